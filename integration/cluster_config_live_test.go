//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterUnknownIndexRefused (issue 9 item 4): on a cluster peer, an
// event for an index the cluster does not have gets HEC's "Incorrect
// index" (400, code 7) and no ack id, through the acknowledging token and
// the one without acks, and nothing is stored: no bucket of it in the
// managers' state, no copy on any peer; a request mixing it with a good
// event indexes neither (all or nothing per request).
func TestClusterUnknownIndexRefused(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2})
	for _, id := range c.PeerIDs() {
		url := "http://" + c.Peer(id).Addr()
		for _, tok := range []string{HECToken, NoAckHECToken} {
			if s, code, ack := hecPostBody(t, url, tok, `{"event":"for nowhere","index":"nosuch"}`); s != 400 || code != 7 || ack != nil {
				t.Fatalf("peer %s, token %s: unknown index answered %d code %d ack %v, want 400 code 7 and no ack id", id, tok, s, code, ack)
			}
		}
		body := `{"event":"a good one","index":"main"}{"event":"for nowhere","index":"nosuch"}`
		if s, code, _ := hecPostBody(t, url, HECToken, body); s != 400 || code != 7 {
			t.Fatalf("peer %s: a request with one unknown index answered %d code %d, want 400 code 7", id, s, code)
		}
	}
	// Nothing stored: a later acknowledged event on main is the only one.
	ingestAckedWith(t, c, "site1-p1", HECToken, "main", []string{"the only event"})
	c.State(func(s *fsm.State) {
		if bs := s.BucketList("nosuch", ""); len(bs) != 0 {
			t.Errorf("the managers list %d buckets of index nosuch", len(bs))
		}
		var events int64
		for _, b := range s.BucketList("main", "") {
			events += b.Events
		}
		if events > 1 {
			t.Errorf("index main holds %d events, want the one acknowledged (the refused requests stored some)", events)
		}
	})
	for _, id := range c.PeerIDs() {
		for _, ci := range c.Inventory(id) {
			if ci.Index == "nosuch" {
				t.Errorf("peer %s holds copy %s of index nosuch", id, ci.ID)
			}
		}
	}
}

// TestClusterRollLimitsLive (issue 9 item 4): a roll limit changed
// through the admin API (POST /v1/config, max_hot_bytes) reaches every
// running peer within seconds and hot buckets roll at the new size, with
// no restart.
func TestClusterRollLimitsLive(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2, MaxHotBytes: 4 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const origin = "site1-p1"
	originBuckets := func() int {
		var n int
		c.State(func(s *fsm.State) {
			for _, b := range s.BucketList("main", "") {
				if b.Origin == origin {
					n++
				}
			}
		})
		return n
	}
	if _, un, err := c.IngestAcked(ctx, origin, Batches("before", 200, 100), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d not acknowledged", err, len(un))
	}
	before := originBuckets()

	const limit = 16 << 10
	var cfg fsm.Config
	c.State(func(s *fsm.State) { cfg = s.Config() })
	cfg.MaxHotBytes = limit
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.AdminPost("/v1/config", string(b))
	c.WaitFor(10*time.Second, func() error {
		for _, id := range c.PeerIDs() {
			if got, _, _ := c.Peer(id).Store().Limits().RollLimits(); got != limit {
				return fmt.Errorf("peer %s rolls at %d bytes, want %d", id, got, limit)
			}
		}
		return nil
	})
	// About 160 KiB of events at a 16 KiB limit: several rolls, where the
	// old 4 MiB limit made none.
	if _, un, err := c.IngestAcked(ctx, origin, Batches("after", 2000, 100), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d not acknowledged", err, len(un))
	}
	c.WaitFor(10*time.Second, func() error {
		if n := originBuckets(); n < before+4 {
			return fmt.Errorf("%d buckets of %s, %d before the change: want at least 4 more", n, origin, before)
		}
		return nil
	})
}

// TestClusterTargetTimeoutLive (issue 9 item 4): target_timeout set
// through the admin API (POST /v1/config) reaches every running peer's
// replicator within seconds, without a restart; set back to 0 the peers
// return to the managers' --target-timeout.
func TestClusterTargetTimeoutLive(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2})
	setTimeout := func(d time.Duration) {
		t.Helper()
		var cfg fsm.Config
		c.State(func(s *fsm.State) { cfg = s.Config() })
		cfg.TargetTimeout = d
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.AdminPost("/v1/config", string(b))
	}
	waitAll := func(want time.Duration) {
		t.Helper()
		c.WaitFor(10*time.Second, func() error {
			for _, id := range c.PeerIDs() {
				if got := c.Peer(id).TargetTimeout(); got != want {
					return fmt.Errorf("peer %s: target_timeout %v, want %v", id, got, want)
				}
			}
			return nil
		})
	}
	waitAll(c.Opts.TargetTimeout)
	setTimeout(700 * time.Millisecond)
	waitAll(700 * time.Millisecond)
	setTimeout(0)
	waitAll(c.Opts.TargetTimeout)
}
