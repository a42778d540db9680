package fsm

import (
	"errors"
	"testing"
)

func TestSetDetention(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	gen := h.s.d.Generation
	peer := func(id string) *Peer { return h.s.d.Peers[id] }
	want := func(id string, st PeerState, by DetentionBy) {
		t.Helper()
		if p := peer(id); p.State != st || p.Detention != by {
			t.Fatalf("peer %s: %s/%q, want %s/%q", id, p.State, p.Detention, st, by)
		}
	}

	h.refuse(&SetDetention{ID: "p9", Enabled: true, By: DetentionManual}, ErrUnknownPeer)
	h.refuse(&SetDetention{ID: "p1", Enabled: true, By: "someone"}, ErrBadState)
	// The disk rule cannot lift what it did not set.
	h.refuse(&SetDetention{ID: "p1", Enabled: false, By: DetentionDisk}, ErrBadState)

	// Disk detention: keeps serving (primary stays, no generation), takes
	// no new data.
	h.must(&SetDetention{ID: "p1", Enabled: true, By: DetentionDisk})
	want("p1", StateDetention, DetentionDisk)
	h.wantPrimary(b, Site0, "p1")
	if h.s.d.Generation != gen {
		t.Fatalf("entering detention started generation %d (was %d)", h.s.d.Generation, gen)
	}
	if _, err := h.s.ChooseTargets("p1", "main"); !errors.Is(err, ErrPeerNotUp) {
		t.Fatalf("detained peer chose targets as an origin: %v", err)
	}
	for i := 0; i < 5; i++ {
		tc, err := h.s.ChooseTargets("p2", "main")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range tc.Targets {
			if c.Peer == "p1" {
				t.Fatalf("detained peer chosen as a target: %+v", tc)
			}
		}
	}
	h.refuse(&SetDetention{ID: "p1", Enabled: true, By: DetentionDisk}, ErrBadState)
	// The operator's detention overrides the disk rule's …
	h.must(&SetDetention{ID: "p1", Enabled: true, By: DetentionManual})
	want("p1", StateDetention, DetentionManual)
	// … which can then neither lift it nor set its own.
	h.refuse(&SetDetention{ID: "p1", Enabled: false, By: DetentionDisk}, ErrBadState)
	h.refuse(&SetDetention{ID: "p1", Enabled: true, By: DetentionDisk}, ErrBadState)
	// Manual on again is harmless.
	h.must(&SetDetention{ID: "p1", Enabled: true, By: DetentionManual})

	// It outlives Down and a re-registration.
	h.must(&PeerDown{ID: "p1"})
	want("p1", StateDown, DetentionManual)
	h.must(&RegisterPeer{ID: "p1", GUID: guid("p1"), Inventory: []CopyInfo{{Bucket: b, Searchable: true}}})
	want("p1", StateDetention, DetentionManual)
	if _, ok := h.b(b).Copies["p1"]; !ok {
		t.Fatal("detained peer's copy not counted after it registered")
	}

	// The operator lifts it.
	h.must(&SetDetention{ID: "p1", Enabled: false, By: DetentionManual})
	want("p1", StateUp, "")
	// Lifting a peer that is not detained is harmless.
	h.must(&SetDetention{ID: "p1", Enabled: false, By: DetentionManual})
	want("p1", StateUp, "")

	// Disk detention lifted by the rule.
	h.must(&SetDetention{ID: "p2", Enabled: true, By: DetentionDisk})
	want("p2", StateDetention, DetentionDisk)
	h.must(&SetDetention{ID: "p2", Enabled: false, By: DetentionDisk})
	want("p2", StateUp, "")

	// A raw SetPeerState keeps the flag true; a removed peer is refused.
	h.must(&SetPeerState{ID: "p3", State: StateDetention})
	want("p3", StateDetention, DetentionManual)
	h.must(&SetPeerState{ID: "p3", State: StateUp})
	want("p3", StateUp, "")
	h.must(&SetDetention{ID: "p4", Enabled: true, By: DetentionManual})
	h.must(&SetPeerState{ID: "p4", State: StateRemoved})
	want("p4", StateRemoved, "")
	h.refuse(&SetDetention{ID: "p4", Enabled: true, By: DetentionManual}, ErrBadState)
}

