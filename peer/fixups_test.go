package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer/store"
)

// fakeCP is a scripted control plane: targets, confirmations, and the
// results and events peers report. Tasks reach the peers as the managers
// send them: pushed over the real bus on quarry.fixup.<site>.<peer>.
type fakeCP struct {
	mu        sync.Mutex
	peers     []fsm.PeerView
	targets   map[string][]fsm.CopySpec // by origin
	tasks     []api.FixupTask
	confirm   map[uint64]bool
	results   map[uint64][]api.FixupResult
	confirmed map[uint64]int
	gate      chan struct{}     // when set, Targets waits for it to close
	targetErr []error           // Targets answers these first, one per call
	events    []api.BucketEvent // the bucket events peers reported
	nc        *nats.Conn        // pushes tasks
}

func (f *fakeCP) Register(ctx context.Context, r api.Register) error { return nil }
func (f *fakeCP) Heartbeat(ctx context.Context, h api.Heartbeat) (api.HeartbeatReply, error) {
	return api.HeartbeatReply{State: fsm.StateUp}, nil
}
func (f *fakeCP) Config(ctx context.Context) (api.PeerConfig, error) {
	return api.PeerConfig{ReplicationFactor: 2, HeartbeatPeriod: 100 * time.Millisecond, AutoCreateIndexes: true}, nil
}
func (f *fakeCP) Bundle(ctx context.Context) (api.BundleReply, error) {
	return api.BundleReply{}, nil
}
func (f *fakeCP) Peers(ctx context.Context) ([]fsm.PeerView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fsm.PeerView(nil), f.peers...), nil
}
func (f *fakeCP) Targets(ctx context.Context, req api.TargetsRequest) (api.TargetsReply, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return api.TargetsReply{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.targetErr) > 0 {
		err := f.targetErr[0]
		f.targetErr = f.targetErr[1:]
		return api.TargetsReply{}, err
	}
	var guid string
	for _, p := range f.peers {
		if p.ID == req.Origin {
			guid = p.GUID
		}
	}
	rep := api.TargetsReply{Bucket: fsm.BucketID(req.Index, req.LocalID, guid), Origin: req.Origin, Targets: []api.Target{}}
	for _, cs := range f.targets[req.Origin] {
		rep.Targets = append(rep.Targets, api.Target{Peer: cs.Peer, Searchable: cs.Searchable})
	}
	return rep, nil
}
func (f *fakeCP) BucketEvent(ctx context.Context, ev api.BucketEvent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	return nil
}

// eventsOf returns the reported bucket events of one kind.
func (f *fakeCP) eventsOf(kind api.BucketEventKind) []api.BucketEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.BucketEvent
	for _, ev := range f.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// Confirm confirms a task the test marked open (destructive ones), and an
// open replicate or fetch task to its target, as the managers do.
func (f *fakeCP) Confirm(ctx context.Context, id uint64) (fsm.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tasks {
		if t.ID != id {
			continue
		}
		ft := fsm.Task{ID: t.ID, Kind: t.Kind, Bucket: t.Bucket, Source: t.Source, Target: t.Target, Searchable: t.Searchable, Destructive: t.Destructive}
		if t.Kind == fsm.TaskReplicate || t.Kind == fsm.TaskFetch {
			return ft, nil
		}
		f.confirmed[id]++
		if !f.confirm[id] {
			return fsm.Task{}, errors.New("not open on the leader")
		}
		return ft, nil
	}
	return fsm.Task{}, errors.New("unknown task")
}
func (f *fakeCP) FixupResult(ctx context.Context, res api.FixupResult) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results[res.ID] = append(f.results[res.ID], res)
	return nil
}
func (f *fakeCP) Buckets(ctx context.Context, ids []string) ([]fsm.BucketView, error) {
	return []fsm.BucketView{}, nil
}

