package searchhead

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/query"
)

// splunkAPI serves the documented subset of Splunk's search REST API on a
// search head (README "Splunk REST API", DESIGN.md "Splunk REST API"):
// login, search jobs, their status, results and events, cancel, and the
// streaming export. It borrows the head: every search runs through
// Head.search, with the head's tokens, limits and completeness rules.
type splunkAPI struct {
	h    *Head
	jobs *jobStore
	// searchNow runs a search at once (oneshot, export): Head.Search.
	searchNow func(ctx context.Context, req Request, indexes []string, emit emitFunc) (*query.Response, error)
	refused   *prometheus.CounterVec
}

func newSplunkAPI(h *Head) *splunkAPI {
	s := &splunkAPI{h: h, searchNow: h.Search}
	run := func(ctx context.Context, req Request, indexes []string, emit emitFunc, started func()) (*query.Response, error) {
		return h.search(ctx, req, indexes, emit, &queuedSearch{started: started})
	}
	// Jobs take at most half the head's search slots at once, so a burst
	// of jobs leaves POST /v1/search room.
	s.jobs = newJobStore(h.cfg.ID, h.cfg.Jobs, h.cfg.MaxSearches/2, run, h.log)
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_searchhead_splunk_jobs_refused_total",
		Help: "Splunk REST API search jobs refused by a limit, per limit: per_token, total, memory."}, []string{"limit"})
	s.jobs.onDrop = func(reason string) { s.refused.WithLabelValues(reason).Inc() }
	h.reg.MustRegister(s.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "quarry_searchhead_splunk_jobs", Help: "Splunk REST API search jobs held (any state)."},
			func() float64 { n, _ := s.jobs.held(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "quarry_searchhead_splunk_job_bytes", Help: "Result bytes the search jobs hold (estimated)."},
			func() float64 { _, b := s.jobs.held(); return float64(b) }))
	return s
}

// splunkPrefixes are the path prefixes the search endpoints answer on:
// Splunk's v1 and v2 paths, with and without a namespace (servicesNS's
// user and app are accepted and ignored: quarry has no apps).
var splunkPrefixes = []string{"/services/search", "/services/search/v2", "/servicesNS/{owner}/{app}/search", "/servicesNS/{owner}/{app}/search/v2"}

func (s *splunkAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /services/auth/login", s.serveLogin)
	for _, p := range splunkPrefixes {
		mux.HandleFunc("GET "+p+"/jobs", s.serveList)
		mux.HandleFunc("POST "+p+"/jobs", s.serveCreate)
		mux.HandleFunc("GET "+p+"/jobs/export", s.serveExport)
		mux.HandleFunc("POST "+p+"/jobs/export", s.serveExport)
		mux.HandleFunc("GET "+p+"/jobs/{sid}", s.serveStatus)
		mux.HandleFunc("DELETE "+p+"/jobs/{sid}", s.serveDelete)
		mux.HandleFunc("POST "+p+"/jobs/{sid}/control", s.serveControl)
		for _, m := range []string{"GET ", "POST "} { // v2 reads results with POST
			mux.HandleFunc(m+p+"/jobs/{sid}/results", s.serveResults(false))
			mux.HandleFunc(m+p+"/jobs/{sid}/events", s.serveResults(true))
		}
	}
	for _, m := range []string{"GET", "POST", "DELETE"} {
		mux.HandleFunc(m+" /services/", s.serveUnsupported)
		mux.HandleFunc(m+" /servicesNS/", s.serveUnsupported)
	}
}

// request reads a request's form (query string and form body, bounded)
// and its output_mode, which must be one of modes (the first is the
// default). It answers the error itself and returns ok false.
func (s *splunkAPI) request(w http.ResponseWriter, r *http.Request, modes ...string) (mode string, ok bool) {
	w.Header().Set(api.RoleHeader, api.RoleSearchHead)
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
	if err := r.ParseForm(); err != nil {
		s.fail(w, "xml", &RequestError{Status: 400, Code: "bad_request", Msg: fmt.Sprintf("read the form: %v", err)})
		return "", false
	}
	mode = strings.ToLower(r.Form.Get("output_mode"))
	if mode == "" {
		mode = modes[0]
	}
	if !slices.Contains(modes, mode) {
		s.fail(w, "xml", &RequestError{Status: 400, Code: "bad_output_mode",
			Msg: fmt.Sprintf("output_mode %q: %s %s answers %s", mode, r.Method, r.URL.Path, strings.Join(modes, ", "))})
		return "", false
	}
	return mode, true
}

