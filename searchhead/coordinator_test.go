package searchhead

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/query"
)

// The run coordinator's coverage rules (SPEC §5 steps 3–4, "Completeness"),
// driven without a transport: messages go straight to run.handle, and what
// the coordinator would send is read from run.retries and run.later.

// fixture is one search over buckets b1…bn, each with a chain of copies,
// the first copy's stream owning it (the default plan's invite).
type fixture struct {
	t       *testing.T
	r       *run
	streams map[string]*peerStream
	merged  map[string]int // partials merged, by the first bucket they came with
}

func newFixture(t *testing.T, q string, infos map[string]fsm.BucketInfo, chains map[string][]string) *fixture {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := &Head{cfg: Config{ID: "sh1", Site: "site1", PeerTimeout: time.Second, SearchTimeout: time.Minute},
		log: log, adaptive: newAdaptive(), suspects: map[string]time.Time{}, metrics: newMetrics(prometheus.NewRegistry()),
		tables: newTables(nil, "site1", log)}
	h.tables.loaded = true
	var peers []fsm.GenerationPeer
	for _, p := range []string{"p1", "p2", "p3"} {
		peers = append(peers, fsm.GenerationPeer{ID: p, Site: "site1", State: fsm.StateUp})
	}
	h.tables.own().Apply(fsm.GenerationView{Peers: peers})
	plan, err := query.Compile(query.Request{Query: q, Now: time.Unix(1_800_000_000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	r := &run{h: h, ctx: ctx, plan: plan, pref: &Preference{}, id: "test", site: "site1", tsite: "site1",
		peers: maps.Collect(h.tables.own().Peers()), buckets: map[string]*bucketRun{}, failed: map[string]bool{}, answered: map[string]bool{},
		scanned: map[string]int64{}, retries: map[string][]string{}}
	f := &fixture{t: t, r: r, streams: map[string]*peerStream{}, merged: map[string]int{}}
	r.onBucket = func(ps []*query.Partial) {
		for range ps {
			f.merged["any"]++
		}
	}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range infos {
			if !yield(id) {
				return
			}
		}
	}) {
		chain := chains[id]
		br := &bucketRun{id: id, info: infos[id], chain: chain, next: 1, primary: chain[0]}
		r.buckets[id], r.order = br, append(r.order, id)
		s := f.stream(chain[0])
		s.buckets[id] = true
		br.stream = s
	}
	return f
}

func (f *fixture) stream(peer string) *peerStream {
	if s, ok := f.streams[peer]; ok {
		return s
	}
	s := &peerStream{peer: peer, buckets: map[string]bool{}, cancel: func() {}, plan: true}
	f.streams[peer] = s
	f.r.streams = append(f.r.streams, s)
	return s
}

func (f *fixture) send(peer string, m api.SearchMsg) {
	var part *query.Partial
	if m.Kind == api.SearchBatch {
		part = &query.Partial{}
	}
	f.r.handle(streamEvent{s: f.stream(peer), msg: &m, part: part})
}

func (f *fixture) state(id string) int { return f.r.buckets[id].state }

// queued returns where the coordinator would send each bucket next.
func (f *fixture) queued() map[string][]string {
	out := map[string][]string{}
	for p, ids := range f.r.retries {
		for _, id := range ids {
			out[id] = append(out[id], p)
		}
	}
	return out
}

func sealed(blocks int64, sum string) fsm.BucketInfo {
	return fsm.BucketInfo{Index: "main", Sealed: true, Blocks: blocks, Checksum: sum, Origin: "p1", SearchableOn: []string{"p1", "p2", "p3"}}
}

func length(blocks int64, sum string) *api.CopyLength {
	return &api.CopyLength{Blocks: blocks, Checksum: sum}
}

// TestCoordinatorProof: a bucket counts only from a copy that proves it is
// whole; any other marker sends the bucket to the next copy.
func TestCoordinatorProof(t *testing.T) {
	hot := fsm.BucketInfo{Index: "main", Hot: true, Origin: "p1", SearchableOn: []string{"p1", "p2"}}
	for _, tc := range []struct {
		name   string
		info   fsm.BucketInfo
		from   string // the stream's peer (chain head)
		batch  bool
		length *api.CopyLength
		ok     bool
		why    string
	}{
		{"sealed, whole", sealed(5, "0000abcd"), "p1", true, length(5, "0000abcd"), true, ""},
		{"sealed, short", sealed(5, "0000abcd"), "p2", true, length(1, "00001111"), false, "holds 1 blocks"},
		{"sealed, longer", sealed(5, "0000abcd"), "p2", true, length(6, "00002222"), false, "holds 6 blocks"},
		{"sealed, same blocks, other checksum", sealed(5, "0000abcd"), "p2", true, length(5, "0000ffff"), false, "sealed at 5 blocks"},
		{"sealed, checksum unknown to the table", sealed(5, ""), "p2", true, length(5, "0000ffff"), true, ""},
		{"no length", sealed(5, "0000abcd"), "p1", true, nil, false, "did not say"},
		{"searched without its batch", sealed(5, "0000abcd"), "p1", false, length(5, "0000abcd"), false, "without sending its results"},
		{"hot, origin", hot, "p1", true, length(0, ""), true, ""},
		{"hot, replica", hot, "p2", true, length(3, "00003333"), true, ""},
		{"rolled without a sealed length", fsm.BucketInfo{Index: "main", Origin: "p1"}, "p2", true, length(2, "00004444"), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chain := []string{tc.from, "p3"}
			f := newFixture(t, "*", map[string]fsm.BucketInfo{"b1": tc.info}, map[string][]string{"b1": chain})
			if tc.batch {
				f.send(tc.from, api.SearchMsg{Kind: api.SearchBatch, Bucket: "b1"})
			}
			f.send(tc.from, api.SearchMsg{Kind: api.SearchMarker, Bucket: "b1", Outcome: api.MarkerSearched, Length: tc.length})
			if tc.ok {
				if f.state("b1") != bSearched || f.merged["any"] != 1 {
					t.Fatalf("state %d, merged %d: want searched once", f.state("b1"), f.merged["any"])
				}
				return
			}
			br := f.r.buckets["b1"]
			if br.state != bPending || f.merged["any"] != 0 || !slices.Equal(f.queued()["b1"], []string{"p3"}) {
				t.Fatalf("state %d, merged %d, queued %v: want pending, nothing merged, sent to p3", br.state, f.merged["any"], f.queued())
			}
			if len(br.failures) != 1 || !strings.Contains(br.failures[0].Reason, tc.why) {
				t.Fatalf("failures %+v, want a reason with %q", br.failures, tc.why)
			}
		})
	}
}

