package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// frozenHarness: single site RF 3 / SF 2, p1..p4 Up, one warm bucket "1"
// from p1 with copies on p1, p2 (searchable) and p3.
func frozenHarness(t *testing.T) (*harness, string) {
	h := fourPeers(t)
	return h, h.warm("1", "p1", "p2", true, "p3", false)
}

// freeze runs a whole-bucket freeze to its end.
func (h *harness) freeze(b string) {
	h.t.Helper()
	id := h.must(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: b, At: h.now}).Index
	h.must(&FixupDone{ID: id})
}

func (h *harness) tombstone(b string) Frozen {
	h.t.Helper()
	fz, ok := h.s.d.Frozen[b]
	if !ok {
		h.t.Fatalf("no tombstone for %s (have %v)", b, sortedKeys(h.s.d.Frozen))
	}
	return *fz
}

func TestFreezeAllHoldersUpLeavesResolvedTombstone(t *testing.T) {
	h, b := frozenHarness(t)
	v := h.s.TableVersion()
	gen := h.s.CurrentGeneration()
	h.freeze(b)
	if _, ok := h.s.d.Buckets[b]; ok {
		t.Fatal("frozen bucket still in the table")
	}
	if fz := h.tombstone(b); len(fz.Holders) != 0 || fz.Index != "main" || fz.At != h.idx {
		t.Fatalf("tombstone %+v, want no holders, index main, at %d", fz, h.idx)
	}
	// Searches drop it at the table version of the freeze (not a new
	// generation: no existing bucket's primary moved).
	if h.s.TableVersion() != h.idx || h.s.CurrentGeneration() != gen {
		t.Fatalf("table version %d (want %d), generation %d (want %d)", h.s.TableVersion(), h.idx, h.s.CurrentGeneration(), gen)
	}
	d, _ := h.s.Generation(Site0, v)
	if !slices.Equal(d.Removed, []string{b}) {
		t.Fatalf("delta since %d removes %v", v, d.Removed)
	}
	for id, n := range h.s.copyCount {
		if n != 0 {
			t.Fatalf("copy count of %s is %d after the freeze", id, n)
		}
	}
}

func TestFreezeWithDownHolderAndItsReturn(t *testing.T) {
	h, b := frozenHarness(t)
	h.must(&PeerDown{ID: "p3", At: h.now})
	h.freeze(b)
	if fz := h.tombstone(b); !slices.Equal(fz.Holders, []string{"p3"}) {
		t.Fatalf("holders %v, want [p3]", fz.Holders)
	}
	// p3 returns with its copy: the bucket does not come back.
	v := h.s.TableVersion()
	h.must(&RegisterPeer{ID: "p3", GUID: guid("p3"), At: h.now, Inventory: []CopyInfo{{Bucket: b, Blocks: 4, Events: 10, Latest: 5}}})
	if _, ok := h.s.d.Buckets[b]; ok {
		t.Fatal("a returning peer's inventory brought a frozen bucket back")
	}
	if d, _ := h.s.Generation(Site0, v); len(d.Buckets) != 0 {
		t.Fatalf("table lists %v after the return", d.Buckets)
	}
	// The planner tells p3 to delete it: a destructive freeze of its copy.
	in := PlanInput{Now: h.now, LastHeartbeat: alive(h, h.now), GraceUntil: h.now.Add(time.Hour)}
	cmds := h.wantPlan(in, "retention freeze 1 p3")
	task := h.s.d.Tasks[h.idx]
	if task == nil || task.Target != "p3" || !task.Destructive || task.Kind != TaskFreeze {
		t.Fatalf("task %+v from %v", task, cmds)
	}
	// Planned once.
	h.wantPlan(in)
	h.must(&FixupDone{ID: task.ID})
	if fz := h.tombstone(b); len(fz.Holders) != 0 {
		t.Fatalf("holders %v after the copy's freeze", fz.Holders)
	}
	h.wantPlan(in)
}

