//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterCutSiteOriginAcks: a site2 origin keeps taking events with
// acks while site2 is cut off from the managers' majority; whatever it
// acknowledged must survive the heal.
//
// Issue 9, item 5 (measured 2026-12-02: 100 acknowledged events lost):
// right after the cut the origin's site1 target timed out and a batch was
// acknowledged on the origin and its site2 target; the managers then
// sealed the bucket from the one copy they reach (site1's, without that
// batch). Issue 24: the origin no longer acknowledges without a target it
// could not report short to the managers, so the seal from site1's copy
// holds every acknowledged event and is final; after the heal the longer
// site2 copies are truncated to it (fsm/DESIGN.md "Final and provisional
// seals").
func TestClusterCutSiteOriginAcks(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	origin := "site2-p1"
	pre, un, err := c.IngestAcked(ctx, origin, Batches("pre", 600, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v %d", err, len(un))
	}
	sh1 := c.StartSearchHead("sh1", "site1")
	if err := c.CutSite("site2"); err != nil {
		t.Fatal(err)
	}
	cut, un, err := c.IngestAcked(ctx, origin, Batches("cut", 2000, 100), 8*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("during the cut: %d batches acknowledged, %d not", len(cut), len(un))
	// During the cut, once the managers have sealed the origin's bucket
	// from the one copy they reach: a site1 search that says it is
	// complete holds every acknowledged event (issue 24's chaos suite: the
	// origin acknowledged on its site2 copies after it could not tell the
	// managers its site1 target failed, the seal missed those events, and
	// site1 searches came back short yet complete). Now the origin's acks
	// wait for a target the managers do not know is short.
	c.WaitFor(60*time.Second, func() error {
		var hot int
		c.State(func(s *fsm.State) {
			for _, b := range s.BucketList("", "") {
				if b.Hot && b.Origin == origin {
					hot++
				}
			}
		})
		if hot > 0 {
			return fmt.Errorf("%d buckets of %s still hot in the managers' view", hot, origin)
		}
		return nil
	})
	acked := map[string]bool{}
	for _, b := range append(append([]AckedBatch(nil), pre...), cut...) {
		for _, r := range b.Raws {
			acked[r] = true
		}
	}
	a := search(t, sh1.URL(), map[string]any{"query": "*"})
	if a.Status != 200 {
		t.Fatalf("search during the cut: HTTP %d %s", a.Status, a.Error)
	}
	if !a.Resp.Summary.Partial {
		got := map[string]bool{}
		for _, r := range a.Resp.Results {
			got[fmt.Sprint(r["_raw"])] = true
		}
		missing := 0
		for r := range acked {
			if !got[r] {
				missing++
			}
		}
		if missing > 0 {
			t.Fatalf("a site1 search during the cut says complete but lacks %d of %d acknowledged events (%d batches acknowledged during the cut)", missing, len(acked), len(cut))
		}
	}
	if err := c.HealSite("site2"); err != nil {
		t.Fatal(err)
	}
	c.WaitPeersUp(c.PeerIDs()...)
	lost := settledNotOnce(t, c, append(pre, cut...))
	if lost > 0 {
		t.Fatalf("%d acknowledged events not exactly once in the primaries", lost)
	}
}
