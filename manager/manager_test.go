package manager

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A group of three: the bootstrap config is committed once, a command
// applied through the leader is on all three, the join is idempotent, and
// every manager knows every other's HTTP address.
func TestGroupReplicatesAndJoinIsIdempotent(t *testing.T) {
	g := newGroup(t, 3, nil)
	l := g.leader()
	if l.ID() != "m1" {
		t.Fatalf("leader = %s, want m1 (the only bootstrap voter)", l.ID())
	}
	g.eventually(5*time.Second, func(id string, m *Manager) error {
		var hb time.Duration
		m.Read(func(s *fsm.State) { hb = s.Config().HeartbeatTimeout })
		if hb != 2*time.Second {
			return fmt.Errorf("heartbeat_timeout %v, want the seed's 2s", hb)
		}
		return nil
	})
	g.apply(&fsm.SetMaintenance{Enabled: true})
	g.eventually(5*time.Second, func(id string, m *Manager) error {
		if !maintenanceOf(m) {
			return errors.New("maintenance not on")
		}
		return nil
	})

	// Join again, through a follower: 307 to the leader, still 3 voters.
	c, err := NewClient([]string{"http://" + g.ms["m3"].HTTPAddr()}, testToken, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mv := g.ms["m2"]
	if err := c.do(ctxT(t), http.MethodPost, "/v1/managers/join", JoinRequest(mv.self()), nil); err != nil {
		t.Fatalf("repeat join: %v", err)
	}
	cf := l.Raft().GetConfiguration()
	if err := cf.Error(); err != nil {
		t.Fatal(err)
	}
	if n := len(cf.Configuration().Servers); n != 3 {
		t.Fatalf("raft configuration has %d servers after a repeated join, want 3", n)
	}
	for _, m := range g.ms {
		view := m.Managers()
		if len(view.Managers) != 3 || view.Leader != "m1" {
			t.Fatalf("%s: managers view %+v, want 3 managers led by m1", m.ID(), view)
		}
		for _, mm := range view.Managers {
			if mm.HTTPAddr != g.ms[mm.ID].HTTPAddr() || !mm.Voter {
				t.Fatalf("%s: member %+v, want voter with http %s", m.ID(), mm, g.ms[mm.ID].HTTPAddr())
			}
		}
	}
}

// Writes: no token → 401 JSON; a follower answers 307 to the leader's HTTP
// address; the client follows it and the write lands; reads are answered
// by the follower itself.
func TestWritesAuthAndRedirect(t *testing.T) {
	g := newGroup(t, 3, nil)
	l := g.leader()
	var f *Manager
	for _, m := range g.ms {
		if m != l {
			f = m
			break
		}
	}
	for _, tc := range []struct {
		name, token string
	}{{"none", ""}, {"wrong", "nope"}} {
		code, body := post(t, noRedirect, "http://"+f.HTTPAddr()+"/v1/maintenance", tc.token, `{"enabled":true}`)
		var ae APIError
		if code != http.StatusUnauthorized || json.Unmarshal([]byte(body), &ae) != nil || ae.Code != "unauthorized" {
			t.Fatalf("token %s: got %d %s, want 401 with code unauthorized", tc.name, code, body)
		}
		code, _ = post(t, noRedirect, "http://"+l.HTTPAddr()+"/v1/maintenance", tc.token, `{"enabled":true}`)
		if code != http.StatusUnauthorized {
			t.Fatalf("token %s on leader: got %d, want 401", tc.name, code)
		}
	}
	if maintenanceOf(l) {
		t.Fatal("a refused write changed the state")
	}

	req, _ := http.NewRequest(http.MethodPost, "http://"+f.HTTPAddr()+"/v1/maintenance?x=1", strings.NewReader(`{"enabled":true}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "http://"+l.HTTPAddr()+"/v1/maintenance?x=1" {
		t.Fatalf("follower answered %d Location=%q, want 307 to http://%s/v1/maintenance?x=1", resp.StatusCode, resp.Header.Get("Location"), l.HTTPAddr())
	}

	c, _ := NewClient([]string{"http://" + f.HTTPAddr()}, testToken, 5*time.Second)
	if err := c.SetMaintenance(ctxT(t), true); err != nil {
		t.Fatalf("maintenance through a follower: %v", err)
	}
	g.eventually(5*time.Second, func(id string, m *Manager) error {
		if !maintenanceOf(m) {
			return errors.New("maintenance not on")
		}
		return nil
	})
	// Reads on the follower, no token needed.
	st, err := c.Status(ctxT(t))
	if err != nil || st.Leader != l.ID() || !st.Maintenance {
		t.Fatalf("status from follower: %+v, %v; want leader %s, maintenance on", st, err, l.ID())
	}

	// Bad requests get a JSON error and change nothing.
	for _, tc := range []struct{ path, body, code string }{
		{"/v1/maintenance", `{"enabled":"yes"}`, "bad_request"},
		{"/v1/maintenance", `{}`, "bad_request"},
		{"/v1/maintenance", ``, "bad_request"},
		{"/v1/peers/p1/offline?enforce_counts=maybe", ``, "bad_request"},
	} {
		code, body := post(t, noRedirect, "http://"+l.HTTPAddr()+tc.path, testToken, tc.body)
		var ae APIError
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &ae) != nil || ae.Code != tc.code {
			t.Fatalf("POST %s %q: got %d %s, want 400 %s", tc.path, tc.body, code, body, tc.code)
		}
	}
	if !maintenanceOf(l) {
		t.Fatal("a bad request changed maintenance")
	}
	// A retried write with the same X-Request-Id is applied once.
	for i, want := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+l.HTTPAddr()+"/v1/rebalance", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("X-Request-Id", "retry-1")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Result fsm.Result `json:"result"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || out.Result.Duplicate != want {
			t.Fatalf("rebalance attempt %d: %d %+v, want duplicate=%v", i+1, resp.StatusCode, out.Result, want)
		}
	}
	// Unknown endpoint and wrong method are JSON errors too.
	resp, err = http.Get("http://" + l.HTTPAddr() + "/v1/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/nope: %d %s, want 404 JSON", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	resp, err = http.Get("http://" + l.HTTPAddr() + "/v1/rebalance")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/rebalance: %d, want 405", resp.StatusCode)
	}
}

// Killing the leader elects another; nothing committed is lost; the old
// leader restarted from its data directory catches up.
func TestLeaderLossAndRestart(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.apply(&fsm.SetMaintenance{Enabled: true})
	old := g.leader().ID()
	g.kill(old)
	nl := g.leader()
	if nl.ID() == old {
		t.Fatal("killed manager still leader")
	}
	if !maintenanceOf(nl) {
		t.Fatal("new leader lost the committed maintenance flag")
	}
	g.apply(&fsm.SetMaintenance{Enabled: false})
	want := g.leader().Raft().AppliedIndex()
	back := g.restart(old)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if back.Raft().AppliedIndex() < want {
			return fmt.Errorf("restarted manager at %d, want ≥ %d", back.Raft().AppliedIndex(), want)
		}
		if maintenanceOf(back) {
			return errors.New("restarted manager still sees maintenance on")
		}
		return nil
	})
	// Writes through the restarted (follower) manager reach the leader.
	c, _ := NewClient([]string{"http://" + back.HTTPAddr()}, testToken, 5*time.Second)
	if err := c.SetMaintenance(ctxT(t), true); err != nil {
		t.Fatalf("write through restarted follower: %v", err)
	}
	g.eventually(5*time.Second, func(id string, m *Manager) error {
		if !maintenanceOf(m) {
			return errors.New("maintenance not on")
		}
		return nil
	})
}

