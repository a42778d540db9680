package fsm

import (
	"maps"
	"slices"
	"testing"
)

// TestGenerationTableDeltaRule pins the one delta rule the search heads
// and the peers keep their generation tables by: a whole table replaces,
// a delta sets primaries (removes one mapped to "") and bucket entries,
// Removed leaves both, the generation and peers are the view's, and a view
// older than the one held is ignored.
func TestGenerationTableDeltaRule(t *testing.T) {
	a5 := BucketInfo{Index: "main", Earliest: 1, Latest: 5}
	a9 := BucketInfo{Index: "main", Earliest: 1, Latest: 9, Sealed: true, Blocks: 3, Checksum: "0000000a"}
	b := BucketInfo{Index: "web", Hot: true}
	c := BucketInfo{Index: "web", Sealed: true, Blocks: 2, Checksum: "0000000c"}
	whole := GenerationView{Generation: 2, Version: 5, Full: true,
		Peers:     []GenerationPeer{{ID: "p1", State: StateUp}, {ID: "p2", State: StateUp}},
		Primaries: map[string]string{"a": "p1", "b": "p2"},
		Buckets:   map[string]BucketInfo{"a": a5, "b": b}}
	cases := []struct {
		name      string
		views     []GenerationView // applied in order after whole
		applied   []bool
		gen, ver  uint64
		peers     []string
		primaries map[string]string
		buckets   map[string]BucketInfo
	}{
		{name: "whole table", gen: 2, ver: 5, peers: []string{"p1", "p2"},
			primaries: map[string]string{"a": "p1", "b": "p2"}, buckets: map[string]BucketInfo{"a": a5, "b": b}},
		{name: "full view replaces",
			views: []GenerationView{{Generation: 3, Version: 7, Full: true, Peers: []GenerationPeer{{ID: "p2"}},
				Primaries: map[string]string{"c": "p2"}, Buckets: map[string]BucketInfo{"c": c}}},
			applied: []bool{true}, gen: 3, ver: 7, peers: []string{"p2"},
			primaries: map[string]string{"c": "p2"}, buckets: map[string]BucketInfo{"c": c}},
		{name: "full view with no maps empties",
			views:   []GenerationView{{Generation: 3, Version: 6, Full: true}},
			applied: []bool{true}, gen: 3, ver: 6, primaries: map[string]string{}, buckets: map[string]BucketInfo{}},
		{name: "incremental view updates",
			views: []GenerationView{{Generation: 2, Version: 6, Since: 5, Peers: whole.Peers,
				Primaries: map[string]string{"a": "p2", "b": "", "c": "p1"}, Buckets: map[string]BucketInfo{"a": a9, "c": c}}},
			applied: []bool{true}, gen: 2, ver: 6, peers: []string{"p1", "p2"},
			primaries: map[string]string{"a": "p2", "c": "p1"}, buckets: map[string]BucketInfo{"a": a9, "b": b, "c": c}},
		{name: "removed buckets leave",
			views:   []GenerationView{{Generation: 2, Version: 6, Since: 5, Peers: whole.Peers, Removed: []string{"a"}}},
			applied: []bool{true}, gen: 2, ver: 6, peers: []string{"p1", "p2"},
			primaries: map[string]string{"b": "p2"}, buckets: map[string]BucketInfo{"b": b}},
		{name: "older view ignored",
			views: []GenerationView{{Generation: 1, Version: 4, Full: true, Peers: []GenerationPeer{{ID: "p9"}},
				Primaries: map[string]string{"z": "p9"}}},
			applied: []bool{false}, gen: 2, ver: 5, peers: []string{"p1", "p2"},
			primaries: map[string]string{"a": "p1", "b": "p2"}, buckets: map[string]BucketInfo{"a": a5, "b": b}},
		{name: "view at the held version applied",
			views:   []GenerationView{{Generation: 2, Version: 5, Since: 5, Peers: whole.Peers, Primaries: map[string]string{"a": "p2"}}},
			applied: []bool{true}, gen: 2, ver: 5, peers: []string{"p1", "p2"},
			primaries: map[string]string{"a": "p2", "b": "p2"}, buckets: map[string]BucketInfo{"a": a5, "b": b}},
		{name: "newer after older",
			views: []GenerationView{{Version: 4, Primaries: map[string]string{"a": ""}},
				{Generation: 2, Version: 8, Peers: whole.Peers, Primaries: map[string]string{"b": "p1"}}},
			applied: []bool{false, true}, gen: 2, ver: 8, peers: []string{"p1", "p2"},
			primaries: map[string]string{"a": "p1", "b": "p1"}, buckets: map[string]BucketInfo{"a": a5, "b": b}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewGenerationTable()
			if !tb.Apply(whole) {
				t.Fatal("the first view was ignored")
			}
			for i, v := range tc.views {
				if got := tb.Apply(v); got != tc.applied[i] {
					t.Fatalf("view %d applied %v, want %v", i, got, tc.applied[i])
				}
			}
			if tb.Generation() != tc.gen || tb.Version() != tc.ver {
				t.Errorf("generation %d version %d, want %d and %d", tb.Generation(), tb.Version(), tc.gen, tc.ver)
			}
			if peers := slices.Sorted(maps.Keys(maps.Collect(tb.Peers()))); !slices.Equal(peers, tc.peers) {
				t.Errorf("peers %v, want %v", peers, tc.peers)
			}
			if got := maps.Collect(tb.Primaries()); !maps.Equal(got, tc.primaries) || tb.PrimaryCount() != len(tc.primaries) {
				t.Errorf("primaries %v, want %v", got, tc.primaries)
			}
			if got := maps.Collect(tb.Buckets()); !maps.EqualFunc(got, tc.buckets, sameBucket) || tb.BucketCount() != len(tc.buckets) {
				t.Errorf("buckets %v, want %v", got, tc.buckets)
			}
		})
	}
}

