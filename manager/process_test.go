package manager

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// The tests in this file run real `quarry manager` processes (the binary is
// built once per test run) on 127.0.0.1 with real BoltDB files.

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// quarryBin builds ./cmd/quarry once (without the race detector: it is the
// product under test, not the test) and returns its path.
func quarryBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "quarry-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "quarry")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/quarry-dev/quarry/cmd/quarry")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/quarry: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is one `quarry manager` process.
type proc struct {
	t        testing.TB
	id       string
	raftAddr string
	httpAddr string
	dir      string
	args     []string
	cmd      *exec.Cmd
	log      *os.File
	done     chan struct{}
}

type procGroup struct {
	t     testing.TB
	procs map[string]*proc
	ids   []string
}

// startProcGroup starts n managers bootstrapped together, extra flags added
// to each.
func startProcGroup(t testing.TB, n int, extra ...string) *procGroup {
	t.Helper()
	bin := quarryBin(t)
	g := &procGroup{t: t, procs: map[string]*proc{}}
	var boot []string
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("m%d", i)
		p := &proc{t: t, id: id, raftAddr: freePort(t), httpAddr: freePort(t), dir: t.TempDir()}
		g.procs[id] = p
		g.ids = append(g.ids, id)
		boot = append(boot, id+"="+p.raftAddr)
	}
	for _, id := range g.ids {
		p := g.procs[id]
		p.args = append([]string{"manager", "--id", id, "--site", "site1", "--data-dir", p.dir,
			"--raft-addr", p.raftAddr, "--http-addr", p.httpAddr, "--admin-token", testToken,
			"--bootstrap", strings.Join(boot, ","), "--log-level", "warn"}, extra...)
		p.cmd = nil
		p.start(bin)
	}
	t.Cleanup(func() {
		for _, p := range g.procs {
			p.kill()
		}
	})
	return g
}

func (p *proc) start(bin string) {
	p.t.Helper()
	f, err := os.OpenFile(filepath.Join(p.dir, "stderr.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.id, err)
	}
	p.cmd, p.log, p.done = cmd, f, make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		close(done)
	}(cmd, p.done)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.log.Close()
	p.cmd = nil
}

func (p *proc) url() string { return "http://" + p.httpAddr }

// logTail is the end of the process's log, for failure messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "stderr.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

var shortHTTP = &http.Client{Timeout: 2 * time.Second}

