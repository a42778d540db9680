package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// memSink is a snapshot sink in memory.
type memSink struct{ bytes.Buffer }

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Write(&sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	snap.Release()
	return sink.Bytes()
}

func restored(t testing.TB, b []byte) *FSM {
	t.Helper()
	f := New()
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	return f
}

func marshal(t testing.TB, f *FSM) []byte {
	t.Helper()
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSnapshotRoundTrip(t *testing.T) {
	f := New()
	r := rand.New(rand.NewPCG(1, 2))
	g := newLogGen(r)
	for i := uint64(1); i <= 400; i++ {
		applyLog(f, i, g.next(f))
	}
	b := snapshotBytes(t, f)
	f2 := restored(t, b)
	if !bytes.Equal(marshal(t, f), marshal(t, f2)) {
		t.Fatal("restored state differs")
	}
	// The views agree too, and both continue identically.
	var s1, s2 Status
	f.Read(func(s *State) { s1 = s.Status() })
	f2.Read(func(s *State) { s2 = s.Status() })
	if fmt.Sprint(s1) != fmt.Sprint(s2) {
		t.Fatal("status differs after restore")
	}
	for i := uint64(401); i <= 500; i++ {
		c := g.next(f)
		applyLog(f, i, c)
		applyLog(f2, i, c)
	}
	if !bytes.Equal(marshal(t, f), marshal(t, f2)) {
		t.Fatal("states diverge after restore")
	}
	if err := New().Restore(io.NopCloser(bytes.NewReader([]byte("garbage")))); err == nil {
		t.Fatal("restored garbage")
	}
}

// failingSink fails writes.
type failingSink struct{ memSink }

func (f *failingSink) Write([]byte) (int, error) { return 0, io.ErrShortWrite }

// TestSnapshotWriteFails: a write error is returned (the manager's
// raft.FSMSnapshot then cancels the Raft sink).
func TestSnapshotWriteFails(t *testing.T) {
	snap, _ := New().Snapshot()
	var sink failingSink
	if err := snap.Write(&sink); err == nil {
		t.Fatal("a failing sink went unnoticed")
	}
}

// TestDeterminism: two FSMs fed the same random log, one of them snapshotted
// and restored at a random step, end byte-identical. The seed is random per
// run (printed; QUARRY_FSM_SEED replays one), so
// `go test ./fsm -run TestDeterminism -count=20` covers 20 logs.
func TestDeterminism(t *testing.T) {
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
	for i := 1; i <= steps; i++ {
		data := g.next(a)
		ra := applyLog(a, uint64(i), data)
		rb := applyLog(b, uint64(i), data)
		if fmt.Sprint(ra) != fmt.Sprint(rb) {
			t.Fatalf("step %d: responses differ: %v / %v", i, ra, rb)
		}
		if i == cut {
			b = restored(t, snapshotBytes(t, b))
		}
	}
	ba, bb := marshal(t, a), marshal(t, b)
	if !bytes.Equal(ba, bb) {
		t.Fatalf("seed %d: states differ after %d steps (snapshot at %d)", seed, steps, cut)
	}
}

func applyLog(f *FSM, idx uint64, data []byte) any {
	return f.Apply(idx, data)
}

// logGen writes a random but plausible log: config first, then peers,
// buckets, copies, rolls, seals, downs and returns, offline, maintenance,
// rebalances, fixup records, and the planner's own commands.
type logGen struct {
	r     *rand.Rand
	n     int
	now   time.Time
	local int
}

func newLogGen(r *rand.Rand) *logGen { return &logGen{r: r, now: epoch} }

func (g *logGen) next(f *FSM) []byte {
	var c Command
	f.Read(func(s *State) { c = g.command(s) })
	b, err := Encode(c)
	if err != nil {
		panic(err)
	}
	return b
}

func (g *logGen) pick(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return xs[g.r.IntN(len(xs))]
}

func (g *logGen) command(s *State) Command {
	g.n++
	g.now = g.now.Add(time.Duration(g.r.IntN(3000)) * time.Millisecond)
	peers := []string{"p1", "p2", "p3", "p4", "p5", "p6"}
	site := func(p string) string {
		if p[1]-'0' <= 3 {
			return "site1"
		}
		return "site2"
	}
	if g.n == 1 {
		if g.r.IntN(2) == 0 {
			return &SetConfig{Config: multiSite("origin:2,total:3", "origin:1,total:2", "site1", "site2")}
		}
		return &SetConfig{Config: singleSite(3, 2)}
	}
	if g.n <= 7 {
		p := peers[g.n-2]
		return &RegisterPeer{ID: p, GUID: guid(p), Site: site(p), At: g.now}
	}
	buckets := s.bucketIDs()
	bucket := g.pick(buckets)
	holder := "none"
	if b, ok := s.d.Buckets[bucket]; ok {
		holder = g.pick(sortedKeys(b.Copies))
	}
	p := g.pick(peers)
	rid := ""
	if g.r.IntN(5) == 0 {
		rid = fmt.Sprintf("r%d", g.r.IntN(50)) // some retried
	}
	req := ReqID{rid}
	if g.r.IntN(12) == 0 {
		return g.savedCommand(req) // savedsearch_test.go
	}
	switch k := g.r.IntN(27); k {
	case 0, 1, 2:
		tc, err := s.ChooseTargets(p, "main")
		if err != nil {
			return &AddBucket{ReqID: req, ID: BucketID("main", "x", guid(p)), Index: "main", Origin: p}
		}
		g.local++
		return &AddBucket{ReqID: req, ID: BucketID("main", fmt.Sprint(g.local), guid(p)), Index: "main", Origin: p,
			Targets: tc.Targets, Degraded: tc.Degraded, Earliest: g.now.UnixNano()}
	case 3:
		return &AddCopy{ReqID: req, Bucket: bucket, Peer: p, Searchable: g.r.IntN(2) == 0}
	case 4:
		return &CopySearchable{ReqID: req, Bucket: bucket, Peer: holder, Searchable: g.r.IntN(3) > 0}
	case 5:
		return &RemoveCopy{ReqID: req, Bucket: bucket, Peer: holder}
	case 6:
		sender := []string{"", holder, p}[g.r.IntN(3)] // an older group's roll, or one naming its sender
		return &RollBucket{ReqID: req, Bucket: bucket, Earliest: g.now.UnixNano() - 1000, Latest: g.now.UnixNano(), Size: int64(g.r.IntN(1 << 20)), Events: 5, Blocks: int64(1 + g.r.IntN(9)), LastChecksum: "c", Origin: sender}
	case 7:
		if b, ok := s.d.Buckets[bucket]; ok && g.r.IntN(2) == 0 {
			// As the manager seals: every holder's length, at the longest.
			c := &SealBucket{ReqID: req, Bucket: bucket, LastChecksum: "s0"}
			for _, p := range sortedKeys(b.Copies) {
				n := int64(g.r.IntN(10))
				c.Lengths = append(c.Lengths, PeerLength{Peer: p, Blocks: n, LastChecksum: fmt.Sprintf("s%d", n)})
				if n > c.Blocks {
					c.Blocks, c.LastChecksum = n, fmt.Sprintf("s%d", n)
				}
			}
			return c
		}
		return &SealBucket{ReqID: req, Bucket: bucket, Blocks: int64(1 + g.r.IntN(9)), LastChecksum: "s"}
	case 8, 9:
		return &PeerDown{ReqID: req, ID: p, At: g.now}
	case 10, 11:
		var inv []CopyInfo
		for _, id := range buckets {
			if c, ok := s.d.Buckets[id].Copies[p]; ok && g.r.IntN(6) > 0 {
				inv = append(inv, CopyInfo{Bucket: id, Searchable: c.Searchable, Blocks: c.Blocks})
			}
		}
		return &RegisterPeer{ReqID: req, ID: p, GUID: guid(p), Site: site(p), Inventory: inv, At: g.now}
	case 12:
		return &SetPeerState{ReqID: req, ID: p, State: peerStates[g.r.IntN(len(peerStates))], At: g.now}
	case 13:
		return &PeerOffline{ReqID: req, ID: p, EnforceCounts: g.r.IntN(2) == 0, At: g.now}
	case 14:
		return &SetMaintenance{ReqID: req, Enabled: g.r.IntN(3) == 0}
	case 15:
		return &RebalancePrimaries{ReqID: req}
	case 16:
		return &MarkCorrupt{ReqID: req, Bucket: bucket, Peer: holder}
	case 17:
		ids := sortedTaskIDs(s.d.Tasks)
		if len(ids) == 0 {
			return &FixupDone{ID: 999999}
		}
		return &FixupDone{ReqID: req, ID: ids[g.r.IntN(len(ids))], Failed: g.r.IntN(4) == 0}
	case 19:
		by := []DetentionBy{DetentionManual, DetentionDisk}[g.r.IntN(2)]
		return &SetDetention{ReqID: req, ID: p, Enabled: g.r.IntN(2) == 0, By: by, At: g.now}
	case 23:
		return &SetClusterVersion{ReqID: req, Version: 1 + g.r.IntN(Version)}
	case 24:
		// A delivery or report mark of an open task (or of none).
		ids := sortedTaskIDs(s.d.Tasks)
		task := uint64(999999)
		if len(ids) > 0 {
			task = ids[g.r.IntN(len(ids))]
		}
		return &MarkFixup{ReqID: req, Task: task, Peer: p, Kind: []string{MarkDelivered, MarkReported}[g.r.IntN(2)]}
	case 18:
		n := int64(g.r.IntN(10))
		return &CopyLength{ReqID: req, Bucket: bucket, Peer: holder, Blocks: n, LastChecksum: fmt.Sprintf("s%d", n)}
	case 20:
		// Rebuild from inventories: buckets nobody knew, some of an origin
		// (p7) that registers only now and then, with random lengths.
		if g.r.IntN(4) == 0 {
			p = "p7"
		}
		var inv []CopyInfo
		for i := range 1 + g.r.IntN(3) {
			origin := g.pick(append([]string{"p7"}, peers...))
			n := int64(g.r.IntN(7))
			inv = append(inv, CopyInfo{Bucket: BucketID("main", fmt.Sprintf("r%d-%d", g.r.IntN(4), i), guid(origin)), Searchable: true,
				Index: "main", Blocks: n, Events: 3 * n, Earliest: g.now.UnixNano() - n, Latest: g.now.UnixNano() + n, Size: 100 * n,
				Hot: origin == p && g.r.IntN(2) == 0})
		}
		return &RegisterPeer{ReqID: req, ID: p, GUID: guid(p), Site: site(p), Inventory: inv, At: g.now}
	case 21:
		if seals := s.RebuildSeals(); len(seals) > 0 {
			c := seals[g.r.IntN(len(seals))]
			c.ReqID = req
			return c
		}
		return &RebalancePrimaries{ReqID: req}
	case 22:
		// A longer copy extending the seal: mostly from the committed
		// seal, sometimes from a stale one (refused).
		b, ok := s.d.Buckets[bucket]
		if !ok {
			return &ExtendSeal{ReqID: req, Bucket: bucket, Peer: holder, From: 1, FromChecksum: "s1", Blocks: 2, LastChecksum: "s2"}
		}
		from, sum := b.Blocks, b.LastChecksum
		if g.r.IntN(4) == 0 {
			from, sum = from+1, fmt.Sprintf("s%d", from+1)
		}
		n := from + int64(1+g.r.IntN(5))
		return &ExtendSeal{ReqID: req, Bucket: bucket, Peer: holder, From: from, FromChecksum: sum, Blocks: n,
			LastChecksum: fmt.Sprintf("s%d", n), Latest: g.now.UnixNano(), Events: 5 * n}
	default:
		// The planner's next command, as a leader would propose it.
		hb := map[string]time.Time{}
		for _, id := range peers {
			if g.r.IntN(8) > 0 {
				hb[id] = g.now
			}
		}
		disk := map[string]DiskReport{}
		for _, id := range peers {
			disk[id] = DiskReport{Free: int64(g.r.IntN(100)), Total: 100}
		}
		cmds := Plan(s, PlanInput{Now: g.now, LastHeartbeat: hb, Disk: disk, Detention: DetentionRule{FreeBytes: 30, HysteresisBytes: 10}})
		if len(cmds) == 0 {
			return &RebalancePrimaries{}
		}
		return cmds[g.r.IntN(len(cmds))]
	}
}
