package manager

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestUpgradeInPlaceFromVersion1 restores a snapshot written by the
// version-1 manager (the member table carrying the delivery marks; made by
// testdata/legacy-v1.gen.txt with the code of f41454e) and replays the log
// that followed it (version-1 mark entries among cluster commands): the
// member table, the marks and the cluster state are those the version-1
// build holds after the same log.
func TestUpgradeInPlaceFromVersion1(t *testing.T) {
	snap, err := os.ReadFile("testdata/legacy-v1.snap")
	if err != nil {
		t.Fatal(err)
	}
	var tail []struct {
		Index      uint64 `json:"index"`
		Data       []byte `json:"data"`
		Extensions []byte `json:"extensions"`
	}
	readJSON(t, "testdata/legacy-v1.log", &tail)
	var oldMembers memberState
	readJSON(t, "testdata/legacy-v1.members.json", &oldMembers)
	oldState, err := os.ReadFile("testdata/legacy-v1.state")
	if err != nil {
		t.Fatal(err)
	}

	inner := fsm.New()
	f := newMuxFSM(inner)
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("restore a version-1 snapshot: %v", err)
	}
	// At the snapshot: task 9 delivered to p2, task 10 reported by p1.
	if !f.marked(fsm.MarkDelivered, 9, "p2") || !f.marked(fsm.MarkReported, 10, "p1") || f.marked(fsm.MarkDelivered, 10, "p1") {
		t.Fatal("marks of the version-1 snapshot not restored")
	}
	for _, e := range tail {
		if res := f.Apply(&raft.Log{Index: e.Index, Type: raft.LogCommand, Data: e.Data, Extensions: e.Extensions}); res != nil {
			if err, ok := res.(error); ok {
				t.Fatalf("replay entry %d: %v", e.Index, err)
			}
		}
	}
	if got := f.memberList(); !reflect.DeepEqual(got, sortedMembers(oldMembers.Members)) || !f.seeded() {
		t.Fatalf("member table %+v (seeded %v), version 1 holds %+v", got, f.seeded(), oldMembers.Members)
	}
	var s *fsm.State
	inner.Read(func(st *fsm.State) { s = st.Clone() })
	if got, want := s.MarkKeys(fsm.MarkDelivered), sortedKeysOf(oldMembers.Delivered); !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered marks %v, version 1 holds %v", got, want)
	}
	if got, want := s.MarkKeys(fsm.MarkReported), sortedKeysOf(oldMembers.Reported); !reflect.DeepEqual(got, want) {
		t.Fatalf("reported marks %v, version 1 holds %v", got, want)
	}
	// The cluster state is the version-1 one, but for the marks (now in
	// it) and the applied index (member entries now advance it).
	got, _ := s.Marshal()
	if a, b := withoutKeys(t, got, "marks", "applied"), withoutKeys(t, oldState, "marks", "applied"); !reflect.DeepEqual(a, b) {
		t.Fatalf("cluster state after the replay differs from version 1's:\n%v\n%v", a, b)
	}

	// A snapshot of this build keeps the marks in its member table too, so
	// a version-1 build that restores it keeps them.
	sn, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := sn.Persist(sink); err != nil {
		t.Fatal(err)
	}
	b := sink.Bytes()
	n := binary.BigEndian.Uint32(b[len(snapshotMagic):])
	var written memberState
	if err := json.Unmarshal(b[len(snapshotMagic)+4:len(snapshotMagic)+4+int(n)], &written); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(written.Delivered, oldMembers.Delivered) || !reflect.DeepEqual(written.Reported, oldMembers.Reported) {
		t.Fatalf("snapshot member table marks %v/%v, want %v/%v", written.Delivered, written.Reported, oldMembers.Delivered, oldMembers.Reported)
	}
	// And it restores to the same state on this build.
	again := fsm.New()
	if err := newMuxFSM(again).Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	w1, _ := inner.Marshal()
	w2, _ := again.Marshal()
	if !bytes.Equal(w1, w2) {
		t.Fatal("this build's snapshot does not restore to the same state")
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func sortedMembers(m map[string]Member) []Member {
	f := newMuxFSM(fsm.New())
	f.members.Members = m
	return f.memberList()
}

// sortedKeysOf lists "<task>/<peer>" keys ordered by task id then peer,
// as State.MarkKeys lists them.
func sortedKeysOf(m map[string]bool) []string {
	type key struct {
		task uint64
		peer string
	}
	var ks []key
	for k := range m {
		var kk key
		fmt.Sscanf(k, "%d/%s", &kk.task, &kk.peer)
		ks = append(ks, kk)
	}
	sort.Slice(ks, func(i, j int) bool {
		return ks[i].task < ks[j].task || (ks[i].task == ks[j].task && ks[i].peer < ks[j].peer)
	})
	var out []string
	for _, k := range ks {
		out = append(out, fmt.Sprintf("%d/%s", k.task, k.peer))
	}
	return out
}

func withoutKeys(t *testing.T, snap []byte, keys ...string) map[string]any {
	t.Helper()
	const magic = "quarry-fsm\n"
	var m map[string]any
	if err := json.Unmarshal(snap[len(magic):], &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		delete(m, k)
	}
	return m
}

// TestRollingUpgrade runs a group of three managers of two builds in one
// process: the "old" build supports cluster version 1 (an FSM that panics
// on the newer command types, as a build without them does), the new
// build fsm.Version, whose extra command types include MarkFixup (version
// 2; version 3 adds binary snapshots, which the old build never gets). The
// managers are upgraded one at a time (stopped, restarted on their data
// directory with the new build). While any member runs the old build the
// cluster version stays put, the new command is refused with
// ErrClusterVersion (HTTP 409 cluster_version) and marks travel in the old
// format; an old follower never meets a command it does not know (its FSM
// would panic and fail the test binary). Once every member runs the new
// build the leader raises the cluster version and the command is accepted;
// an old build can no longer join; every manager ends with the same state.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("three managers restarted one at a time")
	}
	old := 1
	clock := newFakeClock() // fixed: no peer is declared Down, no task times out
	g := newGroup(t, 3, func(c *Config) { c.fsmVersion = old; c.Now = clock.Now })

	// A task to mark: two peers, a warm bucket, a make-searchable task.
	at := clock.Now()
	for _, p := range []string{"p1", "p2"} {
		g.apply(&fsm.RegisterPeer{ID: p, GUID: "g" + p, Site: fsm.DefaultSite, At: at})
	}
	b := fsm.BucketID("main", "1", "gp1")
	g.apply(&fsm.AddBucket{ID: b, Index: "main", Origin: "p1", Targets: []fsm.CopySpec{{Peer: "p2"}}})
	g.apply(&fsm.RollBucket{Bucket: b, Latest: 1, Blocks: 1, LastChecksum: "c"})
	task := makeSearchableTask(t, g, b, "p2", at)

	// markOn marks task for peer through the leader's mark path and waits
	// until every manager holds it.
	markOn := func(peer string) {
		t.Helper()
		testutil.WaitFor(t, 15*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return g.leader().mark(ctx, fsm.MarkDelivered, task, peer)
		})
		g.eventually(10*time.Second, func(id string, m *Manager) error {
			if !m.mux.marked(fsm.MarkDelivered, task, peer) {
				return fmt.Errorf("no mark of task %d for %s", task, peer)
			}
			return nil
		})
	}
	// refused checks the group refuses MarkFixup: the cluster version is
	// still old after the leader has seen every member's entry and ticked.
	refused := func() {
		t.Helper()
		l := g.leader()
		_, _, _, ticks := l.LeaderState()
		testutil.WaitFor(t, 10*time.Second, func() error {
			if _, _, _, n := l.LeaderState(); n < ticks+5 {
				return fmt.Errorf("leader ticked %d times, want 5", n-ticks)
			}
			return nil
		})
		g.eventually(time.Second, func(id string, m *Manager) error {
			if v := m.ClusterVersion(); v != old {
				return fmt.Errorf("cluster version %d with an old build in the group, want %d", v, old)
			}
			return nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := l.Apply(ctx, &fsm.MarkFixup{Task: task, Peer: "p1", Kind: fsm.MarkDelivered})
		if !errors.Is(err, fsm.ErrClusterVersion) {
			t.Fatalf("MarkFixup with an old build in the group: %v, want ErrClusterVersion", err)
		}
		if ae := toAPIError(err); ae.Status != http.StatusConflict || ae.Code != "cluster_version" {
			t.Fatalf("error answer %d %s, want 409 cluster_version", ae.Status, ae.Code)
		}
	}

	refused()
	markOn("p2") // the old format: every build applies it

	// Upgrade one at a time, followers first, the leader last.
	first := g.leader().cfg.ID
	order := []string{}
	for _, id := range []string{"m1", "m2", "m3"} {
		if id != first {
			order = append(order, id)
		}
	}
	order = append(order, first)
	for i, id := range order {
		cfg := g.cfgs[id]
		g.kill(id)
		cfg.Bootstrap, cfg.Join, cfg.fsmVersion = nil, "", 0
		g.ms[id], g.cfgs[id] = mustNewManager(t, cfg), cfg
		// Every manager's table shows the restarted one's new build.
		g.eventually(15*time.Second, func(_ string, m *Manager) error {
			if mem, ok := m.mux.member(id); !ok || mem.supports() != fsm.Version {
				return fmt.Errorf("member table says %s supports %d, want %d", id, mem.supports(), fsm.Version)
			}
			return nil
		})
		if i < len(order)-1 {
			refused()
			markOn(fmt.Sprintf("p-after-%s", id))
		}
	}

	// Every member runs the new build: the leader raises the version.
	g.eventually(15*time.Second, func(_ string, m *Manager) error {
		if v := m.ClusterVersion(); v != fsm.Version {
			return fmt.Errorf("cluster version %d, want %d", v, fsm.Version)
		}
		return nil
	})
	var res any
	testutil.WaitFor(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		res, err = g.leader().Apply(ctx, &fsm.MarkFixup{Task: task, Peer: "p1", Kind: fsm.MarkDelivered})
		if errors.Is(err, ErrNotLeader) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if err != nil {
			t.Fatalf("MarkFixup once every manager is new: %v", err)
		}
		return nil
	})
	if _, ok := res.(fsm.Result); !ok {
		t.Fatalf("MarkFixup answered %v", res)
	}
	markOn("p9")

	// An old build can no longer join: its FSM would meet MarkFixup.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := g.leader().addMember(ctx, JoinRequest{ID: "m4", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2", Version: old})
	if !errors.Is(err, fsm.ErrClusterVersion) {
		t.Fatalf("join of an old build: %v, want ErrClusterVersion", err)
	}
	if v := g.leader().Managers(); v.ClusterVersion != fsm.Version || len(v.Managers) != 3 {
		t.Fatalf("managers view %+v", v)
	}

	// The log, as each manager stored it: old-format marks only before the
	// version change, which is there once, new-format ones only after it.
	for id, m := range g.ms {
		first, _ := m.node.store.FirstIndex()
		last, _ := m.node.store.LastIndex()
		var raised uint64
		legacy, marks := 0, 0
		for i := first; i <= last && first > 0; i++ {
			var l raft.Log
			if err := m.node.store.GetLog(i, &l); err != nil {
				t.Fatalf("%s: log %d: %v", id, i, err)
			}
			if l.Type != raft.LogCommand || len(l.Data) == 0 {
				continue
			}
			switch {
			case bytes.Equal(l.Extensions, memberExtension):
				var c memberCommand
				json.Unmarshal(l.Data, &c)
				if c.Op == fsm.MarkDelivered {
					legacy++
					if raised != 0 {
						t.Fatalf("%s: old-format mark at %d after the version change at %d", id, i, raised)
					}
				}
			case fsm.CommandType(l.Data[0]) == fsm.CmdSetClusterVersion:
				if raised != 0 {
					t.Fatalf("%s: a second SetClusterVersion at %d (first at %d)", id, i, raised)
				}
				raised = i
			case fsm.CommandType(l.Data[0]) == fsm.CmdMarkFixup:
				marks++
				if raised == 0 {
					t.Fatalf("%s: MarkFixup at %d before the version change", id, i)
				}
			}
		}
		if raised == 0 || legacy < 3 || marks < 2 {
			t.Fatalf("%s: log %d..%d: version change at %d, %d old-format marks, %d MarkFixup", id, first, last, raised, legacy, marks)
		}
	}

	// Every manager applied the log to the same state.
	g.eventually(15*time.Second, func(_ string, m *Manager) error {
		var want StateHash
		for _, o := range g.ms {
			h, err := o.StateHash()
			if err != nil {
				return err
			}
			if want.Hash == "" {
				want = h
			} else if h.Applied != want.Applied || h.Hash != want.Hash {
				return fmt.Errorf("state %s at %d on %s, %s at %d on %s", h.Hash, h.Applied, h.ID, want.Hash, want.Applied, want.ID)
			}
		}
		return nil
	})
}

