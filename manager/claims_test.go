package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestNATSClaimedCopiesNeedVouching (review M5, SECURITY.md "bucket
// events"): at the current cluster version, p1 cannot make itself a holder
// of p2's sealed bucket — a copy_added event for it is refused, and a
// registration claiming it is accepted without the claimed copy — so the
// bucket's copies are as before, and the origin's own report is taken.
// (The claims the managers can vouch for: fsm TestInventoryClaims.)
func TestNATSClaimedCopiesNeedVouching(t *testing.T) {
	b := startTestBus(t, "p1", "p2")
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := g.leader()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if v := l.ClusterVersion(); v < fsm.InventoryVersion {
			return fmt.Errorf("cluster version %d", v)
		}
		return nil
	})
	p1, p2 := newFakePeer(t, b, "p1"), newFakePeer(t, b, "p2")
	p1.register(ctx, nil)
	p2.register(ctx, nil)
	for _, p := range []*fakePeer{p1, p2} {
		p.startHeartbeats()
		defer p.stopHeartbeats()
	}
	id := fsm.BucketID("main", "9", p2.guid)
	g.apply(&fsm.AddBucket{ID: id, Index: "main", Origin: "p2", Earliest: 1})
	g.apply(&fsm.RollBucket{Bucket: id, Earliest: 1, Latest: 2, Size: 10, Events: 3, Blocks: 3, LastChecksum: "c3"})
	copies := func() map[string]bool {
		out := map[string]bool{}
		l.Read(func(s *fsm.State) {
			if bv, ok := findBucket(s, id); ok {
				for _, c := range bv.Copies {
					out[c.Peer] = true
				}
			}
		})
		return out
	}
	if c := copies(); len(c) != 1 || !c["p2"] {
		t.Fatalf("copies of %s before: %v", id, c)
	}
	_, err := p1.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "claim-1", Kind: api.EventCopyAdded, Bucket: id, Peer: "p1", Searchable: true, Blocks: 3})
	if !bus.IsRemote(err, api.CodeRefused) {
		t.Fatalf("p1's copy_added for p2's bucket: %v, want refused", err)
	}
	p1.register(ctx, []api.Copy{{Bucket: id, Index: "main", State: api.CopyWarm, Searchable: true, Blocks: 3}})
	if c := copies(); c["p1"] {
		t.Fatalf("p1's registration claim of %s was adopted: copies %v", id, c)
	}
	// The origin's own report is taken as ever.
	p2.register(ctx, []api.Copy{{Bucket: id, Index: "main", State: api.CopyWarm, Searchable: true, Blocks: 3}})
	if c := copies(); len(c) != 1 || !c["p2"] {
		t.Fatalf("copies of %s after the origin registered again: %v", id, c)
	}
}