func TestFrozenHolderReturningWithoutCopy(t *testing.T) {
	h, b := frozenHarness(t)
	h.must(&PeerDown{ID: "p2", At: h.now})
	h.must(&PeerDown{ID: "p3", At: h.now})
	h.freeze(b)
	if fz := h.tombstone(b); !slices.Equal(fz.Holders, []string{"p2", "p3"}) {
		t.Fatalf("holders %v", fz.Holders)
	}
	h.must(&RegisterPeer{ID: "p2", GUID: guid("p2"), At: h.now})
	if fz := h.tombstone(b); !slices.Equal(fz.Holders, []string{"p3"}) {
		t.Fatalf("holders %v after p2 returned empty", fz.Holders)
	}
	// A removed peer is no holder.
	h.must(&SetPeerState{ID: "p3", State: StateRemoved, At: h.now})
	if fz := h.tombstone(b); len(fz.Holders) != 0 {
		t.Fatalf("holders %v after p3 was removed", fz.Holders)
	}
}

func TestFrozenCopyAddedLate(t *testing.T) {
	h, b := frozenHarness(t)
	h.freeze(b)
	// A replication that ended after the freeze reports its copy.
	h.must(&AddCopy{Bucket: b, Peer: "p4", Searchable: true})
	if _, ok := h.s.d.Buckets[b]; ok {
		t.Fatal("a late copy brought a frozen bucket back")
	}
	if fz := h.tombstone(b); !slices.Equal(fz.Holders, []string{"p4"}) {
		t.Fatalf("holders %v", fz.Holders)
	}
	h.refuse(&AddCopy{Bucket: b, Peer: "p9"}, ErrUnknownPeer)
	// And a peer registering with it later (p1 never reported it gone).
	h.must(&RegisterPeer{ID: "p1", GUID: guid("p1"), At: h.now, Inventory: []CopyInfo{{Bucket: b}}})
	if fz := h.tombstone(b); !slices.Equal(fz.Holders, []string{"p1", "p4"}) {
		t.Fatalf("holders %v", fz.Holders)
	}
	in := PlanInput{Now: h.now, LastHeartbeat: alive(h, h.now), GraceUntil: h.now.Add(time.Hour)}
	h.wantPlan(in, "retention freeze 1 p1", "retention freeze 1 p4")
}

func TestFrozenFixupRefusals(t *testing.T) {
	h, b := frozenHarness(t)
	// A live bucket freezes whole.
	h.refuse(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: b, Target: "p2"}, ErrBadTask)
	h.refuse(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: "main~9~g-p1", Target: "p2"}, ErrUnknownBucket)
	h.must(&PeerDown{ID: "p2", At: h.now})
	h.freeze(b)
	h.refuse(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: b, Target: "p4"}, ErrBadTask)
	task := h.must(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: b, Target: "p2"}).Index
	h.refuse(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: b, Target: "p2"}, ErrTaskExists)
	// A holder that is down gets no task; the open one fails (hygiene).
	in := PlanInput{Now: h.now, LastHeartbeat: alive(h, h.now), GraceUntil: h.now.Add(time.Hour)}
	h.wantPlan(in, fmt.Sprintf("done %d failed", task))
	h.wantPlan(in)
	// Back without the copy: nothing to do.
	h.must(&RegisterPeer{ID: "p2", GUID: guid("p2"), At: h.now})
	h.wantPlan(in)
}

func TestFrozenTaskClosedWhenHolderGone(t *testing.T) {
	h, b := frozenHarness(t)
	h.must(&PeerDown{ID: "p2", At: h.now})
	h.freeze(b)
	h.must(&RegisterPeer{ID: "p2", GUID: guid("p2"), At: h.now, Inventory: []CopyInfo{{Bucket: b}}})
	in := PlanInput{Now: h.now, LastHeartbeat: alive(h, h.now), GraceUntil: h.now.Add(time.Hour)}
	h.wantPlan(in, "retention freeze 1 p2")
	task := h.idx
	// The peer is removed before it reports: it is no holder, so the task
	// is done.
	h.must(&SetPeerState{ID: "p2", State: StateRemoved, At: h.now})
	h.wantPlan(in, fmt.Sprintf("done %d ok", task))
}