// TestCoordinatorBatchCount: a marker that says how many batches came
// before it (a peer of this build, api.SearchMsg.Batches) proves the bucket
// only when exactly that many arrived — none for a bucket without events.
func TestCoordinatorBatchCount(t *testing.T) {
	for _, tc := range []struct {
		name          string
		sent, claimed int
		ok            bool
	}{
		{"no events, no batch", 0, 0, true},
		{"two batches, both arrived", 2, 2, true},
		{"a batch said, none arrived", 0, 1, false},
		{"two said, one arrived", 1, 2, false},
		{"none said, one arrived", 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "*", map[string]fsm.BucketInfo{"b1": sealed(5, "0000abcd")}, map[string][]string{"b1": {"p1", "p3"}})
			for range tc.sent {
				f.send("p1", api.SearchMsg{Kind: api.SearchBatch, Bucket: "b1"})
			}
			n := tc.claimed
			f.send("p1", api.SearchMsg{Kind: api.SearchMarker, Bucket: "b1", Outcome: api.MarkerSearched, Length: length(5, "0000abcd"), Batches: &n})
			if tc.ok {
				if f.state("b1") != bSearched || f.merged["any"] != tc.sent {
					t.Fatalf("state %d, merged %d: want searched, %d merged", f.state("b1"), f.merged["any"], tc.sent)
				}
				return
			}
			br := f.r.buckets["b1"]
			if br.state != bPending || f.merged["any"] != 0 || !slices.Equal(f.queued()["b1"], []string{"p3"}) {
				t.Fatalf("state %d, merged %d, queued %v: want pending, nothing merged, sent to p3", br.state, f.merged["any"], f.queued())
			}
			if len(br.failures) != 1 || !strings.Contains(br.failures[0].Reason, "batches, and") {
				t.Fatalf("failures %+v", br.failures)
			}
		})
	}
}

