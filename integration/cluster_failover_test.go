//go:build integration

package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// ingestBackground ingests batches through peer in the background;
// wait returns what was acknowledged and fails the test on any batch not
// acknowledged within 30 s.
func ingestBackground(t *testing.T, ctx context.Context, c *Cluster, peer, tag string, n int) (wait func() []AckedBatch) {
	var (
		wg    sync.WaitGroup
		acked []AckedBatch
		un    [][]string
		err   error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		acked, un, err = c.IngestAcked(ctx, peer, Batches(tag, n, 200), 30*time.Second)
	}()
	return func() []AckedBatch {
		wg.Wait()
		if err != nil {
			t.Fatalf("ingest through %s: %v", peer, err)
		}
		if len(un) > 0 {
			t.Fatalf("ingest through %s: %d batches not acknowledged", peer, len(un))
		}
		return acked
	}
}

// primaryUnion reads every bucket's site0 primary copy and counts each raw.
func primaryUnion(t *testing.T, c *Cluster) map[string]int {
	t.Helper()
	var views []fsm.BucketView
	c.State(func(s *fsm.State) { views = s.BucketList("", "") })
	seen := map[string]int{}
	for _, v := range views {
		p := v.Primary["site0"]
		if p == "" {
			t.Fatalf("bucket %s has no site0 primary", v.ID)
		}
		raws, err := c.CopyRaws(p, v.ID)
		if err != nil {
			t.Fatalf("primary copy of %s on %s: %v", v.ID, p, err)
		}
		for r, k := range raws {
			seen[r] += k
		}
	}
	return seen
}

// TestClusterPeerWithPrimariesKilled: killing a peer that holds primaries
// during ingest leaves the cluster valid again with a strictly larger
// generation, and the union of the site0 primaries holds every
// acknowledged event exactly once.
func TestClusterPeerWithPrimariesKilled(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	origin := "site1-p1"
	wait := ingestBackground(t, ctx, c, origin, "pk", 8000)
	var victim string
	var gen uint64
	c.WaitFor(30*time.Second, func() error {
		var peers []fsm.PeerView
		c.State(func(s *fsm.State) { peers = s.PeerList(); gen = s.CurrentGeneration() })
		best := 0
		for _, p := range peers {
			if p.ID != origin && p.Primaries > best {
				victim, best = p.ID, p.Primaries
			}
		}
		if victim == "" {
			return fmt.Errorf("no peer but the origin holds a primary yet")
		}
		return nil
	})
	c.KillPeer(victim)
	t.Logf("killed %s (generation %d)", victim, gen)
	acked := wait()
	c.WaitFor(30*time.Second, func() error {
		var st fsm.Status
		c.State(func(s *fsm.State) { st = s.Status() })
		if st.Generation <= gen {
			return fmt.Errorf("generation %d, not past %d", st.Generation, gen)
		}
		if !st.Valid {
			return fmt.Errorf("cluster not valid at generation %d", st.Generation)
		}
		if p, ok := c.stateOf(victim); ok && p != fsm.StateDown {
			return fmt.Errorf("%s is %s", victim, p)
		}
		return nil
	})
	seen := primaryUnion(t, c)
	n := 0
	for _, a := range acked {
		for _, r := range a.Raws {
			n++
			if seen[r] != 1 {
				t.Fatalf("acknowledged event %q is %d times in the primaries", r, seen[r])
			}
		}
	}
	t.Logf("%d acknowledged events, each once in the primaries", n)
	// Then complete again: the fixups (replicate, make searchable) restore
	// RF, SF and the site policy without the dead peer.
	c.WaitFor(90*time.Second, func() error {
		var st fsm.Status
		c.State(func(s *fsm.State) { st = s.Status() })
		if !st.Complete {
			return fmt.Errorf("not complete: rf %v sf %v, fixups %v", st.ReplicationFactorMet, st.SearchFactorMet, st.Fixups)
		}
		return nil
	})
	seen = primaryUnion(t, c)
	for _, a := range acked {
		for _, r := range a.Raws {
			if seen[r] != 1 {
				t.Fatalf("complete again: acknowledged event %q is %d times in the primaries", r, seen[r])
			}
		}
	}
}