func TestResolvedTombstonesBounded(t *testing.T) {
	h := fourPeers(t)
	var ids []string
	h.must(&PeerDown{ID: "p4", At: h.now})
	for i := range MaxResolvedFrozen + 5 {
		targets := []any{"p2", true, "p3", false}
		if i == 0 {
			// The first one also has a copy on p4, which is Down.
			h.must(&RegisterPeer{ID: "p4", GUID: guid("p4"), At: h.now})
			targets = append(targets, "p4", false)
		}
		id := h.warm(fmt.Sprint(i+1), "p1", targets...)
		if i == 0 {
			h.must(&PeerDown{ID: "p4", At: h.now})
		}
		h.freeze(id)
		ids = append(ids, id)
	}
	if n := len(h.s.d.Frozen); n != MaxResolvedFrozen+1 {
		t.Fatalf("%d tombstones, want %d resolved and one with a holder", n, MaxResolvedFrozen+1)
	}
	if fz := h.tombstone(ids[0]); !slices.Equal(fz.Holders, []string{"p4"}) {
		t.Fatalf("the tombstone with a holder was dropped or changed: %+v", fz)
	}
	// 1,028 resolved: the 4 oldest go.
	for _, id := range ids[1:5] {
		if h.s.IsFrozen(id) {
			t.Fatalf("oldest resolved tombstone %s kept", id)
		}
	}
	for _, id := range ids[5:] {
		if !h.s.IsFrozen(id) {
			t.Fatalf("newer tombstone %s dropped", id)
		}
	}
}

func TestFrozenSnapshotRoundTrip(t *testing.T) {
	h, b := frozenHarness(t)
	h.must(&PeerDown{ID: "p3", At: h.now})
	h.freeze(b)
	raw, err := h.s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Unmarshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	raw2, _ := s2.Marshal()
	if !bytes.Equal(raw, raw2) || !s2.IsFrozen(b) || !slices.Equal(s2.FrozenBuckets()[0].Holders, []string{"p3"}) {
		t.Fatalf("tombstones after restore: %+v", s2.FrozenBuckets())
	}
}

// TestPlanRetention: frozen_time_period freezes warm buckets whose latest
// event is older than it; max_total_bytes freezes oldest first (by latest
// event) until the index fits; hot buckets never freeze.
func TestPlanRetention(t *testing.T) {
	h := fourPeers(t)
	hour := int64(time.Hour)
	now := epoch.Add(100 * time.Hour)
	roll := func(local string, latestHoursAgo int64, size int64) string {
		id := h.bucket(local, "p1", "p2", true, "p3", false)
		h.must(&RollBucket{Bucket: id, Earliest: now.UnixNano() - latestHoursAgo*hour - 1, Latest: now.UnixNano() - latestHoursAgo*hour,
			Size: size, Events: 1, Blocks: 1, LastChecksum: "c"})
		return id
	}
	roll("1", 50, 100) // oldest
	roll("2", 30, 100)
	roll("3", 10, 100)
	roll("4", 40, 100)
	h.bucket("5", "p1", "p2", true, "p3", false) // hot, oldest of all by earliest
	in := PlanInput{Now: now, LastHeartbeat: alive(h, now), GraceUntil: now.Add(time.Hour)}
	h.wantPlan(in) // no retention set

	cfg := h.s.Config()
	cfg.Indexes = []IndexConfig{{Name: "main", FrozenTimePeriod: 35 * time.Hour}}
	h.must(&SetConfig{Config: cfg})
	h.wantPlan(in, "retention freeze 1", "retention freeze 4")
	h.finishTasks()

	cfg.Indexes = []IndexConfig{{Name: "main", MaxTotalBytes: 150}}
	h.must(&SetConfig{Config: cfg})
	// 200 bytes warm: "2" (latest 30 h ago) goes, then 100 fit.
	h.wantPlan(in, "retention freeze 2")
	h.finishTasks()
	h.wantPlan(in)
	if h.s.IsFrozen(BucketID("main", "3", guid("p1"))) || !h.s.IsFrozen(BucketID("main", "2", guid("p1"))) {
		t.Fatalf("tombstones %v", h.s.FrozenBuckets())
	}
}

// TestMaxDataSizeConfig: max_data_size is bytes, 0 or at least
// MinMaxDataSize; a bad value is refused and changes nothing.
func TestMaxDataSizeConfig(t *testing.T) {
	h := fourPeers(t)
	cfg := h.s.Config()
	for _, bad := range []int64{-1, 1, MinMaxDataSize - 1} {
		c := cfg
		c.Indexes = []IndexConfig{{Name: "main"}, {Name: "web", MaxDataSize: bad}}
		err := h.refuse(&SetConfig{Config: c}, ErrBadConfig)
		if want := fmt.Sprintf(`index "web": max_data_size %d`, bad); !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Fatalf("error %q lacks %q", err, want)
		}
	}
	c := cfg
	c.Indexes = []IndexConfig{{Name: "main"}, {Name: "web", MaxDataSize: MinMaxDataSize}}
	h.must(&SetConfig{Config: c})
	if got := h.s.Config().Indexes[1].MaxDataSize; got != MinMaxDataSize {
		t.Fatalf("max_data_size %d", got)
	}
}

