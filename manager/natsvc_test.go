package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// testBus is one embedded NATS node with an admin, a manager-role user and
// one narrowed peer-role user per fake peer.
type testBus struct {
	srv  *bus.Server
	subj bus.Subjects
}

func startTestBus(t *testing.T, peers ...string) *testBus { return startTestBusB(t, peers...) }

func startTestBusB(t testing.TB, peers ...string) *testBus {
	return startTestBusWith(t, nil, peers...)
}

// startTestBusWith is startTestBus with extra users (search heads:
// user name = head name, password name+"-pw").
func startTestBusWith(t testing.TB, heads []string, peers ...string) *testBus {
	t.Helper()
	subj, _ := bus.NewSubjects(bus.DefaultPrefix)
	users := []bus.User{{Name: "mgr", Password: "mgr-pw", Role: bus.RoleManager}}
	for _, p := range peers {
		users = append(users, bus.User{Name: p, Password: p + "-pw", Role: bus.RolePeer, Site: "site1", Peer: p})
	}
	for _, h := range heads {
		users = append(users, bus.User{Name: h, Password: h + "-pw", Role: bus.RoleSearchHead, Head: h})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0",
		User: "admin", Password: "admin-pw", Users: users, Subjects: subj, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start bus: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return &testBus{srv: srv, subj: subj}
}

func (b *testBus) connect(t *testing.T, user, pass string) *nats.Conn {
	return b.connectB(t, user, pass)
}

func (b *testBus) connectB(t testing.TB, user, pass string) *nats.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := bus.Connect(ctx, b.srv.ClientURL(), bus.ConnectOptions{Name: user, User: user, Password: pass, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// fakePeer speaks the peer side of the manager protocol (package api) over
// a real NATS connection; the test drives it.
type fakePeer struct {
	t    *testing.T
	id   string
	guid string
	nc   *nats.Conn
	cli  *mgrclient.ManagerClient
	b    *testBus

	sealBlocks   int64
	sealChecksum string

	mu        sync.Mutex
	delivered map[uint64]int // task id → deliveries received
	kinds     map[uint64]fsm.TaskKind
	tasks     map[uint64]api.FixupTask

	hbStop chan struct{}
	hbDone chan struct{}
}

func newFakePeer(t *testing.T, b *testBus, id string) *fakePeer {
	p := newIdlePeer(t, b, id)
	p.serve()
	return p
}

// newIdlePeer is a fake peer that does not yet listen for fixup tasks.
func newIdlePeer(t *testing.T, b *testBus, id string) *fakePeer {
	p := &fakePeer{t: t, id: id, guid: "guid-" + id, nc: b.connect(t, id, id+"-pw"), b: b,
		delivered: map[uint64]int{}, kinds: map[uint64]fsm.TaskKind{}, tasks: map[uint64]api.FixupTask{}}
	p.cli = mgrclient.NewManagerClient(p.nc, b.subj)
	p.cli.Sender = id
	return p
}

// serve starts answering fixup tasks: accept each (again when repeated),
// answering seals with sealBlocks/sealChecksum.
func (p *fakePeer) serve() {
	svc, err := mgrclient.ServeFixups(p.nc, p.b.subj, "site1", p.id, bus.ServeOptions{}, func(ctx context.Context, task api.FixupTask) (api.FixupAck, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if task.To != p.id {
			return api.FixupAck{Reason: "addressed to " + task.To}, nil
		}
		p.delivered[task.ID]++
		p.kinds[task.ID] = task.Kind
		p.tasks[task.ID] = task
		ack := api.FixupAck{Accepted: true, Done: p.delivered[task.ID] > 1}
		if task.Kind == fsm.TaskSeal {
			ack.Blocks, ack.LastBlockChecksum, ack.Events = p.sealBlocks, p.sealChecksum, 10*p.sealBlocks
		}
		return ack, nil
	})
	if err != nil {
		p.t.Fatalf("peer %s: serve fixups: %v", p.id, err)
	}
	p.t.Cleanup(func() { svc.Stop(context.Background()) })
}

func (p *fakePeer) task(id uint64) (api.FixupTask, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tasks[id]
	return t, ok
}

func (p *fakePeer) deliveries() map[uint64]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[uint64]int{}
	for k, v := range p.delivered {
		out[k] = v
	}
	return out
}

func (p *fakePeer) register(ctx context.Context, inv []api.Copy) api.RegisterReply {
	p.t.Helper()
	r, err := p.cli.Register(ctx, api.Register{RequestID: "reg-" + p.id, Peer: p.id, GUID: p.guid, Site: "site1",
		Host: "host-" + p.id, HTTPAddr: "127.0.0.1:1", Inventory: inv})
	if err != nil {
		p.t.Fatalf("register %s: %v", p.id, err)
	}
	return r
}

// startHeartbeats heartbeats every 200 ms until stopHeartbeats.
func (p *fakePeer) startHeartbeats() {
	p.hbStop, p.hbDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.hbDone)
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = p.cli.Heartbeat(ctx, api.Heartbeat{Peer: p.id, GUID: p.guid})
			cancel()
			select {
			case <-p.hbStop:
				return
			case <-tk.C:
			}
		}
	}()
	p.t.Cleanup(p.stopHeartbeats)
}

func (p *fakePeer) stopHeartbeats() {
	if p.hbStop == nil {
		return
	}
	select {
	case <-p.hbStop:
	default:
		close(p.hbStop)
	}
	<-p.hbDone
}

