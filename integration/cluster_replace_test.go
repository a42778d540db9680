//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterReplacementTargetRecorded: at RF=2 the only target of a hot
// bucket hangs past target_timeout while Up (SPEC §4, issue 9 item 5).
// Acks continue on a replacement target, which the managers chose and
// recorded before it counted: every copy of that bucket on a peer is in
// the state, the replacement on neither the origin nor the hung target.
func TestClusterReplacementTargetRecorded(t *testing.T) {
	sr := startSlowReplicas(t, Options{RF: "origin:1,total:2", SF: "origin:1,total:1", MaxHotBytes: 4 << 20})
	c := sr.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	origin := "site1-p1"
	sr.ingest(ctx, t, origin, "before", 300)
	var victim, bucket string
	c.WaitFor(30*time.Second, func() error {
		c.State(func(s *fsm.State) {
			for _, b := range s.BucketList("", origin) {
				if b.Hot && b.Origin == origin {
					for _, cp := range b.Copies {
						if cp.Peer != origin {
							victim, bucket = cp.Peer, b.ID
						}
					}
				}
			}
		})
		if victim == "" {
			return fmt.Errorf("no hot replica yet")
		}
		return nil
	})
	sr.hang(victim)
	sr.ingest(ctx, t, origin, "during", 1000)
	var replacement string
	c.WaitFor(30*time.Second, func() error {
		var copies []string
		c.State(func(s *fsm.State) {
			b, _ := findBucketView(s, bucket)
			for _, cp := range b.Copies {
				copies = append(copies, cp.Peer)
				if cp.Peer != origin && cp.Peer != victim {
					replacement = cp.Peer
				}
			}
		})
		if replacement == "" {
			return fmt.Errorf("bucket %s: copies %v, no replacement recorded", bucket, copies)
		}
		return nil
	})
	// The replacement holds the bucket's blocks (it counted toward acks),
	// and every copy of it on any peer is in the state.
	c.WaitFor(30*time.Second, func() error {
		if _, ok := c.Inventory(replacement)[bucket]; !ok {
			return fmt.Errorf("replacement %s holds no copy of %s", replacement, bucket)
		}
		return nil
	})
	known := map[string]bool{}
	c.State(func(s *fsm.State) {
		b, _ := findBucketView(s, bucket)
		for _, cp := range b.Copies {
			known[cp.Peer] = true
		}
	})
	for _, id := range c.PeerIDs() {
		if _, ok := c.Inventory(id)[bucket]; ok && !known[id] {
			t.Errorf("peer %s holds a copy of %s the state does not know", id, bucket)
		}
	}
	t.Logf("bucket %s: target %s hung, replacement %s recorded by the managers", bucket, victim, replacement)
	sr.release()
	waitComplete(t, c)
}
