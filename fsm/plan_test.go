package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The planner scenarios of issue 2. Every expected list below is derived by
// hand from SPEC §3 and the rules written in Plan's and choosePrimaryAmong's
// docs (DESIGN.md "Planner"), step by step in the comments — never pasted
// from the code's output.
//
// Shorthand in the expectations:
//
//	down p1                          PeerDown
//	state p1 GracefulShutdown        SetPeerState
//	<level> <kind> <bucket> [src->]target [S]
//	                                 CreateFixup (S: searchable copy)
//	done <task> ok|failed            FixupDone
//
// <bucket> is the bucket's local id.

func describe(s *State, cmds []Command) []string {
	var out []string
	for _, c := range cmds {
		switch x := c.(type) {
		case *PeerDown:
			out = append(out, "down "+x.ID)
		case *SetPeerState:
			out = append(out, fmt.Sprintf("state %s %s", x.ID, x.State))
		case *CreateFixup:
			_, local, _, _ := ParseBucketID(x.Bucket)
			who := x.Target
			if x.Source != "" {
				who = x.Source + "->" + x.Target
			}
			line := strings.TrimSpace(fmt.Sprintf("%s %s %s %s", x.Level, x.Kind, local, who))
			if x.Searchable && x.Kind == TaskReplicate {
				line += " S"
			}
			out = append(out, line)
		case *FixupDone:
			st := "ok"
			if x.Failed {
				st = "failed"
			}
			out = append(out, fmt.Sprintf("done %d %s", x.ID, st))
		default:
			out = append(out, fmt.Sprintf("%T", c))
		}
	}
	return out
}

func (h *harness) plan(in PlanInput) []string {
	h.t.Helper()
	return describe(h.s, checkedPlan(h.t, h.s, in))
}

// wantPlan runs the planner, compares with want, and applies the commands.
func (h *harness) wantPlan(in PlanInput, want ...string) []Command {
	h.t.Helper()
	cmds := checkedPlan(h.t, h.s, in)
	got := describe(h.s, cmds)
	if !slices.Equal(got, want) {
		h.t.Fatalf("plan:\n  got  %q\n  want %q", got, want)
	}
	for _, c := range cmds {
		h.must(c)
	}
	return cmds
}

// finishTasks closes every open task successfully (the work was done).
func (h *harness) finishTasks() {
	h.t.Helper()
	for _, id := range sortedTaskIDs(h.s.d.Tasks) {
		h.must(&FixupDone{ID: id})
	}
}

// alive builds heartbeats at now for every peer but the silent ones, whose
// last heartbeat is 11 s old (heartbeat_timeout is 10 s).
func alive(h *harness, now time.Time, silent ...string) map[string]time.Time {
	hb := map[string]time.Time{}
	for _, id := range sortedKeys(h.s.d.Peers) {
		hb[id] = now.Add(-time.Second)
		if slices.Contains(silent, id) {
			hb[id] = now.Add(-11 * time.Second)
		}
	}
	return hb
}