// addTask records t and pushes it to the peers it is addressed to, as the
// managers' deliverer does: its target, and the source of a replication
// or of a fetch the source pushes.
func (f *fakeCP) addTask(t *testing.T, tk api.FixupTask) {
	t.Helper()
	f.mu.Lock()
	f.tasks = append(f.tasks, tk)
	f.mu.Unlock()
	f.push(t, tk)
}

// push delivers tk again (a redelivery: the peer re-reports, never redoes).
func (f *fakeCP) push(t *testing.T, tk api.FixupTask) {
	t.Helper()
	to := []string{tk.Target}
	if tk.Kind == fsm.TaskReplicate {
		to = []string{tk.Source}
	}
	s, _ := bus.NewSubjects("")
	for _, peer := range to {
		subj, err := s.Fixup(fsm.DefaultSite, peer)
		if err != nil {
			t.Fatal(err)
		}
		tk.V, tk.To = api.WireVersion, peer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := bus.Request[api.FixupTask, api.FixupAck](ctx, f.nc, subj, tk)
		cancel()
		if err != nil || !ack.Accepted {
			t.Fatalf("push task %d to %s: %+v, %v", tk.ID, peer, ack, err)
		}
	}
}
func (f *fakeCP) result(id uint64) (api.FixupResult, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rs := f.results[id]
	if len(rs) == 0 {
		return api.FixupResult{}, 0
	}
	return rs[0], len(rs)
}

// startTestNATS starts a NATS server on loopback and connects a client
// named name to it; both stop with the test.
func startTestNATS(t *testing.T, name string) (*bus.Server, *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Name: "n1", Site: fsm.DefaultSite, Listen: "127.0.0.1:0", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: name, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}

func startFakeCluster(t *testing.T, ids ...string) (*fakeCP, map[string]*Peer) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, nc := startTestNATS(t, "managers (fake)")
	cp := &fakeCP{targets: map[string][]fsm.CopySpec{}, confirm: map[uint64]bool{}, results: map[uint64][]api.FixupResult{}, confirmed: map[uint64]int{}, nc: nc}
	peers := map[string]*Peer{}
	for _, id := range ids {
		p, err := Start(Config{ID: id, DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Searchable: true, BlockBytes: 8 << 10,
			BlockInterval: 20 * time.Millisecond, Logger: log, NATS: srv.ClientURL(), ControlPlane: cp, FixupRetry: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		peers[id] = p
		cp.mu.Lock()
		cp.peers = append(cp.peers, fsm.PeerView{ID: id, GUID: p.GUID(), Site: fsm.DefaultSite, State: fsm.StateUp})
		cp.mu.Unlock()
	}
	// Every peer learns the others at its next heartbeat.
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, p := range peers {
			p.cl.repl.mu.Lock()
			n := len(p.cl.repl.peers)
			p.cl.repl.mu.Unlock()
			if n != len(ids) {
				return fmt.Errorf("%s knows %d peers", p.cfg.ID, n)
			}
		}
		return nil
	})
	return cp, peers
}

func testEvents(n, from int) []store.Event {
	evs := make([]store.Event, n)
	for i := range evs {
		evs[i] = store.Event{Index: "main", Time: int64(1767225600_000_000_000) + int64(from+i)*1e6,
			Raw: []byte(fmt.Sprintf("fixup ev%dx some words status=%d", from+i, (from+i)%5)), Host: []byte("h"), Source: []byte("s"), Sourcetype: []byte("st")}
	}
	return evs
}

func copyOf(p *Peer, id string) (store.CopyInfo, bool) {
	for _, c := range p.Store().Inventory() {
		if c.ID == id {
			return c, true
		}
	}
	return store.CopyInfo{}, false
}