// noticeLog collects the notices on quarry.gen.
type noticeLog struct {
	mu sync.Mutex
	ns []api.Notice
}

func (l *noticeLog) add(n api.Notice) { l.mu.Lock(); l.ns = append(l.ns, n); l.mu.Unlock() }

func (l *noticeLog) find(pred func(api.Notice) bool) (api.Notice, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.ns {
		if pred(n) {
			return n, true
		}
	}
	return api.Notice{}, false
}

// TestNATSService drives the manager protocol end to end over a real
// embedded NATS and a real 3-manager Raft group: registration, heartbeats,
// targets, rolls, fixup delivery exactly once across a leader change,
// leader-only subscriptions, bus permissions, notices and liveness.
func TestNATSService(t *testing.T) {
	b := startTestBus(t, "p1", "p2", "p3")
	g := newGroup(t, 3, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	p1, p2, p3 := newFakePeer(t, b, "p1"), newFakePeer(t, b, "p2"), newFakePeer(t, b, "p3")
	notices := &noticeLog{}
	sub, err := mgrclient.SubscribeNotices(p2.nc, b.subj, notices.add)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	// Registration: p1 comes with a warm searchable copy the cluster never
	// heard of; it is Up with its copy counted.
	warm := fsm.BucketID("main", "0", p1.guid)
	r1 := p1.register(ctx, []api.Copy{{Bucket: warm, Index: "main", State: api.CopyWarm, Searchable: true,
		Events: 100, Blocks: 3, Bytes: 4096, Earliest: 10, Latest: 20, ContentHash: "h", LastBlockChecksum: "c3"}})
	if r1.State != fsm.StateUp || r1.Config.ID == "" || r1.ConfigID != r1.Config.ID || r1.Config.TargetTimeout != DefaultTargetTimeout {
		t.Fatalf("register reply %+v: want Up with a config and its id", r1)
	}
	if len(r1.Config.KnownIndexes) == 0 || r1.Config.KnownIndexes[0] != "main" {
		t.Fatalf("register reply config indexes %v: want main", r1.Config.KnownIndexes)
	}
	p2.register(ctx, nil)
	p3.register(ctx, nil)
	for _, p := range []*fakePeer{p1, p2, p3} {
		p.startHeartbeats()
	}
	l := g.leader()
	var peers []fsm.PeerView
	l.Read(func(s *fsm.State) { peers = s.PeerList() })
	if len(peers) != 3 {
		t.Fatalf("peers %+v: want 3", peers)
	}
	for _, pv := range peers {
		wantBuckets := 0
		if pv.ID == "p1" {
			wantBuckets = 1
		}
		if pv.State != fsm.StateUp || pv.Buckets != wantBuckets || pv.Attrs["http_addr"] != "127.0.0.1:1" {
			t.Fatalf("peer %+v: want Up with %d bucket(s) and its http_addr", pv, wantBuckets)
		}
	}
	// The registrations moved the table: a notice says so.
	var tv uint64
	l.Read(func(s *fsm.State) { tv = s.TableVersion() })
	testutil.WaitFor(t, 5*time.Second, func() error {
		if _, ok := notices.find(func(n api.Notice) bool { return n.TableVersion >= tv && n.ConfigID == r1.ConfigID }); !ok {
			return fmt.Errorf("no notice with table version >= %d yet", tv)
		}
		return nil
	})

	// Targets for a new hot bucket (RF 3, SF 2 by default): two other
	// peers, exactly one of them searchable (the origin's copy is the other).
	tr, err := p1.cli.Targets(ctx, api.TargetsRequest{RequestID: "t-1", Origin: "p1", Index: "main", LocalID: "1", Earliest: 100})
	if err != nil {
		t.Fatalf("targets: %v", err)
	}
	hot := fsm.BucketID("main", "1", p1.guid)
	searchable := 0
	for _, x := range tr.Targets {
		if x.Peer == "p1" || x.Site != "site1" {
			t.Fatalf("target %+v: never the origin, site is the peer's", x)
		}
		if x.Searchable {
			searchable++
		}
	}
	if tr.Bucket != hot || len(tr.Targets) != 2 || searchable != 1 || tr.Degraded {
		t.Fatalf("targets reply %+v: want bucket %s with 2 targets, 1 searchable", tr, hot)
	}
	// The same request again answers the committed bucket, not an error.
	tr2, err := p1.cli.Targets(ctx, api.TargetsRequest{RequestID: "t-1", Origin: "p1", Index: "main", LocalID: "1", Earliest: 100})
	if err != nil || tr2.Bucket != hot || len(tr2.Targets) != 2 {
		t.Fatalf("retried targets: %+v, %v", tr2, err)
	}
	// Roll it.
	if _, err := p1.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "roll-1", Kind: api.EventRolled, Bucket: hot, Peer: "p1",
		Earliest: 100, Latest: 200, Bytes: 1 << 20, Events: 5000, Blocks: 8, LastBlockChecksum: "c8"}); err != nil {
		t.Fatalf("roll: %v", err)
	}
	var bv fsm.BucketView
	g.leader().Read(func(s *fsm.State) { bv, _ = findBucket(s, hot) })
	if bv.Hot || bv.Events != 5000 || bv.Latest != 200 || len(bv.Copies) != 3 {
		t.Fatalf("rolled bucket %+v: want warm, 5000 events, 3 copies", bv)
	}
	// A bad event is refused with a clear code and changes nothing.
	if _, err := p1.cli.BucketEvent(ctx, api.BucketEvent{Kind: "exploded", Bucket: hot, Peer: "p1"}); !bus.IsRemote(err, api.CodeBadRequest) {
		t.Fatalf("unknown event kind: %v, want bad_request", err)
	}
	if _, err := p1.cli.BucketEvent(ctx, api.BucketEvent{Kind: api.EventRolled, Bucket: "main~9~nobody", Peer: "p1"}); !bus.IsRemote(err, "unknown_bucket") {
		t.Fatalf("roll of an unknown bucket: %v, want unknown_bucket", err)
	}

	// Fixup: the warm bucket has one copy (RF 3): the planner opens two
	// replications from p1, delivered to p1 (the source).
	var taskIDs []uint64
	testutil.WaitFor(t, 10*time.Second, func() error {
		taskIDs = nil
		g.leader().Read(func(s *fsm.State) {
			for _, tk := range s.Tasks() {
				if tk.Bucket == warm && tk.Kind == fsm.TaskReplicate && tk.Source == "p1" {
					taskIDs = append(taskIDs, tk.ID)
				}
			}
		})
		if len(taskIDs) != 2 {
			return fmt.Errorf("replication tasks of %s: %v, want 2", warm, taskIDs)
		}
		got := p1.deliveries()
		for _, id := range taskIDs {
			if got[id] != 1 {
				return fmt.Errorf("task %d delivered %d times so far", id, got[id])
			}
		}
		// The delivery marks are on every manager before the leader dies.
		for mid, m := range g.ms {
			for _, id := range taskIDs {
				if !m.mux.marked("delivered", id, "p1") {
					return fmt.Errorf("%s has no delivery mark for task %d", mid, id)
				}
			}
		}
		return nil
	})
	sort.Slice(taskIDs, func(i, j int) bool { return taskIDs[i] < taskIDs[j] })

	// Leader change: kill the leader in-process. The new leader serves the
	// mgr subjects (heartbeats go on), and it does not deliver the tasks
	// again.
	old := g.leader()
	killed := time.Now()
	g.kill(old.ID())
	if _, err := p2.cli.Heartbeat(ctx, api.Heartbeat{Peer: "p2", GUID: p2.guid}); err != nil {
		t.Fatalf("heartbeat across the leader change: %v", err)
	}
	// Raft timeouts of the in-process group are 1 s (helpers_test.go).
	t.Logf("mgr subjects served again %v after the leader was killed", time.Since(killed).Round(time.Millisecond))
	nl := g.leader()
	if nl.ID() == old.ID() {
		t.Fatal("the killed manager is still the leader")
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if _, ok := notices.find(func(n api.Notice) bool { return n.Leader == nl.ID() }); !ok {
			return fmt.Errorf("no notice from the new leader %s yet", nl.ID())
		}
		return nil
	})
	hb, err := p2.cli.Heartbeat(ctx, api.Heartbeat{Peer: "p2", GUID: p2.guid})
	if err != nil || hb.Reregister || hb.State != fsm.StateUp {
		t.Fatalf("heartbeat to the new leader: %+v, %v", hb, err)
	}
	_, _, _, startTicks := nl.LeaderState()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if _, _, _, ticks := nl.LeaderState(); ticks < startTicks+20 {
			return fmt.Errorf("new leader ran %d ticks, want %d", ticks, startTicks+20)
		}
		return nil
	})
	got := p1.deliveries()
	for _, id := range taskIDs {
		if got[id] != 1 {
			t.Fatalf("task %d delivered %d times across the leader change, want exactly 1 (all: %v)", id, got[id], got)
		}
	}
	nl.Read(func(s *fsm.State) {
		open := 0
		for _, tk := range s.Tasks() {
			for _, id := range taskIDs {
				if tk.ID == id {
					open++
				}
			}
		}
		if open != 2 {
			t.Fatalf("tasks %v: %d still open, want 2", taskIDs, open)
		}
	})

	// The peer reports a result: the task closes with its effect.
	res, err := p1.cli.FixupResult(ctx, api.FixupResult{ID: taskIDs[0], Peer: "p1", OK: true})
	if err != nil || !res.Known {
		t.Fatalf("fixup result: %+v, %v", res, err)
	}
	res, err = p1.cli.FixupResult(ctx, api.FixupResult{ID: taskIDs[0], Peer: "p1", OK: true})
	if err != nil || res.Known {
		t.Fatalf("repeated fixup result: %+v, %v (want known=false: already closed)", res, err)
	}
	// Confirm refuses a non-destructive task.
	cr, err := p1.cli.Confirm(ctx, taskIDs[1], "p1")
	if err != nil || cr.Confirmed || cr.Reason == "" {
		t.Fatalf("confirm of a replication: %+v, %v (want refused with a reason)", cr, err)
	}

	// Permissions: a peer-role user cannot publish a fixup task; the
	// addressed peer never receives it.
	subj, _ := b.subj.Fixup("site1", "p1")
	_, err = bus.Request[api.FixupTask, api.FixupAck](ctx, p2.nc, subj, api.FixupTask{V: 1, ID: 999999, Kind: fsm.TaskRemoveCopy, To: "p1"})
	if !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("peer publishing a fixup task: %v, want permission denied", err)
	}
	if n := p1.deliveries()[999999]; n != 0 {
		t.Fatalf("the forged task reached p1 %d times", n)
	}

	// Liveness: p3 stops heartbeating; after heartbeat_timeout (2 s, and
	// the new leader's grace) it is Down, a new generation is announced,
	// and its next heartbeat is told to register again.
	p3.stopHeartbeats()
	var gen uint64
	testutil.WaitFor(t, 15*time.Second, func() error {
		var p fsm.Peer
		g.leader().Read(func(s *fsm.State) { p, _ = s.Peer("p3"); gen = s.CurrentGeneration() })
		if p.State != fsm.StateDown {
			return fmt.Errorf("p3 is %s", p.State)
		}
		return nil
	})
	testutil.WaitFor(t, 5*time.Second, func() error {
		if _, ok := notices.find(func(n api.Notice) bool {
			return n.Generation >= gen && hasKind(n, api.NoticeGeneration)
		}); !ok {
			return fmt.Errorf("no generation notice for generation %d", gen)
		}
		return nil
	})
	hb3, err := p3.cli.Heartbeat(ctx, api.Heartbeat{Peer: "p3", GUID: p3.guid})
	if err != nil || !hb3.Reregister || hb3.State != fsm.StateDown {
		t.Fatalf("heartbeat of a Down peer: %+v, %v; want reregister", hb3, err)
	}
	// p1 and p2 kept heartbeating: still Up.
	g.leader().Read(func(s *fsm.State) {
		for _, id := range []string{"p1", "p2"} {
			if p, _ := s.Peer(id); p.State != fsm.StateUp {
				t.Fatalf("%s is %s, want Up", id, p.State)
			}
		}
	})

	// No leader (quorum lost): nobody serves the mgr subjects, and a
	// request says so at once instead of waiting for its deadline.
	for _, p := range []*fakePeer{p1, p2} {
		p.stopHeartbeats()
	}
	g.kill(g.leader().ID())
	hbSubj, _ := b.subj.MgrOp(api.OpHeartbeat, "p1")
	testutil.WaitFor(t, 10*time.Second, func() error {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		start := time.Now()
		_, err := bus.Request[api.Heartbeat, api.HeartbeatReply](rctx, p1.nc, hbSubj, api.Heartbeat{V: 1, Peer: "p1", GUID: p1.guid})
		took := time.Since(start)
		if !errors.Is(err, bus.ErrNoResponders) {
			return fmt.Errorf("heartbeat without a leader: %v (after %v)", err, took)
		}
		if took > time.Second {
			t.Fatalf("no-responders took %v, want well under a second", took)
		}
		return nil
	})
}

