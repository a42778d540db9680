package searchhead

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/query"
)

// Tokens of the unit tests' head: two search tokens, one scoped to web,
// the admin token; "hec-tok" is a HEC token, which a head does not know.
const (
	tokA     = "tok-a"
	tokB     = "tok-b"
	tokWeb   = "tok-web"
	tokAdmin = "admin-tok"
	tokHEC   = "hec-tok"
)

// splunkHead is a search head without a bus whose searches are fakes: run
// serves jobs, now serves oneshot and export.
func splunkHead(t testing.TB, lim JobLimits, slots int, run searchFunc, now func(context.Context, Request, []string, emitFunc) (*query.Response, error)) http.Handler {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	h := &Head{cfg: Config{ID: "sh1", Site: "site1", AdminToken: tokAdmin, MaxSearches: 4, Jobs: lim.withDefaults()}, ln: ln,
		reg: prometheus.NewRegistry(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		tokens: []fsm.SearchToken{{Token: fsm.TokenDigest(tokA)}, {Token: fsm.TokenDigest(tokB)}, {Token: fsm.TokenDigest(tokWeb), Indexes: []string{"web"}}}}
	h.splunk = newSplunkAPI(h)
	h.splunk.jobs = newJobStore("sh1", lim, slots, run, h.log)
	h.splunk.searchNow = now
	t.Cleanup(h.splunk.jobs.close)
	return h.mux()
}

// eventRows are n events "ev0000" … as the head's merge gives them, all
// of one size (rowBytes).
func eventRows(from, n int) []map[string]any {
	var out []map[string]any
	for i := from; i < from+n; i++ {
		out = append(out, map[string]any{"_time": fmt.Sprintf("2026-01-01T00:00:%02dZ", i%60), "_raw": fmt.Sprintf("ev%04d status=%d", i, 200+i%2),
			"host": "h1", "index": "main", "status": float64(200 + i%2), "tags": []any{"a", "b"}})
	}
	return out
}

// batchesRun is a job search that emits batches, then answers sum.
func batchesRun(sum query.Summary, batches ...[]map[string]any) searchFunc {
	return func(ctx context.Context, req Request, indexes []string, emit emitFunc, started func()) (*query.Response, error) {
		started()
		for _, b := range batches {
			if err := emit(b, eventFields); err != nil {
				return nil, err
			}
		}
		return &query.Response{Results: []map[string]any{}, Fields: []string{}, Summary: sum}, nil
	}
}

type answer struct {
	code int
	hdr  http.Header
	body []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d %q: %v", a.code, a.body, err)
	}
	return m
}

// call sends a form to the head as curl -d does, with token as
// Authorization: Splunk.
func call(t *testing.T, h http.Handler, method, path, token string, form url.Values) answer {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(form.Encode())
	} else if len(form) > 0 {
		path += "?" + form.Encode()
	}
	r := httptest.NewRequest(method, path, body)
	r.Host = "127.0.0.1:8089"
	if method == "POST" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		r.Header.Set("Authorization", "Splunk "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return answer{w.Code, w.Header(), w.Body.Bytes()}
}

func createJob(t *testing.T, h http.Handler, token, search string) string {
	t.Helper()
	a := call(t, h, "POST", "/services/search/jobs", token, url.Values{"search": {search}, "output_mode": {"json"}})
	if a.code != 201 {
		t.Fatalf("create %q: %d %s", search, a.code, a.body)
	}
	return a.json(t)["sid"].(string)
}

// content is a job's status content (JSON).
func content(t *testing.T, h http.Handler, token, sid string) map[string]any {
	t.Helper()
	a := call(t, h, "GET", "/services/search/jobs/"+sid, token, url.Values{"output_mode": {"json"}})
	if a.code != 200 {
		t.Fatalf("status %s: %d %s", sid, a.code, a.body)
	}
	e := a.json(t)["entry"].([]any)[0].(map[string]any)
	return e["content"].(map[string]any)
}

func waitDone(t *testing.T, h http.Handler, token, sid string) map[string]any {
	t.Helper()
	var c map[string]any
	testutil.WaitFor(t, 5*time.Second, func() error {
		c = content(t, h, token, sid)
		if c["isDone"] != true {
			return fmt.Errorf("dispatchState %v", c["dispatchState"])
		}
		return nil
	})
	return c
}

