package peer

import (
	"maps"
	"testing"

	"github.com/quarry-dev/quarry/fsm"
)

// TestGenCacheKeepsSealedLengths pins what a default-plan search takes
// from the generation table for store.SegmentPrefix: the sealed length of
// each bucket, kept through incremental views and dropped when a bucket
// leaves the table or is no longer sealed.
func TestGenCacheKeepsSealedLengths(t *testing.T) {
	c := newGenCache("p1", nil)
	e := &genEntry{table: c.newTable(), loaded: true}
	c.apply(e, fsm.GenerationView{Version: 5, Full: true,
		Primaries: map[string]string{"a": "p1", "b": "p1", "c": "p2"},
		Buckets: map[string]fsm.BucketInfo{
			"a": {Sealed: true, Blocks: 8, Checksum: "0000000a"},
			"b": {Hot: true},
			"c": {Sealed: true, Blocks: 3, Checksum: "0000000c"},
		}})
	if got, _ := e.table.Bucket("a"); got != (sealedLength{8, "0000000a"}) {
		t.Fatalf("a: %+v", got)
	}
	if _, ok := e.table.Bucket("b"); ok {
		t.Fatal("a hot bucket has no sealed length")
	}
	// Incremental: b rolls, a's seal is extended, c leaves the table.
	c.apply(e, fsm.GenerationView{Version: 6,
		Primaries: map[string]string{"b": "p1"},
		Buckets: map[string]fsm.BucketInfo{
			"a": {Sealed: true, Blocks: 9, Checksum: "0000009a"},
			"b": {Sealed: true, Blocks: 2, Checksum: "0000000b"},
		},
		Removed: []string{"c"}})
	want := map[string]sealedLength{"a": {9, "0000009a"}, "b": {2, "0000000b"}}
	if got := maps.Collect(e.table.Buckets()); !maps.Equal(got, want) {
		t.Fatalf("after the incremental view: %+v, want %+v", got, want)
	}
	if mine := maps.Collect(e.table.Primaries()); len(mine) != 2 || mine["a"] != "p1" || mine["b"] != "p1" || e.version != 6 {
		t.Fatalf("primaries %v version %d", mine, e.version)
	}
}