// TestCoordinatorComboFailsOverOnce: a stream failing with a combined
// answer pending sends each of its buckets to exactly one next copy (it
// sent a combo's siblings to two: the "combined answer overlapped a bucket
// it does not own" partials of issue 24).
func TestCoordinatorComboFailsOverOnce(t *testing.T) {
	infos := map[string]fsm.BucketInfo{"b1": sealed(1, ""), "b2": sealed(1, ""), "b3": sealed(1, "")}
	chains := map[string][]string{"b1": {"p1", "p2", "p3"}, "b2": {"p1", "p2", "p3"}, "b3": {"p1", "p3", "p2"}}
	f := newFixture(t, "* | stats count", infos, chains)
	f.send("p1", api.SearchMsg{Kind: api.SearchBatch, Buckets: []string{"b1", "b2", "b3"}})
	f.send("p1", api.SearchMsg{Kind: api.SearchMarker, Bucket: "b1", Outcome: api.MarkerSearched, Length: length(1, "")})
	f.r.failStream(f.streams["p1"], "peer p1 went silent")
	q := f.queued()
	for id, want := range map[string]string{"b1": "p2", "b2": "p2", "b3": "p3"} {
		if !slices.Equal(q[id], []string{want}) {
			t.Errorf("bucket %s queued to %v, want exactly [%s] (all: %v)", id, q[id], want, q)
		}
		if st := f.state(id); st != bPending {
			t.Errorf("bucket %s state %d, want pending", id, st)
		}
	}
	if f.merged["any"] != 0 {
		t.Fatalf("the dead stream's combined answer was merged")
	}
}

// TestCoordinatorDoneWithoutBucketAndRounds: a done without a bucket sends
// it on; when every copy failed, the chain is tried again after a pause
// (a paused peer may have resumed) before the bucket fails, and the search
// is then partial naming it.
func TestCoordinatorDoneWithoutBucketAndRounds(t *testing.T) {
	f := newFixture(t, "*", map[string]fsm.BucketInfo{"b1": sealed(1, "")}, map[string][]string{"b1": {"p1", "p2"}})
	f.send("p1", api.SearchMsg{Kind: api.SearchDone, TableVersion: 0})
	if q := f.queued(); !slices.Equal(q["b1"], []string{"p2"}) {
		t.Fatalf("after p1's done without b1: queued %v, want p2", q)
	}
	f.r.retries = map[string][]string{}
	// p2 fails too: the chain is used up, a round is scheduled, not a failure.
	s2 := f.stream("p2")
	s2.buckets["b1"], f.r.buckets["b1"].stream = true, s2
	f.r.failStream(s2, "peer p2 went silent")
	br := f.r.buckets["b1"]
	if br.state != bPending || len(f.r.later) != 1 || br.rounds != 1 {
		t.Fatalf("after every copy failed: state %d, later %v, rounds %d: want a second round", br.state, f.r.later, br.rounds)
	}
	// Once the pause is over, the chain starts again (failed peers too).
	f.r.releaseRounds(time.Now().Add(time.Minute))
	if q := f.queued(); !slices.Equal(q["b1"], []string{"p1"}) {
		t.Fatalf("second round: queued %v, want p1 again", q)
	}
	// Rounds are bounded: after maxRounds the bucket fails.
	for br.rounds < maxRounds || br.state == bPending {
		f.r.retries = map[string][]string{}
		br.next = len(br.chain)
		f.r.failover(br, "p1", "still silent")
		f.r.releaseRounds(time.Now().Add(time.Hour))
		if br.rounds > maxRounds {
			t.Fatalf("rounds %d past the bound %d", br.rounds, maxRounds)
		}
		if len(f.r.later) == 0 && len(f.r.retries) == 0 {
			break
		}
	}
	if br.state != bFailed {
		t.Fatalf("after %d rounds: state %d, want failed", br.rounds, br.state)
	}
	sum := f.r.summary()
	if !sum.Partial || sum.Buckets.Failed != 1 {
		t.Fatalf("summary %+v: want partial with b1 failed", sum)
	}
}

