package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

const testToken = "admin-secret"

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done && testing.Verbose() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// fakeClock is a settable clock for the leader loops.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testConfig is a manager config on loopback with OS-chosen ports.
func testConfig(t testing.TB, id, dir string) Config {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	seed := fsm.DefaultConfig()
	seed.HeartbeatTimeout = 2 * time.Second
	return Config{
		ID: id, Site: "site1", DataDir: dir,
		RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		AdminToken:   testToken,
		Seed:         &seed,
		RaftLogLevel: "warn",
		LogOutput:    w,
		Logger:       slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})),
		JoinTimeout:  20 * time.Second,
		LoopInterval: 50 * time.Millisecond,
		// In-process groups share one race-instrumented process on a busy
		// machine: relaxed Raft timeouts keep leadership from flapping.
		RaftHeartbeatTimeout:   time.Second,
		RaftElectionTimeout:    time.Second,
		RaftLeaderLeaseTimeout: time.Second,
	}
}

// mustNewManager starts a manager and closes it at the end of the test.
func mustNewManager(t testing.TB, cfg Config) *Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("start manager %s: %v", cfg.ID, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// group is an in-process group of managers.
type group struct {
	t    testing.TB
	ms   map[string]*Manager
	dirs map[string]string
	cfgs map[string]Config
}

// newGroup starts n managers: m1 bootstraps alone, the others join through
// m1's HTTP address; it waits until every one is a voter with its address
// in the member table and the bootstrap config is committed.
func newGroup(t testing.TB, n int, tweak func(*Config)) *group {
	t.Helper()
	g := &group{t: t, ms: map[string]*Manager{}, dirs: map[string]string{}, cfgs: map[string]Config{}}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("m%d", i)
		dir := t.TempDir()
		cfg := testConfig(t, id, dir)
		if i == 1 {
			cfg.Bootstrap = []Server{{ID: id, RaftAddr: "127.0.0.1:0"}}
		} else {
			cfg.Join = "http://" + g.ms["m1"].HTTPAddr()
			cfg.Seed = nil
		}
		if tweak != nil {
			tweak(&cfg)
		}
		if i == 1 {
			g.ms[id] = mustNewManager(t, cfg)
			testutil.WaitFor(t, 10*time.Second, func() error {
				if !g.ms[id].IsLeader() {
					return fmt.Errorf("m1 not leader yet")
				}
				return nil
			})
		} else {
			g.ms[id] = mustNewManager(t, cfg)
		}
		cfg.RaftAddr, cfg.HTTPAddr = g.ms[id].RaftAddr(), g.ms[id].HTTPAddr()
		g.dirs[id], g.cfgs[id] = dir, cfg
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		for id, m := range g.ms {
			if len(m.Members()) != n {
				return fmt.Errorf("%s knows %d members, want %d", id, len(m.Members()), n)
			}
		}
		return nil
	})
	return g
}

// leader waits for a leader among the running managers whose leader loops
// run, and returns it.
func (g *group) leader() *Manager {
	g.t.Helper()
	var l *Manager
	testutil.WaitFor(g.t, 10*time.Second, func() error {
		l = nil
		for _, m := range g.ms {
			if active, _, _, _ := m.LeaderState(); active && m.IsLeader() {
				l = m
			}
		}
		if l == nil {
			return fmt.Errorf("no leader with running loops")
		}
		return nil
	})
	return l
}

// kill stops a manager (Close, as a crash would leave its files) and
// forgets it.
func (g *group) kill(id string) {
	g.ms[id].Close()
	delete(g.ms, id)
}

// restart starts a stopped manager again from its data directory, with no
// bootstrap or join (the data directory says everything).
// It keeps its addresses (its peers know them), which the OS may have
// handed to another process's socket since it stopped (`go test ./...`
// runs packages side by side): a start refused for an address in use is
// tried again until the address is free, for at most 20 s.
func (g *group) restart(id string) *Manager {
	g.t.Helper()
	cfg := g.cfgs[id]
	cfg.Bootstrap, cfg.Join = nil, ""
	var m *Manager
	testutil.WaitFor(g.t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		m, err = New(ctx, cfg)
		if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
			g.t.Fatalf("start manager %s: %v", id, err)
		}
		return err
	})
	g.t.Cleanup(func() { m.Close() })
	g.ms[id] = m
	return m
}

// applyAll waits until every running manager satisfies check.
func (g *group) eventually(d time.Duration, check func(id string, m *Manager) error) {
	g.t.Helper()
	testutil.WaitFor(g.t, d, func() error {
		for id, m := range g.ms {
			if err := check(id, m); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
		}
		return nil
	})
}

func maintenanceOf(m *Manager) bool {
	var on bool
	m.Read(func(s *fsm.State) { on = s.Maintenance() })
	return on
}

// post sends a POST with an optional token and returns status and body.
func post(t testing.TB, client *http.Client, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// noRedirect is an HTTP client that reports redirects instead of following.
var noRedirect = &http.Client{
	Timeout:       5 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// apply proposes c through the current leader, retrying on a lost
// leadership (an election under load) until d passes.
func (g *group) apply(c fsm.Command) any {
	g.t.Helper()
	var res any
	testutil.WaitFor(g.t, 15*time.Second, func() error {
		l := g.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := l.Apply(ctx, c)
		if err != nil && (errors.Is(err, ErrNotLeader) || errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
		if err != nil {
			g.t.Fatalf("apply %T: %v", c, err)
		}
		res = r
		return nil
	})
	return res
}