// TestPlanRF3SF2PeerDown: single site, RF=3/SF=2, peers p1..p5.
//
//	a: origin p1; p1 S, p3 S, p5 S      (three searchable: two candidates once p1 dies)
//	b: origin p2; p2 S, p4 S, p1 -
//	c: origin p4; p4 S, p5 S, p2 -
//	d: origin p1; p1 S, p2 S, p3 -
//
// Primaries (origin while hot, kept when warm): a p1, b p2, c p4, d p1 —
// counts p1 2, p2 1, p4 1, p3 0, p5 0. Copies per peer: p1 3 (a,b,d),
// p2 3 (b,c,d), p3 2 (a,d), p4 2 (b,c), p5 2 (a,c).
//
// p1's heartbeat is 11 s old → "down p1". Rule 2, buckets in id order:
// a's candidates p3 and p5 both hold 0 primaries → the tie goes to p3 by id;
// b keeps p2; d's only candidate is p2 (p3's copy is not searchable) → p2.
//
// Data safety: every bucket keeps 2 rawdata copies → nothing. Generation:
// every bucket has a primary → nothing. RF (3), in bucket order:
//   - a has p3, p5: targets are Up peers without a copy, p2 (3 copies) and
//     p4 (2) → p4; source: healthy, searchable, lowest id → p3. SF is met
//     (p3, p5 searchable) → a rawdata copy.
//   - b has p2, p4: candidates p3 (2 copies) and p5 (2) → tie → p3; source
//     p2. SF met → rawdata.
//   - c has all three.
//   - d has p2, p3: candidates p4 (2 copies + 1 incoming) and p5 (2) → p5;
//     source p2 (searchable first). SF is short by one but p3's rawdata
//     copy can be made searchable in place → rawdata.
//
// SF: a, b, c met; d has one searchable copy (p2) → make p3's searchable.
func TestPlanRF3SF2PeerDown(t *testing.T) {
	h := fourPeers(t)
	h.peer("p5", "")
	a := h.warm("a", "p1", "p3", true, "p5", true)
	b := h.warm("b", "p2", "p4", true, "p1", false)
	c := h.warm("c", "p4", "p5", true, "p2", false)
	d := h.warm("d", "p1", "p2", true, "p3", false)
	now := epoch.Add(time.Hour)
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "p1")},
		"down p1",
		"replication_factor replicate a p3->p4",
		"replication_factor replicate b p2->p3",
		"replication_factor replicate d p2->p5",
		"search_factor make_searchable d p3",
	)
	h.wantPrimary(a, Site0, "p3") // the tie-break
	h.wantPrimary(b, Site0, "p2")
	h.wantPrimary(c, Site0, "p4")
	h.wantPrimary(d, Site0, "p2")
	if st := h.s.Status(); !st.Valid || st.Complete {
		t.Fatalf("valid %v complete %v", st.Valid, st.Complete)
	}
	// The tasks done, the cluster is complete and the planner is idle.
	h.finishTasks()
	if st := h.s.Status(); !st.Valid || !st.Complete {
		t.Fatalf("after fixup: %+v", st.Fixups)
	}
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "p1")})
}

// sitesScenario: two sites, origin:2,total:3 and origin:1,total:2.
//
//	site1: a1 a2 a3       site2: b1 b2 b3
//	x: origin a1; a1 S, a2 -, b1 S     (targets as ChooseTargets gives them)
//	y: origin b2; b2 S, b3 -, a3 S
//
// Primaries: x — site1 a1 (origin), site0 a1, site2 b1 (its only searchable
// copy there). y — site2 b2, site0 b2, site1 a3.
func sitesScenario(t *testing.T) (h *harness, x, y string) {
	h = twoSites(t)
	x = h.warm("x", "a1", "a2", false, "b1", true)
	y = h.warm("y", "b2", "b3", false, "a3", true)
	for _, want := range [][3]string{{x, "site1", "a1"}, {x, Site0, "a1"}, {x, "site2", "b1"}, {y, "site2", "b2"}, {y, Site0, "b2"}, {y, "site1", "a3"}} {
		h.wantPrimary(want[0], want[1], want[2])
	}
	return h, x, y
}