func hasKind(n api.Notice, k api.NoticeKind) bool {
	for _, x := range n.Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// TestNATSSealConfirmAndRetry: an origin dies with a hot bucket; its
// holders answer the seal delivery with their lengths and the bucket is
// sealed at the longest; the shorter copy gets a fetch (delivered to the
// source, with the sealed length) that its length report closes. A
// destructive task is delivered to a peer that listens only later (retried
// until then, then exactly once) and confirmed over NATS only for it.
// Newer wire versions and incomplete requests are refused with their codes.
func TestNATSSealConfirmAndRetry(t *testing.T) {
	b := startTestBus(t, "p1", "p2", "p3", "p4")
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	p1, p2, p4 := newFakePeer(t, b, "p1"), newFakePeer(t, b, "p2"), newFakePeer(t, b, "p4")
	p3 := newIdlePeer(t, b, "p3")
	p2.sealBlocks, p2.sealChecksum = 5, "c5"
	p3.sealBlocks, p3.sealChecksum = 7, "c7"
	for _, p := range []*fakePeer{p1, p2, p3, p4} {
		p.register(ctx, nil)
		p.startHeartbeats()
	}

	// Refusals: a newer wire version, a registration without a GUID.
	hbSubj, _ := b.subj.MgrOp(api.OpHeartbeat, "p1")
	if _, err := bus.Request[api.Heartbeat, api.HeartbeatReply](ctx, p1.nc, hbSubj, api.Heartbeat{V: api.MaxWireVersion + 1, Peer: "p1"}); !bus.IsRemote(err, api.CodeVersion) {
		t.Fatalf("heartbeat of wire version %d: %v, want %s", api.MaxWireVersion+1, err, api.CodeVersion)
	}
	if _, err := p1.cli.Register(ctx, api.Register{Peer: "p9"}); !bus.IsRemote(err, api.CodeBadRequest) {
		t.Fatalf("register without guid: %v, want bad_request", err)
	}
	var n int
	g.leader().Read(func(s *fsm.State) { n = len(s.PeerList()) })
	if n != 4 {
		t.Fatalf("%d peers after a refused registration, want 4", n)
	}

	// The hot bucket goes to p2 and p3 (fewest copies, ties by id).
	tr, err := p1.cli.Targets(ctx, api.TargetsRequest{RequestID: "t-h", Origin: "p1", Index: "main", LocalID: "7", Earliest: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Targets) != 2 || tr.Targets[0].Peer != "p2" || tr.Targets[1].Peer != "p3" {
		t.Fatalf("targets %+v: want p2, p3", tr.Targets)
	}
	hot := tr.Bucket

	// A destructive task for p3, which does not listen yet: deliveries
	// find no responder and are retried.
	res := g.apply(&fsm.CreateFixup{Kind: fsm.TaskRemoveCopy, Level: fsm.LevelExcess, Bucket: hot, Target: "p3", Reason: "test", At: time.Now()})
	rm := res.(fsm.Result).Index
	l := g.leader()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := testutilCounter(l, "no_responders"); n < 2 {
			return fmt.Errorf("%v undelivered attempts so far", n)
		}
		return nil
	})
	p3.serve()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !l.mux.marked("delivered", rm, "p3") {
			return fmt.Errorf("task %d not yet delivered to p3", rm)
		}
		return nil
	})
	if tk, _ := p3.task(rm); !tk.Destructive || tk.Kind != fsm.TaskRemoveCopy || tk.Target != "p3" || tk.Bucket != hot {
		t.Fatalf("delivered task %+v", tk)
	}
	cr, err := p3.cli.Confirm(ctx, rm, "p3")
	if err != nil || !cr.Confirmed || cr.Task == nil || cr.Task.ID != rm || cr.Leader != l.ID() {
		t.Fatalf("confirm by its target: %+v, %v", cr, err)
	}
	if cr, err := p2.cli.Confirm(ctx, rm, "p2"); err != nil || cr.Confirmed {
		t.Fatalf("confirm by another peer: %+v, %v; want refused", cr, err)
	}
	// The peer decides not to do it: the task fails (and is not planned
	// again by this test's state: the copy is not excess).
	if r, err := p3.cli.FixupResult(ctx, api.FixupResult{ID: rm, Peer: "p3", OK: false, Reason: "changed my mind"}); err != nil || !r.Known {
		t.Fatalf("failed result: %+v, %v", r, err)
	}
	if cr, err := p3.cli.Confirm(ctx, rm, "p3"); err != nil || cr.Confirmed {
		t.Fatalf("confirm of a closed task: %+v, %v; want refused", cr, err)
	}

	// The origin dies: after heartbeat_timeout it is Down, the seal task
	// goes to p2 and p3, and the bucket is sealed at p3's 7 blocks.
	p1.stopHeartbeats()
	var sealTask uint64
	testutil.WaitFor(t, 15*time.Second, func() error {
		var bv fsm.BucketView
		l.Read(func(s *fsm.State) { bv, _ = findBucket(s, hot) })
		if bv.Hot || !bv.Sealed {
			return fmt.Errorf("bucket %s hot=%v sealed=%v", hot, bv.Hot, bv.Sealed)
		}
		return nil
	})
	p2.mu.Lock()
	for id, k := range p2.kinds {
		if k == fsm.TaskSeal {
			sealTask = id
		}
	}
	p2.mu.Unlock()
	testutil.WaitFor(t, 5*time.Second, func() error {
		var err error
		l.Read(func(s *fsm.State) {
			for _, tk := range s.Tasks() {
				if tk.ID == sealTask {
					err = fmt.Errorf("seal task %d still open after the seal", sealTask)
				}
			}
		})
		return err
	})
	if sealTask == 0 || p3.deliveries()[sealTask] == 0 {
		t.Fatalf("seal task not delivered to both holders: p2 %v, p3 %v", p2.deliveries(), p3.deliveries())
	}
	var blocks int64
	var cs string
	l.Read(func(s *fsm.State) { blocks, cs = sealedOf(s, hot) })
	if blocks != 7 || cs != "c7" {
		t.Fatalf("sealed at %d blocks, checksum %q; want 7, c7", blocks, cs)
	}
	// The seal carried both holders' lengths (p2 5, p3 7), so the planner
	// knows p2 is shorter: a fetch from p3, delivered to p3 with the
	// sealed length.
	l.Read(func(s *fsm.State) {
		if bv, _ := findBucket(s, hot); bv.Sealed {
			for _, tk := range s.Tasks() {
				if tk.Bucket == hot && tk.Kind == fsm.TaskTruncate {
					t.Errorf("truncate task %+v: no holder is longer than the seal", tk)
				}
			}
		}
	})
	var fetch api.FixupTask
	testutil.WaitFor(t, 10*time.Second, func() error {
		p3.mu.Lock()
		defer p3.mu.Unlock()
		for _, tk := range p3.tasks {
			if tk.Kind == fsm.TaskFetch {
				fetch = tk
				return nil
			}
		}
		return fmt.Errorf("no fetch task delivered to p3 (tasks %v)", p3.kinds)
	})
	if fetch.Source != "p3" || fetch.Target != "p2" || fetch.TargetSite != "site1" || fetch.SealedBlocks != 7 || fetch.LastBlockChecksum != "c7" {
		t.Fatalf("fetch task %+v: want p3 → p2 up to 7 blocks, c7", fetch)
	}
	// p2 reports its copy has the sealed length: the fetch is done.
	if _, err := p2.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "len-1", Kind: api.EventLength, Bucket: hot, Peer: "p2", Blocks: 7}); err != nil {
		t.Fatal(err)
	}
	l.Read(func(s *fsm.State) {
		for _, tk := range s.Tasks() {
			if tk.ID == fetch.ID {
				t.Fatalf("fetch task %d still open after the length report", tk.ID)
			}
		}
	})
	// p3's copy turns out longer, its prefix matching the seal: but p2 and
	// p3, never reported short, answered the seal, so it is final
	// (fsm.SealFinalVersion): the extend_seal is refused with seal_final
	// (the peer truncates instead) and the seal stays; one verified
	// against another seal is refused as well.
	gen := func() (g uint64) { l.Read(func(s *fsm.State) { g = s.CurrentGeneration() }); return g }
	g0 := gen()
	if _, err := p3.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "ext-1", Kind: api.EventExtendSeal, Bucket: hot, Peer: "p3",
		SealedBlocks: 7, SealedChecksum: "c7", Blocks: 9, LastBlockChecksum: "c9", Events: 90}); !bus.IsRemote(err, api.CodeSealFinal) {
		t.Fatalf("extend_seal of a final seal: %v, want %s", err, api.CodeSealFinal)
	}
	l.Read(func(s *fsm.State) { blocks, cs = sealedOf(s, hot) })
	if blocks != 7 || cs != "c7" || gen() != g0 {
		t.Fatalf("after a refused extend_seal: sealed at %d blocks, %q, generation %d (was %d); want 7, c7, the same", blocks, cs, gen(), g0)
	}
	if _, err := p2.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "ext-2", Kind: api.EventExtendSeal, Bucket: hot, Peer: "p2",
		SealedBlocks: 6, SealedChecksum: "c6", Blocks: 8, LastBlockChecksum: "c8"}); err == nil {
		t.Fatal("an extend_seal from a stale seal was taken")
	}
	l.Read(func(s *fsm.State) { blocks, cs = sealedOf(s, hot) })
	if blocks != 7 || cs != "c7" {
		t.Fatalf("after a stale extend_seal: sealed at %d blocks, %q; want 7, c7", blocks, cs)
	}
}

