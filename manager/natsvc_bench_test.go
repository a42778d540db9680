package manager

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
)

// BenchmarkNATSHeartbeat: one heartbeat round trip peer → leader over the
// embedded bus (typed request, leader check, in-memory record, status).
func BenchmarkNATSHeartbeat(b *testing.B) {
	bb := startTestBusB(b, "p1")
	newGroup(b, 1, func(c *Config) { c.NATS, c.NATSUser, c.NATSPassword = bb.srv.ClientURL(), "mgr", "mgr-pw" })
	nc := bb.connectB(b, "p1", "p1-pw")
	cli := mgrclient.NewManagerClient(nc, bb.subj)
	cli.Sender = "p1"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.Register(ctx, api.Register{Peer: "p1", GUID: "g1", Site: "site1"}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := cli.Heartbeat(ctx, api.Heartbeat{Peer: "p1", GUID: "g1"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNATSTargets: a new hot bucket's targets (ChooseTargets + a Raft
// commit of AddBucket) over NATS, 3 peers, one manager.
func BenchmarkNATSTargets(b *testing.B) {
	bb := startTestBusB(b, "p1", "p2", "p3")
	newGroup(b, 1, func(c *Config) { c.NATS, c.NATSUser, c.NATSPassword = bb.srv.ClientURL(), "mgr", "mgr-pw" })
	var cli *mgrclient.ManagerClient
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range []string{"p3", "p2", "p1"} {
		cli = mgrclient.NewManagerClient(bb.connectB(b, p, p+"-pw"), bb.subj)
		cli.Sender = p // each peer registers itself
		if _, err := cli.Register(ctx, api.Register{Peer: p, GUID: "g" + p, Site: "site1"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := cli.Targets(ctx, api.TargetsRequest{Origin: "p1", Index: "main", LocalID: strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
	}
}