// TestPlanSiteDownAndBack: origin:2,total:3 on two sites, site2 dies, then
// returns.
//
// Site down. b1, b2, b3 silent → "down b1", "down b2", "down b3" (id order).
// Rule 2: x loses its site2 primary b1 and site2 has no searchable copy →
// remote fill-in from all candidates: a1. y: site2 and site0 lose b2; its
// only candidate is a3 → fill-in a3 for site2, a3 for site0.
//
// Data safety (< 2 rawdata copies): x has a1, a2 → fine. y has only a3 →
// one more copy; not a site rule, so "the rest" placement: other sites than
// y's origin site2 first → site1, where a1 and a2 (1 copy each) tie → a1;
// source a3. Searchable? y has 1 of 2 searchable copies and no rawdata copy
// to rebuild → yes.
//
// Generation: the site2 fill-ins could move back only by making a site2
// copy searchable; none is Up → nothing.
//
// RF: x needs site1 ≥ 2 (has a1, a2), one copy on the other sites (site2 is
// down: nowhere), and 3 in total (has 2) → the site that is up takes it:
// site1's a3 (the only peer there without a copy); source a1. Searchable?
// total SF short by 1, but a2's rawdata copy can be rebuilt → rawdata.
// y needs site2 ≥ 2 (down: nowhere) and 3 in total (has a3 + pending a1) →
// site1's a2; source a3. SF is met by a3 + a1 → rawdata.
//
// SF: x — site1 has 1 searchable (a1) ≥ origin:1; the other sites' share
// cannot be met (site2 down); the total (2) is short by 1 → make a2's copy
// searchable. y — site2's searchable copy cannot be made (down); total met.
func TestPlanSiteDownAndBack(t *testing.T) {
	h, x, y := sitesScenario(t)
	now := epoch.Add(time.Hour)
	gen := h.s.CurrentGeneration()
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "b1", "b2", "b3")},
		"down b1", "down b2", "down b3",
		"data_safety replicate y a3->a1 S",
		"replication_factor replicate x a1->a3",
		"replication_factor replicate y a3->a2",
		"search_factor make_searchable x a2",
	)
	h.wantPrimary(x, "site2", "a1")
	h.wantPrimary(y, "site2", "a3")
	h.wantPrimary(y, Site0, "a3")
	st := h.s.Status()
	if !st.Valid || st.Sites["site2"].Valid || !st.Sites["site1"].Valid || h.s.CurrentGeneration() == gen {
		t.Fatalf("site down: %+v", st.Sites)
	}
	h.finishTasks()
	// Copies now: x — a1 S, a2 S, a3 -, b1 S (down); y — a3 S, a1 S, a2 -,
	// b2 S, b3 - (down). Nothing more can be done while site2 is down.
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "b1", "b2", "b3")})

	// Site2 returns: each peer re-registers with its inventory. b1 brings
	// x's searchable copy: x's site2 fill-in a1 moves back to b1 (a new
	// generation); b2 brings y's: y's site2 primary moves back to b2. The
	// rebalance on each return finds no peer two primaries above another
	// (site1: a1 1, a3 1; site0: a1 1, a3 1) → nothing else moves.
	gen = h.s.CurrentGeneration()
	h.must(&RegisterPeer{ID: "b1", GUID: guid("b1"), Site: "site2", Inventory: []CopyInfo{{Bucket: x, Searchable: true}}})
	h.wantPrimary(x, "site2", "b1")
	if h.s.CurrentGeneration() == gen {
		t.Fatal("the fill-in moved back without a new generation")
	}
	h.must(&RegisterPeer{ID: "b2", GUID: guid("b2"), Site: "site2", Inventory: []CopyInfo{{Bucket: y, Searchable: true}}})
	h.must(&RegisterPeer{ID: "b3", GUID: guid("b3"), Site: "site2", Inventory: []CopyInfo{{Bucket: y}}})
	h.wantPrimary(y, "site2", "b2")
	h.wantPrimary(x, "site1", "a1")
	h.wantPrimary(y, "site1", "a3")
	h.wantPrimary(x, Site0, "a1")
	h.wantPrimary(y, Site0, "a3")
	st = h.s.Status()
	if !st.Valid || !st.Sites["site2"].Valid || !st.Complete {
		t.Fatalf("site back: %+v", st)
	}
	// Excess copies. x has 4 (a1 S, a2 S, a3 -, b1 S), 3 needed; primaries
	// a1, b1 stay; removing a2 or a3 keeps RF, SF and the site policy;
	// rawdata-only first → a3. y has 5 (a1 S, a2 -, a3 S, b2 S, b3 -);
	// primaries a3, b2 stay; b3 is one of site2's two → not removable; a1
	// and a2 are → rawdata-only first → a2. One removal per bucket a round.
	cmds := h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now)},
		"excess remove_copy x a3",
		"excess remove_copy y a2",
	)
	for _, c := range cmds {
		if cf := c.(*CreateFixup); !cf.Kind.Destructive() {
			t.Fatal("remove_copy not destructive")
		}
	}
	for _, task := range h.s.Tasks() {
		if !task.Destructive {
			t.Fatalf("task %+v not marked destructive", task)
		}
	}
}