// A manager that missed more entries than the leader keeps behind its last
// snapshot catches up by InstallSnapshot.
func TestLaggingFollowerCatchesUpFromSnapshot(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		c.SnapshotThreshold = 32
		c.TrailingLogs = 8
		c.SnapshotInterval = 100 * time.Millisecond
	})
	l := g.leader()
	var lag string
	for id := range g.ms {
		if id != l.ID() {
			lag = id
			break
		}
	}
	g.kill(lag)
	for i := 0; i < 150; i++ {
		g.apply(&fsm.SetMaintenance{Enabled: i%2 == 0})
	}
	// The leader has snapshotted and compacted its log past what lag has.
	testutil.WaitFor(t, 10*time.Second, func() error {
		snaps, err := os.ReadDir(filepath.Join(g.dirs[l.ID()], raftDirName, "snapshots"))
		if err != nil || len(snaps) == 0 {
			return fmt.Errorf("no snapshot on the leader yet (%v)", err)
		}
		return nil
	})
	want := g.leader().Raft().AppliedIndex()
	back := g.restart(lag)
	testutil.WaitFor(t, 15*time.Second, func() error {
		if back.Raft().AppliedIndex() < want {
			return fmt.Errorf("lagging manager at %d, want ≥ %d", back.Raft().AppliedIndex(), want)
		}
		return nil
	})
	if got, wantM := maintenanceOf(back), maintenanceOf(l); got != wantM {
		t.Fatalf("maintenance on caught-up manager %v, leader %v", got, wantM)
	}
	// It was installed from a snapshot: its own snapshot store has one, and
	// the member table (carried in the snapshot) knows every manager.
	snaps, err := os.ReadDir(filepath.Join(g.dirs[lag], raftDirName, "snapshots"))
	if err != nil || len(snaps) == 0 {
		t.Fatalf("lagging manager has no snapshot after catching up (%v)", err)
	}
	if n := len(back.Members()); n != 3 {
		t.Fatalf("member table after snapshot install has %d members, want 3", n)
	}
}