// auth identifies the caller: a search token or the admin token, as
// Authorization: Splunk, Bearer or Basic (the token as password).
// Token-less mode (loopback, no token configured) serves only requests
// addressed to a loopback host, so a page that rebinds a name to 127.0.0.1
// cannot drive it.
func (s *splunkAPI) auth(w http.ResponseWriter, r *http.Request, mode string) (caller, bool) {
	c, err := s.h.identify(r)
	var re *RequestError
	if errors.As(err, &re) {
		switch re.Status {
		case 401:
			re = &RequestError{Status: 401, Code: re.Code, Msg: "a search token is required: Authorization: Splunk <token>, Bearer <token>, or Basic with the token as password (POST /services/auth/login answers it as the session key)"}
		case 403:
			re = &RequestError{Status: 403, Code: re.Code, Msg: "invalid search token: a search token of the cluster config or the admin token is required (HEC tokens cannot search)"}
		}
		err = re
	}
	if err == nil && c.owner == "" && !loopbackHost(r.Host) {
		err = &RequestError{Status: 403, Code: "loopback_only", Msg: fmt.Sprintf("search head %s has no token configured: it serves only requests addressed to a loopback host, not %q", s.h.cfg.ID, r.Host)}
	}
	if err != nil {
		s.fail(w, mode, err)
		return caller{}, false
	}
	return c, true
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// serveLogin is POST /services/auth/login. quarry has tokens, not users:
// the password is a search token (or the admin token) and the user name
// is free. The session key answered is that token — the caller's own
// secret, nothing is stored — so a tool that logs in and then sends
// Authorization: Splunk <sessionKey> works on every search head, and a
// revoked token stops working at once.
func (s *splunkAPI) serveLogin(w http.ResponseWriter, r *http.Request) {
	mode, ok := s.request(w, r, "xml", "json")
	if !ok {
		return
	}
	user, pw := r.Form.Get("username"), r.Form.Get("password")
	if user == "" || pw == "" {
		s.fail(w, mode, &RequestError{Status: 400, Code: "bad_request", Msg: "username and password are required (any user name; the password is a search token)"})
		return
	}
	c, err := s.h.identifyToken(pw)
	if err == nil && c.owner == "" && !loopbackHost(r.Host) {
		err = errors.New("loopback only")
	}
	if err != nil {
		s.fail(w, mode, &RequestError{Status: 401, Code: "login_failed",
			Msg: "login failed: the password must be a search token of the cluster config or the admin token (HEC tokens cannot search)"})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if mode == "json" {
		writeJSON(w, 200, map[string]string{"sessionKey": pw})
		return
	}
	writeXML(w, 200, "<response>\n  <sessionKey>"+xmlText(pw)+"</sessionKey>\n</response>\n")
}

// stripSearch drops the leading `search` command of a posted search, as
// Splunk reads it ("search index=main error" searches index=main error).
func stripSearch(q string) string {
	t := strings.TrimLeft(q, " \t\r\n")
	if len(t) >= 6 && strings.EqualFold(t[:6], "search") && (len(t) == 6 || strings.ContainsRune(" \t\r\n", rune(t[6]))) {
		return strings.TrimLeft(t[6:], " \t\r\n")
	}
	return q
}

// searchRequest turns the form's search, earliest_time and latest_time
// into a search request, checked (compiled) before anything runs: a bad
// search is a 400 here, not a failed job. events says whether its results
// are events (eventSearch).
func (s *splunkAPI) searchRequest(r *http.Request) (req Request, events bool, err error) {
	search := r.Form.Get("search")
	req = Request{Query: stripSearch(search), Earliest: r.Form.Get("earliest_time"), Latest: r.Form.Get("latest_time")}
	if strings.TrimSpace(search) == "" {
		return req, false, &RequestError{Status: 400, Code: "bad_query", Msg: "search is required (form field search, e.g. search=search index=main error)"}
	}
	_, plan, err := s.h.check(req, time.Now())
	if err != nil {
		return req, false, err
	}
	return req, eventSearch(plan), nil
}

// eventSearch reports whether a search's results are events: no command
// of its pipeline makes rows of its own (table, stats, top, rare,
// timechart), as Splunk tells events from a transforming search's results.
func eventSearch(plan *query.Plan) bool {
	for _, c := range plan.Query.Commands {
		switch c.(type) {
		case query.TableCmd, query.StatsCmd, query.TopCmd, query.TimechartCmd:
			return false
		}
	}
	return true
}

// serveCreate is POST /services/search/jobs: exec_mode normal (answers the
// sid at once), blocking (answers it once the job is done) or oneshot
// (answers the results, no job).
func (s *splunkAPI) serveCreate(w http.ResponseWriter, r *http.Request) {
	mode, ok := s.request(w, r, "xml", "json", "csv")
	if !ok {
		return
	}
	c, ok := s.auth(w, r, mode)
	if !ok {
		return
	}
	exec := r.Form.Get("exec_mode")
	if exec == "" {
		exec = "normal"
	}
	if exec != "normal" && exec != "blocking" && exec != "oneshot" {
		s.fail(w, mode, &RequestError{Status: 400, Code: "bad_request", Msg: fmt.Sprintf("exec_mode %q: expected normal, blocking or oneshot", exec)})
		return
	}
	if mode == "csv" && exec != "oneshot" {
		s.fail(w, "xml", &RequestError{Status: 400, Code: "bad_output_mode", Msg: "output_mode csv: a job's sid is answered as xml or json; csv is for exec_mode=oneshot and for results"})
		return
	}
	req, events, err := s.searchRequest(r)
	if err != nil {
		s.fail(w, mode, err)
		return
	}
	if exec == "oneshot" {
		s.oneshot(w, r, c, req, events, mode)
		return
	}
	j, err := s.jobs.create(c, r.Form.Get("search"), req, events)
	if err != nil {
		s.fail(w, mode, err)
		return
	}
	if exec == "blocking" {
		select {
		case <-j.done:
		case <-r.Context().Done():
			return // the client left; the job stays until its ttl
		}
	}
	if mode == "json" {
		writeJSON(w, 201, map[string]string{"sid": j.sid})
		return
	}
	writeXML(w, 201, "<response>\n  <sid>"+xmlText(j.sid)+"</sid>\n</response>\n")
}

// oneshot runs a search as POST /v1/search does (429 when the head is
// busy) and answers its results page; nothing is kept.
func (s *splunkAPI) oneshot(w http.ResponseWriter, r *http.Request, c caller, req Request, events bool, mode string) {
	off, count, err := paging(r)
	if err != nil {
		s.fail(w, mode, err)
		return
	}
	resp, err := s.searchNow(withCaller(r.Context(), r), req, c.indexes, nil)
	if err != nil {
		s.fail(w, mode, err)
		return
	}
	var columns []string
	if !events {
		columns = resp.Fields
	}
	writeResults(w, mode, page(resp.Results, columns, summaryMessages(resp.Summary), off, count))
}

// job reads the caller's job named in the path; it answers the error
// itself.
func (s *splunkAPI) job(w http.ResponseWriter, r *http.Request, modes ...string) (*job, string, caller, bool) {
	mode, ok := s.request(w, r, modes...)
	if !ok {
		return nil, "", caller{}, false
	}
	c, ok := s.auth(w, r, mode)
	if !ok {
		return nil, "", caller{}, false
	}
	j, err := s.jobs.get(c, r.PathValue("sid"))
	if err != nil {
		s.fail(w, mode, err)
		return nil, "", caller{}, false
	}
	return j, mode, c, true
}

// serveStatus is GET /services/search/jobs/{sid}: the job's entry.
func (s *splunkAPI) serveStatus(w http.ResponseWriter, r *http.Request) {
	j, mode, _, ok := s.job(w, r, "xml", "json")
	if !ok {
		return
	}
	writeEntries(w, mode, s.base(r), []jobView{s.jobs.view(j)}, true)
}

// serveList is GET /services/search/jobs: the caller's jobs.
func (s *splunkAPI) serveList(w http.ResponseWriter, r *http.Request) {
	mode, ok := s.request(w, r, "xml", "json")
	if !ok {
		return
	}
	c, ok := s.auth(w, r, mode)
	if !ok {
		return
	}
	var views []jobView
	for _, j := range s.jobs.list(c) {
		views = append(views, s.jobs.view(j))
	}
	writeEntries(w, mode, s.base(r), views, false)
}

// serveResults is GET|POST …/{sid}/results and …/{sid}/events: 204 while
// the job runs (as Splunk answers), then a page of its results (offset,
// count: default 100, 0 for all). /events answers the same rows when they
// are events; a search that names columns (stats, table, …) keeps no
// events, and /events says so in its messages.
func (s *splunkAPI) serveResults(events bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		j, mode, _, ok := s.job(w, r, "xml", "json", "csv")
		if !ok {
			return
		}
		off, count, err := paging(r)
		if err != nil {
			s.fail(w, mode, err)
			return
		}
		v := s.jobs.view(j)
		if v.state == stateQueued || v.state == stateRunning {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		rows, msgs := v.rows, v.messages
		if events && !v.events() {
			rows = nil
			msgs = append(slices.Clone(msgs), splunkMsg{"INFO", "this search transforms its events (table, stats, top, rare, timechart): quarry keeps its results, not the events that fed them; read /results"})
		}
		writeResults(w, mode, page(rows, v.columns, msgs, off, count))
	}
}

// serveDelete is DELETE /services/search/jobs/{sid}: the search stops and
// its memory is freed.
func (s *splunkAPI) serveDelete(w http.ResponseWriter, r *http.Request) {
	mode, ok := s.request(w, r, "xml", "json")
	if !ok {
		return
	}
	c, ok := s.auth(w, r, mode)
	if !ok {
		return
	}
	if err := s.jobs.remove(c, r.PathValue("sid")); err != nil {
		s.fail(w, mode, err)
		return
	}
	writeMessages(w, mode, 200, splunkMsg{"INFO", "Search job cancelled."})
}

// serveControl is POST …/{sid}/control: action=cancel (as DELETE) or
// touch (the ttl starts again); other actions are refused.
func (s *splunkAPI) serveControl(w http.ResponseWriter, r *http.Request) {
	_, mode, c, ok := s.job(w, r, "xml", "json")
	if !ok {
		return
	}
	switch a := r.Form.Get("action"); a {
	case "cancel":
		if err := s.jobs.remove(c, r.PathValue("sid")); err != nil {
			s.fail(w, mode, err)
			return
		}
		writeMessages(w, mode, 200, splunkMsg{"INFO", "Search job cancelled."})
	case "touch":
		writeMessages(w, mode, 200, splunkMsg{"INFO", "Search job touched."})
	default:
		s.fail(w, mode, &RequestError{Status: 400, Code: "unsupported_action", Msg: fmt.Sprintf("action %q: quarry's search jobs take cancel and touch", a)})
	}
}

// serveUnsupported answers any other /services path with one line naming
// what quarry serves.
func (s *splunkAPI) serveUnsupported(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(api.RoleHeader, api.RoleSearchHead)
	mode := "xml"
	if r.URL.Query().Get("output_mode") == "json" {
		mode = "json"
	}
	s.fail(w, mode, &RequestError{Status: 404, Code: "not_supported", Msg: fmt.Sprintf("%s %s is not part of quarry's Splunk REST API subset: POST /services/auth/login, /services/search/jobs (GET, POST), …/jobs/{sid} (GET, DELETE), …/{sid}/results, …/{sid}/events, …/{sid}/control, /services/search/jobs/export", r.Method, r.URL.Path)})
}

// base is the head's URL as the caller addressed it (entries' ids).
func (s *splunkAPI) base(r *http.Request) string {
	return s.h.cfg.TLS.Scheme() + "://" + r.Host
}

// paging reads offset (default 0) and count (default 100, 0 = all).
func paging(r *http.Request) (off, count int, err error) {
	off, count = 0, 100
	for _, p := range []struct {
		name string
		to   *int
	}{{"offset", &off}, {"count", &count}} {
		v := r.Form.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, 0, &RequestError{Status: 400, Code: "bad_request", Msg: fmt.Sprintf("%s %q: expected a whole number, 0 or more", p.name, v)}
		}
		*p.to = n
	}
	return off, count, nil
}

// fail answers an error as Splunk does — {"messages": [{"type": "ERROR",
// "text": …}]} or <response><messages><msg type="ERROR">…</msg>… — with
// quarry's own "error" and "code" beside (SPEC §7) in JSON, and the code as
// an attribute in XML. 429 and 503 carry Retry-After.
func (s *splunkAPI) fail(w http.ResponseWriter, mode string, err error) {
	status, code, msg := 500, "search_failed", err.Error()
	var re *RequestError
	switch {
	case errors.As(err, &re):
		status, code, msg = re.Status, re.Code, re.Msg
	case errors.Is(err, context.Canceled):
		status, code = 499, "cancelled"
	}
	if status == 429 || status == 503 {
		w.Header().Set("Retry-After", "5")
		if code == "too_many_searches" {
			w.Header().Set("Retry-After", "1")
		}
	}
	if mode == "json" {
		writeJSON(w, status, map[string]any{"messages": []splunkMsg{{"ERROR", msg}}, "error": msg, "code": code})
		return
	}
	writeXML(w, status, "<response>\n  <messages>\n    <msg type=\"ERROR\" code=\""+xmlText(code)+"\">"+xmlText(msg)+"</msg>\n  </messages>\n</response>\n")
}
