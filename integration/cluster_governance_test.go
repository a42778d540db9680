package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/devcluster"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/searchhead"
)

// TestSearchGovernanceN1N4: the review's N1 (half a million nested ln(,
// 2 MB: a head's stack overflowed and took every process down) and N4 (a
// chain of replace(x,"(.+)","$1"×10): a peer out of memory) through a
// search head of a running cluster. Each is a 400 naming the limit —
// bad_query with the position for N1, limit_exceeded from the peers for
// N4 (the head ends the search rather than re-dispatching the bucket) —
// while another search token's normal searches on another head go on,
// exact; the RSS of the whole cluster (one process) stays bounded; and
// afterwards the head and every peer still answer a normal search.
func TestSearchGovernanceN1N4(t *testing.T) {
	const hostile, normal = "tok-hostile-0123456789", "tok-normal-0123456789"
	c := Start(t, Options{SearchTokens: []fsm.SearchToken{{Token: hostile}, {Token: normal}}})
	raws := searchIngest(t, c, "gov", 200)
	waitComplete(t, c)
	sh1 := c.StartSearchHead("sh1", "site1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	post := func(url, q string) SearchAnswer {
		t.Helper()
		a, err := SearchHTTP(ctx, url, hostile, map[string]any{"query": q})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	n := 500000
	n1 := "* | eval x=" + strings.Repeat("ln(", n) + "1" + strings.Repeat(")", n)
	rep := `"` + strings.Repeat("$1", 10) + `"`
	n4 := `* | eval x=replace(_raw,"(.+)",` + rep + `)`
	for i := 0; i < 5; i++ {
		n4 += ` | eval x=replace(x,"(.+)",` + rep + `)`
	}
	n4 += " | eval n=len(x) | fields n"
	// Every process of the cluster runs in this test process; a normal
	// search runs back to back on another head while each is refused.
	sh2 := c.StartSearchHead("sh2", "site1")
	mem := testutil.StartMemPeak()
	for _, tc := range []struct{ name, q, code, msg string }{
		{"N1", n1, "bad_query", "column 262145"},
		{"N4", n4, "limit_exceeded", "1048576-byte limit"},
	} {
		var a SearchAnswer
		lat, err := devcluster.CountsDuring(ctx, sh2.URL(), normal, "*", int64(len(raws)), func() { a = post(sh1.URL(), tc.q) })
		if a.Status != 400 || a.Code != tc.code || !strings.Contains(a.Error, tc.msg) {
			t.Fatalf("%s through the head: %d %s %q", tc.name, a.Status, a.Code, a.Error)
		}
		if err != nil {
			t.Fatalf("a normal search while %s was refused: %v", tc.name, err)
		}
		med, most := devcluster.Spread(lat)
		t.Logf("%s refused in %v (%s); meanwhile %d normal searches, exact, median %v, max %v", tc.name, a.Elapsed, a.Error, len(lat), med, most)
	}
	if _, live, rss := mem.End(); rss > 256<<20 {
		t.Fatalf("resident memory grew %d MiB at its peak over N1 and N4", rss>>20)
	} else {
		t.Logf("peak growth over N1 and N4: RSS %d KiB, live heap %d KiB", rss>>10, live>>10)
	}
	a := post(sh1.URL(), "* | stats count")
	if a.Status != 200 || len(a.Resp.Results) != 1 || fmt.Sprint(a.Resp.Results[0]["count"]) != fmt.Sprint(len(raws)) {
		t.Fatalf("a normal search afterwards: %d %q %+v", a.Status, a.Error, a.Resp.Results)
	}
	for _, id := range c.PeerIDs() {
		if pa := post("http://"+c.Peer(id).Addr(), "* | stats count"); pa.Status != 200 {
			t.Fatalf("peer %s afterwards: %d %q", id, pa.Status, pa.Error)
		}
	}
}

// TestSearchMemoryBudgetCluster (issue 26 item 1, review M1): a search
// whose held partials pass a role's --search-memory ends with 400
// limit_exceeded naming the limit — on the search head (every event of a
// `sort 0`, held for the merge at the end) and on a peer (a group per
// event of `stats count by _raw`, held until the peer's combined batch) —
// and each process goes on answering: a normal search right after gets
// the exact count, from the head and from every peer. The budgets here are
// small so a few thousand events pass them; the defaults are 512 MiB.
func TestSearchMemoryBudgetCluster(t *testing.T) {
	c := Start(t, Options{PeerTweak: func(id string, cfg *peer.Config) { cfg.SearchMemory = 32 << 10 }})
	raws := searchIngest(t, c, "mem", 4000)
	sh1 := c.StartSearchHead("sh1", "site1", func(cfg *searchhead.Config) { cfg.SearchMemory = 512 << 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	post := func(url, q string) SearchAnswer { return mustSearch(t, ctx, url, q) }
	mem := testutil.StartMemPeak()
	for _, tc := range []struct{ q, where string }{
		{"* | sort 0 _raw", "held on search head sh1"},
		{"* | stats count by _raw", "held on peer"},
	} {
		// A normal search runs at the same time as the refused one.
		normal := make(chan SearchAnswer, 1)
		go func() {
			a, err := SearchHTTP(ctx, sh1.URL(), "", map[string]any{"query": "* | stats count"})
			if err != nil {
				a.Status, a.Error = 0, err.Error()
			}
			normal <- a
		}()
		a := post(sh1.URL(), tc.q)
		if a.Status != 400 || a.Code != "limit_exceeded" || !strings.Contains(a.Error, "--search-memory") || !strings.Contains(a.Error, tc.where) {
			t.Fatalf("%q: %d %s %q, want 400 limit_exceeded naming --search-memory %s", tc.q, a.Status, a.Code, a.Error, tc.where)
		}
		t.Logf("%q refused in %v: %s", tc.q, a.Elapsed, a.Error)
		a = <-normal
		if a.Status != 200 || a.Resp.Summary.Partial || fmt.Sprint(a.Resp.Results[0]["count"]) != fmt.Sprint(len(raws)) {
			t.Fatalf("a normal search at the same time: %d %q %+v", a.Status, a.Error, a.Resp.Results)
		}
		t.Logf("a normal search at the same time: %v", a.Elapsed)
	}
	// --max-results applied while merging: a head whose budget cannot hold
	// the whole sort keeps only its first 101 rows as partials arrive, and
	// answers exactly the first 100 rows a head holding everything gives,
	// with the result-limit warning.
	small := c.StartSearchHead("sh2", "site1", func(cfg *searchhead.Config) { cfg.SearchMemory, cfg.MaxResults = 512<<10, 100 })
	big := c.StartSearchHead("sh3", "site1")
	a := post(small.URL(), "* | sort 0 _raw")
	whole := post(big.URL(), "* | sort 0 _raw")
	if a.Status != 200 || whole.Status != 200 || len(a.Resp.Results) != 100 || len(whole.Resp.Results) != len(raws) {
		t.Fatalf("sort 0 with --max-results 100 under 512 KiB: %d %q, %d rows; a head holding everything: %d, %d rows", a.Status, a.Error, len(a.Resp.Results), whole.Status, len(whole.Resp.Results))
	}
	for i, r := range a.Resp.Results {
		if r["_raw"] != whole.Resp.Results[i]["_raw"] {
			t.Fatalf("row %d is %v, the whole sort's is %v", i, r["_raw"], whole.Resp.Results[i]["_raw"])
		}
	}
	if w := strings.Join(a.Resp.Summary.Warnings, "; "); !strings.Contains(w, "result limit of 100 rows reached") {
		t.Fatalf("no result-limit warning: %q", w)
	}
	if sum, by := c.peerMetric(t, `quarry_peer_search_limit_hits_total{limit="search_memory"}`); sum < 1 {
		t.Fatalf("no peer counted its search_memory refusal: %v", by)
	}
	// Every process of the cluster runs in this test process: its resident
	// memory grew by less than the budgets' order of magnitude allows.
	if _, live, rss := mem.End(); rss > 256<<20 {
		t.Fatalf("resident memory grew %d MiB at its peak over the refused searches", rss>>20)
	} else {
		t.Logf("peak growth over the refused searches: RSS %d KiB, live heap %d KiB", rss>>10, live>>10)
	}
	// One stream message past a head's whole budget ends the search the
	// same way before the head holds it (bus.StreamOptions.MaxMessage):
	// a peer's batch of a sort is one message of its bucket's rows.
	tiny := c.StartSearchHead("sh4", "site1", func(cfg *searchhead.Config) { cfg.SearchMemory = 4 << 10 })
	if a := post(tiny.URL(), "* | sort 0 _raw"); a.Status != 400 || a.Code != "limit_exceeded" || !strings.Contains(a.Error, "(one message from peer") {
		t.Fatalf("a message past twice a 4 KiB head budget: %d %s %q", a.Status, a.Code, a.Error)
	} else {
		t.Logf("a message past twice a 4 KiB head budget: %s", a.Error)
	}
	// The peer's own POST /v1/search keeps every partial for its merge:
	// the same budget applies.
	id := c.PeerIDs()[0]
	if pa := post("http://"+c.Peer(id).Addr(), "* | sort 0 _raw"); pa.Status != 400 || pa.Code != "limit_exceeded" || !strings.Contains(pa.Error, "--search-memory") {
		t.Fatalf("peer %s's own search: %d %s %q", id, pa.Status, pa.Code, pa.Error)
	}
	for _, id := range c.PeerIDs() {
		if pa := post("http://"+c.Peer(id).Addr(), "* | stats count"); pa.Status != 200 {
			t.Fatalf("peer %s afterwards: %d %q", id, pa.Status, pa.Error)
		}
	}
}

// mustSearch posts query q to a search head's or a peer's /v1/search.
func mustSearch(t *testing.T, ctx context.Context, url, q string) SearchAnswer {
	t.Helper()
	a, err := SearchHTTP(ctx, url, "", map[string]any{"query": q})
	if err != nil {
		t.Fatal(err)
	}
	return a
}