// Quorum loss: two of three managers are gone for good; the survivor is
// restarted with a peers.json naming only itself and leads again with the
// committed state intact.
func TestRecoveryFromQuorumLoss(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.apply(&fsm.SetMaintenance{Enabled: true})
	g.eventually(5*time.Second, func(id string, m *Manager) error {
		if !maintenanceOf(m) {
			return errors.New("maintenance not on")
		}
		return nil
	})
	survivor := "m3"
	self := []Server{{ID: survivor, RaftAddr: g.cfgs[survivor].RaftAddr}}
	ctx := context.Background()
	recoverOpts := func(dir string, members []Server) RecoverOptions {
		return RecoverOptions{ID: survivor, DataDir: dir, Members: members, Timeout: 500 * time.Millisecond}
	}
	// Refusals, each changing nothing in the data directory.
	empty := t.TempDir()
	if _, err := Recover(ctx, recoverOpts(empty, self)); !errors.Is(err, ErrNoRaftState) {
		t.Fatalf("recover an empty dir: %v, want ErrNoRaftState", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("recover of an empty dir created %v", ents)
	}
	if _, err := Recover(ctx, recoverOpts(g.dirs[survivor], self)); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("recover while the manager runs: %v, want ErrDataDirInUse", err)
	}
	g.kill(survivor)
	before := dirDigest(t, g.dirs[survivor])
	if _, err := Recover(ctx, recoverOpts(g.dirs[survivor], []Server{{ID: "m1", RaftAddr: g.cfgs["m1"].RaftAddr}})); !errors.Is(err, ErrBadMembers) {
		t.Fatalf("recover with members without --id: %v, want ErrBadMembers", err)
	}
	// m1 and m2 still have quorum: the member table names them, they answer.
	if _, err := Recover(ctx, recoverOpts(g.dirs[survivor], self)); !errors.Is(err, ErrLeaderReachable) {
		t.Fatalf("recover while a leader is reachable: %v, want ErrLeaderReachable", err)
	}
	if after := dirDigest(t, g.dirs[survivor]); after != before {
		t.Fatalf("a refused recover changed the data dir:\n%s\n---\n%s", before, after)
	}
	// The majority is gone for good.
	g.kill("m1")
	g.kill("m2")
	// A server that answers, but not with a status (plain HTTP to an HTTPS
	// manager gets a 400): whether it leads is unknown, so refused too.
	odd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Client sent an HTTP request to an HTTPS server.", http.StatusBadRequest)
	}))
	defer odd.Close()
	oddOpts := recoverOpts(g.dirs[survivor], self)
	oddOpts.Managers = []string{odd.URL}
	if _, err := Recover(ctx, oddOpts); !errors.Is(err, ErrLeaderUnknown) {
		t.Fatalf("recover with a manager answering 400: %v, want ErrLeaderUnknown", err)
	}
	if after := dirDigest(t, g.dirs[survivor]); after != before {
		t.Fatalf("a refused recover changed the data dir:\n%s\n---\n%s", before, after)
	}
	rep, err := Recover(ctx, recoverOpts(g.dirs[survivor], self))
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	path := filepath.Join(g.dirs[survivor], raftDirName, peersFileName)
	if rep.PeersFile != path || len(rep.Configured) != 3 || len(rep.Checked) != 2 || len(rep.Unreachable) != 2 {
		t.Fatalf("recover report %+v", rep)
	}
	m := g.restart(survivor)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !m.IsLeader() {
			return errors.New("survivor not leader")
		}
		return nil
	})
	if !maintenanceOf(m) {
		t.Fatal("recovered manager lost committed state")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("peers.json still present after recovery (%v)", err)
	}
	g.apply(&fsm.SetMaintenance{Enabled: false})
	cf := m.Raft().GetConfiguration()
	if err := cf.Error(); err != nil || len(cf.Configuration().Servers) != 1 {
		t.Fatalf("configuration after recovery: %+v %v, want the survivor alone", cf.Configuration(), err)
	}
}

