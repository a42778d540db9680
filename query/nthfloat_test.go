package query

import (
	"math"
	"math/rand"
	"sort"
	"testing"
)

// TestNthFloatMatchesSort: the selection a percentile uses returns the
// value a sort puts at each rank, over random, repetitive, sorted and
// reversed inputs with negatives and both zeros.
func TestNthFloatMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	gens := map[string]func(i int) float64{
		"random":  func(int) float64 { return rng.NormFloat64() * 1e6 },
		"few":     func(int) float64 { return float64(rng.Intn(5)) },
		"zeros":   func(int) float64 { return []float64{0, math.Copysign(0, -1), -1, 1}[rng.Intn(4)] },
		"sorted":  func(i int) float64 { return float64(i) },
		"reverse": func(i int) float64 { return float64(-i) },
		"same":    func(int) float64 { return 7 },
	}
	for name, gen := range gens {
		for _, n := range []int{1, 2, 17, 65, 100, 1000, 5000} {
			nums := make([]float64, n)
			for i := range nums {
				nums[i] = gen(i)
			}
			want := append([]float64(nil), nums...)
			sort.Float64s(want)
			for _, k := range []int{0, n / 10, n / 2, n * 9 / 10, n - 1} {
				got := nthFloat(append([]float64(nil), nums...), k)
				if got != want[k] {
					t.Fatalf("%s n=%d k=%d: got %v, sort gives %v", name, n, k, got, want[k])
				}
				if name == "zeros" && n > 64 && got == 0 {
					// ordered by sign: the k-th is -0 exactly when more
					// than k values are -1 or -0
					neg := 0
					for _, v := range nums {
						if v < 0 || v == 0 && math.Signbit(v) {
							neg++
						}
					}
					if math.Signbit(got) != (k < neg) {
						t.Fatalf("n=%d k=%d: got %v with %d values at or below -0", n, k, got, neg)
					}
				}
			}
		}
	}
}