// TestPlanMaintenance: RF=3/SF=2, p1..p4.
//
//	a: origin p1; p1 S, p2 S, p3 -
//	b: origin p2; p2 S, p3 S, p4 -
//
// p2 goes silent. In maintenance mode only primaries move: "down p2" (a
// keeps p1; b's primary moves to p3, its only other searchable copy) and no
// replication, no make-searchable.
//
// The same state without maintenance: RF — a lacks a copy: the only Up peer
// without one is p4; source p1 (searchable first); SF short by 1 but p3's
// rawdata can be rebuilt → rawdata. b: only p1 lacks one; source p3;
// rawdata (p4 can be rebuilt). SF — a: make p3 searchable; b: make p4
// searchable.
func TestPlanMaintenance(t *testing.T) {
	for _, maint := range []bool{true, false} {
		t.Run(fmt.Sprintf("maintenance=%v", maint), func(t *testing.T) {
			h := fourPeers(t)
			a := h.warm("a", "p1", "p2", true, "p3", false)
			b := h.warm("b", "p2", "p3", true, "p4", false)
			h.must(&SetMaintenance{Enabled: maint})
			now := epoch.Add(time.Hour)
			in := PlanInput{Now: now, LastHeartbeat: alive(h, now, "p2")}
			if maint {
				h.wantPlan(in, "down p2")
			} else {
				h.wantPlan(in, "down p2",
					"replication_factor replicate a p1->p4",
					"replication_factor replicate b p3->p1",
					"search_factor make_searchable a p3",
					"search_factor make_searchable b p4")
			}
			h.wantPrimary(a, Site0, "p1")
			h.wantPrimary(b, Site0, "p3")
			if st := h.s.Status(); !st.Valid || st.Complete {
				t.Fatalf("%+v", st)
			}
		})
	}
}

// offlineScenario: RF=3/SF=2, p1..p5.
//
//	a: origin p1; p1 S, p2 S, p3 -
//	b: origin p2; p2 S, p1 S, p4 -
//	c: origin p3; p3 S, p4 S, p5 -
//
// Primaries a p1, b p2, c p3. Copies: p1 2, p2 2, p3 2, p4 2, p5 1.
func offlineScenario(t *testing.T) (*harness, string, string, string) {
	h := fourPeers(t)
	h.peer("p5", "")
	a := h.warm("a", "p1", "p2", true, "p3", false)
	b := h.warm("b", "p2", "p1", true, "p4", false)
	c := h.warm("c", "p3", "p4", true, "p5", false)
	return h, a, b, c
}

// TestPlanOffline: `peer offline p1` without enforce-counts.
//
// PeerOffline moves p1's primaries (a → p2, its other searchable copy; b
// and c keep theirs) and p1 becomes Restarting: it may stop. The cluster is
// valid, not complete (a and b have 2 counted copies). For restart_timeout
// (60 s) nothing but primaries is fixed: a and b are held, c is complete,
// p1 is not declared Down though silent → the plan is empty.
//
// Past restart_timeout: "state p1 GracefulShutdown", then normal fixup.
// RF: a (p2, p3) — Up peers without a copy: p4 (2 copies), p5 (1) → p5;
// source p2; rawdata (p3 can be rebuilt). b (p2, p4) — p3 (2) and p5
// (1 + 1 incoming) tie → p3; source p2; rawdata. SF: a — make p3
// searchable; b — make p4 searchable.
func TestPlanOffline(t *testing.T) {
	h, a, b, _ := offlineScenario(t)
	start := epoch.Add(time.Hour)
	h.must(&PeerOffline{ID: "p1", At: start})
	h.wantPrimary(a, Site0, "p2")
	h.wantPrimary(b, Site0, "p2")
	st := h.s.Status()
	if !st.Valid || st.Complete {
		t.Fatalf("offline: valid %v complete %v", st.Valid, st.Complete)
	}
	now := start.Add(5 * time.Second)
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "p1")})
	now = start.Add(30 * time.Second)
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "p1")})

	now = start.Add(61 * time.Second)
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "p1")},
		"state p1 GracefulShutdown",
		"replication_factor replicate a p2->p5",
		"replication_factor replicate b p2->p3",
		"search_factor make_searchable a p3",
		"search_factor make_searchable b p4",
	)
}