// dirDigest lists every file under dir with its size and content hash.
func dirDigest(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %x\n", strings.TrimPrefix(path, dir), len(data), sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The grace rule with a fake clock: a new leader declares nobody Down
// before one heartbeat_timeout after its Barrier, even though it never heard
// from any peer; after it, the peer that keeps heartbeating stays Up and the
// silent one goes Down.
func TestNewLeaderGracePeriod(t *testing.T) {
	clock := newFakeClock()
	g := newGroup(t, 3, func(c *Config) { c.Now = clock.Now })
	for _, p := range []string{"p1", "p2"} {
		g.apply(&fsm.RegisterPeer{ID: p, GUID: "guid-" + p, Site: fsm.DefaultSite, At: clock.Now()})
	}
	// Only the leader hears the heartbeats; its successor never does.
	l := g.leader()
	for _, p := range []string{"p1", "p2"} {
		l.Heartbeat(p, clock.Now())
	}
	old := l.ID()
	g.kill(old)
	nl := g.leader()
	_, since, graceUntil, _ := nl.LeaderState()
	if got := graceUntil.Sub(since); got != 2*time.Second {
		t.Fatalf("grace = %v, want heartbeat_timeout 2s", got)
	}
	// Well past heartbeat_timeout since the last heartbeat anyone saw, but
	// inside the new leader's grace: nobody is Down.
	clock.Advance(1900 * time.Millisecond)
	ticksNow := ticks(nl)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if ticks(nl) < ticksNow+3 {
			return errors.New("leader loop has not run yet")
		}
		return nil
	})
	for _, p := range []string{"p1", "p2"} {
		if st := peerState(nl, p); st != fsm.StateUp {
			t.Fatalf("%s is %s inside the grace period, want Up", p, st)
		}
	}
	// p1 keeps heartbeating (to the new leader); p2 is silent.
	nl.Heartbeat("p1", clock.Now())
	clock.Advance(1500 * time.Millisecond) // grace over; p1 heard 1.5s ago
	testutil.WaitFor(t, 5*time.Second, func() error {
		if st := peerState(nl, "p2"); st != fsm.StateDown {
			return fmt.Errorf("p2 is %s after grace with no heartbeat, want Down", st)
		}
		return nil
	})
	if st := peerState(nl, "p1"); st != fsm.StateUp {
		t.Fatalf("p1 is %s, heartbeat 1.5s ago (timeout 2s), want Up", st)
	}
}

func ticks(m *Manager) uint64 { _, _, _, n := m.LeaderState(); return n }

func peerState(m *Manager, id string) fsm.PeerState {
	var st fsm.PeerState
	m.Read(func(s *fsm.State) {
		p, ok := s.Peer(id)
		if ok {
			st = p.State
		}
	})
	return st
}

