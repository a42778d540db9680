package query

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortByKeysIsCompareKeys: the decorated sort orders keys exactly as
// compareKeys does, over numbers, numeric-looking strings, IPs, words and
// empty values, and compareKeys is a total order (antisymmetric and
// transitive on every triple drawn), so the order does not depend on the
// order the groups arrive in.
func TestSortByKeysIsCompareKeys(t *testing.T) {
	vals := []string{"", "0", "-0", "007", "7", "+5", " 5", "1.5", "1e3", "10", "9", "10a", "9a", "a", "B", "10.1.2.3",
		"10.1.2.30", "-3", "9223372036854775807", "9223372036854775806", "NaN", "inf", ".5", "-", "x y"}
	r := rand.New(rand.NewPCG(5, 8))
	for round := 0; round < 200; round++ {
		width := 1 + r.IntN(3)
		keys := make([][]string, 1+r.IntN(60))
		for i := range keys {
			k := make([]string, width)
			for j := range k {
				k[j] = vals[r.IntN(len(vals))]
			}
			keys[i] = k
		}
		got := slices.Clone(keys)
		sortByKeys(got, func(k []string) []string { return k })
		want := slices.Clone(keys)
		slices.SortStableFunc(want, compareKeys)
		for i := range got {
			if compareKeys(got[i], want[i]) != 0 {
				t.Fatalf("round %d: position %d: sortByKeys %q, compareKeys %q", round, i, got[i], want[i])
			}
		}
		for i := 0; i < 50; i++ {
			a, b, c := keys[r.IntN(len(keys))], keys[r.IntN(len(keys))], keys[r.IntN(len(keys))]
			if compareKeys(a, b) != -compareKeys(b, a) {
				t.Fatalf("not antisymmetric: %q %q", a, b)
			}
			if compareKeys(a, b) <= 0 && compareKeys(b, c) <= 0 && compareKeys(a, c) > 0 {
				t.Fatalf("not transitive: %q <= %q <= %q but %q > %q", a, b, c, a, c)
			}
		}
	}
}
