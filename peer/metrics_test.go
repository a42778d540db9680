package peer_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// scrape reads a /metrics page into series → value ("name" or
// `name{label="v"}` exactly as the text format prints it).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// delta checks that each series moved by exactly want between two scrapes.
func delta(t *testing.T, before, after map[string]float64, want map[string]float64) {
	t.Helper()
	for series, w := range want {
		if _, ok := after[series]; !ok {
			t.Errorf("metric %s missing", series)
			continue
		}
		if got := after[series] - before[series]; got != w {
			t.Errorf("%s moved by %v, want %v", series, got, w)
		}
	}
}

func postHEC(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/services/collector/event", strings.NewReader(body))
	req.Header.Set("Authorization", "Splunk T")
	req.Header.Set("X-Splunk-Request-Channel", "0B6F2A3C-5D1E-4F7A-9B8C-1D2E3F4A5B6C")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r map[string]any
	json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

// Ingest metrics: 1,000 events in (four requests) move the HEC event and
// store append counters by exactly 1,000, the raw-byte counter by the bytes
// of their _raw, and the success code by 4; one malformed request moves
// code 6 by exactly 1 and nothing else.
func TestMetricsIngest(t *testing.T) {
	p := mustStartPeer(t, t.TempDir())
	defer p.Close()
	url := "http://" + p.Addr()
	before := scrape(t, url)
	rawBytes := 0
	for r := 0; r < 4; r++ {
		var b strings.Builder
		for i := 0; i < 250; i++ {
			raw := fmt.Sprintf("event %d of request %d status=%d", i, r, 200+i%3)
			rawBytes += len(raw)
			fmt.Fprintf(&b, `{"time":%d,"event":%q,"index":"main"}`, 1767225600+r*250+i, raw)
		}
		if code, rep := postHEC(t, url, b.String()); code != 200 {
			t.Fatalf("HEC request %d: %d %v", r, code, rep)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := scrape(t, url)["quarry_peer_events_appended_total"] - before["quarry_peer_events_appended_total"]; got != 1000 {
			return fmt.Errorf("appended %v", got)
		}
		return nil
	})
	after := scrape(t, url)
	delta(t, before, after, map[string]float64{
		"quarry_peer_hec_events_total":             1000,
		"quarry_peer_events_appended_total":        1000,
		"quarry_peer_hec_event_bytes_total":        float64(rawBytes),
		`quarry_peer_hec_requests_total{code="0"}`: 4,
	})
	if code, rep := postHEC(t, url, `{"event": "unterminated`); code != 400 || rep["code"] != float64(6) {
		t.Fatalf("malformed request: %d %v, want 400 code 6", code, rep)
	}
	again := scrape(t, url)
	delta(t, after, again, map[string]float64{
		`quarry_peer_hec_requests_total{code="6"}`: 1,
		`quarry_peer_hec_requests_total{code="0"}`: 0,
		"quarry_peer_hec_events_total":             0,
		"quarry_peer_hec_event_bytes_total":        0,
	})
}

// Search metrics: one answered search moves the search counter and the
// latency histogram's count by 1 and the bucket outcomes by the summary's
// figures; a syntax error moves the bad_query errors by 1 and its reply
// names the position.
func TestMetricsSearch(t *testing.T) {
	p := mustStartPeer(t, t.TempDir())
	defer p.Close()
	url := "http://" + p.Addr()
	var b strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, `{"time":%d,"event":"line %d","index":"main"}`, 1767225600+i, i)
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
	before := scrape(t, url)
	resp, err := http.Post(url+"/v1/search", "application/json", strings.NewReader(`{"query":"line | stats count"}`))
	if err != nil {
		t.Fatal(err)
	}
	var sr struct {
		Results []map[string]any
		Summary struct {
			Buckets struct{ Total, Successful, Skipped, Failed, Missing int }
		}
	}
	json.NewDecoder(resp.Body).Decode(&sr)
	resp.Body.Close()
	if len(sr.Results) != 1 || sr.Results[0]["count"] != float64(300) {
		t.Fatalf("search: %+v", sr)
	}
	s := sr.Summary.Buckets
	after := scrape(t, url)
	delta(t, before, after, map[string]float64{
		"quarry_peer_searches_total":                           1,
		"quarry_peer_search_duration_seconds_count":            1,
		`quarry_peer_search_buckets_total{outcome="searched"}`: float64(s.Successful - s.Skipped),
		`quarry_peer_search_buckets_total{outcome="skipped"}`:  float64(s.Skipped),
		`quarry_peer_search_buckets_total{outcome="failed"}`:   float64(s.Failed),
		`quarry_peer_search_buckets_total{outcome="missing"}`:  float64(s.Missing),
	})
	if s.Successful-s.Skipped < 1 {
		t.Fatalf("summary %+v searched no bucket", s)
	}
	resp, err = http.Post(url+"/v1/search", "application/json", strings.NewReader(`{"query":"line | stats count bx"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error, Code string
		Position    *int
	}
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e.Code != "bad_query" || e.Position == nil || !strings.Contains(e.Error, fmt.Sprintf("column %d", *e.Position+1)) {
		t.Fatalf("syntax error reply: %d %+v", resp.StatusCode, e)
	}
	delta(t, after, scrape(t, url), map[string]float64{
		`quarry_peer_search_errors_total{code="bad_query"}`: 1,
		"quarry_peer_searches_total":                        1,
	})
}

// ?stream=true answers NDJSON: one line per result, then the summary line.
func TestSearchStream(t *testing.T) {
	p := mustStartPeer(t, t.TempDir())
	defer p.Close()
	url := "http://" + p.Addr()
	var b strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, `{"time":%d,"event":"row %d","index":"main"}`, 1767225600+i, i)
	}
	postHEC(t, url, b.String())
	var lines []string
	testutil.WaitFor(t, 5*time.Second, func() error {
		resp, err := http.Post(url+"/v1/search?stream=true", "application/json", strings.NewReader(`{"query":"row"}`))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
			return fmt.Errorf("content type %q", ct)
		}
		raw, _ := io.ReadAll(resp.Body)
		lines = strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 41 {
			return fmt.Errorf("%d lines", len(lines))
		}
		return nil
	})
	for i, l := range lines[:40] {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil || r["_raw"] == nil {
			t.Fatalf("line %d %q is not a result: %v", i, l, err)
		}
	}
	// Lines keep the answer's column order: a table's group comes first.
	resp, err := http.Post(url+"/v1/search?stream=true", "application/json", strings.NewReader(`{"query":"row | stats count by host"}`))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	if !strings.HasPrefix(first, `{"host":`) {
		t.Fatalf("first line %q does not start with the by field", first)
	}
	var last struct {
		Summary *struct{ Buckets struct{ Total int } }
	}
	if err := json.Unmarshal([]byte(lines[40]), &last); err != nil || last.Summary == nil || last.Summary.Buckets.Total < 1 {
		t.Fatalf("last line %q is not the summary", lines[40])
	}
}
