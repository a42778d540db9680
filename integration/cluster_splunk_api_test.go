package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/searchhead"
)

// Search tokens of TestSplunkRESTAPI's cluster.
const (
	splunkAll = "splunk-all"
	splunkWeb = "splunk-web" // scoped to index web
)

// splunkAnswer is one answer of the Splunk REST API.
type splunkAnswer struct {
	Status int
	Header http.Header
	Body   []byte
}

func (a splunkAnswer) JSON(t *testing.T) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal(a.Body, &m); err != nil {
		t.Fatalf("answer %d %q: %v", a.Status, a.Body, err)
	}
	return m
}

// splunkDo sends a form (as curl -d does) with an Authorization header
// value ("" for none).
func splunkDo(t *testing.T, method, u, auth string, form url.Values) splunkAnswer {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(form.Encode())
	} else if len(form) > 0 {
		u += "?" + form.Encode()
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if method == "POST" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range res.Trailer { // known once the body is read
		res.Header[k] = v
	}
	return splunkAnswer{res.StatusCode, res.Header, b}
}

// rowsOf turns JSON results into result rows.
func rowsOf(t *testing.T, results any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range results.([]any) {
		out = append(out, r.(map[string]any))
	}
	return out
}

// TestSplunkRESTAPI: Splunk's search REST API on real search heads of a
// real cluster, over HTTP: login, a job created, polled to DONE and read
// (exact against what was acknowledged), aggregations, export, oneshot,
// blocking, who is refused, the job limits, and the README's curl lines.
func TestSplunkRESTAPI(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2, MaxHotBytes: 128 << 10,
		SearchTokens: []fsm.SearchToken{{Token: splunkAll}, {Token: splunkWeb, Indexes: []string{"web"}}}})
	raws := searchIngest(t, c, "spl", 600)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []string
	for i := range 5 {
		errs = append(errs, fmt.Sprintf("readme ev%dx POST /login 500 error: timeout", i))
	}
	if acked, unacked, err := c.IngestAcked(ctx, "site1-p2", [][]string{errs}, 30*time.Second); err != nil || len(unacked) > 0 || len(acked) != 1 {
		t.Fatalf("ingest the error events: %v (%d unacked)", err, len(unacked))
	}
	waitComplete(t, c)
	all := append(append([]string(nil), raws...), errs...)
	sh1 := c.StartSearchHead("sh1", "site1")
	jobs := sh1.URL() + "/services/search/jobs"
	auth := "Splunk " + splunkAll
	f := &splunkFixture{c: c, sh: sh1, jobs: jobs, auth: auth, all: all, errs: errs}
	t.Run("jobs", f.jobsCase)
	t.Run("export", f.exportCase)
	t.Run("refused", f.refusedCase)
	t.Run("limits", f.limitsCase)
	t.Run("readme", f.readmeCase)
	t.Run("partial", f.partialCase) // last: it kills every peer
}

// splunkFixture is TestSplunkRESTAPI's cluster, its head and its data.
type splunkFixture struct {
	c          *Cluster
	sh         *searchhead.Head
	jobs, auth string   // the head's /services/search/jobs, a search token's Authorization
	all, errs  []string // every event acknowledged; the README's error events among them
}