// testutilCounter reads the delivery counter of one outcome.
func testutilCounter(m *Manager, outcome string) float64 {
	mfs, err := m.metrics.reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "quarry_manager_fixup_deliveries_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			for _, lp := range x.GetLabel() {
				if lp.GetName() == "outcome" && lp.GetValue() == outcome {
					return x.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestNATSConfigPushAndReconnect: config changes (an index, a HEC token,
// maintenance) reach peers as config notices and through mgr.config; the
// leader serves again after its NATS server restarts (reconnect and
// re-subscribe); a manager whose NATS is unreachable fails to start within
// its connect deadline.
func TestNATSConfigPushAndReconnect(t *testing.T) {
	b := startTestBus(t, "p1", "p2")
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	// The token key changes the config id once; the changes below are
	// compared with what follows it.
	waitTokenKey(t, g.leader())
	p1 := newFakePeer(t, b, "p1")
	r := p1.register(ctx, nil)
	notices := &noticeLog{}
	sub, err := mgrclient.SubscribeNotices(p1.nc, b.subj, notices.add)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	l := g.leader()
	var cfg fsm.Config
	l.Read(func(s *fsm.State) { cfg = s.Config() })
	cfg.Indexes = append(cfg.Indexes, fsm.IndexConfig{Name: "web"})
	cfg.HECTokens = append(cfg.HECTokens, fsm.HECToken{Token: "tok-web", Indexes: []string{"web"}, DefaultIndex: "web", Ack: true})
	g.apply(&fsm.SetConfig{Config: cfg})
	var n api.Notice
	testutil.WaitFor(t, 5*time.Second, func() error {
		var ok bool
		n, ok = notices.find(func(n api.Notice) bool { return hasKind(n, api.NoticeConfig) && n.ConfigID != r.ConfigID })
		if !ok {
			return fmt.Errorf("no config notice yet")
		}
		return nil
	})
	pc, err := p1.cli.Config(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if pc.ID != n.ConfigID || len(pc.HECTokens) != 1 || !fsm.TokenMatches(pc.TokenKey, pc.HECTokens[0].Token, "tok-web") || !containsStr(pc.KnownIndexes, "web") {
		t.Fatalf("config %+v after notice %+v: want the web index and its token (as its digest: no secret leaves the managers) under the notice's id", pc, n)
	}
	// Generation tables over NATS: whole, then only the changes since a
	// version (a new bucket's entry and its primary).
	full, err := p1.cli.Generation(ctx, "", 0)
	if err != nil || !full.View.Full || full.View.Site != fsm.Site0 || len(full.View.Peers) != 1 {
		t.Fatalf("full generation: %+v, %v", full, err)
	}
	p2 := newFakePeer(t, b, "p2")
	p2.register(ctx, nil)
	tr, err := p1.cli.Targets(ctx, api.TargetsRequest{RequestID: "tg", Origin: "p1", Index: "main", LocalID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	delta, err := p1.cli.Generation(ctx, fsm.Site0, full.View.Version)
	if err != nil || delta.View.Full || delta.View.Primaries[tr.Bucket] != "p1" || len(delta.View.Buckets) != 1 {
		t.Fatalf("generation since %d: %+v, %v; want only %s with primary p1", full.View.Version, delta.View, err, tr.Bucket)
	}
	if _, err := p1.cli.Generation(ctx, "site9", 0); !bus.IsRemote(err, "bad_site") {
		t.Fatalf("generation of an unknown site: %v, want bad_site", err)
	}
	g.apply(&fsm.SetMaintenance{Enabled: true})
	testutil.WaitFor(t, 5*time.Second, func() error {
		if _, ok := notices.find(func(x api.Notice) bool { return x.Maintenance && x.ConfigID != n.ConfigID }); !ok {
			return fmt.Errorf("no maintenance notice yet")
		}
		return nil
	})
	hb, err := p1.cli.Heartbeat(ctx, api.Heartbeat{Peer: "p1", GUID: p1.guid})
	if err != nil || hb.ConfigID == n.ConfigID || hb.ConfigID == "" {
		t.Fatalf("heartbeat reply %+v, %v: want the maintenance config id", hb, err)
	}

	// The bus restarts under the leader: it reconnects and serves again.
	b.srv.Shutdown()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	if err := b.srv.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	rcancel()
	testutil.WaitFor(t, 15*time.Second, func() error {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		defer hcancel()
		_, err := p1.cli.Heartbeat(hctx, api.Heartbeat{Peer: "p1", GUID: p1.guid})
		return err
	})

	// Unreachable NATS: the start fails within the connect deadline.
	cfg2 := testConfig(t, "mx", t.TempDir())
	cfg2.Bootstrap = []Server{{ID: "mx", RaftAddr: "127.0.0.1:0"}}
	cfg2.NATS, cfg2.NATSConnectTimeout = "nats://127.0.0.1:1", 300*time.Millisecond
	start := time.Now()
	m, err := New(ctx, cfg2)
	if err == nil {
		m.Close()
		t.Fatal("manager started without its NATS")
	}
	if took := time.Since(start); took > 3*time.Second || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("start without NATS: %v after %v; want a clear error within the deadline", err, took)
	}
}

func containsStr(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// A hot bucket its origin's inventory brought in before the origin's
// targets request was answered (the origin re-registered during a leader
// change while the request was lost): the request, under its own id, gets
// targets recorded as copies instead of "bucket exists" forever (the e2e
// site2 cut stalled site1's acks on it). A bucket no longer hot is still
// refused.
func TestNATSTargetsForAnInventoryHotBucket(t *testing.T) {
	b := startTestBus(t, "p1", "p2", "p3")
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p1, p2, p3 := newFakePeer(t, b, "p1"), newFakePeer(t, b, "p2"), newFakePeer(t, b, "p3")
	hot := fsm.BucketID("main", "4", p1.guid)
	p1.register(ctx, []api.Copy{{Bucket: hot, Index: "main", State: api.CopyHot, Searchable: true, Events: 10, Blocks: 1, Earliest: 5, Latest: 6}})
	p2.register(ctx, nil)
	p3.register(ctx, nil)
	for _, p := range []*fakePeer{p1, p2, p3} {
		p.startHeartbeats()
	}
	var before fsm.BucketView
	g.leader().Read(func(s *fsm.State) { before, _ = findBucket(s, hot) })
	if !before.Hot || len(before.Copies) != 1 {
		t.Fatalf("registered hot bucket %+v: want hot with the origin's copy only", before)
	}
	// The same local id from another peer is another bucket (the id
	// carries its origin's guid): p1's is out of its reach.
	if tr, err := p2.cli.Targets(ctx, api.TargetsRequest{RequestID: "x", Origin: "p2", Index: "main", LocalID: "4"}); err != nil || tr.Bucket == hot {
		t.Fatalf("p2's targets request for local id 4: %+v, %v", tr, err)
	}
	tr, err := p1.cli.Targets(ctx, api.TargetsRequest{RequestID: "targets-p1-main-4", Origin: "p1", Index: "main", LocalID: "4", Earliest: 5})
	if err != nil {
		t.Fatalf("targets for the inventory's hot bucket: %v", err)
	}
	if tr.Bucket != hot || len(tr.Targets) != 2 {
		t.Fatalf("targets reply %+v: want %s with 2 targets", tr, hot)
	}
	var after fsm.BucketView
	g.leader().Read(func(s *fsm.State) { after, _ = findBucket(s, hot) })
	if len(after.Copies) != 3 {
		t.Fatalf("bucket after targets %+v: want the origin's and both targets' copies", after)
	}
	// Asked again: the same targets, nothing added.
	tr2, err := p1.cli.Targets(ctx, api.TargetsRequest{RequestID: "targets-p1-main-4", Origin: "p1", Index: "main", LocalID: "4", Earliest: 5})
	if err != nil || len(tr2.Targets) != 2 {
		t.Fatalf("asked again: %+v, %v", tr2, err)
	}
	// Rolled: no longer hot, a targets request for it is refused.
	if _, err := p1.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "roll-4", Kind: api.EventRolled, Bucket: hot, Peer: "p1",
		Earliest: 5, Latest: 6, Bytes: 100, Events: 10, Blocks: 1, LastBlockChecksum: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.cli.Targets(ctx, api.TargetsRequest{RequestID: "again", Origin: "p1", Index: "main", LocalID: "4"}); !bus.IsRemote(err, "bucket_exists") {
		t.Fatalf("targets for a rolled bucket: %v, want bucket_exists", err)
	}
}

// TestNATSBucketsAndPeersOnly: mgr.buckets answers a peer about named
// buckets of its own only — a bucket without a copy on it and an unknown
// id are left out —, refuses a request for another peer (sender) and one
// over MaxBucketsPerRequest ids or with a traversal id;
// the client sends a longer list in chunks. A peers_only generation request
// carries the peer list and no buckets.
func TestNATSBucketsAndPeersOnly(t *testing.T) {
	b := startTestBus(t, "p1", "p2", "p3")
	newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p1, p2, p3 := newFakePeer(t, b, "p1"), newFakePeer(t, b, "p2"), newFakePeer(t, b, "p3")
	mine := fsm.BucketID("main", "1", p1.guid)
	theirs := fsm.BucketID("main", "2", p2.guid)
	p1.register(ctx, []api.Copy{{Bucket: mine, Index: "main", State: api.CopyWarm, Searchable: true, Events: 10, Blocks: 1, Earliest: 5, Latest: 6, LastBlockChecksum: "c"}})
	p2.register(ctx, []api.Copy{{Bucket: theirs, Index: "main", State: api.CopyWarm, Searchable: true, Events: 10, Blocks: 1, Earliest: 5, Latest: 6, LastBlockChecksum: "c"}})
	p3.register(ctx, nil)

	got, err := p1.cli.Buckets(ctx, "p1", []string{theirs, mine, fsm.BucketID("main", "9", p1.guid)})
	if err != nil || len(got) != 1 || got[0].ID != mine || got[0].Origin != "p1" || len(got[0].Copies) != 1 || got[0].Copies[0].Peer != "p1" {
		t.Fatalf("p1 asks about its bucket, p2's and an unknown one: %+v %v; want its own only", got, err)
	}
	// A long list travels in chunks of at most MaxBucketsPerRequest ids.
	long := []string{}
	for i := 0; i < 3*api.MaxBucketsPerRequest; i++ {
		long = append(long, fsm.BucketID("main", fmt.Sprint(1000+i), p1.guid))
	}
	long = append(long, mine)
	if got, err := p1.cli.Buckets(ctx, "p1", long); err != nil || len(got) != 1 || got[0].ID != mine {
		t.Fatalf("a list of %d ids: %+v %v", len(long), got, err)
	}

	// (mgr.buckets is a read: it never applies anything.)
	subj, _ := b.subj.MgrOp(api.OpBuckets, "p1")
	for name, req := range map[string]api.BucketsRequest{
		"another peer": {V: 1, Peer: "p2", Buckets: []string{theirs}},
		"too many ids": {V: 1, Peer: "p1", Buckets: long},
		"traversal id": {V: 1, Peer: "p1", Buckets: []string{"main~7~x/../../.."}},
		"no peer":      {V: 1, Buckets: []string{mine}},
	} {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		rep, err := bus.Request[api.BucketsRequest, api.BucketsReply](rctx, p1.nc, subj, req)
		rcancel()
		if !bus.IsRemote(err, api.CodeBadRequest) || len(rep.Buckets) != 0 {
			t.Errorf("%s: %+v %v, want bad_request and nothing", name, rep, err)
		}
	}
	// A peer user cannot even publish under another peer's name.
	other, _ := b.subj.MgrOp(api.OpBuckets, "p2")
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = bus.Request[api.BucketsRequest, api.BucketsReply](rctx, p1.nc, other, api.BucketsRequest{V: 1, Peer: "p2", Buckets: []string{theirs}})
	rcancel()
	if err == nil {
		t.Fatal("p1 asked about p2's buckets under p2's subject and got an answer")
	}

	rep, err := p3.cli.GenerationPeers(ctx)
	if err != nil || len(rep.View.Peers) != 3 || len(rep.View.Buckets) != 0 || len(rep.View.Primaries) != 0 || rep.View.Generation == 0 {
		t.Fatalf("peers_only generation: %+v %v; want 3 peers, no buckets", rep.View, err)
	}
	full, err := p3.cli.Generation(ctx, "site0", 0)
	if err != nil || len(full.View.Buckets) != 2 || full.View.Version != rep.View.Version {
		t.Fatalf("full generation: %d buckets, version %d vs %d, %v", len(full.View.Buckets), full.View.Version, rep.View.Version, err)
	}
}

// TestNATSBucketsRefusesNewerWireVersion: mgr.buckets checks the wire
// version like every other operation (a request of a newer version is
// refused with CodeVersion and answers nothing). It used to skip the check:
// the type switch that read each request's version left BucketsRequest out;
// now the operation table takes only api.Request handlers.
func TestNATSBucketsRefusesNewerWireVersion(t *testing.T) {
	b := startTestBus(t, "p1")
	newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p1 := newFakePeer(t, b, "p1")
	mine := fsm.BucketID("main", "1", p1.guid)
	p1.register(ctx, []api.Copy{{Bucket: mine, Index: "main", State: api.CopyWarm, Searchable: true, Events: 10, Blocks: 1, Earliest: 5, Latest: 6, LastBlockChecksum: "c"}})

	subj, _ := b.subj.MgrOp(api.OpBuckets, "p1")
	req := api.BucketsRequest{V: api.MaxWireVersion + 1, Peer: "p1", Buckets: []string{mine}}
	rep, err := bus.Request[api.BucketsRequest, api.BucketsReply](ctx, p1.nc, subj, req)
	if !bus.IsRemote(err, api.CodeVersion) || len(rep.Buckets) != 0 {
		t.Fatalf("buckets request of wire version %d: %+v %v, want %s and nothing", req.V, rep, err, api.CodeVersion)
	}
	req.V = api.WireVersion
	if rep, err := bus.Request[api.BucketsRequest, api.BucketsReply](ctx, p1.nc, subj, req); err != nil || len(rep.Buckets) != 1 {
		t.Fatalf("the same request at wire version %d: %+v %v, want its bucket", req.V, rep, err)
	}
}

// TestPeerOpsCoverEveryOp: the operation table serves every operation of
// api.Ops and nothing else.
func TestPeerOpsCoverEveryOp(t *testing.T) {
	if len(peerOps) != len(api.Ops) {
		t.Fatalf("%d operations in peerOps, api.Ops has %d", len(peerOps), len(api.Ops))
	}
	for _, op := range api.Ops {
		if peerOps[op] == nil {
			t.Errorf("operation %q has no handler in peerOps", op)
		}
	}
}
