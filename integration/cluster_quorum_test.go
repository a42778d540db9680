//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
)

// TestClusterQuorumLossRecover (README "Quorum loss", first case): events
// ingested with acks; `quarry manager recover` is refused while the
// survivor runs (its data dir is locked) and while the two others still
// lead, leaving the data dir byte-identical; then two of the three managers
// are lost for good (data deleted), recover on the survivor's data dir
// writes peers.json, the survivor restarted with its usual config leads a
// one-member group holding every bucket it had, every acknowledged event is
// searchable exactly once, and a new manager joins the usual way.
func TestClusterQuorumLossRecover(t *testing.T) {
	cliBinary(t)
	c := Start(t, Options{MaxHotBytes: 16 << 10}) // small buckets: many of them
	raws := searchIngest(t, c, "ql", 6000)
	buckets := bucketOrigins(c)
	survivor, lost := "m1", []string{"m2", "m3"}
	dir, addr := c.ManagerDataDir(survivor), c.ManagerRaftAddr(survivor)
	recoverArgs := []string{"manager", "recover", "--id", survivor, "--data-dir", dir, "--members", survivor + "=" + addr, "--timeout", "1s"}

	// Refused while it runs (bolt lock), then while a leader is reachable.
	if r := runCLI(t, recoverArgs...); r.Code == 0 || !strings.Contains(r.Stderr, "in use by a running manager") {
		t.Fatalf("recover of a running manager's data dir: exit %d, stderr %q", r.Code, r.Stderr)
	}
	c.KillManager(survivor)
	before := treeDigest(t, dir)
	if r := runCLI(t, recoverArgs...); r.Code == 0 || !strings.Contains(r.Stderr, "a leader of the group is reachable") {
		t.Fatalf("recover while m2/m3 lead: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if after := treeDigest(t, dir); after != before {
		t.Fatalf("a refused recover changed the data dir:\n%s---\n%s", before, after)
	}

	// Two of three lost for good.
	for _, id := range lost {
		c.KillManager(id)
		if err := os.RemoveAll(c.ManagerDataDir(id)); err != nil {
			t.Fatal(err)
		}
	}
	r := mustCLI(t, recoverArgs...)
	if !strings.Contains(r.Stdout, "wrote "+filepath.Join(dir, "raft", "peers.json")) {
		t.Fatalf("recover output %q", r.Stdout)
	}
	start := time.Now()
	m := c.RestartManager(survivor)
	c.WaitFor(20*time.Second, func() error {
		if !m.IsLeader() {
			return fmt.Errorf("the recovered survivor does not lead")
		}
		return nil
	})
	t.Logf("%d buckets; recovered survivor leads %v after its restart", len(buckets), time.Since(start).Round(time.Millisecond))
	if cf := m.Raft().GetConfiguration(); cf.Error() != nil || len(cf.Configuration().Servers) != 1 {
		t.Fatalf("raft configuration after recovery: %+v %v, want the survivor alone", cf.Configuration(), cf.Error())
	}
	if got := bucketOrigins(c); !sameOrigins(got, buckets) {
		t.Fatalf("buckets after recovery %v, want %v", got, buckets)
	}
	c.WaitPeersUp(c.PeerIDs()...)
	waitComplete(t, c)
	searchExactlyOnce(t, c, raws)

	// A replacement manager joins the usual way (empty data dir, --join).
	cfg := c.mgrCfgs["m2"]
	cfg.RaftAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Join = "http://" + m.HTTPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	nm, err := manager.New(ctx, cfg)
	if err != nil {
		t.Fatalf("a new manager joining the recovered one: %v", err)
	}
	c.Mu.Lock()
	c.Managers["m2"] = nm
	c.Mu.Unlock()
	c.WaitFor(30*time.Second, func() error {
		cf := m.Raft().GetConfiguration()
		if err := cf.Error(); err != nil {
			return err
		}
		if n := len(cf.Configuration().Servers); n != 2 {
			return fmt.Errorf("%d voters, want 2", n)
		}
		if got := originsOf(nm); !sameOrigins(got, buckets) {
			return fmt.Errorf("the joined manager holds %d buckets, want %d", len(got), len(buckets))
		}
		return nil
	})
}

// TestClusterRebuildFromInventories (README "Quorum loss", second case):
// events ingested with acks (warm buckets, and hot ones at the loss), the
// last ones while a replica of a hot bucket is stopped, so its copy is
// short; every manager's data is lost and three fresh managers bootstrap;
// `quarry manager rebuild --expect-peers 6` is refused while that peer is
// away (nothing sealed); it comes back, the peers' inventories bring the
// bucket table back, every bucket with its origin; the rebuild seals the
// rebuilt buckets at their longest copy (at least one with a shorter copy,
// which fixup then fetches into); a second rebuild seals nothing; the
// cluster ends valid and complete with no fixup pending, and every
// acknowledged event is searchable exactly once.
func TestClusterRebuildFromInventories(t *testing.T) {
	cliBinary(t)
	c := Start(t, Options{MaxHotBytes: 16 << 10}) // small buckets: many of them
	raws := searchIngest(t, c, "rb", 6000)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, origin := range []string{"site1-p2", "site2-p2"} {
		acked, un, err := c.IngestAcked(ctx, origin, Batches("hot"+origin, 600, 100), 30*time.Second)
		if err != nil || len(un) > 0 {
			t.Fatalf("ingest on %s: %v, %d unacked", origin, err, len(un))
		}
		for _, a := range acked {
			raws = append(raws, a.Raws...)
		}
	}
	// A replica of site1-p2's hot bucket stops; the origin goes on with
	// acks (the failing target leaves the set, the bucket rolls), so that
	// replica's copy is shorter than the others when the managers go.
	origin, short := "site1-p2", ""
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			if b.Hot && b.Origin == origin {
				for _, cp := range b.Copies {
					if cp.Peer != origin && short == "" {
						short = cp.Peer
					}
				}
			}
		}
	})
	if short == "" {
		t.Fatalf("%s has no hot bucket with a replica", origin)
	}
	c.StopPeer(short)
	acked, un, err := c.IngestAcked(ctx, origin, Batches("short", 300, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest on %s with %s stopped: %v, %d unacked", origin, short, err, len(un))
	}
	for _, a := range acked {
		raws = append(raws, a.Raws...)
	}
	buckets := bucketOrigins(c)
	hot := 0
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			if b.Hot {
				hot++
			}
		}
	})
	t.Logf("%d buckets before the loss, %d hot; %s stopped with a short copy", len(buckets), hot, short)

	start := time.Now()
	c.ReplaceManagers()
	var back []string
	for _, id := range c.PeerIDs() {
		if id != short {
			back = append(back, id)
		}
	}
	c.WaitPeersUp(back...)
	mgr := "--manager=" + strings.Join(c.ManagerURLs(), ",")
	tok := "--token=" + AdminToken
	r := runCLI(t, "manager", "rebuild", mgr, tok, "--expect-peers", "6")
	if r.Code == 0 || !strings.Contains(r.Stderr, "peers_missing") {
		t.Fatalf("rebuild expecting 6 peers with 5 back: exit %d, stderr %q", r.Code, r.Stderr)
	}
	c.StartPeer(short)
	c.WaitPeersUp(c.PeerIDs()...)
	c.WaitFor(30*time.Second, func() error {
		if got := bucketOrigins(c); !sameOrigins(got, buckets) {
			return fmt.Errorf("rebuilt table %d buckets %v, want %d %v", len(got), got, len(buckets), buckets)
		}
		return nil
	})
	t.Logf("bucket table back from the inventories %v after the fresh managers started", time.Since(start).Round(time.Millisecond))
	var pending bool
	c.State(func(s *fsm.State) { pending = len(s.RebuildSeals()) > 0 })
	if !pending {
		t.Fatal("nothing to seal after the refused rebuild")
	}

	// The bucket whose copies disagree says what it waits for. The CLI may
	// ask a follower, which answers from what it has applied: wait for it.
	var last string
	c.WaitFor(15*time.Second, func() error {
		r := mustCLI(t, "cluster", "status", mgr, "--output", "json")
		if last = r.Stdout; !strings.Contains(last, "run quarry manager rebuild") {
			return fmt.Errorf("cluster status before the rebuild does not name it: %s", last)
		}
		return nil
	})
	r = mustCLI(t, "manager", "rebuild", mgr, tok, "--expect-peers", "6", "--output", "json")
	var rv manager.RebuildView
	if err := json.Unmarshal([]byte(r.Stdout), &rv); err != nil {
		t.Fatalf("rebuild output: %v: %s", err, r.Stdout)
	}
	uneven := 0
	for _, seal := range rv.Sealed {
		for _, l := range seal.Lengths {
			if l.Blocks < seal.Blocks {
				uneven++
				break
			}
		}
	}
	t.Logf("rebuild sealed %d of %d buckets, %d with a shorter copy", len(rv.Sealed), rv.Buckets, uneven)
	if uneven == 0 {
		t.Fatalf("no rebuilt bucket had a shorter copy (%s's copy should be): %+v", short, rv.Sealed)
	}
	// Run again: nothing left to seal.
	r = mustCLI(t, "manager", "rebuild", mgr, tok, "--output", "json")
	if !strings.Contains(r.Stdout, `"sealed": []`) {
		t.Fatalf("second rebuild sealed again: %s", r.Stdout)
	}
	if lost := settledNotOnce(t, c, []AckedBatch{{Raws: raws}}); lost > 0 {
		t.Fatalf("%d acknowledged events not exactly once in the primaries", lost)
	}
	if got := bucketOrigins(c); !sameOrigins(got, buckets) {
		t.Fatalf("buckets after the rebuild %v, want %v", got, buckets)
	}
	searchExactlyOnce(t, c, raws)
}