// jobsCase: login, a job polled to DONE and read whole and in pages, its Atom
// entry, an aggregation (results, events, CSV), a scoped token, DELETE.
func (f *splunkFixture) jobsCase(t *testing.T) {
	sh1, jobs, all := f.sh, f.jobs, f.all
	// Login: the password is the search token, answered as the key.
	a := splunkDo(t, "POST", sh1.URL()+"/services/auth/login", "", url.Values{"username": {"me"}, "password": {splunkAll}, "output_mode": {"json"}})
	if a.Status != 200 || a.JSON(t)["sessionKey"] != splunkAll {
		t.Fatalf("login: %d %s", a.Status, a.Body)
	}
	auth := "Splunk " + a.JSON(t)["sessionKey"].(string)
	a = splunkDo(t, "POST", jobs, auth, url.Values{"search": {"search *"}, "output_mode": {"json"}})
	if a.Status != 201 {
		t.Fatalf("create: %d %s", a.Status, a.Body)
	}
	sid := a.JSON(t)["sid"].(string)
	content := splunkPollDone(t, jobs+"/"+sid, auth)
	if content["dispatchState"] != "DONE" || content["resultCount"] != float64(len(all)) || content["eventCount"] != float64(len(all)) ||
		len(content["messages"].([]any)) != 0 || content["quarry_summary"].(map[string]any)["partial"] != false {
		t.Fatalf("job content: %v", content)
	}
	// Every event exactly once, in one page and in pages of 250.
	a = splunkDo(t, "GET", jobs+"/"+sid+"/results", auth, url.Values{"output_mode": {"json"}, "count": {"0"}})
	mustExactRows(t, "results", rowsOf(t, a.JSON(t)["results"]), all)
	var paged []map[string]any
	for off := 0; off < len(all); off += 250 {
		a = splunkDo(t, "GET", jobs+"/"+sid+"/results", auth, url.Values{"output_mode": {"json"}, "count": {"250"}, "offset": {strconv.Itoa(off)}})
		paged = append(paged, rowsOf(t, a.JSON(t)["results"])...)
	}
	mustExactRows(t, "paged results", paged, all)
	// The Atom entry says the same, Splunk's way (isDone 1).
	a = splunkDo(t, "GET", jobs+"/"+sid, auth, nil)
	var entry struct {
		Title string `xml:"title"`
		Keys  []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:",chardata"`
		} `xml:"content>dict>key"`
	}
	if err := xml.Unmarshal(a.Body, &entry); err != nil || entry.Title != "search *" {
		t.Fatalf("atom entry: %v %s", err, a.Body)
	}
	keys := map[string]string{}
	for _, k := range entry.Keys {
		keys[k.Name] = k.Value
	}
	if keys["isDone"] != "1" || keys["dispatchState"] != "DONE" || keys["resultCount"] != strconv.Itoa(len(all)) {
		t.Fatalf("atom content: %v", keys)
	}
	// An aggregation: exact counts per status; its /events holds none.
	want := map[string]int{}
	for _, r := range all { // the error events name no status: no group
		if m := regexp.MustCompile(`status=(\d+)`).FindStringSubmatch(r); m != nil {
			want[m[1]]++
		}
	}
	a = splunkDo(t, "POST", jobs, auth, url.Values{"search": {"search * | stats count by status"}, "exec_mode": {"blocking"}, "output_mode": {"json"}})
	stats := a.JSON(t)["sid"].(string)
	a = splunkDo(t, "GET", jobs+"/"+stats+"/results", auth, url.Values{"output_mode": {"json"}})
	got := map[string]int{}
	for _, r := range rowsOf(t, a.JSON(t)["results"]) {
		n, _ := strconv.Atoi(r["count"].(string))
		got[r["status"].(string)] = n
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || !strings.Contains(string(a.Body), `"fields":[{"name":"status"},{"name":"count"}]`) {
		t.Fatalf("stats count by status: %s, want %v", a.Body, want)
	}
	a = splunkDo(t, "GET", jobs+"/"+stats+"/events", auth, url.Values{"output_mode": {"json"}})
	if len(a.JSON(t)["results"].([]any)) != 0 || !strings.Contains(string(a.Body), "transforms its events") {
		t.Fatalf("events of a stats job: %s", a.Body)
	}
	// CSV of the same job.
	a = splunkDo(t, "GET", jobs+"/"+stats+"/results", auth, url.Values{"output_mode": {"csv"}})
	recs, err := csv.NewReader(bytes.NewReader(a.Body)).ReadAll()
	if err != nil || len(recs) != len(want)+1 || strings.Join(recs[0], ",") != "status,count" {
		t.Fatalf("csv: %v %q", err, a.Body)
	}
	// A scoped token's job searches its indexes only.
	a = splunkDo(t, "POST", jobs, "Bearer "+splunkWeb, url.Values{"search": {"search index=main"}, "exec_mode": {"blocking"}, "output_mode": {"json"}})
	web := a.JSON(t)["sid"].(string)
	if c := splunkPollDone(t, jobs+"/"+web, "Bearer "+splunkWeb); c["resultCount"] != 0.0 {
		t.Fatalf("the web token's job read index main: %v", c)
	}
	// Deleted: gone.
	if a = splunkDo(t, "DELETE", jobs+"/"+sid, auth, nil); a.Status != 200 {
		t.Fatalf("delete: %d %s", a.Status, a.Body)
	}
	if a = splunkDo(t, "GET", jobs+"/"+sid, auth, nil); a.Status != 404 {
		t.Fatalf("a deleted job: %d", a.Status)
	}
}

// exportCase: JSON lines (offsets, lastrow), raw and CSV (its trailer), and
// oneshot.
func (f *splunkFixture) exportCase(t *testing.T) {
	jobs, auth, all, errs := f.jobs, f.auth, f.all, f.errs
	a := splunkDo(t, "POST", jobs+"/export", auth, url.Values{"search": {"search *"}, "output_mode": {"json"}})
	var rows []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(a.Body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	last := false
	for sc.Scan() {
		var line struct {
			Preview *bool          `json:"preview"`
			Offset  int            `json:"offset"`
			Lastrow bool           `json:"lastrow"`
			Result  map[string]any `json:"result"`
			Msgs    []any          `json:"messages"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Preview == nil || *line.Preview || line.Msgs != nil || last {
			t.Fatalf("export line %d %q: %v", len(rows), sc.Bytes(), err)
		}
		if line.Offset != len(rows) {
			t.Fatalf("export line %d has offset %d", len(rows), line.Offset)
		}
		rows, last = append(rows, line.Result), line.Lastrow
	}
	if !last || a.Status != 200 {
		t.Fatalf("export: %d, the last line has no lastrow", a.Status)
	}
	mustExactRows(t, "export json", rows, all)
	a = splunkDo(t, "GET", jobs+"/export", "Bearer "+splunkAll, url.Values{"search": {"search *"}, "output_mode": {"raw"}})
	lines := strings.Split(strings.TrimSuffix(string(a.Body), "\n"), "\n")
	if a.Status != 200 || strings.Join(sortedCopy(lines), "\n") != strings.Join(sortedCopy(all), "\n") {
		t.Fatalf("export raw: %d, %d lines for %d events", a.Status, len(lines), len(all))
	}
	a = splunkDo(t, "POST", jobs+"/export", auth, url.Values{"search": {"search index=main error"}, "output_mode": {"csv"}})
	recs, err := csv.NewReader(bytes.NewReader(a.Body)).ReadAll()
	if err != nil || len(recs) != len(errs)+1 || recs[0][0] != "_time" || a.Header.Get("X-Quarry-Partial") != "false" {
		t.Fatalf("export csv: %v %d records (trailer %q)", err, len(recs), a.Header.Get("X-Quarry-Partial"))
	}
	// oneshot: the results at once, no job.
	a = splunkDo(t, "POST", jobs, auth, url.Values{"search": {"search * | stats count"}, "exec_mode": {"oneshot"}, "output_mode": {"json"}})
	if rows := rowsOf(t, a.JSON(t)["results"]); len(rows) != 1 || rows[0]["count"] != strconv.Itoa(len(all)) {
		t.Fatalf("oneshot: %s", a.Body)
	}
}