// TestFixupTasksOnPeers: replicate (resumable, idempotent per task id),
// make searchable, and remove — which waits for the leader's confirmation
// and changes nothing until it comes.
func TestFixupTasksOnPeers(t *testing.T) {
	cp, ps := startFakeCluster(t, "p1", "p2", "p3")
	cp.mu.Lock()
	cp.targets["p1"] = []fsm.CopySpec{{Peer: "p2", Searchable: true}}
	cp.mu.Unlock()
	ack, err := ps["p1"].Store().Append(testEvents(3000, 0))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !ack.Durable() {
			return errors.New("not acknowledged (durable here and on p2)")
		}
		return nil
	})
	ps["p1"].Store().RollAll()
	bucket := ps["p1"].Store().Inventory()[0].ID
	testutil.WaitFor(t, 20*time.Second, func() error {
		c, ok := copyOf(ps["p2"], bucket)
		if !ok || c.State != "warm" {
			return fmt.Errorf("p2's copy: %+v", c)
		}
		return nil
	})
	origin, _ := copyOf(ps["p1"], bucket)

	// Half a copy on p3 already (an interrupted transfer): the task resumes.
	frames, _ := ps["p1"].Store().Replicas().ReadFrames(bucket, 0, 1<<30)
	if _, err := ps["p3"].Store().Replicas().ReplicaAppend(bucket, "main", false, 0, frames[:len(frames)/2]); err != nil {
		t.Fatal(err)
	}
	cp.addTask(t, api.FixupTask{ID: 101, Kind: fsm.TaskReplicate, Bucket: bucket, Source: "p1", Target: "p3", Searchable: false})
	testutil.WaitFor(t, 20*time.Second, func() error {
		if _, n := cp.result(101); n == 0 {
			return errors.New("no result for the replication")
		}
		return nil
	})
	res, _ := cp.result(101)
	ps["p1"].cl.fix.mu.Lock()
	moved := ps["p1"].cl.fix.done[101].Bytes
	ps["p1"].cl.fix.mu.Unlock()
	c3, _ := copyOf(ps["p3"], bucket)
	if !res.OK || c3.ContentHash != origin.ContentHash || c3.Events != origin.Events || c3.Searchable || c3.State != "warm" {
		t.Fatalf("replicated copy %+v (result %+v), origin %+v", c3, res, origin)
	}
	if moved <= 0 || moved >= origin.JournalBytes {
		t.Fatalf("replication moved %d bytes; the second half of %d was missing", moved, origin.JournalBytes)
	}

	cp.addTask(t, api.FixupTask{ID: 102, Kind: fsm.TaskMakeSearchable, Bucket: bucket, Target: "p3"})
	testutil.WaitFor(t, 20*time.Second, func() error {
		if c, _ := copyOf(ps["p3"], bucket); !c.Searchable || c.SearchableEvents != origin.Events {
			return fmt.Errorf("p3's copy: %+v", c)
		}
		return nil
	})

	// Remove, not confirmed: several confirmation attempts, nothing removed.
	cp.addTask(t, api.FixupTask{ID: 103, Kind: fsm.TaskRemoveCopy, Bucket: bucket, Target: "p3", Destructive: true})
	testutil.WaitFor(t, 20*time.Second, func() error {
		cp.mu.Lock()
		n := cp.confirmed[103]
		cp.mu.Unlock()
		if n < 3 {
			return fmt.Errorf("%d confirmation attempts", n)
		}
		return nil
	})
	if _, ok := copyOf(ps["p3"], bucket); !ok {
		t.Fatal("an unconfirmed remove deleted the copy")
	}
	cp.mu.Lock()
	cp.confirm[103] = true
	cp.mu.Unlock()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if _, ok := copyOf(ps["p3"], bucket); ok {
			return errors.New("copy still there")
		}
		if _, n := cp.result(103); n == 0 {
			return errors.New("no result")
		}
		return nil
	})
	// The managers push the tasks again (a redelivery after a leader
	// change): each ran once, its outcome is re-reported the same, never
	// redone — the removed copy stays gone and the replication does not
	// run again.
	cp.mu.Lock()
	again := append([]api.FixupTask(nil), cp.tasks...)
	cp.mu.Unlock()
	for _, tk := range again {
		cp.push(t, tk)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, id := range []uint64{101, 102, 103} {
			if _, n := cp.result(id); n < 2 {
				return fmt.Errorf("task %d reported %d times", id, n)
			}
		}
		return nil
	})
	for _, id := range []uint64{101, 102, 103} {
		rs := func() []api.FixupResult {
			cp.mu.Lock()
			defer cp.mu.Unlock()
			return append([]api.FixupResult(nil), cp.results[id]...)
		}()
		for _, r := range rs[1:] {
			if r != rs[0] {
				t.Fatalf("task %d reported differently the second time: %+v vs %+v", id, r, rs[0])
			}
		}
	}
	if got := ps["p1"].Transfers()[bucket+">p3"]; got != 1 {
		t.Fatalf("the replication to p3 moved data %d times, want once", got)
	}
	if _, ok := copyOf(ps["p3"], bucket); ok {
		t.Fatal("the removed copy came back")
	}
}