// TestSplunkLogin: the password is a search token (or the admin token)
// and comes back as the session key; a HEC token, a wrong or a missing
// password does not log in.
func TestSplunkLogin(t *testing.T) {
	h := splunkHead(t, JobLimits{}, 2, batchesRun(query.Summary{}), nil)
	a := call(t, h, "POST", "/services/auth/login", "", url.Values{"username": {"anyone"}, "password": {tokA}})
	var x struct {
		SessionKey string `xml:"sessionKey"`
	}
	if err := xml.Unmarshal(a.body, &x); a.code != 200 || err != nil || x.SessionKey != tokA {
		t.Fatalf("login: %d %s (%v)", a.code, a.body, err)
	}
	a = call(t, h, "POST", "/services/auth/login", "", url.Values{"username": {"admin"}, "password": {tokAdmin}, "output_mode": {"json"}})
	if a.code != 200 || a.json(t)["sessionKey"] != tokAdmin {
		t.Fatalf("admin login: %d %s", a.code, a.body)
	}
	for _, pw := range []string{tokHEC, "wrong"} {
		a = call(t, h, "POST", "/services/auth/login", "", url.Values{"username": {"u"}, "password": {pw}, "output_mode": {"json"}})
		if a.code != 401 || a.json(t)["code"] != "login_failed" || bytes.Contains(a.body, []byte(pw)) {
			t.Fatalf("login with %q: %d %s", pw, a.code, a.body)
		}
	}
	if a = call(t, h, "POST", "/services/auth/login", "", url.Values{"username": {"u"}}); a.code != 400 {
		t.Fatalf("login without a password: %d %s", a.code, a.body)
	}
	// The session key works as Splunk, Bearer and Basic (as password).
	for _, set := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Authorization", "Splunk "+tokA) },
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tokA) },
		func(r *http.Request) { r.SetBasicAuth("whoever", tokA) },
	} {
		r := httptest.NewRequest("GET", "/services/search/jobs?output_mode=json", nil)
		set(r)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("%s: %d %s", r.Header.Get("Authorization"), w.Code, w.Body)
		}
	}
}