// Bad configs are refused at start with one clear error.
func TestConfigValidation(t *testing.T) {
	base := testConfig(t, "m1", t.TempDir())
	bad := fsm.DefaultConfig()
	bad.SearchFactor = 4
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no id", func(c *Config) { c.ID = "" }, "--id is required"},
		{"no token", func(c *Config) { c.AdminToken = "" }, "--admin-token is required"},
		{"read token equals admin token", func(c *Config) { c.ReadToken = c.AdminToken }, "--read-token equals --admin-token"},
		{"bootstrap and join", func(c *Config) {
			c.Bootstrap = []Server{{ID: "m1", RaftAddr: "127.0.0.1:1"}}
			c.Join = "http://x:1"
		}, "exclude each other"},
		{"bootstrap without self", func(c *Config) { c.Bootstrap = []Server{{ID: "m2", RaftAddr: "127.0.0.1:1"}} }, "does not name this manager"},
		{"bad join", func(c *Config) { c.Join = "ftp://x" }, "--join"},
		{"sf above rf", func(c *Config) { c.Seed = &bad }, "cluster config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mod(&cfg)
			_, err := New(context.Background(), cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want ErrInvalidConfig mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := ParseBootstrap("m1=127.0.0.1:7001,m2"); err == nil {
		t.Fatal("ParseBootstrap accepted an entry without address")
	}
	got, err := ParseBootstrap("m1=127.0.0.1:7001, m2=127.0.0.1:7002")
	if err != nil || len(got) != 2 || got[1] != (Server{ID: "m2", RaftAddr: "127.0.0.1:7002"}) {
		t.Fatalf("ParseBootstrap: %+v %v", got, err)
	}
}

// GET /v1/fixups/{id}?confirm: peers confirm over NATS (mgr.confirm), the
// HTTP form went with the HTTP control plane and is refused on every
// manager, changing nothing; a plain read of an unknown task is 404.
func TestFixupConfirmNotOverHTTP(t *testing.T) {
	g := newGroup(t, 3, nil)
	for _, m := range g.ms {
		resp, err := noRedirect.Get("http://" + m.HTTPAddr() + "/v1/fixups/7?confirm=true")
		if err != nil {
			t.Fatal(err)
		}
		var ae APIError
		json.NewDecoder(resp.Body).Decode(&ae)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || ae.Code != "bad_request" || !strings.Contains(ae.Message, "NATS") {
			t.Fatalf("%s: confirm over HTTP: %d %+v, want 400 bad_request naming NATS", m.ID(), resp.StatusCode, ae)
		}
	}
	err := getJSON("http://"+g.leader().HTTPAddr()+"/v1/fixups/7", &FixupView{})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code != "unknown_task" {
		t.Fatalf("read of a task that does not exist: %v, want 404 unknown_task", err)
	}
	_ = raft.Leader
}

// The leader's planner loop commits fixup-task records; a new leader
// continues them (same ids, none repeated); a task marked done takes effect.
// RF=3/SF=2 on four peers: b1 has p1 (origin, searchable), p2 (searchable),
// p3 (rawdata). With p2 Down, by SPEC §3 RF needs one more copy, on the only
// peer without one (p4). Which task restores SF (a searchable replica on p4,
// or rebuilding p3) is the planner's choice, pinned by fsm's table tests;
// here it only has to be the same before and after the leader change.
func TestPlannerLoopAndNewLeaderContinuesTasks(t *testing.T) {
	clock := newFakeClock() // never advanced: nobody leaves the grace period
	g := newGroup(t, 3, func(c *Config) { c.Now = clock.Now })
	l := g.leader()
	apply := func(c fsm.Command) {
		t.Helper()
		g.apply(c)
	}
	for _, p := range []string{"p1", "p2", "p3", "p4"} {
		apply(&fsm.RegisterPeer{ID: p, GUID: "g" + p, Site: fsm.DefaultSite, At: clock.Now()})
	}
	b1 := fsm.BucketID("main", "1", "gp1")
	apply(&fsm.AddBucket{ID: b1, Index: "main", Origin: "p1", Earliest: 1, Targets: []fsm.CopySpec{{Peer: "p2", Searchable: true}, {Peer: "p3"}}})
	apply(&fsm.RollBucket{Bucket: b1, Earliest: 1, Latest: 2, Size: 100, Events: 10, Blocks: 1, LastChecksum: "c1"})
	apply(&fsm.PeerDown{ID: "p2", Reason: "test", At: clock.Now()})

	type key struct {
		kind   fsm.TaskKind
		target string
	}
	tasksOf := func(m *Manager) map[key]uint64 {
		out := map[key]uint64{}
		m.Read(func(s *fsm.State) {
			for _, tk := range s.Tasks() {
				if tk.Bucket == b1 {
					out[key{tk.Kind, tk.Target}] = tk.ID
				}
			}
		})
		return out
	}
	var first map[key]uint64
	g.eventually(10*time.Second, func(id string, m *Manager) error {
		got := tasksOf(m)
		if got[key{fsm.TaskReplicate, "p4"}] == 0 {
			return fmt.Errorf("tasks %v lack a replication to p4", got)
		}
		first = got
		return nil
	})
	// Stable: a few more ticks plan nothing new.
	n := ticks(l)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if ticks(l) < n+3 {
			return errors.New("loop has not run")
		}
		return nil
	})
	first = tasksOf(l)

	old := g.leader().ID()
	g.kill(old)
	nl := g.leader()
	n0 := ticks(nl)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if ticks(nl) < n0+5 {
			return errors.New("new leader's loop has not run 5 times")
		}
		return nil
	})
	if got := tasksOf(nl); fmt.Sprint(got) != fmt.Sprint(first) {
		t.Fatalf("tasks after the new leader planned: %v, want the previous leader's %v unchanged", got, first)
	}

	// The target confirms its task against the leader's committed state
	// (mgr.confirm: confirmTask after the sender checks).
	rid := first[key{fsm.TaskReplicate, "p4"}]
	cr, err := (&peerService{m: nl}).confirmTask(ctxT(t), api.ConfirmRequest{ID: rid, Peer: "p4"})
	if err != nil || !cr.Confirmed || cr.Task == nil || cr.Leader != nl.ID() || cr.Task.ID != rid || cr.Task.Kind != fsm.TaskReplicate || cr.Task.Target != "p4" {
		t.Fatalf("confirm answer %+v %v, want task %d (replicate to p4) confirmed by the leader", cr, err, rid)
	}

	// p4 reports the replication done: the copy exists, the task is closed
	// (a confirm now answers 404) and nothing is planned again for it.
	g.apply(&fsm.FixupDone{ID: rid})
	n1 := ticks(nl)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if ticks(nl) < n1+3 {
			return errors.New("loop has not run")
		}
		return nil
	})
	var onP4 bool
	nl.Read(func(s *fsm.State) {
		for _, b := range s.BucketList("", "p4") {
			onP4 = onP4 || b.ID == b1
		}
	})
	if !onP4 {
		t.Fatal("replicate task done but p4 holds no copy of b1")
	}
	got := tasksOf(nl)
	delete(first, key{fsm.TaskReplicate, "p4"})
	if fmt.Sprint(got) != fmt.Sprint(first) {
		t.Fatalf("tasks after the replication finished: %v, want the remaining %v", got, first)
	}
	if cr, err := (&peerService{m: nl}).confirmTask(ctxT(t), api.ConfirmRequest{ID: rid, Peer: "p4"}); err != nil || cr.Confirmed {
		t.Fatalf("confirm of a closed task: %+v %v, want not confirmed", cr, err)
	}
}