// TestPlanOfflineEnforceCounts: `peer offline p1 --enforce-counts`.
//
// p1 becomes Decommissioning: its primaries move (a → p2), its copies stop
// counting, and fixup starts at once while p1 keeps running (its heartbeat
// is fresh, so it is not declared Down). Same targets as the timed-out
// restart above: a → p5 and b → p3 (p1's copies are not healthy, so the
// sources are p2), then make p3 (a) and p4 (b) searchable. p1 is not yet
// removed: a and b do not meet RF/SF without it until the tasks are done.
//
// Once done, every bucket p1 holds meets RF and SF without it, nothing
// streams from it, it is no hot bucket's origin → "state p1 Removed"; its
// copies leave the table and the cluster is valid and complete.
func TestPlanOfflineEnforceCounts(t *testing.T) {
	h, a, b, _ := offlineScenario(t)
	start := epoch.Add(time.Hour)
	h.must(&PeerOffline{ID: "p1", EnforceCounts: true, At: start})
	h.wantPrimary(a, Site0, "p2")
	now := start.Add(time.Second)
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now)},
		"replication_factor replicate a p2->p5",
		"replication_factor replicate b p2->p3",
		"search_factor make_searchable a p3",
		"search_factor make_searchable b p4",
	)
	if p, _ := h.s.Peer("p1"); p.State != StateDecommissioning {
		t.Fatal(p.State)
	}
	h.finishTasks()
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now)}, "state p1 Removed")
	if _, ok := h.b(b).Copies["p1"]; ok {
		t.Fatal("decommissioned peer's copy still counted")
	}
	if st := h.s.Status(); !st.Valid || !st.Complete {
		t.Fatalf("after decommission: %+v", st.Fixups)
	}
}

// TestPlanNewLeaderContinues: the leader of TestPlanRF3SF2PeerDown proposed
// its plan and died. Task b (replicate b p2→p3) was done — the peer
// committed the copy — but its FixupDone never made it; the others are in
// flight.
//
// A new leader, inside its grace period and with no heartbeat heard yet,
// declares nobody Down; it sees the open tasks as work in progress (a's
// copy to p4 and d's to p5 are counted, d's make-searchable on p3 too), so
// it plans no copy again. Task b's goal is in the state → it closes it:
// "done <b> ok". After the grace period, with every peer heard, nothing
// else: the work continues, nothing is repeated.
func TestPlanNewLeaderContinues(t *testing.T) {
	h := fourPeers(t)
	h.peer("p5", "")
	h.warm("a", "p1", "p3", true, "p5", true)
	b := h.warm("b", "p2", "p4", true, "p1", false)
	h.warm("c", "p4", "p5", true, "p2", false)
	h.warm("d", "p1", "p2", true, "p3", false)
	now := epoch.Add(time.Hour)
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "p1")},
		"down p1",
		"replication_factor replicate a p3->p4",
		"replication_factor replicate b p2->p3",
		"replication_factor replicate d p2->p5",
		"search_factor make_searchable d p3",
	)
	var taskB uint64
	for _, task := range h.s.Tasks() {
		if task.Bucket == b {
			taskB = task.ID
		}
	}
	h.must(&AddCopy{Bucket: b, Peer: "p3"})

	// The new leader, from a snapshot-restored copy of the state.
	later := now.Add(20 * time.Second)
	fresh := roundTrip(h.s)
	got := describe(fresh, Plan(fresh, PlanInput{Now: later, GraceUntil: later.Add(10 * time.Second)}))
	want := []string{fmt.Sprintf("done %d ok", taskB)}
	if !slices.Equal(got, want) {
		t.Fatalf("new leader in grace: got %q want %q", got, want)
	}
	h.wantPlan(PlanInput{Now: later, GraceUntil: later.Add(10 * time.Second)}, want...)
	after := later.Add(11 * time.Second)
	h.wantPlan(PlanInput{Now: after, GraceUntil: later.Add(10 * time.Second), LastHeartbeat: alive(h, after, "p1")})
	if n := len(h.s.Tasks()); n != 3 {
		t.Fatalf("%d open tasks, want the 3 in flight", n)
	}
}

