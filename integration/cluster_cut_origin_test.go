//go:build integration

package integration

import (
	"context"
	"testing"
	"time"
)

// TestClusterCutSiteOriginAcks: a site2 origin keeps taking events with
// acks while site2 is cut off from the managers' majority; whatever it
// acknowledged must survive the heal.
//
// Issue 9, item 5 (measured 2026-12-02: 100 acknowledged events lost):
// right after the cut the origin's site1 target leaves the set and a batch
// is acknowledged on the origin and its site2 target; the managers then
// seal the bucket from the one copy they reach (site1's, without that
// batch). After the heal the longer copies, whose block at the sealed
// length carries the sealed checksum, extend the seal (fsm.ExtendSeal)
// instead of being truncated, and the shorter copies fetch the rest
// (fsm/DESIGN.md "Extending a seal").
func TestClusterCutSiteOriginAcks(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	origin := "site2-p1"
	pre, un, err := c.IngestAcked(ctx, origin, Batches("pre", 600, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v %d", err, len(un))
	}
	if err := c.CutSite("site2"); err != nil {
		t.Fatal(err)
	}
	cut, un, err := c.IngestAcked(ctx, origin, Batches("cut", 2000, 100), 8*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("during the cut: %d batches acknowledged, %d not", len(cut), len(un))
	if err := c.HealSite("site2"); err != nil {
		t.Fatal(err)
	}
	c.WaitPeersUp(c.PeerIDs()...)
	lost := settledNotOnce(t, c, append(pre, cut...))
	if lost > 0 {
		t.Fatalf("%d acknowledged events not exactly once in the primaries", lost)
	}
}
