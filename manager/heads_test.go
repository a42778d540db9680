package manager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/fsm"
)

// TestSearchHeadURLHeardByLeader (issue 29 item 5, SECURITY.md "search
// head URL"): a search head that names its URL in its generation requests
// is listed, with its site, under search_heads of the leader's status —
// the cluster page's link. A registered peer naming a URL the same way is
// a peer, not a search head, and is never listed; a URL that is not http
// or https with a host (javascript:, user info, too long) is ignored; the
// generation is answered in every case.
func TestSearchHeadURLHeardByLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := startTestBusWith(t, []string{"sh1", "sh2"}, "p1")
	subj := b.subj
	g := newGroup(t, 1, func(c *Config) { c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw" })
	l := g.leader()
	p1 := newFakePeer(t, b, "p1")
	p1.register(ctx, nil)
	fetch := func(c *mgrclient.ManagerClient, site string) {
		t.Helper()
		if _, err := c.FetchGeneration(ctx, site, 0, 0); err != nil {
			t.Fatalf("generation for %s: %v", site, err)
		}
	}
	p1.cli.SetURL(fsm.DefaultSite, "http://127.0.0.1:9/")
	fetch(p1.cli, fsm.DefaultSite)
	sh1 := mgrclient.NewManagerClient(b.connect(t, "sh1", "sh1-pw"), subj)
	sh1.Sender = "sh1"
	sh1.SetURL(fsm.DefaultSite, "http://127.0.0.1:18042")
	fetch(sh1, fsm.Site0) // not its own site's table: names no URL
	if got := l.statusView().SearchHeads; len(got) != 0 {
		t.Fatalf("before sh1 asked for its own site's table: %+v", got)
	}
	fetch(sh1, fsm.DefaultSite)
	sh2 := mgrclient.NewManagerClient(b.connect(t, "sh2", "sh2-pw"), subj)
	sh2.Sender = "sh2"
	for _, bad := range []string{"javascript:alert(1)", "http://user:pw@127.0.0.1:1", "ftp://127.0.0.1", "http://", "http://x/" + strings.Repeat("a", maxHeadURL)} {
		sh2.SetURL(fsm.DefaultSite, bad)
		fetch(sh2, fsm.DefaultSite)
	}
	got := l.statusView().SearchHeads
	if len(got) != 1 || got["sh1"].URL != "http://127.0.0.1:18042" || got["sh1"].Site != fsm.DefaultSite {
		t.Fatalf("search_heads %+v, want only sh1 at http://127.0.0.1:18042 (site %s)", got, fsm.DefaultSite)
	}
	// sh1 announces a new address: the entry follows it.
	sh1.SetURL(fsm.DefaultSite, "https://sh1.example:8089")
	fetch(sh1, fsm.DefaultSite)
	if u := l.statusView().SearchHeads["sh1"].URL; u != "https://sh1.example:8089" {
		t.Fatalf("after a new URL: %q", u)
	}
}

// TestHeadBookBounded: the heads kept are capped at maxHeadsKept (a new
// one replaces the one heard longest ago) and forgotten after headForget.
func TestHeadBookBounded(t *testing.T) {
	var hb headBook
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < maxHeadsKept+10; i++ {
		hb.record(fmt.Sprintf("sh%03d", i), "site1", "http://127.0.0.1:1", t0.Add(time.Duration(i)*time.Millisecond))
	}
	ids := hb.ids(t0.Add(time.Second))
	if len(ids) != maxHeadsKept || ids[0] != "sh010" {
		t.Fatalf("%d heads kept, first %q; want %d from sh010", len(ids), ids[0], maxHeadsKept)
	}
	if n := len(hb.view(t0.Add(headForget + time.Minute))); n != 0 {
		t.Fatalf("%d heads left after %v unheard", n, headForget)
	}
}