func getJSON(url string, out any) error {
	resp, err := shortHTTP.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeAPIError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (p *proc) status() (fsm.Status, error) {
	var st fsm.Status
	err := getJSON(p.url()+"/v1/status", &st)
	return st, err
}

// metric reads one unlabeled metric from /metrics.
func (p *proc) metric(name string) (float64, error) {
	resp, err := shortHTTP.Get(p.url() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// leader waits until every running manager (except those in skip) reports
// the same running leader, and returns it.
func (g *procGroup) leader(d time.Duration, skip ...string) *proc {
	g.t.Helper()
	var l *proc
	testutil.WaitFor(g.t, d, func() error {
		var err error
		l, err = g.currentLeader(skip...)
		return err
	})
	return l
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// currentLeader is the leader every running manager (but skip) agrees on.
func (g *procGroup) currentLeader(skip ...string) (*proc, error) {
	var l *proc
	for _, id := range g.ids {
		p := g.procs[id]
		if p.cmd == nil || contains(skip, id) {
			continue
		}
		st, err := p.status()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", id, err)
		}
		lp, ok := g.procs[st.Leader]
		if !ok || lp.cmd == nil || contains(skip, st.Leader) {
			return nil, fmt.Errorf("%s reports leader %q", id, st.Leader)
		}
		if l != nil && l != lp {
			return nil, fmt.Errorf("managers disagree on the leader: %s and %s", l.id, lp.id)
		}
		l = lp
	}
	if l == nil {
		return nil, errors.New("no manager running")
	}
	return l, nil
}

// eventually waits until check holds on every running manager.
func (g *procGroup) eventually(d time.Duration, check func(p *proc) error) {
	g.t.Helper()
	testutil.WaitFor(g.t, d, func() error {
		for _, id := range g.ids {
			p := g.procs[id]
			if p.cmd == nil {
				continue
			}
			if err := check(p); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
		}
		return nil
	})
}

func peerStates(p *proc) (map[string]fsm.PeerState, error) {
	var out struct {
		Peers []fsm.PeerView `json:"peers"`
	}
	if err := getJSON(p.url()+"/v1/peers", &out); err != nil {
		return nil, err
	}
	m := map[string]fsm.PeerState{}
	for _, pv := range out.Peers {
		m[pv.ID] = pv.State
	}
	return m, nil
}

// TestManagerProcesses is the manager group acceptance of issue 2, with
// three `quarry manager` processes.
func TestManagerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three manager processes; skipped with -short")
	}
	const hbTimeout = 8 * time.Second
	// The peers' protocol is NATS only (mgr.<op>.<peer>): one bus node in
	// the test process, without users, which the managers serve while
	// leader and the test's peers speak through mgrclient.
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	busSrv, err := bus.StartServer(bctx, bus.ServerConfig{Name: "n1", Site: fsm.DefaultSite, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	bcancel()
	if err != nil {
		t.Fatal(err)
	}
	defer busSrv.Shutdown()
	g := startProcGroup(t, 3, "--heartbeat-timeout", hbTimeout.String(),
		"--raft-snapshot-threshold", "64", "--raft-snapshot-interval", "200ms",
		"--hec-token", "tok1=main,web", "--index", "web", "--nats", busSrv.ClientURL())
	peerClient := func(pid string) *mgrclient.ManagerClient {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nc, err := bus.Connect(ctx, busSrv.ClientURL(), bus.ConnectOptions{Name: "peer " + pid, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c := mgrclient.NewManagerClient(nc, bus.Subjects{})
		c.Sender = pid
		return c
	}
	pcs := map[string]*mgrclient.ManagerClient{"p1": peerClient("p1"), "p2": peerClient("p2"), "p3": peerClient("p3")}
	bin := quarryBin(t)
	defer func() {
		if t.Failed() {
			for _, id := range g.ids {
				t.Logf("--- log of %s ---\n%s", id, g.procs[id].logTail())
			}
		}
	}()

	l := g.leader(20 * time.Second)
	// The bootstrap config was committed once and is the same everywhere.
	g.eventually(10*time.Second, func(p *proc) error {
		st, err := p.status()
		if err != nil {
			return err
		}
		if st.Config.HeartbeatTimeout != hbTimeout || len(st.Config.HECTokens) != 1 || !hasIndexConfig(st.Config.Indexes, "web") {
			return fmt.Errorf("config %+v: want the seed (heartbeat_timeout %v, token tok1, index web)", st.Config, hbTimeout)
		}
		return nil
	})
	var follower *proc
	for _, id := range g.ids {
		if g.procs[id] != l {
			follower = g.procs[id]
			break
		}
	}

	// A write without the admin token is refused, on the leader and on a
	// follower, and changes nothing.
	for _, p := range []*proc{l, follower} {
		code, body := post(t, noRedirect, p.url()+"/v1/maintenance", "", `{"enabled":true}`)
		if code != http.StatusUnauthorized || !strings.Contains(body, `"unauthorized"`) {
			t.Fatalf("%s: write without token: %d %s, want 401 unauthorized", p.id, code, body)
		}
	}
	// A write sent to a follower is redirected to the leader and succeeds.
	code, _ := post(t, noRedirect, follower.url()+"/v1/maintenance", testToken, `{"enabled":true}`)
	if code != http.StatusTemporaryRedirect {
		t.Fatalf("follower answered %d to a write, want 307", code)
	}
	fc, _ := NewClient([]string{follower.url()}, testToken, 5*time.Second)
	if err := fc.SetMaintenance(ctxT(t), true); err != nil {
		t.Fatalf("write through a follower: %v", err)
	}
	// Commands applied through the leader appear on all three.
	for _, pid := range []string{"p1", "p2", "p3"} {
		if _, err := pcs[pid].Register(ctxT(t), api.Register{Peer: pid, GUID: "guid-" + pid, Site: "default", Inventory: []api.Copy{}}); err != nil {
			t.Fatalf("register %s: %v", pid, err)
		}
	}
	g.eventually(10*time.Second, func(p *proc) error {
		st, err := p.status()
		if err != nil {
			return err
		}
		if !st.Maintenance || len(st.Peers) != 3 {
			return fmt.Errorf("maintenance %v, %d peers; want on and 3", st.Maintenance, len(st.Peers))
		}
		return nil
	})

	// A peer starting a hot bucket gets its targets, committed by the
	// leader: RF=3, SF=2 → two targets besides the origin, one of them
	// searchable.
	sb, err := pcs["p1"].Targets(ctxT(t), api.TargetsRequest{RequestID: "t1", Index: "main", LocalID: "1", Origin: "p1", Earliest: 1})
	if err != nil {
		t.Fatalf("start bucket: %v", err)
	}
	nSearch := 0
	var tpeers []string
	for _, tg := range sb.Targets {
		tpeers = append(tpeers, tg.Peer)
		if tg.Searchable {
			nSearch++
		}
	}
	sort.Strings(tpeers)
	if sb.Bucket != "main~1~guid-p1" || strings.Join(tpeers, ",") != "p2,p3" || nSearch != 1 || sb.Degraded {
		t.Fatalf("start bucket answered %+v; want main~1~guid-p1 on p2,p3, one searchable, not degraded", sb)
	}
	g.eventually(10*time.Second, func(p *proc) error {
		var out struct {
			Buckets []fsm.BucketView `json:"buckets"`
		}
		if err := getJSON(p.url()+"/v1/buckets?peer=p3", &out); err != nil {
			return err
		}
		if len(out.Buckets) != 1 || out.Buckets[0].ID != sb.Bucket || !out.Buckets[0].Hot || len(out.Buckets[0].Copies) != 3 {
			return fmt.Errorf("buckets on p3: %+v", out.Buckets)
		}
		return nil
	})
	out, err := exec.Command(bin, "buckets", "list", "--manager", follower.url()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), sb.Bucket) || !strings.Contains(string(out), "hot") || !strings.Contains(string(out), "site0=p1") {
		t.Fatalf("quarry buckets list: %v\n%s", err, out)
	}

	// `quarry cluster status` prints leader, generation, config, valid/complete.
	urls := []string{}
	for _, id := range g.ids {
		urls = append(urls, g.procs[id].url())
	}
	out, err = exec.Command(bin, "cluster", "status", "--manager", "http://127.0.0.1:1,"+strings.Join(urls, ",")).CombinedOutput()
	if err != nil {
		t.Fatalf("quarry cluster status: %v\n%s", err, out)
	}
	for _, want := range []string{"leader                  " + l.id, "generation", "config                  replication_factor=3 search_factor=2 heartbeat_timeout=8s", "valid ", "complete ", "maintenance             yes", "p1", "p2", "p3"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("cluster status output lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(bin, "cluster", "status", "--output", "json", "--manager", follower.url()).Output()
	if err != nil {
		t.Fatalf("quarry cluster status --output json: %v", err)
	}
	var js fsm.Status
	if err := json.Unmarshal(out, &js); err != nil || js.Leader != l.id || len(js.Peers) != 3 {
		t.Fatalf("cluster status json: %v %+v", err, js)
	}
	out, err = exec.Command(bin, "maintenance", "disable", "--manager", follower.url()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unauthorized") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Fatalf("maintenance disable without token: err %v, output %q; want a non-zero exit with one line", err, out)
	}

	// Heartbeats reach the leader; then they stop and the leader is killed.
	lastHB := time.Now()
	for _, pid := range []string{"p1", "p2", "p3"} {
		if _, err := pcs[pid].Heartbeat(ctxT(t), api.Heartbeat{Peer: pid, GUID: "guid-" + pid}); err != nil {
			t.Fatalf("heartbeat %s: %v", pid, err)
		}
	}
	before, _ := l.metric("quarry_manager_raft_applied_index")
	killedAt := time.Now()
	l.kill()
	old := l.id
	// Wait until a new leader's loop has run a few times in its term, then
	// look: a moment provably inside its grace period, since every
	// heartbeat is older than the kill and the grace lasts heartbeat_timeout
	// from its election, which came after the kill. (Under load leadership
	// may move again; any leader elected after the kill will do.)
	var nl *proc
	testutil.WaitFor(t, 20*time.Second, func() error {
		p, err := g.currentLeader(old)
		if err != nil {
			return err
		}
		n, err := p.metric("quarry_manager_leader_loop_term_ticks")
		if err != nil || n < 3 {
			return fmt.Errorf("%s: leader loop ticks in this term %v (%v)", p.id, n, err)
		}
		nl = p
		return nil
	})
	t.Logf("new leader %s running its loops %v after the SIGKILL", nl.id, time.Since(killedAt))
	states, err := peerStates(nl)
	observed := time.Since(lastHB)
	if err != nil {
		t.Fatal(err)
	}
	if observed >= hbTimeout {
		t.Fatalf("took %v to observe the new leader; cannot check the grace period inside heartbeat_timeout %v", observed, hbTimeout)
	}
	for _, pid := range []string{"p1", "p2", "p3"} {
		if states[pid] != fsm.StateUp {
			t.Fatalf("%s is %s %v after its last heartbeat, inside the new leader's grace: want Up", pid, states[pid], observed)
		}
	}
	// No committed state was lost.
	st, err := nl.status()
	if err != nil || !st.Maintenance || len(st.Peers) != 3 {
		t.Fatalf("new leader status %+v %v: committed state lost", st, err)
	}
	if after, _ := nl.metric("quarry_manager_raft_applied_index"); after < before {
		t.Fatalf("new leader applied index %v < old leader's %v", after, before)
	}

	// p1 keeps heartbeating to the new leader, p2 and p3 are silent: after
	// the grace and the timeout, p2 and p3 are Down and p1 is Up.
	var lastBeat time.Time
	testutil.WaitFor(t, 3*hbTimeout, func() error {
		if time.Since(lastBeat) > 300*time.Millisecond {
			if _, err := pcs["p1"].Heartbeat(ctxT(t), api.Heartbeat{Peer: "p1", GUID: "guid-p1"}); err != nil {
				return err
			}
			lastBeat = time.Now()
		}
		s, err := peerStates(nl)
		if err != nil {
			return err
		}
		if s["p2"] != fsm.StateDown || s["p3"] != fsm.StateDown {
			return fmt.Errorf("states %v: want p2 and p3 Down", s)
		}
		if s["p1"] != fsm.StateUp {
			return fmt.Errorf("p1 is %s though it heartbeats", s["p1"])
		}
		return nil
	})

	// The killed manager restarts from its data directory and catches up.
	g.procs[old].start(bin)
	g.eventually(15*time.Second, func(p *proc) error {
		s, err := peerStates(p)
		if err != nil {
			return err
		}
		if s["p2"] != fsm.StateDown {
			return fmt.Errorf("p2 is %s, want Down", s["p2"])
		}
		return nil
	})
	if l2 := g.leader(10 * time.Second); l2.id != nl.id {
		t.Logf("leadership moved to %s after the restart", l2.id)
	}

	// A manager that misses many entries catches up from a snapshot.
	l = g.leader(10 * time.Second)
	var lag *proc
	for _, id := range g.ids {
		if g.procs[id] != l {
			lag = g.procs[id]
			break
		}
	}
	lagAt, err := lag.metric("quarry_manager_raft_applied_index")
	if err != nil {
		t.Fatal(err)
	}
	lag.kill()
	lc, _ := NewClient([]string{l.url()}, testToken, 5*time.Second)
	for i := 0; i < 200; i++ {
		if err := lc.SetMaintenance(ctxT(t), i%2 == 1); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	want, err := l.metric("quarry_manager_raft_applied_index")
	if err != nil {
		t.Fatal(err)
	}
	// The leader snapshotted and dropped the entries the lagging manager
	// lacks: it can only catch up from a snapshot.
	testutil.WaitFor(t, 20*time.Second, func() error {
		first, err := l.metric("quarry_manager_raft_log_first_index")
		if err != nil || first <= lagAt+1 {
			return fmt.Errorf("leader log starts at %v, lagging manager has up to %v (%v)", first, lagAt, err)
		}
		return nil
	})
	lag.start(bin)
	testutil.WaitFor(t, 20*time.Second, func() error {
		n, err := lag.metric("quarry_manager_raft_applied_index")
		if err != nil || n < want {
			return fmt.Errorf("lagging manager applied %v, want ≥ %v (%v)", n, want, err)
		}
		return nil
	})
	if si, err := lag.metric("quarry_manager_raft_last_snapshot_index"); err != nil || si <= lagAt {
		t.Fatalf("lagging manager's last snapshot index %v (%v); want one installed from the leader past %v", si, err, lagAt)
	}
	g.eventually(10*time.Second, func(p *proc) error {
		st, err := p.status()
		if err != nil {
			return err
		}
		if !st.Maintenance {
			return errors.New("maintenance off; the last write turned it on")
		}
		return nil
	})
}

// TestManagerGracefulShutdown: SIGTERM stops a manager cleanly (exit 0)
// and it restarts from its data directory.
func TestManagerGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a manager process; skipped with -short")
	}
	g := startProcGroup(t, 1)
	p := g.leader(20 * time.Second)
	c, _ := NewClient([]string{p.url()}, testToken, 5*time.Second)
	if err := c.SetMaintenance(ctxT(t), true); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatal("manager did not exit within 15s of SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0\n%s", code, p.logTail())
	}
	p.log.Close()
	p.cmd = nil
	p.start(quarryBin(t))
	testutil.WaitFor(t, 20*time.Second, func() error {
		st, err := p.status()
		if err != nil || !st.Maintenance || st.Leader != p.id {
			return fmt.Errorf("after restart: leader %q maintenance %v (%v)", st.Leader, st.Maintenance, err)
		}
		return nil
	})
}

// TestMeasureFailover prints the time from SIGKILL of the leader to a new
// leader, 10 times, and the median, with the default config. Run it with
//
//	QUARRY_MEASURE=1 go test -run TestMeasureFailover -v ./manager/
func TestMeasureFailover(t *testing.T) {
	if os.Getenv("QUARRY_MEASURE") == "" {
		t.Skip("set QUARRY_MEASURE=1 to measure failover")
	}
	g := startProcGroup(t, 3)
	bin := quarryBin(t)
	var took []time.Duration
	for i := 0; i < 10; i++ {
		l := g.leader(30 * time.Second)
		// Every manager is caught up and following this leader.
		g.eventually(10*time.Second, func(p *proc) error {
			st, err := p.status()
			if err != nil || st.Leader != l.id {
				return fmt.Errorf("leader %q (%v)", st.Leader, err)
			}
			return nil
		})
		var survivors []*proc
		for _, id := range g.ids {
			if g.procs[id] != l {
				survivors = append(survivors, g.procs[id])
			}
		}
		t0 := time.Now()
		l.kill()
		var t1 time.Time
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for t1.IsZero() && ctx.Err() == nil {
			for _, p := range survivors {
				var h struct {
					Leader string `json:"leader"`
				}
				if getJSON(p.url()+"/healthz", &h) == nil && h.Leader != "" && h.Leader != l.id {
					t1 = time.Now()
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if t1.IsZero() {
			t.Fatalf("round %d: no new leader within 30s", i+1)
		}
		took = append(took, t1.Sub(t0))
		t.Logf("round %2d: killed %s, new leader after %v", i+1, l.id, t1.Sub(t0).Round(time.Millisecond))
		l.start(bin)
	}
	sorted := append([]time.Duration(nil), took...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	median := (sorted[4] + sorted[5]) / 2
	var figs []string
	for _, d := range took {
		figs = append(figs, d.Round(time.Millisecond).String())
	}
	fmt.Printf("failover (SIGKILL leader → new leader), 10 rounds: %s\nmedian %v, min %v, max %v\n",
		strings.Join(figs, " "), median.Round(time.Millisecond), sorted[0].Round(time.Millisecond), sorted[9].Round(time.Millisecond))
}

func hasIndexConfig(list []fsm.IndexConfig, name string) bool {
	for _, ix := range list {
		if ix.Name == name {
			return true
		}
	}
	return false
}

// `quarry manager` refuses a bad config at start with one clear line and a
// non-zero exit, before touching the data directory.
func TestManagerCommandRefusesBadConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := quarryBin(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"sf above rf", []string{"--search-factor", "4"}, "cluster config refused"},
		{"bad policy", []string{"--sites", "site1,site2", "--site-replication-factor", "origin:2"}, "--site-replication-factor"},
		{"unknown site in policy", []string{"--sites", "site1,site2", "--site-replication-factor", "origin:1,site3:1,total:3"}, "cluster config refused"},
		{"bad bootstrap", []string{"--bootstrap", "m1"}, "--bootstrap"},
		{"bad hec token", []string{"--hec-token", "tok=main,"}, "--hec-token"},
		{"no token", []string{"--admin-token", ""}, "admin-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"manager", "--id", "m1", "--data-dir", dir, "--admin-token", "T",
				"--raft-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tc.args...)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "QUARRY_ADMIN_TOKEN=")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("exit: %v, want non-zero; output %q", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("output %q: want one line mentioning %q", out, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("refused start created the data directory (%v)", err)
			}
		})
	}
}
