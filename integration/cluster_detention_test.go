package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer"
)

// fakeDisk is a peer's data disk as the test plays it: heartbeats report
// its free space (peer.Config.DiskSpace) and, once full, every journal and
// replica write fails with ENOSPC (peer.Config.WriteFault).
type fakeDisk struct{ full atomic.Bool }

const (
	gib            = int64(1) << 30
	diskTotal      = 100 * gib
	detentionBelow = 10 * gib // the managers' --detention-free-bytes in these tests
)

func (d *fakeDisk) space() (free, total int64) {
	if d.full.Load() {
		return 100 << 20, diskTotal
	}
	return 50 * gib, diskTotal
}

func (d *fakeDisk) fault() error {
	if d.full.Load() {
		return fmt.Errorf("fake disk: %w", syscall.ENOSPC)
	}
	return nil
}

// startDetentionCluster is the default harness cluster whose peers write
// to fake disks and whose managers detain below 10 GiB free (1 GiB
// hysteresis).
func startDetentionCluster(t *testing.T) (*Cluster, map[string]*fakeDisk) {
	disks := map[string]*fakeDisk{}
	var mu sync.Mutex
	c := Start(t, Options{
		MaxHotBytes: 256 << 10,
		PeerTweak: func(id string, cfg *peer.Config) {
			d := &fakeDisk{}
			mu.Lock()
			disks[id] = d
			mu.Unlock()
			cfg.DiskSpace, cfg.WriteFault = d.space, d.fault
		},
		ManagerTweak: func(id string, cfg *manager.Config) {
			cfg.DetentionFreeBytes, cfg.DetentionHysteresisBytes = detentionBelow, gib
		},
	})
	return c, disks
}

// peerState is the leader's committed state of peer id and who detained it.
func peerState(c *Cluster, id string) (fsm.PeerState, fsm.DetentionBy) {
	var p fsm.Peer
	c.State(func(s *fsm.State) { p, _ = s.Peer(id) })
	return p.State, p.Detention
}

// hecProbe posts one event to peer id's HEC with the acknowledging token and
// returns the HTTP status and Splunk's code.
func hecProbe(t *testing.T, c *Cluster, id string) (int, int) {
	t.Helper()
	h := c.NewHECClient(id)
	req, _ := http.NewRequest(http.MethodPost, h.URL+"/services/collector/event", strings.NewReader(`{"event":"probe detention"}`))
	req.Header.Set("Authorization", "Splunk "+HECToken)
	req.Header.Set("X-Splunk-Request-Channel", h.Channel)
	resp, err := h.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Code int `json:"code"`
	}
	json.NewDecoder(resp.Body).Decode(&ans)
	return resp.StatusCode, ans.Code
}

// waitBusy waits until peer id's HEC answers 503 code 9.
func waitBusy(t *testing.T, c *Cluster, id string) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if s, code := hecProbe(t, c, id); s != http.StatusServiceUnavailable || code != 9 {
			return fmt.Errorf("HEC of %s answered %d code %d, want 503 code 9", id, s, code)
		}
		return nil
	})
}

// ingestLoop sends acknowledged batches through each origin until stop is
// closed, keeping what was acknowledged; refused or unacknowledged batches
// are counted, not fatal (a detained or full peer refuses them).
type ingestLoop struct {
	mu      sync.Mutex
	acked   []AckedBatch
	refused map[string]int
	wg      sync.WaitGroup
	stop    chan struct{}
}

