package manager

import (
	"context"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
)

// A targets request applied whose answer was lost, asked again with the
// same id naming the targets the origin used meanwhile (api.TargetsRequest
// Used): the state records those copies too, so it knows every copy that
// counts toward an ack — not only the committed choice the origin never
// heard of.
func TestNATSTargetsRetryRecordsUsed(t *testing.T) {
	b := startTestBus(t, "p1", "p2", "p3", "p4")
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p1, p2, p3, p4 := newFakePeer(t, b, "p1"), newFakePeer(t, b, "p2"), newFakePeer(t, b, "p3"), newFakePeer(t, b, "p4")
	for _, p := range []*fakePeer{p1, p2, p3, p4} {
		p.register(ctx, nil)
		p.startHeartbeats()
	}
	req := api.TargetsRequest{RequestID: "targets-p1-main-9", Origin: "p1", Index: "main", LocalID: "9", Earliest: 5}
	tr, err := p1.cli.Targets(ctx, req)
	if err != nil || len(tr.Targets) != 2 {
		t.Fatalf("targets: %+v, %v; want two targets at RF 3", tr, err)
	}
	var peers []string
	for _, x := range tr.Targets {
		peers = append(peers, x.Peer)
	}
	other := ""
	for _, p := range []string{"p2", "p3", "p4"} {
		if !containsStr(peers, p) {
			other = p
		}
	}
	req.Used = []api.Target{{Peer: other, Searchable: true}}
	if _, err := p1.cli.Targets(ctx, req); err != nil {
		t.Fatalf("targets again with used %s: %v", other, err)
	}
	var bv fsm.BucketView
	g.leader().Read(func(s *fsm.State) { bv, _ = findBucket(s, tr.Bucket) })
	peers = peers[:0]
	for _, c := range bv.Copies {
		peers = append(peers, c.Peer)
	}
	if len(bv.Copies) != 4 || !containsStr(peers, other) {
		t.Fatalf("copies %v: want the origin's, the committed targets' and the used %s", peers, other)
	}
}