// refusedCase: a HEC token cannot log in; no token, a HEC token or another
// search token is refused on every endpoint, and the job is still there.
func (f *splunkFixture) refusedCase(t *testing.T) {
	sh1, jobs, auth, all := f.sh, f.jobs, f.auth, f.all
	a := splunkDo(t, "POST", sh1.URL()+"/services/auth/login", "", url.Values{"username": {"me"}, "password": {HECToken}})
	if a.Status != 401 || bytes.Contains(a.Body, []byte(HECToken)) {
		t.Fatalf("login with the HEC token: %d %s", a.Status, a.Body)
	}
	a = splunkDo(t, "POST", jobs, "Basic "+basic("me", splunkAll), url.Values{"search": {"search *"}, "output_mode": {"json"}})
	sid := a.JSON(t)["sid"].(string)
	splunkPollDone(t, jobs+"/"+sid, auth)
	for _, p := range []struct{ method, url string }{
		{"POST", jobs}, {"GET", jobs + "/export"}, {"GET", jobs + "/" + sid}, {"GET", jobs + "/" + sid + "/results"},
		{"GET", jobs + "/" + sid + "/events"}, {"POST", jobs + "/" + sid + "/control"}, {"DELETE", jobs + "/" + sid},
	} {
		form := url.Values{"search": {"search *"}, "action": {"cancel"}}
		for who, want := range map[string]int{"": 401, "Splunk " + HECToken: 403, "Bearer " + HECToken: 403} {
			if a := splunkDo(t, p.method, p.url, who, form); a.Status != want {
				t.Fatalf("%s %s as %q: %d %s, want %d", p.method, p.url, who, a.Status, a.Body, want)
			}
		}
		if p.url == jobs || p.url == jobs+"/export" {
			continue
		}
		if a := splunkDo(t, p.method, p.url, "Splunk "+splunkWeb, form); a.Status != 404 {
			t.Fatalf("%s %s by another token: %d %s", p.method, p.url, a.Status, a.Body)
		}
	}
	if c := splunkPollDone(t, jobs+"/"+sid, auth); c["resultCount"] != float64(len(all)) {
		t.Fatalf("the owner's job after the refusals: %v", c)
	}
}

