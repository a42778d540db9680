package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// hotTargets returns the running peers that hold a hot copy of a bucket
// whose origin is peer origin.
func hotTargets(c *Cluster, origin string) []string {
	guid := c.Peer(origin).GUID()
	var out []string
	for _, id := range c.PeerIDs() {
		if id == origin {
			continue
		}
		for b, ci := range c.Inventory(id) {
			if strings.HasSuffix(b, "~"+guid) && ci.State == "hot" {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

// TestClusterTargetKilledMidStream: when a replication target dies during
// ingest, the origin rolls and carries on with new targets; no ack waits
// more than target_timeout + 1 s, and every bucket of the origin ends with
// at least min(2, RF) agreeing copies on the survivors.
func TestClusterTargetKilledMidStream(t *testing.T) {
	c := Start(t, Options{})
	origin := "site1-p1"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	batches := Batches("k", 12_000, 200)
	var (
		mu    sync.Mutex
		acked []AckedBatch
		un    [][]string
		ierr  error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a, u, err := c.IngestAcked(ctx, origin, batches, 30*time.Second)
		mu.Lock()
		acked, un, ierr = a, u, err
		mu.Unlock()
	}()
	var victim string
	c.WaitFor(30*time.Second, func() error {
		ts := hotTargets(c, origin)
		if len(ts) == 0 {
			return errors.New("no hot replica yet")
		}
		victim = ts[0]
		return nil
	})
	rollsBefore := c.Peer(origin).Store().Stats.Rolls.Load()
	c.KillPeer(victim)
	t.Logf("killed target %s", victim)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if ierr != nil {
		t.Fatalf("ingest: %v", ierr)
	}
	if len(un) > 0 {
		t.Fatalf("%d batches not acknowledged", len(un))
	}
	limit := c.Opts.TargetTimeout + time.Second
	if raceEnabled {
		limit += 10 * time.Second // a starved race run; the strict bound holds without -race
	}
	var worst time.Duration
	for _, a := range acked {
		worst = max(worst, a.Waited)
	}
	t.Logf("acknowledged %d batches; longest ack wait %v", len(acked), worst)
	if worst > limit {
		t.Errorf("an ack waited %v, more than target_timeout + 1 s = %v", worst, limit)
	}
	if c.Peer(origin).Store().Stats.Rolls.Load() <= rollsBefore {
		t.Errorf("the origin did not roll after its target died")
	}
	// Every bucket of the origin: ≥ 2 agreeing copies among the survivors.
	c.Peer(origin).Store().RollAll()
	guid := c.Peer(origin).GUID()
	c.WaitFor(60*time.Second, func() error {
		own := c.Inventory(origin)
		for b, oc := range own {
			if oc.State != "warm" {
				return fmt.Errorf("%s still %s on the origin", b, oc.State)
			}
			if !strings.HasSuffix(b, "~"+guid) {
				continue
			}
			n := 1
			for _, id := range c.PeerIDs() {
				if id == origin {
					continue
				}
				if ci, ok := c.Inventory(id)[b]; ok && ci.ContentHash == oc.ContentHash && ci.State == "warm" {
					n++
				}
			}
			if n < 2 {
				return fmt.Errorf("bucket %s has %d agreeing warm copies on the survivors", b, n)
			}
		}
		return nil
	})
}