func (c *Cluster) stateOf(peer string) (fsm.PeerState, bool) {
	var (
		p  fsm.Peer
		ok bool
	)
	c.State(func(s *fsm.State) { p, ok = s.Peer(peer) })
	return p.State, ok
}

// TestClusterManagerLeaderKilled: killing the manager leader during
// ingest, a new leader takes over and the peers keep indexing with acks
// (new hot buckets get their targets from the new leader).
func TestClusterManagerLeaderKilled(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 256 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w1 := ingestBackground(t, ctx, c, "site1-p1", "ml1", 6000)
	w2 := ingestBackground(t, ctx, c, "site2-p1", "ml2", 6000)
	old := c.Leader()
	c.WaitFor(30*time.Second, func() error {
		if len(hotTargets(c, "site1-p1")) == 0 {
			return fmt.Errorf("no replica yet")
		}
		return nil
	})
	// A peer dies too, so fixups (replications) run across the change of
	// leader.
	c.KillPeer("site1-p3")
	c.KillManager(old.ID())
	acked := append(w1(), w2()...)
	nl := c.Leader()
	if nl.ID() == old.ID() {
		t.Fatalf("leader is still %s", old.ID())
	}
	var buckets int
	nl.Read(func(s *fsm.State) { buckets = len(s.BucketList("", "")) })
	t.Logf("new leader %s; %d batches acknowledged; %d buckets", nl.ID(), len(acked), buckets)
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			p.Store().RollAll()
		}
	}
	c.WaitFor(120*time.Second, func() error {
		var st fsm.Status
		c.State(func(s *fsm.State) { st = s.Status() })
		if !st.Complete {
			return fmt.Errorf("not complete: %v", st.Fixups)
		}
		return nil
	})
	total := 0
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			for k, n := range p.Transfers() {
				total += n
				if n > 1 {
					t.Errorf("transfer %s done %d times", k, n)
				}
			}
		}
	}
	t.Logf("%d fixup transfers, each (bucket, target) at most once", total)
}

// TestClusterSiteCut: with site2's gateway cut, site1 keeps ingesting with
// acks (targets on site2 time out and leave the set; acks stand on the
// site1 copies); after the heal no acknowledged event is lost or
// duplicated on the origin's copies.
func TestClusterSiteCut(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	origin := "site1-p1"
	if _, un, err := c.IngestAcked(ctx, origin, Batches("pre", 1000, 200), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v %d", err, len(un))
	}
	if err := c.CutSite("site2"); err != nil {
		t.Fatal(err)
	}
	acked, un, err := c.IngestAcked(ctx, origin, Batches("cut", 4000, 200), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest during the cut: %v, %d unacked", err, len(un))
	}
	var worst time.Duration
	for _, a := range acked {
		worst = max(worst, a.Waited)
	}
	t.Logf("during the cut: %d batches acknowledged, longest wait %v", len(acked), worst)
	if err := c.HealSite("site2"); err != nil {
		t.Fatal(err)
	}
	c.Peer(origin).Store().RollAll()
	if err := c.Peer(origin).Store().WaitIdle(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	guid := c.Peer(origin).GUID()
	for b := range c.Inventory(origin) {
		if len(b) < len(guid) || b[len(b)-len(guid):] != guid {
			continue
		}
		raws, err := c.CopyRaws(origin, b)
		if err != nil {
			t.Fatal(err)
		}
		for r, k := range raws {
			seen[r] += k
		}
	}
	for _, a := range acked {
		for _, r := range a.Raws {
			if seen[r] != 1 {
				t.Fatalf("acknowledged event %q on the origin %d times", r, seen[r])
			}
		}
	}
	// Healed: the cluster becomes complete again, and the primaries hold
	// every acknowledged event exactly once.
	c.WaitPeersUp(c.PeerIDs()...)
	c.WaitFor(120*time.Second, func() error {
		var st fsm.Status
		c.State(func(s *fsm.State) { st = s.Status() })
		if !st.Complete || !st.Valid {
			return fmt.Errorf("valid %v complete %v, fixups %v", st.Valid, st.Complete, st.Fixups)
		}
		return nil
	})
	union := primaryUnion(t, c)
	for _, a := range acked {
		for _, r := range a.Raws {
			if union[r] != 1 {
				t.Fatalf("after the heal: acknowledged event %q is %d times in the primaries", r, union[r])
			}
		}
	}
}