// TestSplunkJobLifecycle: a job created, polled to DONE, read as JSON,
// CSV and XML page by page, its events, then deleted.
func TestSplunkJobLifecycle(t *testing.T) {
	var gotQuery, gotEarliest string
	run := func(ctx context.Context, req Request, indexes []string, emit emitFunc, started func()) (*query.Response, error) {
		gotQuery, gotEarliest = req.Query, req.Earliest
		return batchesRun(query.Summary{Warnings: []string{}}, eventRows(0, 150), eventRows(150, 100))(ctx, req, indexes, emit, started)
	}
	h := splunkHead(t, JobLimits{}, 2, run, nil)
	a := call(t, h, "POST", "/services/search/jobs", tokA, url.Values{"search": {"search index=main ev*"}, "earliest_time": {"-1h"}})
	var created struct {
		Sid string `xml:"sid"`
	}
	if err := xml.Unmarshal(a.body, &created); a.code != 201 || err != nil || !strings.HasPrefix(created.Sid, "sh1_") {
		t.Fatalf("create (xml): %d %s", a.code, a.body)
	}
	c := waitDone(t, h, tokA, created.Sid)
	if gotQuery != "index=main ev*" || gotEarliest != "-1h" {
		t.Fatalf("the search ran %q from %q", gotQuery, gotEarliest)
	}
	if c["dispatchState"] != "DONE" || c["resultCount"] != 250.0 || c["eventCount"] != 250.0 || c["isFailed"] != false || len(c["messages"].([]any)) != 0 {
		t.Fatalf("content: %v", c)
	}
	// JSON pages: default count 100; count=0 is everything.
	seen := map[string]bool{}
	for off := 0; off < 250; off += 100 {
		a = call(t, h, "GET", "/services/search/jobs/"+created.Sid+"/results", tokA, url.Values{"output_mode": {"json"}, "offset": {fmt.Sprint(off)}})
		m := a.json(t)
		rows := m["results"].([]any)
		if a.code != 200 || m["preview"] != false || m["init_offset"] != float64(off) || len(rows) != min(100, 250-off) {
			t.Fatalf("page at %d: %d, %d rows, init_offset %v", off, a.code, len(rows), m["init_offset"])
		}
		for _, r := range rows {
			row := r.(map[string]any)
			if row["status"] != "200" && row["status"] != "201" || fmt.Sprint(row["tags"]) != "[a b]" {
				t.Fatalf("row values not Splunk's strings: %v", row)
			}
			seen[row["_raw"].(string)] = true
		}
		if f := m["fields"].([]any); f[0].(map[string]any)["name"] != "_time" {
			t.Fatalf("fields %v", f)
		}
	}
	if len(seen) != 250 {
		t.Fatalf("pages held %d distinct rows, want 250", len(seen))
	}
	// CSV: a header and 250 rows; multivalue cells one value a line.
	a = call(t, h, "GET", "/services/search/jobs/"+created.Sid+"/results", tokA, url.Values{"output_mode": {"csv"}, "count": {"0"}})
	recs, err := csv.NewReader(bytes.NewReader(a.body)).ReadAll()
	if err != nil || len(recs) != 251 || strings.Join(recs[0], ",") != "_time,_raw,host,index,status,tags" || recs[1][5] != "a\nb" {
		t.Fatalf("csv: %v, %d records, %q", err, len(recs), recs[:min(2, len(recs))])
	}
	// XML: Splunk's <results> with one <result> per row.
	a = call(t, h, "GET", "/services/search/jobs/"+created.Sid+"/events", tokA, url.Values{"count": {"10"}, "offset": {"5"}})
	var xr struct {
		Results []struct {
			Offset int `xml:"offset,attr"`
			Fields []struct {
				K string `xml:"k,attr"`
				V string `xml:"v"`
			} `xml:"field"`
		} `xml:"result"`
	}
	if err := xml.Unmarshal(a.body, &xr); err != nil || len(xr.Results) != 10 || xr.Results[0].Offset != 5 {
		t.Fatalf("xml events: %v %s", err, a.body)
	}
	// Deleted: gone, and a second DELETE is 404.
	if a = call(t, h, "DELETE", "/services/search/jobs/"+created.Sid, tokA, nil); a.code != 200 {
		t.Fatalf("delete: %d %s", a.code, a.body)
	}
	for _, p := range []string{"", "/results"} {
		if a = call(t, h, "GET", "/services/search/jobs/"+created.Sid+p, tokA, nil); a.code != 404 {
			t.Fatalf("after delete %s: %d", p, a.code)
		}
	}
}

// TestSplunkJobsAreTheirOwners: only the token that created a job sees
// it; no token, a HEC token or another token is refused on every
// endpoint; a scoped token's job searches its indexes only.
func TestSplunkJobsAreTheirOwners(t *testing.T) {
	var mu sync.Mutex
	var scopes [][]string
	run := func(ctx context.Context, req Request, indexes []string, emit emitFunc, started func()) (*query.Response, error) {
		mu.Lock()
		scopes = append(scopes, indexes)
		mu.Unlock()
		return batchesRun(query.Summary{}, eventRows(0, 3))(ctx, req, indexes, emit, started)
	}
	h := splunkHead(t, JobLimits{}, 2, run, nil)
	sid := createJob(t, h, tokA, "search *")
	waitDone(t, h, tokA, sid)
	paths := []struct{ method, path string }{
		{"GET", "/services/search/jobs/" + sid}, {"GET", "/services/search/jobs/" + sid + "/results"},
		{"GET", "/services/search/jobs/" + sid + "/events"}, {"POST", "/services/search/jobs/" + sid + "/control"},
		{"DELETE", "/services/search/jobs/" + sid}, {"GET", "/services/search/v2/jobs/" + sid},
	}
	for _, p := range paths {
		for tok, want := range map[string]int{"": 401, tokHEC: 403, tokB: 404, tokAdmin: 404} {
			a := call(t, h, p.method, p.path, tok, url.Values{"action": {"cancel"}, "output_mode": {"json"}})
			if a.code != want {
				t.Fatalf("%s %s with %q: %d %s, want %d", p.method, p.path, tok, a.code, a.body, want)
			}
		}
	}
	if a := call(t, h, "POST", "/services/search/jobs", tokHEC, url.Values{"search": {"*"}}); a.code != 403 {
		t.Fatalf("a HEC token created a job: %d %s", a.code, a.body)
	}
	a := call(t, h, "GET", "/services/search/jobs", tokB, url.Values{"output_mode": {"json"}})
	if n := len(a.json(t)["entry"].([]any)); n != 0 {
		t.Fatalf("token B lists %d jobs of token A", n)
	}
	// Still there for its owner after every refusal.
	if c := content(t, h, tokA, sid); c["resultCount"] != 3.0 {
		t.Fatalf("the owner's job after the refusals: %v", c)
	}
	waitDone(t, h, tokWeb, createJob(t, h, tokWeb, "search *"))
	mu.Lock()
	defer mu.Unlock()
	if len(scopes) != 2 || scopes[0] != nil || fmt.Sprint(scopes[1]) != "[web]" {
		t.Fatalf("scopes searched: %v", scopes)
	}
}

