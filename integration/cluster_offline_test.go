//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterPeerOffline: `offline --enforce-counts` removes the peer only
// once every bucket meets RF and SF without it, then the peer stops; plain
// `offline` moves the peer's primaries, the peer stops, and the cluster
// stays valid.
func TestClusterPeerOffline(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 256 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ctx, "site1-p1", Batches("off", 6000, 300), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d", err, len(un))
	}
	stopped := func(id string) error {
		select {
		case <-c.Peer(id).TakenOffline():
			return nil
		default:
			return fmt.Errorf("%s still running", id)
		}
	}

	leaving := "site1-p3"
	// Other origins' hot buckets with a copy on the leaving peer.
	var hot []string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", leaving) {
			if b.Hot && b.Origin != leaving {
				hot = append(hot, b.ID)
			}
		}
	})
	if len(hot) == 0 {
		t.Fatalf("no other origin's hot bucket replicates to %s: the test cannot see the roll", leaving)
	}
	c.AdminPost("/v1/peers/"+leaving+"/offline?enforce_counts=true", "")
	c.WaitFor(30*time.Second, func() error {
		var still []string
		c.State(func(s *fsm.State) {
			for _, id := range hot {
				if v, ok := findBucketView(s, id); ok && v.Hot {
					still = append(still, id)
				}
			}
		})
		if len(still) > 0 {
			return fmt.Errorf("hot buckets replicating to the decommissioning %s not rolled: %v", leaving, still)
		}
		return nil
	})
	// Hot buckets replicating to it must roll before their copies can
	// move: the leaving peer rolls its own, and the planner sends the other
	// origins a roll task for theirs that replicate to it (nothing is
	// rolled by hand here).
	c.WaitFor(120*time.Second, func() error {
		if st, _ := c.stateOf(leaving); st != fsm.StateRemoved {
			return fmt.Errorf("%s is %s", leaving, st)
		}
		return stopped(leaving)
	})
	var st fsm.Status
	c.State(func(s *fsm.State) { st = s.Status() })
	if !st.ReplicationFactorMet || !st.SearchFactorMet {
		t.Fatalf("%s removed while RF met %v, SF met %v", leaving, st.ReplicationFactorMet, st.SearchFactorMet)
	}
	c.KillPeer(leaving)

	restarting := "site2-p2"
	c.AdminPost("/v1/peers/"+restarting+"/offline", "")
	c.WaitFor(60*time.Second, func() error {
		if st, _ := c.stateOf(restarting); st != fsm.StateRestarting {
			return fmt.Errorf("%s is %s", restarting, st)
		}
		return stopped(restarting)
	})
	c.WaitFor(30*time.Second, func() error {
		var st fsm.Status
		c.State(func(s *fsm.State) { st = s.Status() })
		if !st.Valid {
			return errors.New("not valid")
		}
		for _, p := range st.Peers {
			if p.ID == restarting && p.Primaries > 0 {
				return fmt.Errorf("%s still holds %d primaries", restarting, p.Primaries)
			}
		}
		return nil
	})
	c.KillPeer(restarting)
}
