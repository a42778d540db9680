package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// The quarry binary, built once per test process on first use (cliBinary)
// and removed by TestMain.
var (
	cliOnce sync.Once
	cliDir  string
	cliPath string
	cliErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cliDir != "" {
		os.RemoveAll(cliDir)
	}
	os.Exit(code)
}

// cliBinary builds ./cmd/quarry from the module root (go env GOMOD) once.
func cliBinary(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
		if err != nil {
			cliErr = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(gomod)))
		if cliDir, err = os.MkdirTemp("", "quarry-cli-test-"); err != nil {
			cliErr = err
			return
		}
		bin := filepath.Join(cliDir, "quarry")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/quarry")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build ./cmd/quarry: %v\n%s", err, out)
			return
		}
		cliPath = bin
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

// cliResult is one run of the binary.
type cliResult struct {
	Code           int
	Stdout, Stderr string
}

// runCLI runs `quarry args…` with a 20 s timeout; the QUARRY_* environment
// of the test process is dropped so only the given flags count.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBinary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUARRY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.Code = ee.ExitCode()
	default:
		t.Fatalf("quarry %s: %v (stderr %q)", strings.Join(args, " "), err, res.Stderr)
	}
	return res
}

// mustCLI runs the binary and fails the test on a non-zero exit.
func mustCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	r := runCLI(t, args...)
	if r.Code != 0 {
		t.Fatalf("quarry %s: exit %d, stderr %q", strings.Join(args, " "), r.Code, r.Stderr)
	}
	return r
}

func cliPeerState(c *Cluster, id string) fsm.PeerState {
	var p fsm.Peer
	c.State(func(s *fsm.State) { p, _ = s.Peer(id) })
	return p.State
}

// cliPrimariesCheck: every bucket has exactly one primary in each site's
// table and in site0's, held by a peer with a copy of it.
func cliPrimariesCheck(c *Cluster) error {
	var bs []fsm.BucketView
	c.State(func(s *fsm.State) { bs = s.BucketList("", "") })
	if len(bs) == 0 {
		return errors.New("no buckets")
	}
	for _, b := range bs {
		holders := map[string]bool{}
		for _, cp := range b.Copies {
			holders[cp.Peer] = true
		}
		for _, table := range append(append([]string(nil), c.Opts.Sites...), fsm.Site0) {
			p, ok := b.Primary[table]
			if !ok || p == "" {
				return fmt.Errorf("%s has no primary in %s (primaries %v)", b.ID, table, b.Primary)
			}
			if !holders[p] {
				return fmt.Errorf("%s: primary of %s is %s, which holds no copy", b.ID, table, p)
			}
		}
		if len(b.Primary) != len(c.Opts.Sites)+1 {
			return fmt.Errorf("%s has primaries %v, want one per site and site0", b.ID, b.Primary)
		}
	}
	return nil
}

// cliPrimaryCounts counts primaries per peer in each table (sites, site0).
func cliPrimaryCounts(c *Cluster) map[string]map[string]int {
	out := map[string]map[string]int{}
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			for table, p := range b.Primary {
				if out[table] == nil {
					out[table] = map[string]int{}
				}
				out[table][p]++
			}
		}
	})
	return out
}

func maxOf(m map[string]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}