// TestSplunkJobLimits: past the per-token limit 429, past the head's 503,
// both with Retry-After; a DELETE frees a place, and so does the ttl.
func TestSplunkJobLimits(t *testing.T) {
	h := splunkHead(t, JobLimits{PerToken: 2, Total: 3, TTL: 3 * time.Second}, 2, batchesRun(query.Summary{}, eventRows(0, 2)), nil)
	a1 := createJob(t, h, tokA, "search a")
	createJob(t, h, tokA, "search b")
	a := call(t, h, "POST", "/services/search/jobs", tokA, url.Values{"search": {"search c"}, "output_mode": {"json"}})
	if a.code != 429 || a.hdr.Get("Retry-After") == "" || a.json(t)["code"] != "too_many_jobs" || !strings.Contains(a.json(t)["error"].(string), "--splunk-max-jobs-per-token") {
		t.Fatalf("third job of a token: %d %s", a.code, a.body)
	}
	createJob(t, h, tokB, "search d")
	a = call(t, h, "POST", "/services/search/jobs", tokB, url.Values{"search": {"search e"}, "output_mode": {"json"}})
	if a.code != 503 || a.hdr.Get("Retry-After") == "" || !strings.Contains(a.json(t)["error"].(string), "--splunk-max-jobs") {
		t.Fatalf("fourth job of the head: %d %s", a.code, a.body)
	}
	if a = call(t, h, "DELETE", "/services/search/jobs/"+a1, tokA, nil); a.code != 200 {
		t.Fatalf("delete: %d", a.code)
	}
	createJob(t, h, tokB, "search e")
	// The ttl frees everything that is not read: a new job is accepted.
	testutil.WaitFor(t, 15*time.Second, func() error {
		a := call(t, h, "POST", "/services/search/jobs", tokA, url.Values{"search": {"search f"}, "output_mode": {"json"}})
		if a.code != 201 {
			return fmt.Errorf("%d %s", a.code, a.body)
		}
		return nil
	})
}

// TestSplunkJobTTL: a finished job lives its ttl after its last read,
// then answers 404; a read starts the ttl again.
func TestSplunkJobTTL(t *testing.T) {
	ttl := time.Second
	h := splunkHead(t, JobLimits{TTL: ttl}, 2, batchesRun(query.Summary{}, eventRows(0, 1)), nil)
	sid := createJob(t, h, tokA, "search x")
	waitDone(t, h, tokA, sid)
	start := time.Now()
	for time.Since(start) < 2*ttl { // reads more often than the ttl keep it past it
		time.Sleep(ttl / 4)
		content(t, h, tokA, sid)
	}
	// The list does not count as a read of each job.
	testutil.WaitFor(t, 5*time.Second, func() error {
		a := call(t, h, "GET", "/services/search/jobs", tokA, url.Values{"output_mode": {"json"}})
		if n := len(a.json(t)["entry"].([]any)); n != 0 {
			return fmt.Errorf("%d jobs listed", n)
		}
		return nil
	})
	if a := call(t, h, "GET", "/services/search/jobs/"+sid, tokA, nil); a.code != 404 {
		t.Fatalf("an expired job answers %d", a.code)
	}
}