// TestCoordinatorConfirmsHotReplicas: a hot bucket taken from a replica on
// the table's word counts only once the managers confirm that word after
// the search began (confirmHotReplicas): a replica they count short now, a
// seal past what it held, or managers that cannot be reached make the
// bucket failed and the search partial; an unchanged table keeps it; an
// answer from the origin needs no confirmation.
func TestCoordinatorConfirmsHotReplicas(t *testing.T) {
	hot := fsm.BucketInfo{Index: "main", Hot: true, Origin: "p1", SearchableOn: []string{"p1", "p2"}}
	shortNow := hot
	shortNow.SearchableOn = []string{"p1"}
	sealedPast := fsm.BucketInfo{Index: "main", Sealed: true, Blocks: 5, Checksum: "00005555", Origin: "p1", SearchableOn: []string{"p1", "p2"}}
	// With LeftAt (fsm.LeftAtVersion): the replica left the set at table
	// version 8, after the plan's 7 (and came back: hot and listed again),
	// or at 6, before the plan's table, which already listed it whole again.
	leftAfter, leftBefore, hotBack := sealedPast, sealedPast, hot
	leftAfter.LeftAt = map[string]uint64{"p2": 8}
	leftBefore.LeftAt = map[string]uint64{"p2": 6}
	hotBack.LeftAt = map[string]uint64{"p2": 8}
	hotLater := shortNow
	hotLater.LeftAt = map[string]uint64{"p2": 9}
	for _, tc := range []struct {
		name    string
		from    string
		answer  *fsm.BucketInfo // the managers' entry now; nil: unchanged
		leftAt  uint64          // LeftAtFrom of the tables (0: not recorded)
		err     error
		ok      bool
		fetched bool
		why     string
	}{
		{"origin: no confirmation", "p1", nil, 0, nil, true, false, ""},
		{"replica, table unchanged", "p2", nil, 0, nil, true, true, ""},
		{"replica, counted short now", "p2", &shortNow, 0, nil, false, true, "count short now"},
		{"replica, sealed past it, no LeftAt", "p2", &sealedPast, 0, nil, false, true, "sealed at 5 blocks meanwhile"},
		{"replica, managers unreachable", "p2", nil, 0, errors.New("no responders"), false, true, "could not confirm"},
		{"replica, sealed past it, never left", "p2", &sealedPast, 5, nil, true, true, ""},
		{"replica, sealed past it, left after the plan", "p2", &leftAfter, 5, nil, false, true, "left the bucket's searchable set at table version 8"},
		{"replica, sealed past it, left before the plan", "p2", &leftBefore, 5, nil, true, true, ""},
		{"replica, hot, left after the plan and back", "p2", &hotBack, 5, nil, false, true, "left the bucket's searchable set at table version 8"},
		{"replica, sealed past it, LeftAt recorded only after the plan", "p2", &sealedPast, 9, nil, false, true, "keep no record"},
		{"replica, hot, left after the search's barrier", "p2", nil, 5, nil, true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "*", map[string]fsm.BucketInfo{"b1": hot}, map[string][]string{"b1": {tc.from, "p3"}})
			f.r.begun = time.Now()
			f.r.h.tables.own().Apply(fsm.GenerationView{Version: 7, Full: true, Peers: slices.Collect(maps.Values(f.r.peers)), Buckets: map[string]fsm.BucketInfo{"b1": hot}, LeftAtFrom: tc.leftAt})
			f.r.buckets["b1"].tver = 7
			fetched := 0
			f.r.h.tables.fetchGen = func(ctx context.Context, site string, since uint64) (fsm.GenerationView, error) {
				fetched++
				if tc.err != nil {
					return fsm.GenerationView{}, tc.err
				}
				v := fsm.GenerationView{Version: since, Since: since, LeftAtFrom: tc.leftAt}
				if tc.answer != nil {
					v.Version = since + 1
					v.Buckets = map[string]fsm.BucketInfo{"b1": *tc.answer}
				}
				return v, nil
			}
			f.send(tc.from, api.SearchMsg{Kind: api.SearchBatch, Bucket: "b1"})
			f.send(tc.from, api.SearchMsg{Kind: api.SearchMarker, Bucket: "b1", Outcome: api.MarkerSearched, Length: length(3, "00003333")})
			if strings.Contains(tc.name, "after the search's barrier") {
				// The barrier answers version 7 (nothing changed); the leave
				// is committed later, at 9, and reaches the table before the
				// search's end: every block acknowledged without the replica
				// was acknowledged after the search began.
				v, err := f.r.barrierAfterBegin()
				f.r.barrier = &barrierResult{v, err}
				f.r.h.tables.own().Apply(fsm.GenerationView{Version: 9, Since: 7, LeftAtFrom: tc.leftAt, Buckets: map[string]fsm.BucketInfo{"b1": hotLater}})
			}
			f.r.confirmHotReplicas()
			if (fetched > 0) != tc.fetched {
				t.Fatalf("the managers were asked %d times, want asked %v", fetched, tc.fetched)
			}
			sum := f.r.summary()
			if tc.ok {
				if f.state("b1") != bSearched || sum.Partial {
					t.Fatalf("state %d, partial %v: want searched and complete", f.state("b1"), sum.Partial)
				}
				return
			}
			if f.state("b1") != bFailed || !sum.Partial || !strings.Contains(strings.Join(sum.Warnings, " "), tc.why) {
				t.Fatalf("state %d, partial %v, warnings %q: want failed, partial, a reason with %q", f.state("b1"), sum.Partial, sum.Warnings, tc.why)
			}
		})
	}
}

