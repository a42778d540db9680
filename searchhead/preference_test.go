package searchhead

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

var testPeers = map[string]peerInfo{
	"site1-p1": {ID: "site1-p1", Site: "site1", Host: "idx-11", Attrs: map[string]string{"rack": "r1"}},
	"site1-p2": {ID: "site1-p2", Site: "site1", Host: "idx-12", Attrs: map[string]string{"rack": "r2"}},
	"site2-p1": {ID: "site2-p1", Site: "site2", Host: "idx-21", Attrs: map[string]string{"rack": "r1"}},
	"site2-p2": {ID: "site2-p2", Site: "site2", Host: "idx-22", Attrs: map[string]string{"rack": "r3"}},
}

func orderFor(t *testing.T, pref, site string, in orderInput) ([]string, error) {
	t.Helper()
	p, err := ParsePreference(pref)
	if err != nil {
		return nil, err
	}
	o := &orderer{pref: p, site: site, peers: testPeers, rank: newAdaptive().rank}
	return o.order(in)
}

func TestPreferenceOrders(t *testing.T) {
	copies := []string{"site1-p1", "site1-p2", "site2-p1", "site2-p2"}
	in := orderInput{Bucket: "main~1~G", Copies: copies, Primary: "site2-p1"}
	cases := []struct {
		pref, site string
		rr         int
		want       []string
	}{
		{"_local", "site1", 0, []string{"site1-p1", "site1-p2", "site2-p1", "site2-p2"}},
		{"_local", "site1", 1, []string{"site1-p2", "site1-p1", "site2-p2", "site2-p1"}},
		{"_local", "site2", 0, []string{"site2-p1", "site2-p2", "site1-p1", "site1-p2"}},
		{"_local", "site0", 1, []string{"site1-p2", "site2-p1", "site2-p2", "site1-p1"}}, // no local copy: round-robin
		{"_only_local", "site2", 0, []string{"site2-p1", "site2-p2"}},
		{"_prefer_nodes:site2-p2,site1-p2", "site1", 0, []string{"site2-p2", "site1-p2", "site1-p1", "site2-p1"}},
		{"_prefer_nodes:nobody", "site1", 0, []string{"site1-p1", "site1-p2", "site2-p1", "site2-p2"}},
		{"_only_nodes:site1-p2", "site1", 0, []string{"site1-p2"}},
		{"_only_nodes:idx-2*", "site1", 0, []string{"site2-p1", "site2-p2"}},
		{"_only_nodes:rack:r1", "site1", 0, []string{"site1-p1", "site2-p1"}},
		{"_only_nodes:ra*:r3*", "site1", 0, []string{"site2-p2"}},
		{"_only_nodes:site:site2", "site1", 0, []string{"site2-p1", "site2-p2"}},
		{"_only_nodes:nomatch*,site1-p1", "site1", 0, []string{"site1-p1"}}, // a spec that matches nothing is ignored
		{"_primary", "site1", 0, []string{"site2-p1"}},
		{"_primary_first", "site1", 0, []string{"site2-p1", "site1-p1", "site1-p2", "site2-p2"}},
		{"_replica", "site1", 0, []string{"site1-p1", "site1-p2", "site2-p2"}},
		{"_replica_first", "site1", 0, []string{"site1-p1", "site1-p2", "site2-p2", "site2-p1"}},
		{"_buckets:main~1~G|_primary", "site1", 0, []string{"site2-p1"}},
	}
	for _, c := range cases {
		in.RR = c.rr
		got, err := orderFor(t, c.pref, c.site, in)
		if err != nil {
			t.Fatalf("%s on %s: %v", c.pref, c.site, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s on %s (rr %d): %v, want %v", c.pref, c.site, c.rr, got, c.want)
		}
	}
	// A single searchable copy that is the primary: _replica has none
	// (missing, not an error).
	got, err := orderFor(t, "_replica", "site1", orderInput{Bucket: "b", Copies: []string{"site2-p1"}, Primary: "site2-p1"})
	if err != nil || len(got) != 0 {
		t.Fatalf("_replica with one copy: %v %v", got, err)
	}
	// _only_local with no local copy: missing, no error.
	got, err = orderFor(t, "_only_local", "site1", orderInput{Bucket: "b", Copies: []string{"site2-p1"}})
	if err != nil || len(got) != 0 {
		t.Fatalf("_only_local with no local copy: %v %v", got, err)
	}
}

func TestPreferenceErrors(t *testing.T) {
	for pref, want := range map[string]string{
		"_xyz":                  "no preference for [_xyz]",
		"_local:x":              "no preference for [_local:x]",
		"_buckets:b1|_nope":     "no preference for [_nope]",
		"_only_nodes:":          "preference [_only_nodes:]: _only_nodes needs at least one node spec",
		"_prefer_nodes:":        "preference [_prefer_nodes:]: _prefer_nodes needs at least one node id",
		"_buckets:|_local":      "preference [_buckets:|_local]: _buckets needs at least one bucket id",
		"_buckets:a|_buckets:b": "preference [_buckets:a|_buckets:b]: _buckets cannot be nested",
	} {
		_, err := ParsePreference(pref)
		var re *RequestError
		if !errors.As(err, &re) || re.Status != 400 || re.Msg != want {
			t.Errorf("%q: %v, want 400 %q", pref, err, want)
		}
	}
	// Bounded (security review L4): counts, item and value lengths, and
	// the message shows at most the value's first 200 bytes.
	many := func(prefix string, n int, item string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf("%s%d", item, i)
		}
		return prefix + strings.Join(parts, ",")
	}
	for pref, want := range map[string]string{
		many("_only_nodes:", 65, "site1-p"):          "65 node specs, more than the 64 allowed",
		many("_prefer_nodes:", 65, "p"):              "65 node ids, more than the 64 allowed",
		"_only_nodes:" + strings.Repeat("x", 257):    "one of its node specs is 257 bytes, more than 256",
		many("_buckets:", 10001, "b") + "|_local":    "10001 bucket ids, more than the 10000 allowed",
		"_only_nodes:" + strings.Repeat("a,", 40000): "longer than 65536 bytes",
	} {
		_, err := ParsePreference(pref)
		var re *RequestError
		if !errors.As(err, &re) || re.Status != 400 || !strings.Contains(re.Msg, want) || len(re.Msg) > 400 {
			t.Errorf("a preference of %d bytes: %v, want 400 with %q in a message under 400 bytes", len(pref), err, want)
		}
	}
	if _, err := ParsePreference(many("_only_nodes:", 64, "site1-p")); err != nil {
		t.Errorf("64 node specs: %v, want allowed", err)
	}
	_, err := orderFor(t, "_only_nodes:site9-*", "site1", orderInput{Bucket: "main~1~G", Copies: []string{"site1-p1"}})
	var re *RequestError
	if !errors.As(err, &re) || re.Status != 400 || re.Msg != "no peers with criteria [site9-*] found for bucket [main~1~G]" {
		t.Fatalf("_only_nodes without a match: %v", err)
	}
}

