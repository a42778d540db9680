package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestHostileSearchInvitesReachOnlyTheirPeer (SECURITY.md, review finding
// M4): a search head sends each peer its own request, with only that
// peer's stream invite, on the peer's own subject. A process holding a
// peer's NATS credentials cannot subscribe to its site's search subject or
// to another peer's, so it never learns another peer's stream inbox (the
// only way to answer, forge or abort that peer's stream: inboxes are
// random, and each user subscribes only its own). What it does receive on
// its own subject names its own peer and no other. Searches stay exact.
func TestHostileSearchInvitesReachOnlyTheirPeer(t *testing.T) {
	c := Start(t, Options{RoleUsers: true, PeersPerSite: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Through both site1 peers, so each originates buckets and is primary
	// for some in site1: the spy's own subject gets requests.
	for _, p := range []string{"site1-p1", "site1-p2"} {
		if _, un, err := c.IngestAcked(ctx, p, Batches("invites", 1000, 50), 30*time.Second); err != nil || len(un) > 0 {
			t.Fatalf("ingest through %s: %v (%d batches not acknowledged)", p, err, len(un))
		}
	}
	head := c.StartSearchHead("sh1", "site1").URL()
	const spy = "site1-p2"
	errs := &asyncErrs{}
	nc, err := bus.Connect(ctx, c.Bus.Server("site1").ClientURL(), bus.ConnectOptions{Name: "spy " + spy, User: spy,
		Password: NATSPassword(spy), Logger: quietLogger(), OnAsyncError: errs.add})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj, _ := bus.NewSubjects("")
	own, _ := subj.SearchPeer("site1", spy)
	mine, err := nc.SubscribeSync(own)
	if err != nil {
		t.Fatal(err)
	}
	others := []string{"quarry.search.site1", "quarry.search.site1.site1-p1", "quarry.search.site2.site2-p1", "quarry.search.>"}
	leaked := make(chan *nats.Msg, 64)
	for _, s := range others {
		if _, err := nc.ChanSubscribe(s, leaked); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, s := range others {
		testutil.WaitFor(t, 5*time.Second, func() error { return errs.violation(s) })
	}
	for i := 0; i < 5; i++ {
		a, err := SearchHTTP(ctx, head, "", map[string]any{"query": "invites | stats count"})
		if err != nil || a.Status != 200 || len(a.Resp.Results) != 1 || a.Resp.Summary.Partial {
			t.Fatalf("search %d: %+v %v", i, a, err)
		}
		if n, _ := a.Resp.Results[0]["count"].(json.Number).Int64(); n != 2000 {
			t.Fatalf("search %d counts %d events, want 2000", i, n)
		}
	}
	got := 0
	for {
		m, err := mine.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		var req api.SearchRequest
		if err := bus.Decode(m, &req); err != nil {
			t.Fatalf("a request on %s: %v", own, err)
		}
		for p := range req.Invites {
			if p != spy {
				t.Fatalf("a request on %s invites %s too: %v", own, p, req.Invites)
			}
		}
		got++
	}
	if got == 0 {
		t.Fatalf("no search request reached %s on %s", spy, own)
	}
	select {
	case m := <-leaked:
		t.Fatalf("a search request for others reached %s's credentials on %s", spy, m.Subject)
	default:
	}
	t.Logf("%d requests on %s, each inviting %s alone", got, own, spy)
}