// TestJoinOlderLeader: a leader of a build before cluster versions decodes
// the join body with unknown fields disallowed; the joining manager sends
// it again without its version, and that leader records it.
func TestJoinOlderLeader(t *testing.T) {
	type oldJoinRequest struct {
		ID       string `json:"id"`
		Site     string `json:"site,omitempty"`
		RaftAddr string `json:"raft_addr"`
		HTTPAddr string `json:"http_addr"`
	}
	var got []oldJoinRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req oldJoinRequest
		if err := decodeBody(r, &req, false); err != nil {
			writeError(w, toAPIError(err))
			return
		}
		got = append(got, req)
		writeJSON(w, http.StatusOK, ManagersView{})
	}))
	defer srv.Close()
	m := &Manager{cfg: Config{AdminToken: testToken}}
	jr := JoinRequest{ID: "m2", RaftAddr: "127.0.0.1:7002", HTTPAddr: "127.0.0.1:8002", Version: fsm.Version}
	if err := m.postJoin(context.Background(), srv.URL+"/v1/managers/join", jr); err != nil {
		t.Fatalf("join through an older leader: %v", err)
	}
	if len(got) != 1 || got[0].ID != "m2" {
		t.Fatalf("older leader recorded %+v", got)
	}
}

// makeSearchableTask opens a make_searchable task for bucket b on target
// through the leader and returns its id; the leader's planner may open the
// same task first (the copy is not searchable), and then that is the task.
func makeSearchableTask(t *testing.T, g *group, b, target string, at time.Time) uint64 {
	t.Helper()
	var task uint64
	testutil.WaitFor(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := g.leader().Apply(ctx, &fsm.CreateFixup{Kind: fsm.TaskMakeSearchable, Level: fsm.LevelSearch, Bucket: b, Target: target, Reason: "test", At: at})
		if err == nil {
			task = r.(fsm.Result).Index
			return nil
		}
		if !errors.Is(err, fsm.ErrTaskExists) {
			return err
		}
		g.leader().Read(func(s *fsm.State) {
			for _, tk := range s.Tasks() {
				if tk.Bucket == b && tk.Kind == fsm.TaskMakeSearchable && tk.Target == target {
					task = tk.ID
				}
			}
		})
		if task == 0 {
			return fmt.Errorf("the task exists but was not found")
		}
		return nil
	})
	return task
}