// limitsCase: a head with low job limits answers 429 per token and 503 for
// the head, with Retry-After; a DELETE frees a place.
func (f *splunkFixture) limitsCase(t *testing.T) {
	c, auth := f.c, f.auth
	sh := c.StartSearchHead("sh2", "site2", func(cfg *searchhead.Config) {
		cfg.Jobs = searchhead.JobLimits{PerToken: 2, Total: 3}
	})
	jobs := sh.URL() + "/services/search/jobs"
	create := func(who string) splunkAnswer {
		return splunkDo(t, "POST", jobs, who, url.Values{"search": {"search * | stats count"}, "output_mode": {"json"}})
	}
	first := create(auth).JSON(t)["sid"].(string)
	create(auth)
	if a := create(auth); a.Status != 429 || a.Header.Get("Retry-After") == "" || a.JSON(t)["code"] != "too_many_jobs" {
		t.Fatalf("a token's third job: %d %s", a.Status, a.Body)
	}
	if a := create("Splunk " + splunkWeb); a.Status != 201 {
		t.Fatalf("another token's first job: %d %s", a.Status, a.Body)
	}
	if a := create("Splunk " + splunkWeb); a.Status != 503 || a.Header.Get("Retry-After") == "" || !strings.Contains(a.JSON(t)["error"].(string), "limit 3") {
		t.Fatalf("the head's fourth job: %d %s", a.Status, a.Body)
	}
	splunkDo(t, "DELETE", jobs+"/"+first, auth, nil)
	if a := create(auth); a.Status != 201 {
		t.Fatalf("a job after a DELETE: %d %s", a.Status, a.Body)
	}
}

