package peer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/peer/hec"
)

// startLimited starts a standalone peer with single-peer search limits
// and 20 indexed events in main.
func startLimited(t *testing.T, timeout time.Duration, maxResults, maxSearches int) (*Peer, string) {
	t.Helper()
	tok, err := hec.ParseTokenFlag("T=main:useack=false")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(Config{ID: "p1", Site: "site1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true,
		SearchTimeout: timeout, MaxResults: maxResults, MaxSearches: maxSearches})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	url := "http://" + p.Addr()
	var b strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&b, `{"time":%d,"event":"row %d","index":"main"}`, 1767225600+i, i)
	}
	postEventsOK(t, url, b.String())
	return p, url
}

// postEventsOK posts a HEC /event body with token T and fails the test
// unless it is answered 200.
func postEventsOK(t *testing.T, url, body string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/services/collector/event", strings.NewReader(body))
	req.Header.Set("Authorization", "Splunk T")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HEC: %v %v", resp, err)
	}
	resp.Body.Close()
}

// allTwenty polls (the events are indexed in the background) until a
// count over the peer's 20 events answers 20.
func allTwenty(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, rep := searchOnce(t, url, "row | stats count")
		if resp.StatusCode == 200 && len(rep.Results) == 1 && rep.Results[0]["count"] == float64(20) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a count of the 20 events: %d %+v", resp.StatusCode, rep)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type limitedReply struct {
	Results []map[string]any
	Summary struct{ Warnings []string }
	Error   string
	Code    string
}

func searchOnce(t *testing.T, url, q string) (*http.Response, limitedReply) {
	t.Helper()
	resp, err := http.Post(url+"/v1/search", "application/json", strings.NewReader(fmt.Sprintf(`{"query":%q}`, q)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep limitedReply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return resp, rep
}

// Review M1: a peer's own POST /v1/search had no concurrency cap. Past
// --max-searches it answers 429 too_many_searches with Retry-After, and
// serves again once a slot is free.
func TestHTTPSearchConcurrencyCap(t *testing.T) {
	p, url := startLimited(t, time.Minute, 100, 1)
	p.httpSearchSem <- struct{}{} // one search running
	resp, rep := searchOnce(t, url, "row | stats count")
	if resp.StatusCode != 429 || rep.Code != "too_many_searches" || resp.Header.Get("Retry-After") == "" || !strings.Contains(rep.Error, "--max-searches") {
		t.Fatalf("past the cap: %d %s %+v", resp.StatusCode, resp.Header.Get("Retry-After"), rep)
	}
	<-p.httpSearchSem
	allTwenty(t, url)
}

// A single-peer search past --search-timeout is stopped with 504
// search_timeout naming the limit; past --max-results the answer is cut
// with a warning in the summary, never silently.
func TestHTTPSearchTimeAndResultCaps(t *testing.T) {
	_, url := startLimited(t, time.Nanosecond, 100, 4)
	resp, rep := searchOnce(t, url, "row")
	if resp.StatusCode != 504 || rep.Code != "search_timeout" || !strings.Contains(rep.Error, "--search-timeout") {
		t.Fatalf("timeout: %d %+v", resp.StatusCode, rep)
	}
	_, url = startLimited(t, time.Minute, 5, 4)
	allTwenty(t, url)
	resp, rep = searchOnce(t, url, "row")
	if resp.StatusCode != 200 || len(rep.Results) != 5 || len(rep.Summary.Warnings) != 1 || !strings.Contains(rep.Summary.Warnings[0], "result limit of 5 rows") {
		t.Fatalf("result cap: %d %d rows %+v", resp.StatusCode, len(rep.Results), rep.Summary)
	}
	if rep.Results[0]["_raw"] != "row 19" {
		t.Fatalf("first row %v, want the newest (row 19)", rep.Results[0]["_raw"])
	}
	resp, rep = searchOnce(t, url, "row | stats count by _raw")
	if resp.StatusCode != 200 || len(rep.Results) != 5 || len(rep.Summary.Warnings) != 1 {
		t.Fatalf("result cap on groups: %d %d rows %+v", resp.StatusCode, len(rep.Results), rep.Summary)
	}
}
