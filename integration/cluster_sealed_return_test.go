//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterOriginReturnsToSealedBucket: site2 is cut off while a site2
// origin holds a hot bucket; the managers declare it Down and seal the
// bucket from the site1 copy they reach. After the heal the origin comes
// back without a restart: it must not go on appending to the sealed
// bucket (a later truncate to the sealed length would cut what it acked
// there). Then, in maintenance mode, it ingests with acks and is
// restarted, as the e2e rolling restart does; once maintenance is off and
// the cluster complete, every acknowledged event is in the primaries once.
func TestClusterOriginReturnsToSealedBucket(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	origin := "site2-p1"
	pre, un, err := c.IngestAcked(ctx, origin, Batches("pre", 600, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v %d", err, len(un))
	}
	var hot []string
	c.State(func(s *fsm.State) {
		for _, v := range s.BucketList("", "") {
			if v.Hot && v.Origin == origin {
				hot = append(hot, v.ID)
			}
		}
	})
	if len(hot) == 0 {
		t.Fatal("the origin has no hot bucket before the cut")
	}
	if err := c.CutSite("site2"); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(60*time.Second, func() error {
		var views []fsm.BucketView
		c.State(func(s *fsm.State) { views = s.BucketList("", "") })
		for _, v := range views {
			for _, id := range hot {
				if v.ID == id && v.Hot {
					return fmt.Errorf("%s still hot", id)
				}
			}
		}
		return nil
	})
	if err := c.HealSite("site2"); err != nil {
		t.Fatal(err)
	}
	c.WaitPeersUp(c.PeerIDs()...)
	c.WaitFor(60*time.Second, func() error {
		inv := c.Inventory(origin)
		for _, id := range hot {
			if ci, ok := inv[id]; ok && ci.State == "hot" {
				return fmt.Errorf("the returned origin still indexes the sealed bucket %s", id)
			}
		}
		return nil
	})
	c.SetMaintenance(true)
	post, un, err := c.IngestAcked(ctx, origin, Batches("post", 600, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest after the return: %v %d", err, len(un))
	}
	c.StopPeer(origin)
	c.StartPeer(origin)
	c.WaitPeersUp(origin)
	c.SetMaintenance(false)
	if lost := settledNotOnce(t, c, append(pre, post...)); lost > 0 {
		t.Fatalf("%d acknowledged events not exactly once in the primaries", lost)
	}
}

// settledNotOnce waits until the cluster is valid and complete with no
// fixup pending, then counts the events of the acknowledged batches that
// are not exactly once in the primaries.
func settledNotOnce(t *testing.T, c *Cluster, acked []AckedBatch) int {
	t.Helper()
	c.WaitFor(120*time.Second, func() error {
		var st fsm.Status
		c.State(func(s *fsm.State) { st = s.Status() })
		if !st.Complete || !st.Valid || len(st.Fixups) > 0 {
			return fmt.Errorf("valid %v complete %v, fixups %v", st.Valid, st.Complete, st.Fixups)
		}
		return nil
	})
	union := primaryUnion(t, c)
	lost := 0
	for _, a := range acked {
		for _, r := range a.Raws {
			if union[r] != 1 {
				lost++
			}
		}
	}
	return lost
}