func startIngest(ctx context.Context, c *Cluster, tag string, origins ...string) *ingestLoop {
	l := &ingestLoop{refused: map[string]int{}, stop: make(chan struct{})}
	for i, o := range origins {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				b := Batches(fmt.Sprintf("%s%dn%d", tag, i, n), 20, 20)
				a, un, err := c.IngestAcked(ctx, o, b, 10*time.Second)
				l.mu.Lock()
				l.acked = append(l.acked, a...)
				if err != nil || len(un) > 0 {
					l.refused[o]++
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

func (l *ingestLoop) end() []AckedBatch {
	close(l.stop)
	l.wg.Wait()
	return l.acked
}

func (l *ingestLoop) ackedBy(peer string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.acked {
		if a.Peer == peer {
			n++
		}
	}
	return n
}

// bucketIDs is the set of buckets the leader knows.
func bucketIDs(c *Cluster) map[string]bool {
	out := map[string]bool{}
	c.State(func(s *fsm.State) {
		for _, v := range s.BucketList("", "") {
			out[v.ID] = true
		}
	})
	return out
}

// bucketsSince lists the buckets the leader knows that are not in before.
func bucketsSince(c *Cluster, before map[string]bool) []fsm.BucketView {
	var out []fsm.BucketView
	c.State(func(s *fsm.State) {
		for _, v := range s.BucketList("", "") {
			if !before[v.ID] {
				out = append(out, v)
			}
		}
	})
	return out
}

// TestClusterDiskFullDetention is issue 13's acceptance line: a peer whose
// disk fills enters detention (HEC 503 code 9, no longer a target), the
// cluster keeps ingesting on the others, no acknowledged event is lost or
// doubled, and the peer leaves detention once space is freed — its store
// writing again without a restart. It logs the time from the threshold
// crossed to detention and from space freed to normal.
func TestClusterDiskFullDetention(t *testing.T) {
	c, disks := startDetentionCluster(t)
	const victim = "site1-p1"
	others := []string{}
	for _, id := range c.PeerIDs() {
		if id != victim {
			others = append(others, id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	head := c.StartSearchHead("sh0", "site0")

	// Every peer ingests, the victim too; every peer reports its disk.
	loop := startIngest(ctx, c, "dfA", c.PeerIDs()...)
	testutil.WaitFor(t, 20*time.Second, func() error {
		for _, id := range c.PeerIDs() {
			if loop.ackedBy(id) < 3 {
				return fmt.Errorf("%s: %d batches acknowledged", id, loop.ackedBy(id))
			}
		}
		return nil
	})

	// The disk fills: below the threshold, and writes fail.
	crossed := time.Now()
	disks[victim].full.Store(true)
	var sawFull atomic.Bool // the victim's writer met ENOSPC (a batch was in flight)
	watch := make(chan struct{})
	go func() {
		for {
			select {
			case <-watch:
				return
			case <-time.After(5 * time.Millisecond):
				if p := c.Peer(victim); p != nil && p.Store().DiskFull() {
					sawFull.Store(true)
				}
			}
		}
	}()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if st, by := peerState(c, victim); st != fsm.StateDetention || by != fsm.DetentionDisk {
			return fmt.Errorf("%s is %s/%q", victim, st, by)
		}
		return nil
	})
	toDetention := time.Since(crossed)
	atDetention := bucketIDs(c)
	waitBusy(t, c, victim)
	toRefusing := time.Since(crossed)
	if err := c.Peer(victim).Store().Err(); err != nil {
		t.Fatalf("the full disk failed the store: %v", err)
	}

	// The others keep ingesting; new hot buckets never target the victim.
	before := 0
	for _, id := range others {
		before += loop.ackedBy(id)
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		n := 0
		for _, id := range others {
			n += loop.ackedBy(id)
		}
		if n < before+25 {
			return fmt.Errorf("%d batches acknowledged by the others since detention, want 25", n-before)
		}
		return nil
	})
	// Buckets opened since the detention have no copy on the victim.
	for _, v := range bucketsSince(c, atDetention) {
		for _, cp := range v.Copies {
			if cp.Peer == victim {
				t.Fatalf("bucket %s, opened after the detention, has a copy on %s: %+v", v.ID, victim, v.Copies)
			}
		}
	}

	// Space freed: out of detention, HEC takes data again, no restart.
	freed := time.Now()
	disks[victim].full.Store(false)
	testutil.WaitFor(t, 15*time.Second, func() error {
		if st, by := peerState(c, victim); st != fsm.StateUp || by != "" {
			return fmt.Errorf("%s is %s/%q", victim, st, by)
		}
		return nil
	})
	toUp := time.Since(freed)
	close(watch)
	victimAcked := loop.ackedBy(victim)
	testutil.WaitFor(t, 20*time.Second, func() error {
		if n := loop.ackedBy(victim); n < victimAcked+3 {
			return fmt.Errorf("%s acknowledged %d batches since it left detention", victim, n-victimAcked)
		}
		return nil
	})
	toNormal := time.Since(freed)
	acked := loop.end()
	t.Logf("threshold crossed → detention committed %v, → HEC 503 code 9 %v; space freed → Up %v, → acknowledging again %v",
		toDetention.Round(time.Millisecond), toRefusing.Round(time.Millisecond), toUp.Round(time.Millisecond), toNormal.Round(time.Millisecond))
	t.Logf("batches acknowledged %d; refused or unacknowledged per peer %v; the victim's store waited for room: %v (its error: %v)",
		len(acked), loop.refused, sawFull.Load(), c.Peer(victim).Store().Err())
	if err := c.Peer(victim).Store().Err(); err != nil {
		t.Fatalf("the full disk failed the victim's store: %v", err)
	}

	// No acknowledged event lost, none twice: a site0 search counts each.
	want := map[string]bool{}
	for _, a := range acked {
		for _, r := range a.Raws {
			want[r] = true
		}
	}
	testutil.WaitFor(t, 60*time.Second, func() error {
		a, err := SearchHTTP(ctx, head.URL(), "", map[string]any{"query": "index=main"})
		if err != nil || a.Status != 200 {
			return fmt.Errorf("search: %v %d %s", err, a.Status, a.Error)
		}
		seen := map[string]int{}
		for _, r := range a.Resp.Results {
			raw, _ := r["_raw"].(string)
			seen[raw]++
		}
		for r, n := range seen {
			if n > 1 {
				t.Fatalf("event %q returned %d times", r, n)
			}
		}
		missing := 0
		for r := range want {
			if seen[r] != 1 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged events not found (%d results, partial %v)", missing, len(want), len(a.Resp.Results), a.Resp.Summary.Partial)
		}
		return nil
	})
}

// TestClusterManualDetention: `quarry peer detention <id> on|off` and POST
// /v1/peers/{id}/detention; a manual detention holds whatever the disk
// reports (the free-disk rule never lifts it), HEC answers 503 code 9 and
// the peer is chosen as no target while its primaries keep serving.
func TestClusterManualDetention(t *testing.T) {
	cliBinary(t)
	c, _ := startDetentionCluster(t)
	mgr := "--manager=" + strings.Join(c.ManagerURLs(), ",")
	tok := "--token=" + AdminToken
	const id = "site2-p2"

	r := mustCLI(t, "peer", "detention", id, "on", mgr, tok)
	if !strings.Contains(r.Stdout, "manual detention") {
		t.Fatalf("CLI said %q", r.Stdout)
	}
	if st, by := peerState(c, id); st != fsm.StateDetention || by != fsm.DetentionManual {
		t.Fatalf("after the CLI: %s/%q", st, by)
	}
	atDetention := bucketIDs(c)
	waitBusy(t, c, id)
	// Its disk is roomy: the rule leaves a manual detention alone.
	time.Sleep(2 * time.Second) // several planner passes (100 ms each) and heartbeats
	if st, _ := peerState(c, id); st != fsm.StateDetention {
		t.Fatalf("the free-disk rule lifted a manual detention: %s", st)
	}
	// Targets for a new bucket never name it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, un, err := c.IngestAcked(ctx, "site2-p1", Batches("manual", 40, 20), 10*time.Second)
	if err != nil || len(un) > 0 || len(a) != 2 {
		t.Fatalf("ingest on site2-p1 beside the detained peer: %v, %d unacknowledged", err, len(un))
	}
	for _, v := range bucketsSince(c, atDetention) {
		for _, cp := range v.Copies {
			if cp.Peer == id {
				t.Fatalf("bucket %s, opened during the detention, has a copy on %s: %+v", v.ID, id, v.Copies)
			}
		}
	}
	r = mustCLI(t, "peer", "detention", id, "off", mgr, tok, "--output", "json")
	var out map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out["detention"] != false {
		t.Fatalf("CLI json %q: %v", r.Stdout, err)
	}
	if st, by := peerState(c, id); st != fsm.StateUp || by != "" {
		t.Fatalf("after detention off: %s/%q", st, by)
	}

	// The endpoint.
	c.AdminPost("/v1/peers/"+id+"/detention", `{"enabled": true}`)
	if st, by := peerState(c, id); st != fsm.StateDetention || by != fsm.DetentionManual {
		t.Fatalf("after the endpoint: %s/%q", st, by)
	}
	c.AdminPost("/v1/peers/"+id+"/detention", `{"enabled": false}`)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if s, code := hecProbe(t, c, id); s != 200 || code != 0 {
			return fmt.Errorf("HEC of %s answered %d code %d after detention off", id, s, code)
		}
		return nil
	})
	for _, bad := range []struct{ args []string }{
		{[]string{"peer", "detention", id, "maybe", mgr, tok}},
		{[]string{"peer", "detention", "no-such-peer", "on", mgr, tok}},
		{[]string{"peer", "detention", id, "on", mgr, "--token=wrong"}},
	} {
		if r := runCLI(t, bad.args...); r.Code == 0 {
			t.Fatalf("quarry %v: exit 0, want a failure", bad.args)
		}
	}
	if st, _ := peerState(c, id); st != fsm.StateUp {
		t.Fatalf("refused CLI calls changed the state: %s", st)
	}
}
