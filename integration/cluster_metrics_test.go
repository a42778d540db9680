package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/manager"
)

// peerMetric sums one series over every running peer's /metrics.
func (c *Cluster) peerMetric(t *testing.T, series string) (sum float64, by map[string]float64) {
	t.Helper()
	by = map[string]float64{}
	for _, id := range c.PeerIDs() {
		p := c.Peer(id)
		if p == nil {
			continue
		}
		resp, err := http.Get("http://" + p.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if name, v, ok := strings.Cut(sc.Text(), " "); ok && name == series {
				f, _ := strconv.ParseFloat(v, 64)
				by[id] = f
				sum += f
			}
		}
		resp.Body.Close()
	}
	return sum, by
}

// TestClusterIngestMetrics: 1,000 events into a cluster move the peers'
// HEC event counters by exactly 1,000 in all (all on the peer that took
// them); one malformed request moves code 6 by exactly 1, on that peer.
func TestClusterIngestMetrics(t *testing.T) {
	c := Start(t, Options{})
	const events = `quarry_peer_hec_events_total`
	const code6 = `quarry_peer_hec_requests_total{code="6"}`
	before, _ := c.peerMetric(t, events)
	before6, _ := c.peerMetric(t, code6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ctx, "site1-p2", Batches("metrics", 1000, 250), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d unacknowledged", err, len(un))
	}
	after, by := c.peerMetric(t, events)
	if after-before != 1000 || by["site1-p2"] < 1000 {
		t.Fatalf("peers' HEC event counters moved by %v (%v), want 1000 on site1-p2", after-before, by)
	}
	h := c.NewHECClient("site1-p2")
	req, _ := http.NewRequest(http.MethodPost, h.URL+"/services/collector/event", strings.NewReader(`{"event": "unterminated`))
	req.Header.Set("Authorization", "Splunk "+h.Token)
	req.Header.Set("X-Splunk-Request-Channel", h.Channel)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	after6, by6 := c.peerMetric(t, code6)
	if after6-before6 != 1 || by6["site1-p2"] < 1 {
		t.Fatalf("code 6 counters moved by %v (%v), want 1 on site1-p2", after6-before6, by6)
	}
	if again, _ := c.peerMetric(t, events); again != after {
		t.Fatalf("a refused request moved the event counters: %v → %v", after, again)
	}
}

// TestClusterHotBucketLiveEvents: a hot bucket's event count on the
// leader's GET /v1/buckets (and so the cluster page) is its origin's live
// count from the heartbeats, not the 0 the FSM holds until the roll
// (issue 29).
func TestClusterHotBucketLiveEvents(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ctx, "site1-p2", Batches("livecount", 700, 100), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d unacknowledged", err, len(un))
	}
	cl, err := manager.NewClient([]string{"http://" + c.Leader().HTTPAddr()}, AdminToken, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		buckets, err := cl.Buckets(ctx, "main", "")
		if err != nil {
			return err
		}
		hot := int64(0)
		for _, b := range buckets {
			if b.Hot && b.Origin == "site1-p2" {
				hot += b.Events
			}
		}
		if hot != 700 {
			return fmt.Errorf("site1-p2's hot buckets show %d events on the leader, want 700", hot)
		}
		return nil
	})
}