// TestTokenKeyWaitsForTheClusterVersion: while a manager of the build
// before fsm.TokenKeyVersion is in the group, the leader proposes no token
// key (a SetTokenKey is refused with ErrClusterVersion) and peers get the
// unkeyed digests they can check; once every manager runs the new build
// the leader draws one key, every manager holds the same, and the peers'
// config turns keyed with the key in it (review L1).
func TestTokenKeyWaitsForTheClusterVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("three managers restarted one at a time")
	}
	old := fsm.TokenKeyVersion - 1
	g := newGroup(t, 3, func(c *Config) { c.fsmVersion = old })
	cfg := configOf(g.leader())
	cfg.HECTokens = []fsm.HECToken{{Token: "hec-secret-0001", Ack: true}}
	g.apply(&fsm.SetConfig{Config: cfg})
	l := g.leader()
	_, _, _, ticks := l.LeaderState()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if _, _, _, n := l.LeaderState(); n < ticks+5 {
			return fmt.Errorf("leader ticked %d times, want 5", n-ticks)
		}
		return nil
	})
	var pc api.PeerConfig
	l.Read(func(s *fsm.State) {
		if fsm.TokenKeyOf(s) != nil {
			t.Fatal("a token key below the cluster version")
		}
		pc = l.peerConfigFor(s, true)
	})
	if pc.TokenKey != nil || pc.HECTokens[0].Token != fsm.TokenDigest("hec-secret-0001") || pc.AdminTokenDigest != fsm.TokenDigest(testToken) {
		t.Fatalf("peer config below the version: %+v", pc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.Apply(ctx, &fsm.SetTokenKey{Key: make([]byte, fsm.TokenKeySize)}); !errors.Is(err, fsm.ErrClusterVersion) {
		t.Fatalf("SetTokenKey below the version: %v, want ErrClusterVersion", err)
	}

	for _, id := range []string{"m1", "m2", "m3"} {
		cfg := g.cfgs[id]
		g.kill(id)
		cfg.Bootstrap, cfg.Join, cfg.fsmVersion = nil, "", 0
		g.ms[id], g.cfgs[id] = mustNewManager(t, cfg), cfg
	}
	var key []byte
	g.eventually(30*time.Second, func(id string, m *Manager) error {
		var k []byte
		m.Read(func(s *fsm.State) { k = fsm.TokenKeyOf(s) })
		switch {
		case k == nil:
			return fmt.Errorf("%s: no token key yet (cluster version %d)", id, m.ClusterVersion())
		case key == nil:
			key = k
		case !bytes.Equal(k, key):
			t.Fatalf("%s holds another token key", id)
		}
		return nil
	})
	l = g.leader()
	l.Read(func(s *fsm.State) { pc = l.peerConfigFor(s, true) })
	if !bytes.Equal(pc.TokenKey, key) || pc.HECTokens[0].Token != fsm.KeyedDigest(key, "hec-secret-0001") || pc.AdminTokenDigest != fsm.KeyedDigest(key, testToken) {
		t.Fatalf("peer config once keyed: %+v", pc)
	}
}
