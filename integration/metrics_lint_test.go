package integration

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// scrape reads a /metrics page and lints it as Prometheus would.
func scrape(t *testing.T, url string) (string, []promlint.Problem) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	probs, err := promlint.New(strings.NewReader(string(b))).Lint()
	if err != nil {
		t.Fatalf("%s: not the Prometheus text format: %v", url, err)
	}
	return string(b), probs
}

// TestMetricsLintClean: every role's /metrics passes Prometheus's own
// linter, the bus's metrics are there, and the HEC, replication-lag and
// search-latency metrics are exported (issue 11, Prometheus conventions).
func TestMetricsLintClean(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2})
	url := "http://" + c.Peer("site1-p1").Addr()
	// Some traffic so the labelled series exist.
	if s, code, _ := hecPost(t, url, NoAckHECToken, ""); s != 200 || code != 0 {
		t.Fatalf("hec: %d %d", s, code)
	}
	resp, err := http.Post(url+"/v1/search", "application/json", strings.NewReader(`{"query":"token | stats count"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	pages := map[string]string{}
	for _, id := range c.PeerIDs() {
		pages["peer "+id] = "http://" + c.Peer(id).Addr() + "/metrics"
	}
	for id, m := range c.Managers {
		pages["manager "+id] = "http://" + m.HTTPAddr() + "/metrics"
	}
	for name, u := range pages {
		text, probs := scrape(t, u)
		if len(probs) > 0 {
			t.Errorf("%s: lint problems %+v", name, probs)
		}
		if !strings.Contains(text, "quarry_bus_requests_total") {
			t.Errorf("%s: the bus metrics are not registered", name)
		}
	}
	text, _ := scrape(t, url+"/metrics")
	for _, want := range []string{
		`quarry_peer_hec_requests_total{code="0"} 1`,
		`quarry_peer_hec_http_requests_total{endpoint="event",status="200"} 1`,
		`quarry_peer_hec_request_duration_seconds_count{endpoint="event"} 1`,
		"quarry_peer_replication_lag_blocks",
		"quarry_peer_replication_lag_seconds",
		"quarry_peer_search_duration_seconds_count 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("site1-p1 /metrics lacks %q", want)
		}
	}
	if strings.Contains(text, NoAckHECToken) || strings.Contains(text, HECToken) {
		t.Error("a token appears in /metrics")
	}

	// The search head's page: lint-clean, and its counters move by exactly
	// what two searches imply.
	sh := c.StartSearchHead("sh1", "site1")
	var searched, skipped int
	for _, q := range []string{"token", "* | stats count"} {
		a := search(t, sh.URL(), map[string]any{"query": q})
		if a.Status != 200 {
			t.Fatalf("search %q: %d %s", q, a.Status, a.Error)
		}
		b := a.Resp.Summary.Buckets
		searched += b.Successful - b.Skipped
		skipped += b.Skipped
	}
	text, probs := scrape(t, sh.URL()+"/metrics")
	if len(probs) > 0 {
		t.Errorf("search head: lint problems %+v", probs)
	}
	for _, want := range []string{
		"quarry_searchhead_searches_total 2",
		"quarry_searchhead_search_duration_seconds_count 2",
		fmt.Sprintf(`quarry_searchhead_buckets_total{outcome="searched"} %d`, searched),
		fmt.Sprintf(`quarry_searchhead_buckets_total{outcome="skipped"} %d`, skipped),
		`quarry_searchhead_buckets_total{outcome="failed"} 0`,
		`quarry_searchhead_buckets_total{outcome="missing"} 0`,
		"quarry_searchhead_searches_cancelled_total 0",
		"quarry_bus_requests_total",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("search head /metrics lacks %q", want)
		}
	}
}