func TestPlanDetention(t *testing.T) {
	const mb = 1 << 20
	rule := DetentionRule{FreeBytes: 100 * mb, HysteresisBytes: 20 * mb}
	h := fourPeers(t)
	h.warm("1", "p1", "p2", true, "p3", false)
	plan := func(disk map[string]DiskReport) []Command {
		in := PlanInput{Now: h.now, LastHeartbeat: alive(h, h.now), Disk: disk, Detention: rule}
		return Plan(h.s, in)
	}
	detentions := func(cmds []Command) []SetDetention {
		var out []SetDetention
		for _, c := range cmds {
			if d, ok := c.(*SetDetention); ok {
				out = append(out, *d)
			}
		}
		return out
	}
	full := DiskReport{Free: 99 * mb, Total: 1000 * mb}
	cases := []struct {
		name   string
		before func()
		disk   map[string]DiskReport
		want   []SetDetention // ID, Enabled, By only
	}{
		{name: "no reports", disk: nil},
		{name: "unknown total is no report", disk: map[string]DiskReport{"p1": {Free: 0}}},
		{name: "above the threshold", disk: map[string]DiskReport{"p1": {Free: 100 * mb, Total: 1000 * mb}}},
		{name: "below", disk: map[string]DiskReport{"p1": full, "p3": {Free: 0, Total: 1000 * mb}},
			want: []SetDetention{{ID: "p1", Enabled: true, By: DetentionDisk}, {ID: "p3", Enabled: true, By: DetentionDisk}}},
		{name: "in the hysteresis band stays", before: func() { h.must(&SetDetention{ID: "p1", Enabled: true, By: DetentionDisk}) },
			disk: map[string]DiskReport{"p1": {Free: 119 * mb, Total: 1000 * mb}}},
		{name: "past the band leaves", disk: map[string]DiskReport{"p1": {Free: 120 * mb, Total: 1000 * mb}},
			want: []SetDetention{{ID: "p1", Enabled: false, By: DetentionDisk}}},
		{name: "manual is not lifted", before: func() { h.must(&SetDetention{ID: "p1", Enabled: true, By: DetentionManual}) },
			disk: map[string]DiskReport{"p1": {Free: 900 * mb, Total: 1000 * mb}}},
		{name: "a down peer is left alone", before: func() { h.must(&PeerDown{ID: "p2"}) },
			disk: map[string]DiskReport{"p2": full}},
	}
	for _, c := range cases {
		if c.before != nil {
			c.before()
		}
		got := detentions(plan(c.disk))
		if len(got) != len(c.want) {
			t.Fatalf("%s: planned %+v, want %+v", c.name, got, c.want)
		}
		for i := range got {
			if got[i].ID != c.want[i].ID || got[i].Enabled != c.want[i].Enabled || got[i].By != c.want[i].By || got[i].Reason == "" {
				t.Fatalf("%s: planned %+v, want %+v", c.name, got[i], c.want[i])
			}
		}
	}
	// The rule off: nothing, however full.
	if got := detentions(Plan(h.s, PlanInput{Now: h.now, LastHeartbeat: alive(h, h.now), Disk: map[string]DiskReport{"p3": full}})); len(got) != 0 {
		t.Fatalf("rule off planned %+v", got)
	}
	// Maintenance does not stop the rule.
	h.must(&SetMaintenance{Enabled: true})
	if got := detentions(plan(map[string]DiskReport{"p3": full})); len(got) != 1 {
		t.Fatalf("maintenance: planned %+v", got)
	}
}