// TestSplunkJobMemoryCap: a job whose results pass --splunk-job-max-bytes
// stops its search, keeps what fits and says so; the head's total is
// bounded too.
func TestSplunkJobMemoryCap(t *testing.T) {
	one := rowBytes(eventRows(0, 1)[0])
	var stopped error
	run := func(ctx context.Context, req Request, indexes []string, emit emitFunc, started func()) (*query.Response, error) {
		started()
		for i := 0; i < 100; i++ {
			if err := emit(eventRows(i*10, 10), eventFields); err != nil {
				stopped = err
				return nil, err
			}
		}
		return &query.Response{Summary: query.Summary{}}, nil
	}
	h := splunkHead(t, JobLimits{JobBytes: 25 * one, TotalBytes: 1 << 30}, 2, run, nil)
	sid := createJob(t, h, tokA, "search big")
	c := waitDone(t, h, tokA, sid)
	msgs := fmt.Sprint(c["messages"])
	if stopped == nil || c["dispatchState"] != "DONE" || c["resultCount"] != 25.0 ||
		!strings.Contains(msgs, "--splunk-job-max-bytes") || !strings.Contains(msgs, "truncated") {
		t.Fatalf("capped job: stopped=%v %v", stopped, c)
	}
	a := call(t, h, "GET", "/services/search/jobs/"+sid+"/results", tokA, url.Values{"output_mode": {"json"}})
	if m := a.json(t); !strings.Contains(fmt.Sprint(m["messages"]), "truncated") {
		t.Fatalf("results do not say they are truncated: %v", m["messages"])
	}
	// Total: one token holds at most half of it; a second token's job
	// takes the other half, then a new job is refused while it is held.
	h = splunkHead(t, JobLimits{JobBytes: 1 << 30, TotalBytes: 60 * one}, 2, run, nil)
	waitDone(t, h, tokA, createJob(t, h, tokA, "search a"))
	waitDone(t, h, tokB, createJob(t, h, tokB, "search b"))
	a = call(t, h, "POST", "/services/search/jobs", tokB, url.Values{"search": {"search c"}, "output_mode": {"json"}})
	if a.code != 503 || a.json(t)["code"] != "jobs_memory_full" {
		t.Fatalf("a job while the memory is full: %d %s", a.code, a.body)
	}
}

// TestSplunkPartialSaysSo: a partial search says so in the job's status,
// its results' messages and the export's last line.
func TestSplunkPartialSaysSo(t *testing.T) {
	sum := query.Summary{Partial: true, Buckets: query.BucketSummary{Total: 4, Successful: 3, Failed: 1,
		Failures: []query.Failure{{Bucket: "main~1~g", Peer: "p1", Reason: "peer p1 sent no progress for 3s"}}},
		Warnings: []string{"bucket main~1~g not searched: peer p1 sent no progress for 3s"}}
	now := func(ctx context.Context, req Request, indexes []string, emit emitFunc) (*query.Response, error) {
		if err := emit(eventRows(0, 3), eventFields); err != nil {
			return nil, err
		}
		return &query.Response{Summary: sum}, nil
	}
	h := splunkHead(t, JobLimits{}, 2, batchesRun(sum, eventRows(0, 3)), now)
	sid := createJob(t, h, tokA, "search *")
	c := waitDone(t, h, tokA, sid)
	want := "partial results: 1 of 4 buckets were not searched"
	if !strings.Contains(fmt.Sprint(c["messages"]), want) || c["quarry_summary"].(map[string]any)["partial"] != true {
		t.Fatalf("status: %v", c)
	}
	a := call(t, h, "GET", "/services/search/jobs/"+sid+"/results", tokA, url.Values{"output_mode": {"json"}})
	if !strings.Contains(string(a.body), want) || !strings.Contains(string(a.body), "main~1~g") {
		t.Fatalf("results: %s", a.body)
	}
	a = call(t, h, "POST", "/services/search/jobs/export", tokA, url.Values{"search": {"search *"}, "output_mode": {"json"}})
	lines := strings.Split(strings.TrimSpace(string(a.body)), "\n")
	if len(lines) != 4 || !strings.Contains(lines[2], `"lastrow":true`) || !strings.Contains(lines[3], want) {
		t.Fatalf("export: %q", lines)
	}
	a = call(t, h, "POST", "/services/search/jobs/export", tokA, url.Values{"search": {"search *"}, "output_mode": {"csv"}})
	if a.hdr.Get("X-Quarry-Partial") != "true" {
		t.Fatalf("csv export trailer: %v", a.hdr)
	}
}