// bucketOrigins is the leader's bucket table: bucket id → origin.
func bucketOrigins(c *Cluster) map[string]string { return originsOf(c.Leader()) }

// originsOf is one manager's committed bucket table: bucket id → origin.
func originsOf(m *manager.Manager) map[string]string {
	out := map[string]string{}
	m.Read(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			out[b.ID] = b.Origin
		}
	})
	return out
}

func sameOrigins(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// searchExactlyOnce searches everything through a site0 search head and
// fails unless it returns exactly raws, each once, with a full summary.
func searchExactlyOnce(t *testing.T, c *Cluster, raws []string) {
	t.Helper()
	h := c.Heads["sh0"]
	if h == nil {
		h = c.StartSearchHead("sh0", "site0")
	}
	want := rawsChecksum(raws)
	c.WaitFor(60*time.Second, func() error {
		a := search(t, h.URL(), map[string]any{"query": "*"})
		if a.Status != 200 {
			return fmt.Errorf("search: HTTP %d %s", a.Status, a.Error)
		}
		_, sum := resultIDs(t, a.Resp.Results) // fails on an event returned twice
		if len(a.Resp.Results) != len(raws) || sum != want {
			return fmt.Errorf("%d results (checksum %s), want %d (%s)", len(a.Resp.Results), sum, len(raws), want)
		}
		if s := a.Resp.Summary; s.Partial || s.Buckets.Failed != 0 || s.Buckets.Missing != 0 {
			return fmt.Errorf("summary %+v", s)
		}
		return nil
	})
}

// treeDigest lists every file under dir with its size and content hash.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %d %x", strings.TrimPrefix(path, dir), len(data), sha256.Sum256(data)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