// TestFrozenDeterminism: the determinism test's random log with freezes
// mixed in — whole-bucket freezes completed at once, holders down at the
// time, returns with frozen copies in the inventory, late copies — and a
// snapshot and restore at a random step in one of two FSMs: they end
// byte-identical, and no frozen bucket is ever back in the table while its
// tombstone is kept. QUARRY_FSM_SEED replays a seed.
func TestFrozenDeterminism(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if env := os.Getenv("QUARRY_FSM_SEED"); env != "" {
		v, err := strconv.ParseUint(env, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with QUARRY_FSM_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, seed>>7))
	steps := 300 + r.IntN(300)
	cut := 1 + r.IntN(steps)
	a, b := New(), New()
	g := newLogGen(r)
	var pending []Command
	everFrozen := map[string]bool{}
	for i := 1; i <= steps; i++ {
		var c Command
		a.Read(func(s *State) {
			if len(pending) > 0 {
				c, pending = pending[0], pending[1:]
				return
			}
			c = frozenCommand(g, s, &pending)
			if c == nil {
				c = g.command(s)
			}
		})
		data, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		ra := applyLog(a, uint64(i), data)
		rb := applyLog(b, uint64(i), data)
		if fmt.Sprint(ra) != fmt.Sprint(rb) {
			t.Fatalf("step %d: responses differ: %v / %v", i, ra, rb)
		}
		if x, ok := c.(*CreateFixup); ok && x.Kind == TaskFreeze && x.Target == "" {
			if res, ok := ra.(Result); ok {
				pending = append(pending, &FixupDone{ID: res.Index})
			}
		}
		a.Read(func(s *State) {
			for _, id := range sortedKeys(s.d.Frozen) {
				everFrozen[id] = true
				if _, back := s.d.Buckets[id]; back {
					t.Fatalf("step %d: frozen bucket %s is in the table", i, id)
				}
				for _, p := range s.d.Frozen[id].Holders {
					if st := s.stateOf(p); st == StateRemoved || st == "" {
						t.Fatalf("step %d: tombstone %s holder %s is %q", i, id, p, st)
					}
				}
			}
		})
		if i == cut {
			b = restored(t, snapshotBytes(t, b))
		}
	}
	ba, bb := marshal(t, a), marshal(t, b)
	if !bytes.Equal(ba, bb) {
		t.Fatalf("seed %d: states differ after %d steps (snapshot at %d)", seed, steps, cut)
	}
	t.Logf("%d buckets frozen", len(everFrozen))
}

// frozenCommand is, one time in six, a freeze or a command about frozen
// buckets; nil otherwise.
func frozenCommand(g *logGen, s *State, pending *[]Command) Command {
	if g.n < 8 || g.r.IntN(6) != 0 {
		return nil
	}
	g.n++
	peers := []string{"p1", "p2", "p3", "p4", "p5", "p6"}
	p := peers[g.r.IntN(len(peers))]
	frozen := sortedKeys(s.d.Frozen)
	switch g.r.IntN(3) {
	case 0:
		ids := s.bucketIDs()
		if len(ids) == 0 {
			return nil
		}
		if g.r.IntN(2) == 0 {
			*pending = append(*pending, &PeerDown{ID: p, At: g.now})
			return &PeerDown{ID: peers[g.r.IntN(len(peers))], At: g.now}
		}
		return &CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: ids[g.r.IntN(len(ids))], At: g.now}
	case 1:
		// A return whose inventory holds frozen buckets and live copies.
		var inv []CopyInfo
		for _, id := range frozen {
			if g.r.IntN(2) == 0 {
				inv = append(inv, CopyInfo{Bucket: id, Blocks: 3})
			}
		}
		for _, id := range s.bucketIDs() {
			if _, ok := s.d.Buckets[id].Copies[p]; ok {
				inv = append(inv, CopyInfo{Bucket: id})
			}
		}
		site := "site1"
		if p[1]-'0' > 3 {
			site = "site2"
		}
		return &RegisterPeer{ID: p, GUID: guid(p), Site: site, Inventory: inv, At: g.now}
	default:
		if len(frozen) == 0 {
			return nil
		}
		return &AddCopy{Bucket: frozen[g.r.IntN(len(frozen))], Peer: p}
	}
}

