package fsm

import (
	"maps"
	"testing"
)

// TestLeftAtRecordsWhenAHotCopyLeaves: from cluster version LeftAtVersion
// the FSM records the index at which a copy left a hot bucket's searchable
// set (short, corrupt, dropped), keeps it when the copy returns and once
// the bucket is sealed, does not record the seal itself, carries it in the
// generation table and through both snapshot formats, and records nothing
// before the version (a version 5 manager would not).
func TestLeftAtRecordsWhenAHotCopyLeaves(t *testing.T) {
	h := twoSites(t)
	old := h.bucket("o", "a1", "a2", true, "b1", true)
	h.must(&CopyShort{Bucket: old, Peer: "b1", Short: true})
	if h.b(old).LeftAt != nil || h.s.d.LeftAtFrom != 0 {
		t.Fatalf("recorded before the cluster version: %v, from %d", h.b(old).LeftAt, h.s.d.LeftAtFrom)
	}
	h.must(&SetClusterVersion{Version: LeftAtVersion})
	from := h.idx
	if h.s.d.LeftAtFrom != from {
		t.Fatalf("LeftAtFrom %d, want %d", h.s.d.LeftAtFrom, from)
	}
	h.must(&SetClusterVersion{Version: LeftAtVersion}) // a repeat keeps it
	if h.s.d.LeftAtFrom != from {
		t.Fatalf("a repeated SetClusterVersion moved LeftAtFrom to %d", h.s.d.LeftAtFrom)
	}

	b := h.bucket("s", "a1", "a2", true, "b1", true)
	if h.b(b).LeftAt != nil {
		t.Fatalf("a new bucket has LeftAt %v", h.b(b).LeftAt)
	}
	h.must(&CopyShort{Bucket: b, Peer: "b1", Short: true})
	short := h.idx
	h.must(&CopyShort{Bucket: b, Peer: "b1", Short: false}) // caught up: kept
	h.must(&MarkCorrupt{Bucket: b, Peer: "a2"})
	corrupt := h.idx
	want := map[string]uint64{"b1": short, "a2": corrupt}
	if got := h.b(b).LeftAt; !maps.Equal(got, want) {
		t.Fatalf("LeftAt %v, want %v", got, want)
	}
	// The seal leaves b1 at 3 of 5 blocks out of the set: not a leave
	// while hot, nothing recorded.
	h.must(sealAt(b, lengths("a1", 5, "a2", 5, "b1", 3)))
	if got := h.b(b).LeftAt; !maps.Equal(got, want) {
		t.Fatalf("after the seal LeftAt %v, want %v", got, want)
	}
	view, err := h.s.Generation("site1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := view.Buckets[b].LeftAt; !maps.Equal(got, want) || view.LeftAtFrom != from {
		t.Fatalf("generation table: LeftAt %v from %d, want %v from %d", got, view.LeftAtFrom, want, from)
	}
	// Both snapshot formats keep it.
	if got := roundTrip(h.s).d.Buckets[b].LeftAt; !maps.Equal(got, want) {
		t.Fatalf("JSON snapshot: LeftAt %v, want %v", got, want)
	}
	bin, err := h.s.appendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := readSnapshot(bin)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.d.Buckets[b].LeftAt; !maps.Equal(got, want) || back.d.LeftAtFrom != from {
		t.Fatalf("binary snapshot: LeftAt %v from %d, want %v from %d", got, back.d.LeftAtFrom, want, from)
	}
	if back.d.Buckets[old].LeftAt != nil {
		t.Fatalf("binary snapshot: LeftAt %v on a bucket without one", back.d.Buckets[old].LeftAt)
	}
	// A clone's map is its own.
	c := h.s.Clone()
	c.d.Buckets[b].LeftAt["b1"] = 1
	if h.b(b).LeftAt["b1"] != short {
		t.Fatal("a clone shares LeftAt")
	}
}
