//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestClusterOriginRestart: an origin killed and restarted from its data
// dir rolls its hot bucket (SPEC §2); its targets get the blocks they lack
// and the roll, so every copy ends warm and identical; ingest goes on
// into a new bucket.
func TestClusterOriginRestart(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 256 << 20})
	origin := "site1-p1"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ctx, origin, Batches("r1", 3000, 300), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d", err, len(un))
	}
	guid := c.Peer(origin).GUID()
	c.KillPeer(origin)
	c.StartPeer(origin)
	c.WaitPeersUp(origin)
	check := func() error {
		copies := map[string]int{}
		var ref = map[string]string{}
		for _, id := range c.PeerIDs() {
			for b, ci := range c.Inventory(id) {
				if !strings.HasSuffix(b, "~"+guid) {
					continue
				}
				if ci.State != "warm" {
					return fmt.Errorf("%s on %s is %s", b, id, ci.State)
				}
				key := fmt.Sprintf("%d/%d/%s", ci.Events, ci.Blocks, ci.ContentHash)
				if r, ok := ref[b]; ok && r != key {
					return fmt.Errorf("%s: copies disagree (%s vs %s)", b, r, key)
				}
				ref[b] = key
				copies[b]++
			}
		}
		if len(copies) == 0 {
			return errors.New("no bucket")
		}
		for b, n := range copies {
			if n != 3 {
				return fmt.Errorf("%s has %d copies", b, n)
			}
		}
		return nil
	}
	c.WaitFor(30*time.Second, check)
	if _, un, err := c.IngestAcked(ctx, origin, Batches("r2", 2000, 200), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest after the restart: %v, %d", err, len(un))
	}
	c.Peer(origin).Store().RollAll()
	c.WaitFor(30*time.Second, check)
}