// checkFrozen is the property test's invariant of tombstones: no frozen
// bucket is in the table; holders are sorted, distinct, known and not
// Removed; at most MaxResolvedFrozen tombstones without holders; an open
// freeze of one copy names a frozen bucket.
func checkFrozen(t interface{ Fatalf(string, ...any) }, s *State) {
	resolved := 0
	for _, id := range sortedKeys(s.d.Frozen) {
		fz := s.d.Frozen[id]
		if _, ok := s.d.Buckets[id]; ok {
			t.Fatalf("bucket %s is both in the table and frozen", id)
		}
		if len(fz.Holders) == 0 {
			resolved++
		}
		for i, p := range fz.Holders {
			if i > 0 && fz.Holders[i-1] >= p {
				t.Fatalf("tombstone %s: holders %v not sorted and distinct", id, fz.Holders)
			}
			if st := s.stateOf(p); st == "" || st == StateRemoved {
				t.Fatalf("tombstone %s: holder %s is %q", id, p, st)
			}
		}
	}
	if resolved > MaxResolvedFrozen {
		t.Fatalf("%d resolved tombstones, at most %d kept", resolved, MaxResolvedFrozen)
	}
	for _, id := range sortedTaskIDs(s.d.Tasks) {
		tk := s.d.Tasks[id]
		if _, live := s.d.Buckets[tk.Bucket]; !live && !s.IsFrozen(tk.Bucket) {
			t.Fatalf("task %d (%s) names %s, neither in the table nor frozen", id, tk.Kind, tk.Bucket)
		}
		if tk.Kind == TaskFreeze && tk.Target != "" && !s.IsFrozen(tk.Bucket) {
			t.Fatalf("task %d freezes one copy of %s, which is not frozen", id, tk.Bucket)
		}
	}
}

// TestPlanRetentionWaitsForStreams: a bucket with a copy still streaming
// in (an open replicate task) is not frozen until the stream ends — a
// freeze drops the bucket's tasks, so the copy that lands afterwards would
// be on no freeze task and in no tombstone — and under max_total_bytes a
// newer bucket is not frozen in the oldest one's place meanwhile.
func TestPlanRetentionWaitsForStreams(t *testing.T) {
	h := fourPeers(t)
	hour := int64(time.Hour)
	now := epoch.Add(100 * time.Hour)
	roll := func(local string, latestHoursAgo int64) string {
		id := h.bucket(local, "p1", "p2", true, "p3", false)
		h.must(&RollBucket{Bucket: id, Earliest: now.UnixNano() - latestHoursAgo*hour - 1, Latest: now.UnixNano() - latestHoursAgo*hour,
			Size: 100, Events: 1, Blocks: 1, LastChecksum: "c"})
		return id
	}
	old, newer := roll("1", 50), roll("2", 40)
	h.must(&CreateFixup{Kind: TaskReplicate, Level: LevelReplication, Bucket: old, Source: "p2", Target: "p4", Searchable: true, At: h.now})
	in := PlanInput{Now: now, LastHeartbeat: alive(h, now), GraceUntil: now.Add(time.Hour)}
	cfg := h.s.Config()
	for _, ic := range []IndexConfig{{Name: "main", FrozenTimePeriod: 45 * time.Hour}, {Name: "main", MaxTotalBytes: 150}} {
		cfg.Indexes = []IndexConfig{ic}
		h.must(&SetConfig{Config: cfg})
		for _, c := range Plan(h.s, in) {
			if f, ok := c.(*CreateFixup); ok && f.Kind == TaskFreeze {
				t.Fatalf("%+v: froze %s while a copy of %s streams in", ic, f.Bucket, old)
			}
		}
	}
	h.finishTasks() // the stream ends: a fourth copy (excess), and the oldest goes
	h.wantPlan(in, "excess remove_copy 1 p3", "retention freeze 1")
	if h.s.IsFrozen(newer) {
		t.Fatalf("%s frozen in place of %s", newer, old)
	}
}
