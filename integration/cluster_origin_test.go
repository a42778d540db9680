package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterOriginKilledAfterAck: the origin dies right after an ack it
// sent (nothing more was sent to it). Every event it acknowledged is on
// every surviving copy: all surviving copies of each of its buckets agree
// (events, blocks, content hash), and the searchable ones hold each
// acknowledged event exactly once over the buckets.
//
// Sealing at the longest length and fetch/truncate are the managers' seal
// task plus the peer's fixup runner (peer/fixups_test.go); the managers'
// side of that exchange travels on the NATS control plane.
func TestClusterOriginKilledAfterAck(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 128 << 10})
	origin := "site2-p3"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	acked, un, err := c.IngestAcked(ctx, origin, Batches("od", 6000, 300), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d unacked", err, len(un))
	}
	guid := c.Peer(origin).GUID()
	c.KillPeer(origin) // right after the last ack: nothing else was sent
	var survivors map[string][]string
	c.WaitFor(30*time.Second, func() error {
		survivors = map[string][]string{}
		for _, id := range c.PeerIDs() {
			if c.Peer(id) == nil {
				continue
			}
			for b := range c.Inventory(id) {
				if strings.HasSuffix(b, "~"+guid) {
					survivors[b] = append(survivors[b], id)
				}
			}
		}
		if len(survivors) == 0 {
			return fmt.Errorf("no surviving copy of the origin's buckets")
		}
		for b, hs := range survivors {
			if len(hs) < 2 {
				return fmt.Errorf("bucket %s survives on %v only", b, hs)
			}
			first := c.Inventory(hs[0])[b]
			for _, h := range hs[1:] {
				ci := c.Inventory(h)[b]
				if ci.Events != first.Events || ci.Blocks != first.Blocks || ci.ContentHash != first.ContentHash {
					return fmt.Errorf("bucket %s: %s has %d events/%d blocks, %s has %d/%d", b, hs[0], first.Events, first.Blocks, h, ci.Events, ci.Blocks)
				}
			}
		}
		return nil
	})
	seen := c.RawsOnSearchableCopies(survivors)
	n := 0
	for _, a := range acked {
		for _, r := range a.Raws {
			n++
			if seen[r] != 1 {
				t.Fatalf("acknowledged event %q on the survivors %d times", r, seen[r])
			}
		}
	}
	t.Logf("%d acknowledged events on every surviving copy of %d buckets", n, len(survivors))

	// The managers declare the origin Down and seal its hot bucket at the
	// longest surviving length; every surviving copy ends warm at that
	// length, with one content hash.
	c.WaitFor(60*time.Second, func() error {
		var views []fsm.BucketView
		c.State(func(s *fsm.State) { views = s.BucketList("", "") })
		for _, v := range views {
			if !strings.HasSuffix(v.ID, "~"+guid) {
				continue
			}
			if v.Hot {
				return fmt.Errorf("bucket %s still hot in the managers' table", v.ID)
			}
		}
		for b, hs := range survivors {
			first := c.Inventory(hs[0])[b]
			for _, h := range hs {
				ci := c.Inventory(h)[b]
				if ci.State != "warm" || ci.Blocks != first.Blocks || ci.ContentHash != first.ContentHash {
					return fmt.Errorf("bucket %s on %s: %s, %d blocks (vs %d on %s)", b, h, ci.State, ci.Blocks, first.Blocks, hs[0])
				}
			}
		}
		return nil
	})
}