// TestPlanThrottles: ten buckets all missing a copy, one possible target:
// at most 5 incoming replications on it, and a new round (a new leader)
// counts the open ones and plans no more until some finish.
func TestPlanThrottles(t *testing.T) {
	h := newHarness(t)
	h.config(singleSite(3, 1))
	for _, p := range []string{"p1", "p2", "p3"} {
		h.peer(p, "")
	}
	for i := range 10 {
		h.warm(fmt.Sprint(i), "p1", "p2", false)
	}
	now := epoch.Add(time.Hour)
	in := PlanInput{Now: now, LastHeartbeat: alive(h, now)}
	h.wantPlan(in,
		"replication_factor replicate 0 p1->p3", "replication_factor replicate 1 p1->p3",
		"replication_factor replicate 2 p1->p3", "replication_factor replicate 3 p1->p3",
		"replication_factor replicate 4 p1->p3")
	h.wantPlan(in)
	h.must(&FixupDone{ID: h.s.Tasks()[0].ID})
	h.wantPlan(in, "replication_factor replicate 5 p1->p3")
}

// TestPlanStreaming: the origin of a hot bucket dies → seal it (the
// executor collects lengths and commits SealBucket). Once sealed, a copy
// longer than the sealed length is truncated (destructive) and a shorter
// one fetches the rest.
func TestPlanStreaming(t *testing.T) {
	h := fourPeers(t)
	b := h.bucket("h", "p1", "p2", true, "p3", false)
	now := epoch.Add(time.Hour)
	// p1 down → "down p1"; b is hot with a dead origin → streaming seal.
	// Nothing else for b: it is not sealed yet.
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now, "p1")},
		"down p1", "streaming seal h")
	h.must(&SealBucket{Bucket: b, Blocks: 5, LastChecksum: "c5"})
	// The surviving copies report their lengths (p2 holds 5, p3 holds 3),
	// and p1 returns with 6 blocks (it wrote one the others never got).
	h.must(&RegisterPeer{ID: "p2", GUID: guid("p2"), Inventory: []CopyInfo{{Bucket: b, Searchable: true, Blocks: 5}}})
	h.must(&RegisterPeer{ID: "p3", GUID: guid("p3"), Inventory: []CopyInfo{{Bucket: b, Blocks: 3}}})
	h.must(&RegisterPeer{ID: "p1", GUID: guid("p1"), Inventory: []CopyInfo{{Bucket: b, Searchable: true, Blocks: 6}}})
	// Hygiene first: the seal task is done (b is warm) → "done <seal> ok".
	// Streaming: p1 has 6 > 5 → truncate p1; p3 has 3 < 5 → fetch from p2
	// (the first copy with the sealed length). RF: p1, p2, p3 = 3 copies ✓;
	// SF: p1, p2 searchable ✓.
	seal := h.s.Tasks()[0].ID
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now)},
		fmt.Sprintf("done %d ok", seal),
		"streaming truncate h p1",
		"streaming fetch h p2->p3")
}