func sameBucket(a, b BucketInfo) bool {
	return a.Index == b.Index && a.Earliest == b.Earliest && a.Latest == b.Latest && a.Hot == b.Hot &&
		a.Sealed == b.Sealed && a.Blocks == b.Blocks && a.Checksum == b.Checksum && slices.Equal(a.SearchableOn, b.SearchableOn)
}

// TestGenerationTableKeeps pins what a reader that keeps part of the table
// holds: a primary it does not keep (moved to another peer) and a bucket
// entry it does not keep (no longer sealed) leave as a lost one does; with
// no bucket projection it holds primaries only.
func TestGenerationTableKeeps(t *testing.T) {
	type length struct{ blocks int64 }
	mine := NewGenerationTableOf(func(p string) bool { return p == "p1" }, func(b BucketInfo) (length, bool) {
		return length{b.Blocks}, b.Sealed
	})
	mine.Apply(GenerationView{Version: 1, Full: true, Primaries: map[string]string{"a": "p1", "b": "p2", "c": "p1"},
		Buckets: map[string]BucketInfo{"a": {Sealed: true, Blocks: 4}, "b": {Hot: true}, "c": {Sealed: true, Blocks: 2}}})
	mine.Apply(GenerationView{Version: 2, Primaries: map[string]string{"a": "p2", "b": "p1"},
		Buckets: map[string]BucketInfo{"a": {Hot: true}, "b": {Sealed: true, Blocks: 7}}})
	if got, want := maps.Collect(mine.Primaries()), map[string]string{"b": "p1", "c": "p1"}; !maps.Equal(got, want) {
		t.Errorf("primaries %v, want %v", got, want)
	}
	if got, want := maps.Collect(mine.Buckets()), map[string]length{"b": {7}, "c": {2}}; !maps.Equal(got, want) {
		t.Errorf("buckets %v, want %v", got, want)
	}

	prim := NewGenerationTableOf[BucketInfo](nil, nil)
	prim.Apply(GenerationView{Version: 1, Full: true, Primaries: map[string]string{"a": "p1"}, Buckets: map[string]BucketInfo{"a": {}}})
	if p, ok := prim.Primary("a"); !ok || p != "p1" || prim.BucketCount() != 0 {
		t.Errorf("primaries-only table: primary %q %v, %d buckets", p, ok, prim.BucketCount())
	}
}
