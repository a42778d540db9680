//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
)

// TestClusterPeerKillDetected pins failure detection as an invariant, not
// a timing (the timing is TestMeasurePeerKill's; this test runs under the
// race detector): a killed peer that holds primaries is declared Down, the
// generation grows, the cluster is valid again and no primary of any
// table (site0 or a site) is left on the dead peer. Killed a second time
// after it came back, the same holds.
func TestClusterPeerKillDetected(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 128 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, unacked, err := c.IngestAcked(ctx, "site1-p1", Batches("kd", 3000, 300), 30*time.Second); err != nil || len(unacked) > 0 {
		t.Fatalf("ingest: %v, %d batches not acknowledged", err, len(unacked))
	}
	c.WaitFor(60*time.Second, c.validComplete)
	for round := 1; round <= 2; round++ {
		victim, gen := c.busiestPeer("site1-p1")
		var held int
		c.State(func(s *fsm.State) { held = len(primariesOn(s, victim)) })
		if held == 0 {
			t.Fatalf("round %d: %s holds no primary", round, victim)
		}
		c.KillPeer(victim)
		t.Logf("round %d: killed %s (%d primaries, generation %d)", round, victim, held, gen)
		c.WaitFor(60*time.Second, func() error {
			var (
				st    fsm.Status
				p     fsm.Peer
				stuck []string
			)
			c.State(func(s *fsm.State) { st, stuck = s.Status(), primariesOn(s, victim); p, _ = s.Peer(victim) })
			switch {
			case p.State != fsm.StateDown:
				return fmt.Errorf("%s is %s", victim, p.State)
			case st.Generation <= gen:
				return fmt.Errorf("generation %d, not past %d", st.Generation, gen)
			case !st.Valid:
				return fmt.Errorf("not valid at generation %d", st.Generation)
			case len(stuck) > 0:
				return fmt.Errorf("primaries still on %s: %v", victim, stuck)
			}
			return nil
		})
		// Every manager ends with the same verdict.
		c.Mu.Lock()
		mgrs := map[string]*manager.Manager{}
		for id, m := range c.Managers {
			mgrs[id] = m
		}
		c.Mu.Unlock()
		c.WaitFor(30*time.Second, func() error {
			for _, id := range slices.Sorted(maps.Keys(mgrs)) {
				var p fsm.Peer
				mgrs[id].Read(func(s *fsm.State) { p, _ = s.Peer(victim) })
				if p.State != fsm.StateDown {
					return fmt.Errorf("manager %s has %s %s", id, victim, p.State)
				}
			}
			return nil
		})
		c.StartPeer(victim)
		c.WaitPeersUp(victim)
		c.WaitFor(90*time.Second, c.validComplete)
	}
}

// primariesOn lists "bucket/table" for every primary of any table on peer.
func primariesOn(s *fsm.State, peer string) []string {
	var out []string
	for _, b := range s.BucketList("", "") {
		for _, table := range slices.Sorted(maps.Keys(b.Primary)) {
			if b.Primary[table] == peer {
				out = append(out, b.ID+"/"+table)
			}
		}
	}
	return out
}