// TestPlanRollShortHotBucket: origin:2,total:3 (and SF origin:1,total:2) on
// two sites a1..a3, b1..b3. Site2 is down when a1 starts hot bucket h:
// ChooseTargets places site1's second copy (a2 and a3 hold nothing: a2 by
// id), then the one copy the policy wants on another site: none is Up, so
// it falls back to site1's a3 (degraded). Search: site1 wants 1 (the
// origin's), the total 2 → a2 searchable. h holds a1 S, a2 S, a3 -: RF is
// not met (0 of the 1 copy outside site1).
//
// While site2 is down: h is short but a fresh choice would
// be degraded as well → no roll (rolling would only make another short
// bucket). Nothing else is planned: h is hot (no copy-making for hot
// buckets), every peer of site1 is heard.
//
// Site2 back (b1..b3 registered, no inventory): h is still short and a
// fresh choice is complete → "replication_factor roll h a1" (the target is
// the origin). In maintenance mode the same state plans nothing. Once the
// roll is committed (RollBucket) the task is done ("done <id> ok" at the
// next pass) and h is warm: replication fixup gives it its site2 copy.
func TestPlanRollShortHotBucket(t *testing.T) {
	h := twoSites(t)
	now := epoch.Add(time.Hour)
	for _, id := range []string{"b1", "b2", "b3"} {
		h.must(&PeerDown{ID: id, At: now})
	}
	choice, err := h.s.ChooseTargets("a1", "main")
	if err != nil || !choice.Degraded {
		t.Fatalf("choice with site2 down: %+v, %v (want degraded)", choice, err)
	}
	var ts []any
	for _, c := range choice.Targets {
		ts = append(ts, c.Peer, c.Searchable)
	}
	hb := h.bucket("h", "a1", ts...)
	if got := h.copies(hb); got != "a1(Up,srch=true) a2(Up,srch=true) a3(Up,srch=false) " {
		t.Fatalf("h's copies %q, want a1 S, a2 S, a3 -", got)
	}
	down := alive(h, now)
	for _, id := range []string{"b1", "b2", "b3"} {
		delete(down, id)
	}
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: down})
	for _, id := range []string{"b1", "b2", "b3"} {
		h.must(&RegisterPeer{ID: id, GUID: guid(id), Site: "site2", At: now})
	}
	h.must(&SetMaintenance{Enabled: true})
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now)})
	h.must(&SetMaintenance{Enabled: false})
	cmds := h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now)}, "replication_factor roll h a1")
	task := h.s.Tasks()[0]
	if task.Target != "a1" || task.Kind != TaskRoll || len(cmds) != 1 {
		t.Fatalf("roll task %+v", task)
	}
	// A roll task for a peer that is not the origin, or a warm bucket, is refused.
	h.refuse(&CreateFixup{Kind: TaskRoll, Level: LevelReplication, Bucket: hb, Target: "a2", At: now}, ErrBadTask)
	h.must(&RollBucket{Bucket: hb, Earliest: now.UnixNano(), Latest: now.UnixNano() + 1, Size: 100, Events: 10, Blocks: 4, LastChecksum: "c4"})
	got := h.plan(PlanInput{Now: now, LastHeartbeat: alive(h, now)})
	if len(got) == 0 || got[0] != fmt.Sprintf("done %d ok", task.ID) || !slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, "replication_factor replicate h ") }) {
		t.Fatalf("after the roll: %q, want the roll task done and h replicated to site2", got)
	}
}

// TestPlanCorruptOriginCopySealed: an origin that is Up but whose own copy
// of a hot bucket is corrupt (its journal unreadable at restart, issue 9
// item 9) cannot roll it: the bucket is sealed from the surviving copies
// as after a death, not left hot for ever.
func TestPlanCorruptOriginCopySealed(t *testing.T) {
	h := fourPeers(t)
	h.bucket("h", "p1", "p2", true, "p3", false)
	b := BucketID("main", "h", guid("p1"))
	now := epoch.Add(time.Hour)
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now)})
	h.must(&MarkCorrupt{Bucket: b, Peer: "p1", Reason: "journal unreadable at offset 4096"})
	h.wantPlan(PlanInput{Now: now, LastHeartbeat: alive(h, now)}, "streaming seal h")
}