// TestSettleBarrierPlansAgain: a search that plans to read a hot bucket
// from a replica takes the barrier first and plans again on the table it
// brought: the replica that left the bucket's searchable set meanwhile is
// not read, and the plan's table is at least the barrier's (so no leave
// can fall between the two).
func TestSettleBarrierPlansAgain(t *testing.T) {
	f := newFixture(t, "*", nil, nil)
	r := f.r
	peers := []fsm.GenerationPeer{{ID: "p9", Site: "site2", State: fsm.StateUp}}
	for _, p := range []string{"p1", "p2", "p3"} {
		peers = append(peers, fsm.GenerationPeer{ID: p, Site: "site1", State: fsm.StateUp})
	}
	before := fsm.BucketInfo{Index: "main", Hot: true, Origin: "p9", SearchableOn: []string{"p2", "p3", "p9"}}
	after := before
	after.SearchableOn, after.LeftAt = []string{"p3", "p9"}, map[string]uint64{"p2": 8}
	r.h.tables.own().Apply(fsm.GenerationView{Version: 7, Full: true, Peers: peers, LeftAtFrom: 2,
		Buckets: map[string]fsm.BucketInfo{"b1": before}, Primaries: map[string]string{"b1": "p2"}})
	r.h.tables.fetchGen = func(ctx context.Context, site string, since uint64) (fsm.GenerationView, error) {
		return fsm.GenerationView{Version: 8, Since: since, Peers: peers, LeftAtFrom: 2,
			Buckets: map[string]fsm.BucketInfo{"b1": after}, Primaries: map[string]string{"b1": "p3"}}, nil
	}
	r.begun = time.Now()
	r.buckets, r.order = map[string]*bucketRun{}, nil
	if err := r.planBuckets(); err != nil {
		t.Fatal(err)
	}
	if br := r.buckets["b1"]; br.chain[0] != "p2" || !r.readsHotReplica() {
		t.Fatalf("first plan: chain %v, want p2 first (a hot replica)", br.chain)
	}
	if err := r.settleBarrier(); err != nil {
		t.Fatal(err)
	}
	br := r.buckets["b1"]
	if br.chain[0] != "p3" || slices.Contains(br.chain, "p2") || br.tver != 8 || r.version != 8 {
		t.Fatalf("after the barrier: chain %v, table version %d (run %d); want p3 first, no p2, version 8", br.chain, br.tver, r.version)
	}
	br.hotFrom, br.state = "p3", bSearched
	if why := hotReplicaDoubt(br, after, true, 2, *r.barrier); why != "" {
		t.Fatalf("a replica planned from the barrier's table is doubted: %s", why)
	}
}