// GET /v1/config answers the committed config to the admin token only (it
// holds the tokens: SPEC §7); POST /v1/config replaces it through the
// leader, and a config that cannot be met is refused with 400 bad_config
// and changes nothing.
func TestConfigAPI(t *testing.T) {
	g := newGroup(t, 2, nil)
	l := g.leader()
	var f *Manager
	for _, m := range g.ms {
		if m != l {
			f = m
		}
	}
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+f.HTTPAddr()+"/v1/config", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `"unauthorized"`) || strings.Contains(string(b), "heartbeat") {
			t.Fatalf("GET /v1/config with token %q: %d %s, want 401 unauthorized and no config", tok, resp.StatusCode, b)
		}
	}
	var cfg fsm.Config
	fc, _ := NewClient([]string{"http://" + f.HTTPAddr()}, testToken, 5*time.Second)
	if err := fc.do(ctxT(t), http.MethodGet, "/v1/config", nil, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.HeartbeatTimeout != 2*time.Second {
		t.Fatalf("config heartbeat_timeout %v, want the seed's 2s", cfg.HeartbeatTimeout)
	}
	bad := cfg
	bad.SearchFactor = 5
	body, _ := json.Marshal(bad)
	code, resp := post(t, noRedirect, "http://"+l.HTTPAddr()+"/v1/config", testToken, string(body))
	if code != http.StatusBadRequest || !strings.Contains(resp, `"bad_config"`) {
		t.Fatalf("POST an unmeetable config: %d %s, want 400 bad_config", code, resp)
	}
	good := cfg
	good.HeartbeatTimeout = 3 * time.Second
	c, _ := NewClient([]string{"http://" + f.HTTPAddr()}, testToken, 5*time.Second)
	if err := c.do(ctxT(t), http.MethodPost, "/v1/config", good, nil); err != nil {
		t.Fatalf("POST config through a follower: %v", err)
	}
	g.eventually(5*time.Second, func(id string, m *Manager) error {
		var got fsm.Config
		m.Read(func(s *fsm.State) { got = s.Config() })
		if got.HeartbeatTimeout != 3*time.Second || got.SearchFactor != 2 {
			return fmt.Errorf("config %+v, want heartbeat_timeout 3s and SF 2", got)
		}
		return nil
	})
}