// TestSplunkQueuedAndCancelled: jobs past their slots wait QUEUED (results
// 204), run once a slot frees; DELETE cancels a running search.
func TestSplunkQueuedAndCancelled(t *testing.T) {
	release := make(chan struct{})
	cancelled := make(chan struct{}, 4)
	run := func(ctx context.Context, req Request, indexes []string, emit emitFunc, started func()) (*query.Response, error) {
		started()
		select {
		case <-release:
		case <-ctx.Done():
			cancelled <- struct{}{}
			return nil, ctx.Err()
		}
		return batchesRun(query.Summary{}, eventRows(0, 1))(ctx, req, indexes, emit, func() {})
	}
	h := splunkHead(t, JobLimits{}, 1, run, nil)
	first := createJob(t, h, tokA, "search one")
	testutil.WaitFor(t, 5*time.Second, func() error {
		if s := content(t, h, tokA, first)["dispatchState"]; s != "RUNNING" {
			return fmt.Errorf("first %v", s)
		}
		return nil
	})
	second := createJob(t, h, tokA, "search two")
	if s := content(t, h, tokA, second)["dispatchState"]; s != "QUEUED" {
		t.Fatalf("second job %v, want QUEUED", s)
	}
	if a := call(t, h, "GET", "/services/search/jobs/"+second+"/results", tokA, nil); a.code != 204 {
		t.Fatalf("results of a queued job: %d", a.code)
	}
	if a := call(t, h, "POST", "/services/search/jobs/"+first+"/control", tokA, url.Values{"action": {"cancel"}}); a.code != 200 {
		t.Fatalf("cancel: %d %s", a.code, a.body)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled job's search did not stop")
	}
	close(release)
	waitDone(t, h, tokA, second)
}

// TestSplunkCreateChecks: a bad search, mode or paging is refused before
// any job exists; a blocking job answers done; oneshot answers results.
func TestSplunkCreateChecks(t *testing.T) {
	now := func(ctx context.Context, req Request, indexes []string, emit emitFunc) (*query.Response, error) {
		return &query.Response{Results: []map[string]any{{"count": float64(42)}}, Fields: []string{"count"}}, nil
	}
	h := splunkHead(t, JobLimits{}, 2, batchesRun(query.Summary{}, eventRows(0, 2)), now)
	for _, f := range []url.Values{
		{"search": {"search a | nosuchcommand"}}, {"search": {""}}, {"search": {"*"}, "exec_mode": {"later"}},
		{"search": {"*"}, "output_mode": {"yaml"}}, {"search": {"*"}, "earliest_time": {"yesterday-ish"}},
	} {
		if a := call(t, h, "POST", "/services/search/jobs", tokA, f); a.code != 400 {
			t.Fatalf("%v: %d %s", f, a.code, a.body)
		}
	}
	a := call(t, h, "POST", "/services/search/jobs", tokA, url.Values{"search": {"search x"}, "exec_mode": {"blocking"}, "output_mode": {"json"}})
	if c := content(t, h, tokA, a.json(t)["sid"].(string)); c["isDone"] != true {
		t.Fatalf("blocking job answered before done: %v", c)
	}
	a = call(t, h, "POST", "/services/search/jobs", tokA, url.Values{"search": {"search * | stats count"}, "exec_mode": {"oneshot"}, "output_mode": {"json"}})
	if a.code != 200 || !strings.Contains(string(a.body), `"results":[{"count":"42"}]`) || !strings.Contains(string(a.body), `"fields":[{"name":"count"}]`) {
		t.Fatalf("oneshot: %d %s", a.code, a.body)
	}
	if a = call(t, h, "GET", "/services/search/jobs/x/results", tokA, url.Values{"count": {"-1"}}); a.code != 400 && a.code != 404 {
		t.Fatalf("negative count: %d", a.code)
	}
	if a = call(t, h, "GET", "/services/server/info", tokA, nil); a.code != 404 || !strings.Contains(string(a.body), "not part of quarry") {
		t.Fatalf("unsupported endpoint: %d %s", a.code, a.body)
	}
	// HEC sent to a head still gets its own answer, not the Splunk API's.
	for _, p := range []string{"/services/collector", "/services/collector/event"} {
		if a = call(t, h, "POST", p, "", nil); a.code != 404 || !strings.Contains(string(a.body), "not_a_peer") {
			t.Fatalf("HEC %s on a head: %d %s", p, a.code, a.body)
		}
	}
}

