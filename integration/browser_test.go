//go:build browser

package integration

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/browsertest"
)

// TestBrowserClusterPagePeerDown: the leader's cluster page, left open,
// shows a killed peer turn Down and the generation change, without a
// reload (a marker set in the page before the kill is still there after).
func TestBrowserClusterPagePeerDown(t *testing.T) {
	c := Start(t, Options{})
	ctx := browsertest.New(t, 2*time.Minute)
	ictx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ictx, "site1-p1", Batches("ui", 600, 200), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d unacknowledged", err, len(un))
	}
	ids := c.PeerIDs()
	c.WaitPeersUp(ids...)
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+c.Leader().HTTPAddr()+"/")); err != nil {
		t.Fatal(err)
	}
	peerState := func(id string) (string, error) {
		var s string
		err := browsertest.Eval(ctx, fmt.Sprintf(`(document.querySelector('tr[data-peer=%q] td.state') || {}).textContent || ""`, id), &s)
		return s, err
	}
	browsertest.Poll(t, 20*time.Second, func() error {
		for _, id := range ids {
			if s, err := peerState(id); err != nil || s != "Up" {
				return fmt.Errorf("page shows %s as %q (%v)", id, s, err)
			}
		}
		return nil
	})
	var gen0 string
	if err := browsertest.Eval(ctx, `document.getElementById("generation").textContent`, &gen0); err != nil {
		t.Fatal(err)
	}
	var marked bool
	if err := browsertest.Eval(ctx, `(window.__notReloaded = true)`, &marked); err != nil || !marked {
		t.Fatalf("mark the page: %v", err)
	}
	var fcp float64
	browsertest.Eval(ctx, `(performance.getEntriesByName("first-contentful-paint")[0] || {startTime: -1}).startTime`, &fcp)
	t.Logf("cluster page: first contentful paint %.0f ms after navigation", fcp)
	browsertest.Screenshot(t, ctx, "cluster.png")

	victim := "site2-p3"
	c.KillPeer(victim)
	var gen string
	browsertest.Poll(t, 30*time.Second, func() error {
		s, err := peerState(victim)
		if err != nil {
			return err
		}
		browsertest.Eval(ctx, `document.getElementById("generation").textContent`, &gen)
		if s != "Down" || gen == gen0 {
			return fmt.Errorf("page shows %s as %q, generation %s (was %s)", victim, s, gen, gen0)
		}
		return nil
	})
	var still bool
	if err := browsertest.Eval(ctx, `window.__notReloaded === true`, &still); err != nil || !still {
		t.Fatalf("the page was reloaded (marker gone): %v", err)
	}
	// The generation history names the change.
	var hist string
	browsertest.Poll(t, 10*time.Second, func() error {
		browsertest.Eval(ctx, fmt.Sprintf(`(document.querySelector('#gens tr[data-generation=%q]') || {}).textContent || ""`, gen), &hist)
		if hist == "" {
			return fmt.Errorf("generation %s not in the history table", gen)
		}
		return nil
	})
	t.Logf("generation %s → %s; history row: %s", gen0, gen, hist)
	browsertest.Screenshot(t, ctx, "cluster-peer-down.png")

	// Maintenance from the page: without the token the page asks for it and
	// nothing changes; with it the cluster enters maintenance mode and the
	// badge says so; disabling it works the same way.
	badge := func() string {
		var b string
		browsertest.Eval(ctx, `document.getElementById("maint-badge").textContent`, &b)
		return b
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("maint-on"))); err != nil {
		t.Fatal(err)
	}
	var msg string
	browsertest.Eval(ctx, `document.getElementById("action-result").textContent`, &msg)
	if msg != "Type the admin token first." || c.maintenance() {
		t.Fatalf("maintenance without a token: page says %q, cluster maintenance %v", msg, c.maintenance())
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), AdminToken), chromedp.Click(chromedp.ID("maint-on"))); err != nil {
		t.Fatal(err)
	}
	browsertest.Poll(t, 10*time.Second, func() error {
		if b := badge(); b != "MAINTENANCE MODE" || !c.maintenance() {
			return fmt.Errorf("badge %q, cluster maintenance %v", b, c.maintenance())
		}
		return nil
	})
	var stored string
	browsertest.Eval(ctx, `sessionStorage.getItem("quarry.adminToken")`, &stored)
	if stored != AdminToken {
		t.Fatalf("token kept in the tab as %q", stored)
	}
	browsertest.Screenshot(t, ctx, "cluster-maintenance.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("maint-off"))); err != nil {
		t.Fatal(err)
	}
	browsertest.Poll(t, 10*time.Second, func() error {
		if b := badge(); b != "maintenance off" || c.maintenance() {
			return fmt.Errorf("badge %q, cluster maintenance %v", b, c.maintenance())
		}
		return nil
	})
}

func (c *Cluster) maintenance() bool {
	var on bool
	c.State(func(s *fsm.State) { on = s.Maintenance() })
	return on
}

// TestBrowserClusterPageLinksSearchHeads (issue 29 item 5): the leader's
// cluster page lists every search head that asked it for a table, with a
// link to its search page; following the link opens that head's search
// page, which answers a search.
func TestBrowserClusterPageLinksSearchHeads(t *testing.T) {
	c := Start(t, Options{})
	raws := searchIngest(t, c, "links", 100)
	heads := map[string]string{}
	for _, h := range []struct{ id, site string }{{"sh1", "site1"}, {"sh0", fsm.Site0}} {
		heads[h.id] = c.StartSearchHead(h.id, h.site).URL()
	}
	ctx := browsertest.New(t, 2*time.Minute)
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+c.Leader().HTTPAddr()+"/")); err != nil {
		t.Fatal(err)
	}
	browsertest.Poll(t, 20*time.Second, func() error {
		for id, u := range heads {
			var href string
			browsertest.Eval(ctx, fmt.Sprintf(`(document.querySelector('#heads tr[data-head=%q] a') || {}).href || ""`, id), &href)
			if href != u+"/" {
				return fmt.Errorf("page links %s to %q, want %q", id, href, u+"/")
			}
		}
		return nil
	})
	browsertest.Screenshot(t, ctx, "cluster-search-heads.png")
	var clicked bool
	if err := browsertest.Eval(ctx, `(function () { document.querySelector('#heads tr[data-head="sh1"] a').click(); return true })()`, &clicked); err != nil || !clicked {
		t.Fatalf("click the link to sh1: %v", err)
	}
	var loc string
	browsertest.Poll(t, 20*time.Second, func() error {
		browsertest.Eval(ctx, `location.href`, &loc)
		if !strings.HasPrefix(loc, heads["sh1"]+"/") {
			return fmt.Errorf("after the click the tab is at %q", loc)
		}
		return nil
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(heads["sh1"]+"/?range=all&q="+url.QueryEscape("* | stats count"))); err != nil {
		t.Fatal(err)
	}
	browsertest.Poll(t, 30*time.Second, func() error {
		var text string
		if err := browsertest.Eval(ctx, `document.body.innerText`, &text); err != nil {
			return err
		}
		if !strings.Contains(text, fmt.Sprint(len(raws))) {
			return fmt.Errorf("the linked search page does not show the count %d yet", len(raws))
		}
		return nil
	})
}