// The read endpoints on a follower: generation (full and since), peers,
// buckets with filters, healthz, metrics and the cluster page.
func TestReadEndpoints(t *testing.T) {
	g := newGroup(t, 2, nil)
	l := g.leader()
	var f *Manager
	for _, m := range g.ms {
		if m != l {
			f = m
		}
	}
	apply := func(c fsm.Command) {
		t.Helper()
		g.apply(c)
	}
	for _, p := range []string{"p1", "p2", "p3"} {
		apply(&fsm.RegisterPeer{ID: p, GUID: "g" + p, Site: fsm.DefaultSite})
	}
	b1 := fsm.BucketID("main", "1", "gp1")
	apply(&fsm.AddBucket{ID: b1, Index: "main", Origin: "p1", Earliest: 10, Targets: []fsm.CopySpec{{Peer: "p2", Searchable: true}, {Peer: "p3"}}})
	var version uint64
	testutil.WaitFor(t, 5*time.Second, func() error {
		var gv fsm.GenerationView
		if err := getJSON("http://"+f.HTTPAddr()+"/v1/generation?site=site0", &gv); err != nil {
			return err
		}
		if gv.Primaries[b1] != "p1" || len(gv.Peers) != 3 {
			return fmt.Errorf("generation %+v: want b1 primary p1 and 3 peers", gv)
		}
		version = gv.Version
		return nil
	})
	apply(&fsm.RollBucket{Bucket: b1, Earliest: 10, Latest: 20, Size: 100, Events: 7})
	testutil.WaitFor(t, 5*time.Second, func() error {
		var gv fsm.GenerationView
		if err := getJSON(fmt.Sprintf("http://%s/v1/generation?site=site0&since=%d", f.HTTPAddr(), version), &gv); err != nil {
			return err
		}
		if b, ok := gv.Buckets[b1]; !ok || b.Hot {
			return fmt.Errorf("delta since %d: %+v, want b1 now warm", version, gv)
		}
		return nil
	})
	err := getJSON("http://"+f.HTTPAddr()+"/v1/generation?site=site0&since=x", &struct{}{})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Fatalf("since=x: %v, want 400", err)
	}
	err = getJSON("http://"+f.HTTPAddr()+"/v1/generation?site=mars", &struct{}{})
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "bad_site" {
		t.Fatalf("site=mars: %v, want 400 bad_site", err)
	}
	c, _ := NewClient([]string{"http://" + f.HTTPAddr()}, "", 5*time.Second)
	bs, err := c.Buckets(ctxT(t), "", "p3")
	if err != nil || len(bs) != 1 || bs[0].ID != b1 || bs[0].Events != 7 {
		t.Fatalf("buckets on p3: %+v %v, want b1 with 7 events", bs, err)
	}
	if bs, err := c.Buckets(ctxT(t), "other", ""); err != nil || len(bs) != 0 {
		t.Fatalf("buckets of index other: %+v %v, want none", bs, err)
	}
	peers, err := c.Peers(ctxT(t))
	if err != nil || len(peers) != 3 || peers[0].ID != "p1" || peers[0].State != fsm.StateUp {
		t.Fatalf("peers: %+v %v", peers, err)
	}
	var h map[string]any
	if err := getJSON("http://"+f.HTTPAddr()+"/healthz", &h); err != nil || h["leader"] != l.ID() {
		t.Fatalf("healthz: %v %v", h, err)
	}
	for path, wants := range map[string][]string{
		"/metrics":        {"quarry_manager_raft_applied_index ", `quarry_manager_peers{state="Up"} 3`, "quarry_manager_buckets 1", `quarry_manager_raft_state{state="Follower"} 1`, "quarry_manager_generation "},
		"/":               {"<title>quarry cluster", `"leader":"` + l.ID() + `"`, `"id":"p1"`, `"id":"p2"`, `"id":"p3"`, "site0", `"replication_factor":3`, `src="/ui/cluster.js"`},
		"/ui/cluster.js":  {"/v1/status", "/v1/generations", "sessionStorage"},
		"/v1/generations": {`"generation": `, `"history": [`, `"serving": [`},
	} {
		resp, err := http.Get("http://" + f.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		_, _ = io.Copy(&sb, resp.Body)
		resp.Body.Close()
		for _, w := range wants {
			if !strings.Contains(sb.String(), w) {
				t.Fatalf("GET %s lacks %q", path, w)
			}
		}
	}
}

// Close stops everything the manager started: after a group of two is
// closed, the goroutine count is back where it was.
func TestCloseStopsEverything(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		g := newGroup(t, 2, nil)
		g.leader()
		for id := range g.ms {
			g.kill(id)
		}
	}()
	http.DefaultClient.CloseIdleConnections()
	noRedirect.CloseIdleConnections()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > base+2 {
			buf := make([]byte, 1<<16)
			return fmt.Errorf("%d goroutines after Close, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
		return nil
	})
}