// readmeCase: the README's splunk-rest block, replayed with net/http, asks
// what it says and gets exact answers.
func (f *splunkFixture) readmeCase(t *testing.T) {
	sh1, jobs, auth, errs := f.sh, f.jobs, f.auth, f.errs
	r := &curlReplay{t: t, env: map[string]string{"SH": sh1.URL(), "TOKEN": splunkAll}, fixed: map[string]bool{"SH": true, "TOKEN": true}, client: http.DefaultClient}
	r.run(readmeBlock(t, "splunk-rest"))
	paths := []string{}
	for _, s := range r.steps {
		paths = append(paths, s.Method+" "+strings.TrimPrefix(s.URL.Path, "/services/"))
	}
	sid := r.env["SID"]
	want := []string{"POST auth/login", "POST search/jobs", "GET search/jobs/" + sid, "GET search/jobs/" + sid + "/results",
		"DELETE search/jobs/" + sid, "POST search/jobs/export", "POST search/jobs"}
	if strings.Join(paths, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the README's requests:\n%s\nwant\n%s", strings.Join(paths, "\n"), strings.Join(want, "\n"))
	}
	st := r.steps
	if !strings.Contains(string(st[0].Body), "<sessionKey>"+splunkAll+"</sessionKey>") {
		t.Fatalf("login: %s", st[0].Body)
	}
	var status struct {
		Entry []struct {
			Content map[string]any `json:"content"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(st[2].Body, &status); err != nil || status.Entry[0].Content["dispatchState"] != "DONE" {
		t.Fatalf("status: %v %s", err, st[2].Body)
	}
	if !strings.Contains(string(st[3].Body), fmt.Sprintf(`"results":[{"count":"%d"}]`, len(errs))) {
		t.Fatalf("results: %s", st[3].Body)
	}
	if n := strings.Count(string(st[5].Body), `"result":`); n != len(errs) || !strings.Contains(string(st[5].Body), `"lastrow":true`) {
		t.Fatalf("export: %d rows: %s", n, st[5].Body)
	}
	if string(st[6].Body) != fmt.Sprintf("index,count\nmain,%d\n", len(errs)) {
		t.Fatalf("oneshot csv: %q", st[6].Body)
	}
	if a := splunkDo(t, "GET", jobs+"/"+sid, auth, nil); a.Status != 404 {
		t.Fatalf("the README's DELETE left the job: %d", a.Status)
	}
}

// partialCase: with every peer killed, a job and an export say that the
// search is partial — in the job's messages and summary, the results'
// messages and the export's last line — instead of answering short in
// silence.
func (f *splunkFixture) partialCase(t *testing.T) {
	for _, id := range f.c.PeerIDs() {
		f.c.KillPeer(id)
	}
	a := splunkDo(t, "POST", f.jobs, f.auth, url.Values{"search": {"search *"}, "output_mode": {"json"}})
	sid := a.JSON(t)["sid"].(string)
	content := splunkPollDone(t, f.jobs+"/"+sid, f.auth)
	const want = "partial results: "
	if content["dispatchState"] != "DONE" || !strings.Contains(fmt.Sprint(content["messages"]), want) ||
		content["quarry_summary"].(map[string]any)["partial"] != true {
		t.Fatalf("a job with every peer down: %v", content)
	}
	a = splunkDo(t, "GET", f.jobs+"/"+sid+"/results", f.auth, url.Values{"output_mode": {"json"}})
	if !strings.Contains(fmt.Sprint(a.JSON(t)["messages"]), want) {
		t.Fatalf("results with every peer down: %s", a.Body)
	}
	a = splunkDo(t, "POST", f.jobs+"/export", f.auth, url.Values{"search": {"search *"}, "output_mode": {"json"}})
	lines := strings.Split(strings.TrimSpace(string(a.Body)), "\n")
	if a.Status != 200 || !strings.Contains(lines[len(lines)-1], want) {
		t.Fatalf("export with every peer down: %d %s", a.Status, a.Body)
	}
}

// splunkPollDone polls a job's status (JSON) until it is done and returns
// its content.
func splunkPollDone(t *testing.T, jobURL, auth string) map[string]any {
	t.Helper()
	var content map[string]any
	testutil.WaitFor(t, time.Minute, func() error {
		a := splunkDo(t, "GET", jobURL, auth, url.Values{"output_mode": {"json"}})
		if a.Status != 200 {
			return fmt.Errorf("status %d %s", a.Status, a.Body)
		}
		content = a.JSON(t)["entry"].([]any)[0].(map[string]any)["content"].(map[string]any)
		if content["isDone"] != true {
			return fmt.Errorf("dispatchState %v", content["dispatchState"])
		}
		return nil
	})
	return content
}

// mustExactRows checks that rows hold every event of raws exactly once.
func mustExactRows(t *testing.T, what string, rows []map[string]any, raws []string) {
	t.Helper()
	_, sum := resultIDs(t, rows)
	if len(rows) != len(raws) || sum != rawsChecksum(raws) {
		t.Fatalf("%s: %d rows, want %d events", what, len(rows), len(raws))
	}
}

func sortedCopy(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
