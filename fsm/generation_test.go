package fsm

import (
	"errors"
	"testing"
)

// twoSites: site1 has a1,a2,a3; site2 has b1,b2,b3; origin:2,total:3 and
// origin:1,total:2.
func twoSites(t *testing.T) *harness {
	h := newHarness(t)
	h.config(multiSite("origin:2,total:3", "origin:1,total:2", "site1", "site2"))
	for _, p := range []string{"a1", "a2", "a3"} {
		h.peer(p, "site1")
	}
	for _, p := range []string{"b1", "b2", "b3"} {
		h.peer(p, "site2")
	}
	return h
}

func TestGenerationRule(t *testing.T) {
	h := fourPeers(t)
	g0 := h.s.CurrentGeneration()
	if g0 == 0 {
		t.Fatal("registering peers began no generation")
	}
	b := h.warm("1", "p1", "p2", true, "p3", false)
	if h.s.CurrentGeneration() != g0 {
		t.Fatal("new bucket / roll began a generation")
	}
	// A copy that is not a candidate's change (non-searchable copy added)
	// moves no primary: same generation, new table version.
	h.must(&AddCopy{Bucket: b, Peer: "p4"})
	if h.s.CurrentGeneration() != g0 || h.s.TableVersion() != h.idx {
		t.Fatalf("gen %d (was %d), version %d at %d", h.s.CurrentGeneration(), g0, h.s.TableVersion(), h.idx)
	}
	// Detention changes no set of serving peers and no primary.
	h.must(&SetPeerState{ID: "p4", State: StateDetention})
	if h.s.CurrentGeneration() != g0 {
		t.Fatal("detention began a generation")
	}
	// p4 Down: the serving set changes.
	h.must(&PeerDown{ID: "p4"})
	if h.s.CurrentGeneration() != h.idx {
		t.Fatal("peer down began no generation")
	}
	// A primary moves (p1's copy removed): new generation.
	h.must(&RemoveCopy{Bucket: b, Peer: "p1"})
	if h.s.CurrentGeneration() != h.idx {
		t.Fatal("primary move began no generation")
	}
	g := h.s.CurrentGeneration()
	h.must(&SetMaintenance{Enabled: true})
	h.must(&CreateFixup{Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p3"})
	if h.s.CurrentGeneration() != g {
		t.Fatal("maintenance or a task record began a generation")
	}
}

func TestGenerationDeltas(t *testing.T) {
	h := fourPeers(t)
	b1 := h.warm("1", "p1", "p2", true, "p3", false)
	v0 := h.s.TableVersion()
	full, err := h.s.Generation(Site0, 0)
	if err != nil || !full.Full || full.Primaries[b1] != "p1" || len(full.Buckets) != 1 || full.Version != v0 {
		t.Fatalf("full %+v %v", full, err)
	}
	if got := full.Buckets[b1].SearchableOn; len(got) != 2 || got[0] != "p1" || got[1] != "p2" {
		t.Fatalf("searchable_on %v", got)
	}
	b2 := h.warm("2", "p2", "p3", true, "p4", false)
	h.must(&PeerDown{ID: "p1"})
	d, err := h.s.Generation(Site0, v0)
	if err != nil || d.Full {
		t.Fatal(err)
	}
	// Since v0: b1's primary moved to p2, b2 was added (its bucket entry
	// and its primary).
	if d.Primaries[b1] != "p2" || d.Primaries[b2] != "p2" || len(d.Primaries) != 2 {
		t.Fatalf("delta primaries %v", d.Primaries)
	}
	if _, ok := d.Buckets[b2]; !ok || len(d.Buckets) != 1 {
		t.Fatalf("delta buckets %v", d.Buckets)
	}
	// Nothing after the current version.
	d, _ = h.s.Generation(Site0, h.s.TableVersion())
	if len(d.Primaries)+len(d.Buckets) != 0 {
		t.Fatalf("empty delta %+v", d)
	}
	// Freeze b2: it is listed as removed.
	v := h.s.TableVersion()
	id := h.must(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: b2}).Index
	h.must(&FixupDone{ID: id})
	d, _ = h.s.Generation(Site0, v)
	if len(d.Removed) != 1 || d.Removed[0] != b2 {
		t.Fatalf("removed %v", d.Removed)
	}
	if _, err := h.s.Generation("site9", 0); !errors.Is(err, ErrBadSite) {
		t.Fatal(err)
	}
}

func TestHistoryKeepsGenerations(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", true)
	var gens []uint64
	var owners []string
	for i := range 3 * HistoryGenerations {
		// Each down/up of the current primary's peer moves the primary.
		cur := h.primary(b, Site0)
		gens = append(gens, h.s.CurrentGeneration())
		owners = append(owners, cur)
		h.must(&PeerDown{ID: cur})
		h.must(&RegisterPeer{ID: cur, GUID: guid(cur), Inventory: []CopyInfo{{Bucket: b, Searchable: true}}})
		_ = i
	}
	distinct := map[uint64]bool{}
	for _, d := range h.s.d.History {
		distinct[d.Generation] = true
	}
	if len(distinct) < 32 || len(distinct) > HistoryGenerations {
		t.Fatalf("history holds %d generations", len(distinct))
	}
	// The last 32 generations can be reconstructed exactly.
	for i := len(gens) - 32; i < len(gens); i++ {
		tab, err := h.s.PrimariesAt(Site0, gens[i])
		if err != nil {
			t.Fatal(err)
		}
		if tab[b] != owners[i] {
			t.Fatalf("generation %d: primary %s, want %s", gens[i], tab[b], owners[i])
		}
	}
	if _, err := h.s.PrimariesAt(Site0, gens[0]); !errors.Is(err, ErrGenerationTooOld) {
		t.Fatalf("oldest generation: %v", err)
	}
	// A since older than the history answers the whole table.
	if v, _ := h.s.Generation(Site0, 1); !v.Full {
		t.Fatal("since below the floor answered a delta")
	}
}

// Rule 2's tie-break: among candidates the peer with the fewest primaries
// for that table wins, ties by peer id.
func TestPrimaryTieBreak(t *testing.T) {
	h := fourPeers(t)
	// x: copies p1 (origin), p3, p4 searchable. y: origin p2 — p2 holds one primary.
	x := h.warm("x", "p1", "p3", true, "p4", true)
	y := h.warm("y", "p3", "p4", true)
	// Primaries: x->p1, y->p3. p1 down: x's candidates p3 (1 primary) and
	// p4 (0 primaries): p4 wins on count.
	h.must(&PeerDown{ID: "p1"})
	h.wantPrimary(x, Site0, "p4")
	h.wantPrimary(y, Site0, "p3")
	// z: copies p2 (origin), p3, p4; p2 down; p3 and p4 hold one primary each:
	// the tie goes to p3 by id.
	z := h.warm("z", "p2", "p3", true, "p4", true)
	h.must(&PeerDown{ID: "p2"})
	h.wantPrimary(z, Site0, "p3")
}

func TestHotPrimaryPinnedToOrigin(t *testing.T) {
	h := twoSites(t)
	b := h.bucket("1", "a2", "a1", true, "b1", true)
	h.wantPrimary(b, "site1", "a2")
	h.wantPrimary(b, Site0, "a2")
	h.wantPrimary(b, "site2", "b1")
	// Rebalancing never moves a hot origin primary, even when lopsided.
	for i := range 4 {
		h.bucket(string(rune('c'+i)), "a2", "a1", true, "b1", true)
	}
	h.must(&RebalancePrimaries{})
	h.wantPrimary(b, "site1", "a2")
	h.wantPrimary(b, Site0, "a2")
	// Origin down: the primary moves; back (bucket still hot, copy reported):
	// it returns to the origin.
	h.must(&PeerDown{ID: "a2"})
	h.wantPrimary(b, "site1", "a1")
	h.must(&RegisterPeer{ID: "a2", GUID: guid("a2"), Site: "site1", Inventory: []CopyInfo{{Bucket: b, Searchable: true, Hot: true}}})
	h.wantPrimary(b, "site1", "a2")
	h.wantPrimary(b, Site0, "a2")
}

func TestFillInAndMoveBack(t *testing.T) {
	h := twoSites(t)
	b := h.warm("1", "a1", "a2", false, "b1", true)
	h.wantPrimary(b, "site2", "b1")
	gen := h.s.CurrentGeneration()
	h.must(&PeerDown{ID: "b1"})
	// No searchable copy on site2: remote fill-in a1 (the only searchable
	// copy left); site2 is not valid.
	h.wantPrimary(b, "site2", "a1")
	st := h.s.Status()
	if st.Sites["site2"].Valid || !st.Sites["site1"].Valid || !st.Valid {
		t.Fatalf("status %+v", st.Sites)
	}
	// site2 regains a searchable copy: the fill-in moves back, a new generation.
	h.must(&AddCopy{Bucket: b, Peer: "b2", Searchable: true})
	h.wantPrimary(b, "site2", "b2")
	if h.s.CurrentGeneration() == gen || h.s.CurrentGeneration() != h.idx {
		t.Fatal("move back began no generation")
	}
	if !h.s.Status().Sites["site2"].Valid {
		t.Fatal("site2 still invalid")
	}
}

func TestRebalanceWithinSites(t *testing.T) {
	h := twoSites(t)
	var bs []string
	for i := range 6 {
		bs = append(bs, h.warm(string(rune('a'+i)), "a1", "a2", true, "b1", true, "b2", true))
	}
	// Warm buckets keep their origin-era primaries: a1 everywhere on site1
	// and site0, b1 on site2 (fewest, then id → b1 first, then b2…).
	cov := func() map[string]bool {
		out := map[string]bool{}
		for _, b := range bs {
			for _, tb := range []string{"site1", "site2", Site0} {
				out[b+tb] = h.s.validFor(h.b(b), tb)
			}
		}
		return out
	}
	before := cov()
	h.must(&RebalancePrimaries{})
	count := func(table string) map[string]int {
		n := map[string]int{}
		for _, b := range bs {
			n[h.primary(b, table)]++
		}
		return n
	}
	if c := count("site1"); c["a1"] != 3 || c["a2"] != 3 {
		t.Fatalf("site1 %v", c)
	}
	if c := count("site2"); c["b1"] != 3 || c["b2"] != 3 {
		t.Fatalf("site2 %v", c)
	}
	// site0: across all four holders, 6 primaries → 2,2,1,1 or better.
	for p, n := range count(Site0) {
		if n > 2 {
			t.Fatalf("site0 %s holds %d", p, n)
		}
	}
	for k, v := range cov() {
		if before[k] != v {
			t.Fatalf("rebalance changed coverage of %s", k)
		}
	}
	// Site-local: site1's table never points at site2 after rebalance.
	for _, b := range bs {
		if s := h.s.siteOf(h.primary(b, "site1")); s != "site1" {
			t.Fatalf("site1 primary on %s", s)
		}
	}
}

func TestChooseTargets(t *testing.T) {
	h := twoSites(t)
	tc, err := h.s.ChooseTargets("a1", "main")
	if err != nil {
		t.Fatal(err)
	}
	// origin:2 → one more on site1 (a2: no copies, lowest id); total:3 → the
	// rest on site2 (b1). SF origin:1 is the origin itself; total:2 puts the
	// second searchable copy on the site with fewest searchable: b1.
	if len(tc.Targets) != 2 || tc.Targets[0] != (CopySpec{"a2", false}) || tc.Targets[1] != (CopySpec{"b1", true}) || tc.Degraded {
		t.Fatalf("targets %+v", tc)
	}
	// Balancing by copy count: after a bucket on a2 and b1, the next goes to a3 and b2.
	h.bucket("1", "a1", "a2", false, "b1", true)
	tc, _ = h.s.ChooseTargets("a1", "main")
	if tc.Targets[0].Peer != "a3" || tc.Targets[1].Peer != "b2" {
		t.Fatalf("balanced %+v", tc)
	}
	// site2 down: its share goes to site1 and the choice is degraded.
	for _, p := range []string{"b1", "b2", "b3"} {
		h.must(&PeerDown{ID: p})
	}
	tc, _ = h.s.ChooseTargets("a1", "main")
	if !tc.Degraded || len(tc.Targets) != 2 || h.s.siteOf(tc.Targets[0].Peer) != "site1" || h.s.siteOf(tc.Targets[1].Peer) != "site1" {
		t.Fatalf("degraded %+v", tc)
	}
	if _, err := h.s.ChooseTargets("b1", "main"); !errors.Is(err, ErrPeerNotUp) {
		t.Fatal(err)
	}
	if _, err := h.s.ChooseTargets("a1", "web"); !errors.Is(err, ErrUnknownIndex) {
		t.Fatal(err)
	}
}

func TestChooseTargetsSingleSite(t *testing.T) {
	h := fourPeers(t)
	tc, err := h.s.ChooseTargets("p2", "main")
	if err != nil {
		t.Fatal(err)
	}
	// RF 3: two more copies, p1 and p3 (no copies, by id); SF 2: the origin
	// and the first target.
	if len(tc.Targets) != 2 || tc.Targets[0] != (CopySpec{"p1", true}) || tc.Targets[1] != (CopySpec{"p3", false}) {
		t.Fatalf("%+v", tc)
	}
	h.must(&PeerDown{ID: "p3"})
	h.must(&PeerDown{ID: "p4"})
	tc, _ = h.s.ChooseTargets("p2", "main")
	if !tc.Degraded || len(tc.Targets) != 1 {
		t.Fatalf("%+v", tc)
	}
}

func TestStatusValidComplete(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	st := h.s.Status()
	if !st.Valid || !st.Complete || !st.ReplicationFactorMet || !st.SearchFactorMet || len(st.Fixups) != 0 {
		t.Fatalf("%+v", st)
	}
	h.must(&PeerDown{ID: "p3"})
	st = h.s.Status()
	if !st.Valid || st.Complete || st.ReplicationFactorMet || !st.SearchFactorMet {
		t.Fatalf("%+v", st)
	}
	if len(st.Sites[Site0].IncompleteBuckets) != 1 || st.Fixups[0].Level != LevelReplication {
		t.Fatalf("%+v", st)
	}
	h.must(&PeerDown{ID: "p1"})
	h.must(&PeerDown{ID: "p2"})
	st = h.s.Status()
	if st.Valid || st.Sites[Site0].InvalidBuckets[0] != b {
		t.Fatalf("%+v", st)
	}
	for _, p := range st.Peers {
		if p.ID == "p1" && (p.Buckets != 1 || p.Primaries != 0 || p.Searchable != 1 || p.State != StateDown) {
			t.Fatalf("%+v", p)
		}
	}
}

// TestChooseReplacement: the managers choose a failed target's replacement
// (SPEC §4): on the failed target's site first, never a peer that holds a
// copy, was tried or is not Up, searchable when the failed copy was.
func TestChooseReplacement(t *testing.T) {
	h := twoSites(t)
	id := h.bucket("1", "a1", "a2", false, "b1", true)
	for _, tc := range []struct {
		name    string
		exclude []string
		want    CopySpec
	}{
		{"same site as the failed target", []string{"b1"}, CopySpec{"b2", true}},
		{"tried peers skipped", []string{"b1", "b2"}, CopySpec{"b3", true}},
		{"non-searchable failed copy", []string{"a2"}, CopySpec{"a3", false}},
		{"its site full: another site", []string{"a2", "a3"}, CopySpec{"b2", false}},
	} {
		got, err := h.s.ChooseReplacement(id, tc.exclude)
		if err != nil || got != tc.want {
			t.Fatalf("%s: ChooseReplacement(%v) = %+v, %v; want %+v", tc.name, tc.exclude, got, err, tc.want)
		}
	}
	h.must(&PeerDown{ID: "b2"})
	if got, err := h.s.ChooseReplacement(id, []string{"b1"}); err != nil || got != (CopySpec{"b3", true}) {
		t.Fatalf("Down peers skipped: %+v, %v; want b3", got, err)
	}
	if _, err := h.s.ChooseReplacement("main~9~x", []string{"b1"}); !errors.Is(err, ErrUnknownBucket) {
		t.Fatalf("unknown bucket: %v", err)
	}
	for _, p := range []string{"a3", "b3"} {
		h.must(&PeerDown{ID: p})
	}
	if _, err := h.s.ChooseReplacement(id, []string{"b1"}); !errors.Is(err, ErrPeerNotUp) {
		t.Fatalf("no Up peer left: %v", err)
	}
	w := h.warm("2", "a1", "a2", false, "b1", true)
	if _, err := h.s.ChooseReplacement(w, []string{"b1"}); !errors.Is(err, ErrBucketNotHot) {
		t.Fatalf("warm bucket: %v", err)
	}
}