// TestFailoverToHotReplicaTakesBarrier: a hot bucket whose origin fails
// mid-search goes to a replica only on a table at least as new as the
// search's barrier (hotfailover.go): the barrier is taken without holding
// up the loop, the bucket waits for it, and a replica that left the
// bucket's searchable set meanwhile is passed over for the next copy; one
// still in the set is read, planned from the barrier's table, so a leave
// after the barrier does not fail it at the end.
func TestFailoverToHotReplicaTakesBarrier(t *testing.T) {
	hot := fsm.BucketInfo{Index: "main", Hot: true, Origin: "p1", SearchableOn: []string{"p1", "p2", "p3"}}
	left := hot
	left.SearchableOn, left.LeftAt = []string{"p1", "p3"}, map[string]uint64{"p2": 8}
	for _, tc := range []struct {
		name     string
		answer   fsm.BucketInfo // the bucket at the barrier's table (version 8)
		barrier  bool           // a barrier (version 8) was taken before the failover
		wantPeer string
	}{
		{"replica left before the barrier: next copy", left, false, "p3"},
		{"replica still whole at the barrier: read", hot, false, "p2"},
		{"barrier taken earlier, replica left: next copy", left, true, "p3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "*", map[string]fsm.BucketInfo{"b1": hot}, map[string][]string{"b1": {"p1", "p2", "p3"}})
			r := f.r
			r.h.tables.own().Apply(fsm.GenerationView{Version: 7, Full: true, Peers: slices.Collect(maps.Values(r.peers)),
				Buckets: map[string]fsm.BucketInfo{"b1": hot}, LeftAtFrom: 2})
			r.buckets["b1"].tver = 7
			r.h.tables.fetchGen = func(ctx context.Context, site string, since uint64) (fsm.GenerationView, error) {
				return fsm.GenerationView{Version: 8, Since: since, LeftAtFrom: 2, Buckets: map[string]fsm.BucketInfo{"b1": tc.answer}}, nil
			}
			r.begun = time.Now()
			if tc.barrier {
				v, err := r.barrierAfterBegin()
				r.barrier = &barrierResult{v, err}
			}
			r.failStream(f.stream("p1"), "peer p1 sent no progress")
			if q := f.queued()["b1"]; !slices.Equal(q, []string{"p2"}) {
				t.Fatalf("after the origin failed: queued to %v, want p2", q)
			}
			sent := r.gateHotReplicas("p2", r.retries["p2"])
			delete(r.retries, "p2")
			if !tc.barrier {
				if len(sent) != 0 || r.barrierWait == nil {
					t.Fatalf("sent %v with no barrier taken; want the bucket held for the barrier", sent)
				}
				if r.pending() == 0 {
					t.Fatal("a bucket held for the barrier is not pending: the search would end without it")
				}
				select {
				case b := <-r.barrierWait:
					r.takeBarrier(b)
				case <-time.After(10 * time.Second):
					t.Fatal("no barrier")
				}
				sent = r.gateHotReplicas("p2", r.retries["p2"])
				delete(r.retries, "p2")
			}
			br := r.buckets["b1"]
			got := ""
			if len(sent) == 1 {
				got = "p2"
			} else if q := f.queued()["b1"]; len(q) == 1 {
				got = q[0]
			}
			if got != tc.wantPeer || br.tver != 8 {
				t.Fatalf("bucket goes to %q on table version %d; want %s on 8", got, br.tver, tc.wantPeer)
			}
			if got != "p2" {
				return
			}
			// A leave after the barrier, seen before the search's end.
			later := hot
			later.SearchableOn, later.LeftAt = []string{"p1", "p3"}, map[string]uint64{"p2": 9}
			br.hotFrom, br.state = "p2", bSearched
			if why := hotReplicaDoubt(br, later, true, 2, *r.barrier); why != "" {
				t.Fatalf("a replica read on the barrier's table is doubted for a later leave: %s", why)
			}
		})
	}
}