// TestFixupSealAfterOriginDeath: three copies of a hot bucket whose origin
// is gone hold 3, 5 and 7 blocks; with the bucket sealed at 5 (the managers
// reached only the first two), the shorter copy fetches the missing blocks
// from the one at 5; the longer one, whose block 4 carries the sealed
// checksum, is not truncated once confirmed: it reports extend_seal to 7
// blocks (SPEC §4, fsm.ExtendSeal). The managers then ask the copies
// sealed at 5 to fetch up to 7, and all end warm with 7 blocks and one
// content hash.
func TestFixupSealAfterOriginDeath(t *testing.T) {
	cp, ps := startFakeCluster(t, "p1", "p2", "p3")
	bucket, frames := deadOrigin(t, 7)
	for id, n := range map[string]int{"p1": 3, "p2": 5, "p3": 7} {
		if _, err := ps[id].Store().Replicas().ReplicaAppend(bucket, "main", true, 0, frames[:n]); err != nil {
			t.Fatal(err)
		}
	}
	sealedSum := ps["p2"].Store().Replicas().LastChecksum(bucket, 5)
	cp.addTask(t, api.FixupTask{ID: 201, Kind: fsm.TaskFetch, Bucket: bucket, Source: "p2", Target: "p1", SealedBlocks: 5, LastBlockChecksum: sealedSum})
	cp.addTask(t, api.FixupTask{ID: 202, Kind: fsm.TaskTruncate, Bucket: bucket, Target: "p3", Destructive: true, SealedBlocks: 5, LastBlockChecksum: sealedSum})
	cp.addTask(t, api.FixupTask{ID: 203, Kind: fsm.TaskFetch, Bucket: bucket, Source: "p3", Target: "p2", SealedBlocks: 5, LastBlockChecksum: sealedSum})
	testutil.WaitFor(t, 20*time.Second, func() error {
		c, _ := copyOf(ps["p1"], bucket)
		if c.State != "warm" || c.Blocks != 5 {
			return fmt.Errorf("p1's copy %+v", c)
		}
		return nil
	})
	if c, _ := copyOf(ps["p3"], bucket); c.Blocks != 7 {
		t.Fatalf("p3's copy cut before confirmation: %+v", c)
	}
	cp.mu.Lock()
	cp.confirm[202] = true
	cp.mu.Unlock()
	var ext api.BucketEvent
	testutil.WaitFor(t, 20*time.Second, func() error {
		evs := cp.eventsOf(api.EventExtendSeal)
		if len(evs) == 0 {
			return errors.New("no extend_seal reported")
		}
		ext = evs[0]
		return nil
	})
	fullSum := ps["p3"].Store().Replicas().LastChecksum(bucket, 7)
	if ext.Bucket != bucket || ext.Peer != "p3" || ext.SealedBlocks != 5 || ext.SealedChecksum != sealedSum ||
		ext.Blocks != 7 || ext.LastBlockChecksum != fullSum || ext.Events == 0 {
		t.Fatalf("extend_seal %+v, want p3 from 5 (%s) to 7 (%s)", ext, sealedSum, fullSum)
	}
	if c, _ := copyOf(ps["p3"], bucket); c.Blocks != 7 || c.State != "warm" {
		t.Fatalf("p3's copy after the extension: %+v, want 7 blocks warm", c)
	}
	if n := ps["p3"].cl.fix.divergent.Load(); n != 0 {
		t.Fatalf("%d divergent copies counted", n)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		c, _ := copyOf(ps["p2"], bucket)
		if c.State != "warm" || c.Blocks != 5 {
			return fmt.Errorf("p2's copy %+v", c)
		}
		return nil
	})
	// The seal is at 7 now: the copies sealed warm at 5 fetch the rest.
	cp.addTask(t, api.FixupTask{ID: 204, Kind: fsm.TaskFetch, Bucket: bucket, Source: "p3", Target: "p1", SealedBlocks: 7, LastBlockChecksum: fullSum})
	cp.addTask(t, api.FixupTask{ID: 205, Kind: fsm.TaskFetch, Bucket: bucket, Source: "p3", Target: "p2", SealedBlocks: 7, LastBlockChecksum: fullSum})
	var hashes []string
	testutil.WaitFor(t, 20*time.Second, func() error {
		hashes = hashes[:0]
		for _, id := range []string{"p1", "p2", "p3"} {
			c, _ := copyOf(ps[id], bucket)
			if c.State != "warm" || c.Blocks != 7 {
				return fmt.Errorf("%s's copy %+v", id, c)
			}
			hashes = append(hashes, c.ContentHash)
		}
		return nil
	})
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("copies disagree after the extended seal: %v", hashes)
	}
	for _, id := range []string{"p1", "p2", "p3"} {
		if err := ps[id].Store().Repairs().Verify(bucket); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

// TestFixupTruncateDivergentCopy: a copy longer than the sealed length
// whose block at the sealed length is not the sealed one (its blocks from
// another writer) extends nothing: it is truncated to the sealed length
// once confirmed, and counted as divergent.
func TestFixupTruncateDivergentCopy(t *testing.T) {
	cp, ps := startFakeCluster(t, "p1", "p2")
	bucket, frames := deadOrigin(t, 7)
	// Another writer's blocks under the same numbers: from another store
	// whose events differ.
	alt, err := store.Open(store.Options{Dir: t.TempDir(), GUID: "A1700000-0000-4000-8000-000000000000", BlockBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer alt.Close()
	if _, err := alt.Append(testEvents(2000, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := alt.Flush(); err != nil {
		t.Fatal(err)
	}
	altFrames, _ := alt.Replicas().ReadFrames(alt.Inventory()[0].ID, 0, 1<<30)
	if len(altFrames) < 7 {
		t.Fatalf("%d blocks, want ≥ 7", len(altFrames))
	}
	if _, err := ps["p1"].Store().Replicas().ReplicaAppend(bucket, "main", true, 0, frames[:5]); err != nil {
		t.Fatal(err)
	}
	if _, err := ps["p2"].Store().Replicas().ReplicaAppend(bucket, "main", true, 0, frames[:4]); err != nil {
		t.Fatal(err)
	}
	if _, err := ps["p2"].Store().Replicas().ReplicaAppend(bucket, "main", true, 4, altFrames[4:7]); err != nil {
		t.Fatal(err)
	}
	sealedSum := ps["p1"].Store().Replicas().LastChecksum(bucket, 5)
	if ps["p2"].Store().Replicas().LastChecksum(bucket, 5) == sealedSum {
		t.Fatal("the divergent copy's block 4 matches the seal")
	}
	cp.addTask(t, api.FixupTask{ID: 301, Kind: fsm.TaskTruncate, Bucket: bucket, Target: "p2", Destructive: true, SealedBlocks: 5, LastBlockChecksum: sealedSum})
	cp.mu.Lock()
	cp.confirm[301] = true
	cp.mu.Unlock()
	testutil.WaitFor(t, 20*time.Second, func() error {
		c, _ := copyOf(ps["p2"], bucket)
		if c.State != "warm" || c.Blocks != 5 {
			return fmt.Errorf("p2's copy %+v", c)
		}
		return nil
	})
	if evs := cp.eventsOf(api.EventExtendSeal); len(evs) != 0 {
		t.Fatalf("a divergent copy extended the seal: %+v", evs)
	}
	if n := ps["p2"].cl.fix.divergent.Load(); n != 1 {
		t.Fatalf("%d divergent copies counted, want 1", n)
	}
}

// deadOrigin writes at least n blocks of one bucket in a store that is no
// cluster member (an origin that died) and returns the bucket and frames.
func deadOrigin(t *testing.T, n int) (string, [][]byte) {
	t.Helper()
	dead, err := store.Open(store.Options{Dir: t.TempDir(), GUID: "DEAD0000-0000-4000-8000-000000000000", BlockBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	if _, err := dead.Append(testEvents(2000, 0)); err != nil {
		t.Fatal(err)
	}
	if err := dead.Flush(); err != nil {
		t.Fatal(err)
	}
	bucket := dead.Inventory()[0].ID
	frames, _ := dead.Replicas().ReadFrames(bucket, 0, 1<<30)
	if len(frames) < n {
		t.Fatalf("%d blocks, want ≥ %d", len(frames), n)
	}
	return bucket, frames
}

// TestReplicationBacklogOverMaxPayload: blocks that piled up while the
// targets were unknown (several MiB, over NATS's 1 MiB max payload) reach
// the target in several messages and the acks turn true.
func TestReplicationBacklogOverMaxPayload(t *testing.T) {
	cp, ps := startFakeCluster(t, "p1", "p2")
	gate := make(chan struct{})
	cp.mu.Lock()
	cp.targets["p1"] = []fsm.CopySpec{{Peer: "p2"}}
	cp.gate = gate
	cp.mu.Unlock()
	var acks []*store.Ack
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		evs := testEvents(5000, i*5000)
		for j := range evs {
			evs[j].Raw = append(evs[j].Raw, fmt.Sprintf(" pad%016x%016x", rng.Uint64(), rng.Uint64())...)
		}
		a, err := ps["p1"].Store().Append(evs)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	if err := ps["p1"].Store().Flush(); err != nil {
		t.Fatal(err)
	}
	bucket := ps["p1"].Store().Inventory()[0]
	if bucket.JournalBytes < 2<<20 {
		t.Fatalf("backlog of %d bytes; want over 2 MiB", bucket.JournalBytes)
	}
	for _, a := range acks {
		if a.Durable() {
			t.Fatal("acknowledged before any target had the blocks")
		}
	}
	close(gate)
	testutil.WaitFor(t, 30*time.Second, func() error {
		for i, a := range acks {
			if !a.Durable() {
				return fmt.Errorf("append %d not acknowledged", i)
			}
		}
		return nil
	})
	c, _ := copyOf(ps["p2"], bucket.ID)
	if c.Blocks < bucket.Blocks || c.Events < bucket.Events {
		t.Fatalf("target copy %+v, origin %+v", c, bucket)
	}
}

// The outcomes kept for re-reporting are bounded: the oldest reported ones
// go, one not yet reported stays.
func TestFixupOutcomesBounded(t *testing.T) {
	f := newFixupRunner(nil, nil, 0)
	f.queued[1] = api.FixupTask{ID: 1} // run, not yet reported
	for id := uint64(1); id <= 2*fixupOutcomesKept+1; id++ {
		f.keepOutcome(fixupOutcome{FixupResult: api.FixupResult{ID: id}})
	}
	if len(f.done) != fixupOutcomesKept {
		t.Fatalf("%d outcomes kept, want %d", len(f.done), fixupOutcomesKept)
	}
	if _, ok := f.done[1]; !ok {
		t.Fatal("the unreported outcome was forgotten")
	}
	if _, ok := f.done[2]; ok {
		t.Fatal("the oldest reported outcome was kept")
	}
	if _, ok := f.done[2*fixupOutcomesKept+1]; !ok {
		t.Fatal("the newest outcome was forgotten")
	}
}
