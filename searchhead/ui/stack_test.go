package ui_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/searchhead/ui"
)

// The test data: statusCounts events (status=<code>), at known times from
// base, so a top, a timechart and the sidebar have exact answers.
var (
	base         = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	statusCounts = []struct {
		Status string
		N      int
	}{{"200", 40}, {"404", 25}, {"500", 12}, {"503", 5}, {"301", 2}}
)

// eventTime spreads event i unevenly over half an hour.
func eventTime(i int) time.Time { return base.Add(time.Duration((i*i*7)%1800) * time.Second) }

// stack is a real standalone peer with the test data and an httptest
// server that serves ui.Handler() at / and reverse-proxies /v1/search to
// the peer, as a search head would answer it.
type stack struct {
	URL  string
	Peer *peer.Peer
	N    int
}

func startStack(t *testing.T) *stack {
	t.Helper()
	tok, err := hec.ParseTokenFlag("T=main")
	if err != nil {
		t.Fatal(err)
	}
	p, err := peer.Start(peer.Config{ID: "p1", Site: "site1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var body strings.Builder
	n := 0
	for _, sc := range statusCounts {
		for j := 0; j < sc.N; j++ {
			raw := fmt.Sprintf("GET /item/%d status=%s user=u%d", n, sc.Status, n%4)
			fmt.Fprintf(&body, `{"time":%d,"event":%q,"index":"main","host":"web-%d","sourcetype":"access"}`, eventTime(n).Unix(), raw, n%3)
			n++
		}
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr()+"/services/collector/event", strings.NewReader(body.String()))
	req.Header.Set("Authorization", "Splunk T")
	req.Header.Set("X-Splunk-Request-Channel", "0B6F2A3C-5D1E-4F7A-9B8C-1D2E3F4A5B6C")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HEC: %d", resp.StatusCode)
	}
	target, _ := url.Parse("http://" + p.Addr())
	mux := http.NewServeMux()
	mux.Handle("/v1/search", httputil.NewSingleHostReverseProxy(target))
	mux.Handle("/", ui.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := &stack{URL: srv.URL, Peer: p, N: n}
	testutil.WaitFor(t, 10*time.Second, func() error {
		r, err := s.search("index=main | stats count")
		if err != nil {
			return err
		}
		if len(r.Results) != 1 || fmt.Sprint(r.Results[0]["count"]) != fmt.Sprint(n) {
			return fmt.Errorf("searchable so far: %v", r.Results)
		}
		return nil
	})
	return s
}

type searchAnswer struct {
	Results []map[string]any `json:"results"`
	Fields  []string         `json:"fields"`
	Error   string           `json:"error"`
	Code    string           `json:"code"`
}

// search asks the stack's /v1/search (through the proxy) without the page.
func (s *stack) search(q string) (*searchAnswer, error) {
	b, _ := json.Marshal(map[string]any{"query": q})
	resp, err := http.Post(s.URL+"/v1/search", "application/json", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var a searchAnswer
	d := json.NewDecoder(resp.Body)
	d.UseNumber()
	if err := d.Decode(&a); err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return &a, fmt.Errorf("search %q: HTTP %d %s (%s)", q, resp.StatusCode, a.Error, a.Code)
	}
	return &a, nil
}

// The page and its assets are served from the binary, and the page's one
// call answers through the same origin.
func TestHandlerServesPage(t *testing.T) {
	s := startStack(t)
	for path, want := range map[string]string{
		"/":              `<script src="/ui/search.js">`,
		"/ui/search.js":  `/v1/search?stream=true`,
		"/ui/search.css": `#fields`,
	} {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Fatalf("GET %s: %d, lacks %q", path, resp.StatusCode, want)
		}
	}
	resp, _ := http.Get(s.URL + "/nope")
	var e struct{ Error, Code string }
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 404 || e.Code != "not_found" {
		t.Fatalf("GET /nope: %d %+v", resp.StatusCode, e)
	}
	if n := ui.Size(); n <= 0 || n > 64<<10 {
		t.Fatalf("page weight %d bytes", n)
	}
	t.Logf("page weight: %d bytes", ui.Size())
}