func TestStripSearch(t *testing.T) {
	for in, want := range map[string]string{
		"search index=main error": "index=main error", "  SEARCH  *": "*", "searchterm": "searchterm",
		"index=main": "index=main", "search": "", "| stats count": "| stats count",
	} {
		if got := stripSearch(in); got != want {
			t.Errorf("stripSearch(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzSplunkRequest sends arbitrary forms and paths to a head's Splunk
// REST API (searches are fakes): every answer is a success or a 4xx in
// Splunk's error shape with quarry's code — never a 5xx or a panic — and
// none holds a token the request did not carry.
func FuzzSplunkRequest(f *testing.F) {
	for _, s := range []struct {
		method uint8
		path   string
		form   string
		who    uint8
	}{
		{1, "auth/login", "username=me&password=tok-a&output_mode=json", 0},
		{1, "search/jobs", "search=search+*&output_mode=json", 1},
		{1, "search/jobs", "search=search+*+%7C+stats+count&exec_mode=oneshot&output_mode=csv&count=3", 1},
		{1, "search/v2/jobs/export", "search=%22&output_mode=raw", 1},
		{0, "search/jobs/sh1_1.00/results", "output_mode=xml&offset=-1", 1},
		{2, "search/jobs/sh9_1.00", "", 2},
		{1, "search/jobs/x/control", "action=pause", 1},
		{0, "server/info", "output_mode=json", 0},
	} {
		f.Add(s.method, s.path, s.form, s.who)
	}
	now := func(ctx context.Context, req Request, indexes []string, emit emitFunc) (*query.Response, error) {
		rows := eventRows(0, 3)
		if emit != nil {
			if err := emit(rows, eventFields); err != nil {
				return nil, err
			}
		}
		return &query.Response{Results: rows, Fields: []string{}}, nil
	}
	h := splunkHead(f, JobLimits{PerToken: 5, Total: 10}, 2, batchesRun(query.Summary{}, eventRows(0, 3)), now)
	f.Fuzz(func(t *testing.T, method uint8, path, form string, who uint8) {
		m := []string{"GET", "POST", "DELETE"}[int(method)%3]
		tok := []string{"", tokA, tokHEC}[int(who)%3]
		r, err := http.NewRequest(m, "http://127.0.0.1:8089/services/"+path, strings.NewReader(form))
		if err != nil || len(form) > maxRequestBytes {
			return
		}
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tok != "" {
			r.Header.Set("Authorization", "Splunk "+tok)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		body := w.Body.String()
		if w.Code >= 500 {
			t.Fatalf("%s /services/%s %q as %q: %d %s", m, path, form, tok, w.Code, body)
		}
		if w.Code >= 400 && !strings.Contains(body, "ERROR") && w.Code != 405 {
			t.Fatalf("%s /services/%s: %d without Splunk's error shape: %s", m, path, w.Code, body)
		}
		for _, secret := range []string{tokB, tokWeb, tokAdmin, tokA} {
			if strings.Contains(body, secret) && secret != tok && !strings.Contains(form, secret) && !strings.Contains(path, secret) {
				t.Fatalf("%s /services/%s %q as %q shows %q: %s", m, path, form, tok, secret, body)
			}
		}
	})
}
