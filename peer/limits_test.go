package peer_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/query"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// searchReply is what POST /v1/search answers, success or error.
type searchReply struct {
	Results  []map[string]any
	Summary  query.Summary
	Error    string
	Code     string
	Position *int
}

// postSearch posts a search request for q to a peer and decodes the reply.
func postSearch(t *testing.T, url, q string) (*http.Response, searchReply) {
	t.Helper()
	body, err := json.Marshal(map[string]string{"query": q})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+"/v1/search", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep searchReply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("decode reply to %.80q: %v", q, err)
	}
	return resp, rep
}

// mustPeerWithEvents starts a standalone peer holding n events in main
// ("line <i> " padded to about 100 bytes), indexed.
func mustPeerWithEvents(t *testing.T, n int) string {
	t.Helper()
	p := mustStartPeer(t, t.TempDir())
	t.Cleanup(func() { p.Close() })
	url := "http://" + p.Addr()
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"time":%d,"event":"line %d %s","index":"main"}`, 1767225600+i, i, strings.Repeat("x", 90))
	}
	if code, rep := postHEC(t, url, b.String()); code != 200 {
		t.Fatalf("HEC: %d %v", code, rep)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := scrape(t, url)["quarry_peer_unindexed_events"]; n != 0 {
			return fmt.Errorf("%v events not indexed yet", n)
		}
		return nil
	})
	return url
}

// TestSearchN1Refused: review N1 on a standalone peer — 262,000 nested
// ln( (1 MB, under the peer's 1 MiB body cap) were accepted and cost
// 1.3 GB. Now the request is a 400 bad_query at the query-size cap, a
// nesting too deep under it is a 400 at the 101st call, each counted in
// quarry_peer_search_limit_hits_total under its limit, and the peer still
// answers a normal search afterwards.
func TestSearchN1Refused(t *testing.T) {
	url := mustPeerWithEvents(t, 10)
	before := scrape(t, url)
	prefix := "* | eval x="
	for _, c := range []struct {
		n, pos int
	}{
		{262000, query.MaxQueryBytes},
		{60000, len(prefix) + 3*query.MaxNesting},
	} {
		q := prefix + strings.Repeat("ln(", c.n) + "1" + strings.Repeat(")", c.n)
		resp, rep := postSearch(t, url, q)
		if resp.StatusCode != 400 || rep.Code != "bad_query" || rep.Position == nil || *rep.Position != c.pos {
			t.Fatalf("%d levels: %d %+v, want 400 bad_query at %d", c.n, resp.StatusCode, rep, c.pos)
		}
	}
	delta(t, before, scrape(t, url), map[string]float64{
		`quarry_peer_search_limit_hits_total{limit="query_size"}`: 1,
		`quarry_peer_search_limit_hits_total{limit="nesting"}`:    1,
	})
	resp, rep := postSearch(t, url, "line | stats count")
	if resp.StatusCode != 200 || len(rep.Results) != 1 || rep.Results[0]["count"] != float64(10) {
		t.Fatalf("normal search afterwards: %d %+v", resp.StatusCode, rep)
	}
}

// TestSearchN4Refused: review N4 on a standalone peer — six chained
// replace(x,"(.+)","$1"×10) grew a 100-byte event to 1 GB and the peer
// died out of memory. Now the fifth replace (10 MB) fails the search with
// 400 limit_exceeded naming the 1 MiB value limit, four run (1,000,000
// bytes), and the peer answers a normal search afterwards.
func TestSearchN4Refused(t *testing.T) {
	url := mustPeerWithEvents(t, 1)
	rep10 := `"` + strings.Repeat("$1", 10) + `"`
	q := `index=main | eval x=replace(_raw,"(.+)",` + rep10 + `)`
	for i := 0; i < 3; i++ {
		q += ` | eval x=replace(x,"(.+)",` + rep10 + `)`
	}
	resp, rep := postSearch(t, url, q+" | eval n=len(x) | fields n")
	if resp.StatusCode != 200 || len(rep.Results) != 1 {
		t.Fatalf("four replaces: %d %+v", resp.StatusCode, rep)
	}
	for i := 0; i < 2; i++ {
		q += ` | eval x=replace(x,"(.+)",` + rep10 + `)`
	}
	resp, rep = postSearch(t, url, q+" | eval n=len(x) | fields n")
	if resp.StatusCode != 400 || rep.Code != "limit_exceeded" || !strings.Contains(rep.Error, "1048576-byte limit") {
		t.Fatalf("six replaces (%d bytes of query): %d %+v, want 400 limit_exceeded", len(q), resp.StatusCode, rep)
	}
	resp, rep = postSearch(t, url, "line | stats count")
	if resp.StatusCode != 200 || len(rep.Results) != 1 || rep.Results[0]["count"] != float64(1) {
		t.Fatalf("normal search afterwards: %d %+v", resp.StatusCode, rep)
	}
}