// A custom string: the same copy for the same string and bucket (sticky,
// whatever the head), and different strings spread over all copies.
func TestPreferenceCustom(t *testing.T) {
	copies := []string{"site1-p1", "site1-p2", "site2-p1", "site2-p2"}
	in := orderInput{Bucket: "main~1~G", Copies: copies}
	first, _ := orderFor(t, "user-42", "site1", in)
	again, _ := orderFor(t, "user-42", "site2", orderInput{Bucket: "main~1~G", Copies: copies, RR: 7})
	if !slices.Equal(first, again) {
		t.Fatalf("custom string not sticky: %v vs %v", first, again)
	}
	seen := map[string]int{}
	for i := 0; i < 100; i++ {
		got, _ := orderFor(t, "session-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "site1", in)
		seen[got[0]]++
	}
	if len(seen) != len(copies) {
		t.Fatalf("100 strings served by %v, want all %d copies", seen, len(copies))
	}
}

// _adaptive: unmeasured peers first; then the lowest C3 rank; a search
// spreads its buckets (planned load); losers drift toward the winner.
func TestAdaptiveRank(t *testing.T) {
	a := newAdaptive()
	a.begin("fast")
	a.end("fast", 2e6, 1e6, 0, true) // 2 ms response, 1 ms service
	a.begin("slow")
	a.end("slow", 200e6, 150e6, 4, true)
	if got := a.rank([]string{"slow", "fast", "new"}); !slices.Equal(got, []string{"new", "fast", "slow"}) {
		t.Fatalf("rank %v", got)
	}
	planned := map[string]int{}
	var firsts []string
	for i := 0; i < 4; i++ {
		got := a.rankPlanned([]string{"fast", "fast2"}, planned)
		planned[got[0]]++
		firsts = append(firsts, got[0])
	}
	if !slices.Contains(firsts, "fast2") {
		t.Fatalf("one search's buckets not spread: %v", firsts)
	}
	before := a.peers["slow"].response
	a.rank([]string{"fast", "slow"})
	if a.peers["slow"].response >= before {
		t.Fatalf("loser's figures did not drift toward the winner's")
	}
}