func sumOf(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestCLIAdminOperations drives the admin commands of issue 5 through the
// real `quarry` binary against a running harness cluster: cluster status
// (JSON names the leader), peers list and buckets list (what the state
// holds), a write without --token refused with one line,
// maintenance enable/status/disable, rebalance primaries, peer offline
// --enforce-counts (Decommissioning, then Removed with RF/SF met) and plain
// peer offline (primaries moved away, cluster valid). It covers the
// README's admin block ("Any manager answers reads …"): cluster status,
// peers list, buckets list, maintenance, rebalance primaries and peer
// offline; that block's search and health lines are covered by
// TestCLISearchHead, ingest by TestReadmeBlocks and TestReadmeSmallCluster,
// sample by make demo, /v1/state/hash by the e2e pause scenario.
func TestCLIAdminOperations(t *testing.T) {
	cliBinary(t) // before the cluster, so the build is not timed against it
	c := Start(t, Options{MaxHotBytes: 64 << 10})
	mgr := "--manager=" + strings.Join(c.ManagerURLs(), ",")
	tok := "--token=" + AdminToken
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Origins in both sites; the peer decommissioned below is one of them,
	// so it holds hot buckets that must roll before it can go.
	leaving := "site1-p3"
	for _, origin := range []string{"site1-p1", leaving, "site2-p1"} {
		if _, un, err := c.IngestAcked(ctx, origin, Batches(origin, 1500, 150), 30*time.Second); err != nil || len(un) > 0 {
			t.Fatalf("ingest on %s: %v, %d unacked", origin, err, len(un))
		}
	}

	// cluster status --output json parses and names the leader.
	var st struct {
		fsm.Status
		Managers []struct {
			ID     string `json:"id"`
			Leader bool   `json:"leader"`
		} `json:"managers"`
	}
	r := mustCLI(t, "cluster", "status", mgr, "--output", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("cluster status JSON: %v\n%s", err, r.Stdout)
	}
	if want := c.Leader().ID(); st.Leader != want {
		t.Errorf("cluster status leader %q, want %q", st.Leader, want)
	}
	leaders := 0
	for _, m := range st.Managers {
		if m.Leader {
			leaders++
		}
	}
	if len(st.Managers) != 3 || leaders != 1 {
		t.Errorf("cluster status managers %+v: want 3, one leader", st.Managers)
	}
	// peers list and buckets list, as scripts read them.
	var pl struct {
		Peers []fsm.PeerView `json:"peers"`
	}
	r = mustCLI(t, "peers", "list", mgr, "--output", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &pl); err != nil || len(pl.Peers) != len(c.PeerIDs()) {
		t.Errorf("peers list --output json: %d peers (%v), want %d:\n%s", len(pl.Peers), err, len(c.PeerIDs()), r.Stdout)
	}
	var nb int
	c.State(func(s *fsm.State) { nb = len(s.BucketList("", "")) })
	if r = mustCLI(t, "buckets", "list", mgr); strings.Count(r.Stdout, "main~") != nb {
		t.Errorf("buckets list shows %d buckets, the state holds %d:\n%s", strings.Count(r.Stdout, "main~"), nb, r.Stdout)
	}

	// A write without --token: non-zero exit, one clear line, no change.
	r = runCLI(t, "maintenance", "enable", mgr)
	if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); r.Code == 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "quarry: maintenance:") {
		t.Errorf("maintenance enable without token: exit %d, stderr %q; want non-zero and one `quarry: maintenance: …` line", r.Code, r.Stderr)
	} else {
		t.Logf("without token: %s", lines[0])
	}
	var on bool
	c.State(func(s *fsm.State) { on = s.Maintenance() })
	if on {
		t.Fatal("maintenance turned on by a write without token")
	}

	// 1. maintenance status / enable / disable.
	maint := func() bool {
		t.Helper()
		var v struct {
			Maintenance *bool `json:"maintenance"`
		}
		r := mustCLI(t, "maintenance", "status", mgr, "--output", "json")
		if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil || v.Maintenance == nil {
			t.Fatalf("maintenance status JSON %q: %v", r.Stdout, err)
		}
		return *v.Maintenance
	}
	if maint() {
		t.Fatal("maintenance status: enabled at start")
	}
	mustCLI(t, "maintenance", "enable", mgr, tok)
	if !maint() {
		t.Error("maintenance status: disabled after enable")
	}
	c.State(func(s *fsm.State) { on = s.Maintenance() })
	if !on {
		t.Error("FSM: maintenance off after `maintenance enable`")
	}
	mustCLI(t, "maintenance", "disable", mgr, tok)
	if maint() {
		t.Error("maintenance status: enabled after disable")
	}
	c.State(func(s *fsm.State) { on = s.Maintenance() })
	if on {
		t.Error("FSM: maintenance on after `maintenance disable`")
	}

	// 2. rebalance primaries: the cluster stays valid, one primary per
	// site and site0 for every bucket.
	before := cliPrimaryCounts(c)
	mustCLI(t, "rebalance", "primaries", mgr, tok)
	c.WaitFor(20*time.Second, func() error {
		var v struct {
			Valid *bool `json:"valid"`
		}
		r := mustCLI(t, "cluster", "status", mgr, "--output", "json")
		if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil || v.Valid == nil {
			return fmt.Errorf("status JSON %q: %v", r.Stdout, err)
		}
		if !*v.Valid {
			return errors.New("cluster not valid after rebalance")
		}
		return cliPrimariesCheck(c)
	})
	after := cliPrimaryCounts(c)
	for table, n := range before {
		// Every move of the rebalance lowers the spread: no peer ends with
		// more primaries than the most loaded one had.
		if maxOf(after[table]) > maxOf(n) || sumOf(after[table]) != sumOf(n) {
			t.Errorf("rebalance of %s: primaries per peer %v, before %v", table, after[table], n)
		}
	}
	t.Logf("primaries per peer before rebalance %v, after %v", before, after)

	// 4. peer offline --enforce-counts (the flag after the id, as SPEC §8
	// writes it): Decommissioning, and Removed only with RF/SF met.
	mustCLI(t, "peer", "offline", leaving, "--enforce-counts", mgr, tok)
	if s := cliPeerState(c, leaving); s != fsm.StateDecommissioning {
		t.Fatalf("%s is %s after offline --enforce-counts, want Decommissioning (it origins hot buckets)", leaving, s)
	}
	// Hot buckets replicating to it must roll before their copies can move
	// (the origins do not do it on their own yet; as cluster_offline_test).
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			p.Store().RollAll()
		}
	}
	c.WaitFor(120*time.Second, func() error {
		var (
			p      fsm.Peer
			status fsm.Status
		)
		c.State(func(s *fsm.State) { p, _ = s.Peer(leaving); status = s.Status() })
		switch p.State {
		case fsm.StateDecommissioning:
			return fmt.Errorf("%s still Decommissioning (%d fixups: %+v)", leaving, len(status.Fixups), status.Fixups)
		case fsm.StateRemoved:
			if !status.ReplicationFactorMet || !status.SearchFactorMet {
				t.Fatalf("%s removed while RF met %v, SF met %v", leaving, status.ReplicationFactorMet, status.SearchFactorMet)
			}
		default:
			t.Fatalf("%s is %s during decommission", leaving, p.State)
		}
		select {
		case <-c.Peer(leaving).TakenOffline():
			return nil
		default:
			return fmt.Errorf("%s removed but still running", leaving)
		}
	})
	t.Logf("%s decommissioned and removed with RF and SF met", leaving)
	c.KillPeer(leaving)
	var bs []fsm.BucketView
	c.State(func(s *fsm.State) { bs = s.BucketList("", leaving) })
	if len(bs) != 0 {
		t.Errorf("removed %s still holds %d copies in the FSM", leaving, len(bs))
	}

	// 3. plain peer offline of a peer holding primaries: it stops, holds
	// no primary, the cluster stays valid.
	var victim string
	c.WaitFor(20*time.Second, func() error {
		var status fsm.Status
		c.State(func(s *fsm.State) { status = s.Status() })
		for _, p := range status.Peers {
			if p.Site == "site2" && p.State == fsm.StateUp && p.Primaries > 0 {
				victim = p.ID
				return nil
			}
		}
		return errors.New("no Up site2 peer holds primaries")
	})
	mustCLI(t, "peer", "offline", victim, mgr, tok)
	c.WaitFor(30*time.Second, func() error {
		if s := cliPeerState(c, victim); s != fsm.StateRestarting {
			return fmt.Errorf("%s is %s", victim, s)
		}
		select {
		case <-c.Peer(victim).TakenOffline():
		default:
			return fmt.Errorf("%s still running", victim)
		}
		var status fsm.Status
		c.State(func(s *fsm.State) { status = s.Status() })
		if !status.Valid {
			return errors.New("not valid")
		}
		for _, p := range status.Peers {
			if p.ID == victim && p.Primaries > 0 {
				return fmt.Errorf("%s still holds %d primaries", victim, p.Primaries)
			}
		}
		var held []string
		c.State(func(s *fsm.State) {
			for _, b := range s.BucketList("", "") {
				for table, p := range b.Primary {
					if p == victim {
						held = append(held, b.ID+"@"+table)
					}
				}
			}
		})
		if len(held) > 0 {
			return fmt.Errorf("%s still primary of %v", victim, held)
		}
		return nil
	})
	t.Logf("%s offline: stopped, its primaries moved, cluster valid", victim)
	c.KillPeer(victim)

	// Unknown peer: one clear line, non-zero exit.
	r = runCLI(t, "peer", "offline", "no-such-peer", mgr, tok)
	if r.Code == 0 || strings.TrimSpace(r.Stderr) != "quarry: peer offline no-such-peer: no such peer" {
		t.Errorf("offline of an unknown peer: exit %d, stderr %q", r.Code, r.Stderr)
	}
}
