package searchhead

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/query"
)

// lnQuery is the review's N1 request body: `* | eval x=ln(ln(…1…))`, n
// levels, as the review's python one-liner builds it.
func lnQuery(t *testing.T, n int) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]string{"query": "* | eval x=" + strings.Repeat("ln(", n) + "1" + strings.Repeat(")", n)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSearchN1Refused: review N1 — half a million nested ln( (2 MB, under
// the head's 4 MiB body cap) overflowed the stack of a head and took all of
// `quarry dev` down. Through serveSearch it is now a 400 bad_query naming
// the position (the query-size cap), and so is a nesting too deep inside
// the size cap (the nesting cap, at the 101st call); the head goes on
// answering: a good request after them is checked and accepted.
func TestSearchN1Refused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	subj, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	h := &Head{ln: ln, subj: subj, cfg: Config{ID: "sh1", Site: "site1"}, metrics: newMetrics(prometheus.NewRegistry())}
	for _, c := range []struct {
		body []byte
		pos  int
		msg  string
	}{
		{lnQuery(t, 500000), query.MaxQueryBytes, "a query of at most 262144 bytes"},
		{lnQuery(t, 60000), len("* | eval x=") + 3*query.MaxNesting, "at most 100 levels of nesting"},
	} {
		start := time.Now()
		r := httptest.NewRequest("POST", "/v1/search", bytes.NewReader(c.body))
		r.Host = "127.0.0.1:18031" // a local client (internal/localonly)
		w := httptest.NewRecorder()
		h.serveSearch(w, r)
		var rep struct {
			Error, Code string
			Position    *int
		}
		if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
			t.Fatalf("reply %q: %v", w.Body.String(), err)
		}
		if w.Code != 400 || rep.Code != "bad_query" || rep.Position == nil || *rep.Position != c.pos || !strings.Contains(rep.Error, c.msg) {
			t.Fatalf("%d-byte request: %d %+v, want 400 bad_query at %d (%s)", len(c.body), w.Code, rep, c.pos, c.msg)
		}
		t.Logf("%d-byte request refused in %v: %s", len(c.body), time.Since(start), rep.Error)
	}
	if _, _, err := checkRequest("sh1", "site1", subj, Request{Query: "* | eval x=ln(ln(2))"}, time.Now(), nil); err != nil {
		t.Fatalf("a good request after the refused ones: %v", err)
	}
	if got := promtest.ToFloat64(h.metrics.limits.WithLabelValues("query_size")); got != 1 {
		t.Fatalf(`limit_hits_total{limit="query_size"} = %v, want 1`, got)
	}
	if got := promtest.ToFloat64(h.metrics.limits.WithLabelValues("nesting")); got != 1 {
		t.Fatalf(`limit_hits_total{limit="nesting"} = %v, want 1`, got)
	}
}

// TestCompileLimitsCounted (issue 26 item 6): every request a compile-time
// limit refuses counts once in quarry_searchhead_limit_hits_total under
// that limit's name; a plain syntax error or a bad preference that passed
// no limit counts under none.
func TestCompileLimitsCounted(t *testing.T) {
	subj, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	h := &Head{subj: subj, cfg: Config{ID: "sh1", Site: "site1"}, metrics: newMetrics(prometheus.NewRegistry())}
	big := strings.Repeat("(a|b)", 1000)
	for _, c := range []struct {
		name  string
		req   Request
		limit string
	}{
		{"query size", Request{Query: strings.Repeat("x ", query.MaxQueryBytes)}, "query_size"},
		{"nesting", Request{Query: "* | eval x=" + strings.Repeat("abs(", 101) + "1" + strings.Repeat(")", 101)}, "nesting"},
		{"height", Request{Query: "* | eval x=1" + strings.Repeat("+1", query.MaxHeight+1)}, "expression_height"},
		{"regex source", Request{Query: `* | rex "(?<x>` + strings.Repeat("a", query.MaxRegexBytes) + `)"`}, "regex"},
		{"regex program", Request{Query: `* | where match(_raw, "` + big + `")`}, "regex"},
		{"preference", Request{Query: "*", Preference: "_only_nodes:" + strings.Repeat("p,", query.MaxPreferenceNodes+1) + "p"}, "preference"},
		{"syntax", Request{Query: "* | eval x=("}, ""},
		{"bad regex", Request{Query: `* | rex "(?<x>["`}, ""},
		{"bad preference", Request{Query: "*", Preference: "_nonsense"}, ""},
	} {
		before := promtest.CollectAndCount(h.metrics.limits)
		var was float64
		if c.limit != "" {
			was = promtest.ToFloat64(h.metrics.limits.WithLabelValues(c.limit))
		}
		if _, _, err := h.check(c.req, time.Now()); err == nil {
			t.Fatalf("%s: accepted", c.name)
		} else if got := query.CompileLimit(err); got != c.limit {
			t.Fatalf("%s: %v names limit %q, want %q", c.name, err, got, c.limit)
		}
		if c.limit == "" {
			if after := promtest.CollectAndCount(h.metrics.limits); after != before {
				t.Fatalf("%s: a refusal that passed no limit counted in the limit metric", c.name)
			}
			continue
		}
		if got := promtest.ToFloat64(h.metrics.limits.WithLabelValues(c.limit)); got != was+1 {
			t.Fatalf(`%s: limit_hits_total{limit=%q} went from %v to %v, want +1`, c.name, c.limit, was, got)
		}
	}
}
