package fsm

import (
	"maps"
	"testing"
	"time"
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

// TestPeerDownAfterRegistrationIgnored: a PeerDown planned on one
// registration of a peer changes nothing once the peer registered again
// (cluster version PeerDownRegisteredVersion; chaos: a restarted peer was
// declared Down by a decision planned before its registration), and the
// planner sets the registration it judged; without one (an older group's
// entry) the peer goes Down as before.
func TestPeerDownAfterRegistrationIgnored(t *testing.T) {
	h := twoSites(t)
	h.must(&SetClusterVersion{Version: PeerDownRegisteredVersion})
	judged := h.s.d.Peers["a1"].Registered
	h.peer("a1", "site1") // registers again: a restart
	h.refuse(&PeerDown{ID: "a1", Reason: "no heartbeat", At: h.now, Registered: judged}, ErrBadState)
	if st := h.s.d.Peers["a1"].State; st != StateUp {
		t.Fatalf("a1 %s after a stale PeerDown, want Up", st)
	}
	h.must(&PeerDown{ID: "a1", Reason: "no heartbeat", At: h.now, Registered: h.s.d.Peers["a1"].Registered})
	if st := h.s.d.Peers["a1"].State; st != StateDown {
		t.Fatalf("a1 %s after a PeerDown of its registration, want Down", st)
	}
	h.peer("a2", "site1")
	h.must(&PeerDown{ID: "a2", Reason: "older group", At: h.now})
	if st := h.s.d.Peers["a2"].State; st != StateDown {
		t.Fatalf("a2 %s after a PeerDown without a registration, want Down", st)
	}
	// The planner names the registration it judged.
	in := PlanInput{Now: h.now.Add(time.Hour), LastHeartbeat: map[string]time.Time{}}
	var got *PeerDown
	for _, c := range Plan(h.s, in) {
		if pd, ok := c.(*PeerDown); ok && pd.ID == "b1" {
			got = pd
		}
	}
	if got == nil || got.Registered != h.s.d.Peers["b1"].Registered || got.Registered == 0 {
		t.Fatalf("planned PeerDown for b1: %+v, want Registered %d", got, h.s.d.Peers["b1"].Registered)
	}
}