// A leader cut off from its quorum cannot confirm a task: VerifyLeader
// fails, so a deposed leader can never let a peer destroy data.
func TestDeposedLeaderCannotConfirm(t *testing.T) {
	clock := newFakeClock()
	g := newGroup(t, 3, func(c *Config) { c.Now = clock.Now })
	for _, p := range []string{"p1", "p2", "p3", "p4"} {
		g.apply(&fsm.RegisterPeer{ID: p, GUID: "g" + p, Site: fsm.DefaultSite, At: clock.Now()})
	}
	b1 := fsm.BucketID("main", "1", "gp1")
	g.apply(&fsm.AddBucket{ID: b1, Index: "main", Origin: "p1", Earliest: 1, Targets: []fsm.CopySpec{{Peer: "p2", Searchable: true}, {Peer: "p3"}}})
	g.apply(&fsm.RollBucket{Bucket: b1, Earliest: 1, Latest: 2, Size: 100, Events: 10, Blocks: 1, LastChecksum: "c1"})
	g.apply(&fsm.PeerDown{ID: "p2", Reason: "test", At: clock.Now()})
	l := g.leader()
	var id uint64
	testutil.WaitFor(t, 10*time.Second, func() error {
		l.Read(func(s *fsm.State) {
			for _, tk := range s.Tasks() {
				id = tk.ID
			}
		})
		if id == 0 {
			return errors.New("no fixup task yet")
		}
		return nil
	})
	for mid := range g.ms {
		if mid != l.ID() {
			g.kill(mid)
		}
	}
	// hashicorp/raft lets a heartbeat that was already in flight when the
	// followers died satisfy a VerifyLeader registered just after; what the
	// rule protects against is a leader that has lost its quorum, which it
	// learns within its lease. Wait for that, then confirm must be refused.
	testutil.WaitFor(t, 10*time.Second, func() error {
		if l.IsLeader() {
			return errors.New("still leader without a quorum")
		}
		return nil
	})
	target := ""
	l.Read(func(s *fsm.State) {
		for _, tk := range s.Tasks() {
			if tk.ID == id {
				target = tk.Target
			}
		}
	})
	if cr, err := (&peerService{m: l}).confirmTask(ctxT(t), api.ConfirmRequest{ID: id, Peer: target}); err == nil || cr.Confirmed {
		t.Fatalf("leader without quorum answered %+v %v to a confirm, want a refusal", cr, err)
	}
	// Unconfirmed reads still answer from the local state.
	var fv FixupView
	if err := getJSON(fmt.Sprintf("http://%s/v1/fixups/%d", l.HTTPAddr(), id), &fv); err != nil || fv.ID != id {
		t.Fatalf("plain read of task %d: %+v %v", id, fv, err)
	}
}

// The grace follows the committed heartbeat_timeout: a fresh cluster's
// first leader starts its grace at its Barrier, before its bootstrap config
// (heartbeat_timeout 2 s) is committed, under the default timeout (10 s).
// The grace still ends 2 s after it began, and a peer silent for longer
// goes Down then, not 10 s after the leader started (issue 9 item 8: a
// peer killed in a new cluster's first 10 s was declared Down up to 10 s
// after the leader started, 7.86 s after the kill with a 3 s timeout).
func TestGraceFollowsCommittedHeartbeatTimeout(t *testing.T) {
	clock := newFakeClock()
	g := newGroup(t, 1, func(c *Config) { c.Now = clock.Now })
	l := g.leader()
	testutil.WaitFor(t, 5*time.Second, func() error {
		var hb time.Duration
		l.Read(func(s *fsm.State) { hb = s.Config().HeartbeatTimeout })
		if hb != 2*time.Second {
			return fmt.Errorf("heartbeat_timeout %v, want the seed's 2s", hb)
		}
		return nil
	})
	if _, since, graceUntil, _ := l.LeaderState(); graceUntil.Sub(since) != 2*time.Second {
		t.Fatalf("grace = %v, want the committed heartbeat_timeout 2s", graceUntil.Sub(since))
	}
	g.apply(&fsm.RegisterPeer{ID: "p1", GUID: "guid-p1", Site: fsm.DefaultSite, At: clock.Now()})
	l.Heartbeat("p1", clock.Now())
	clock.Advance(2500 * time.Millisecond) // past the grace and the timeout, far inside 10 s
	testutil.WaitFor(t, 5*time.Second, func() error {
		if st := peerState(l, "p1"); st != fsm.StateDown {
			return fmt.Errorf("p1 is %s 2.5s after its last heartbeat (timeout 2s), want Down", st)
		}
		return nil
	})
}
