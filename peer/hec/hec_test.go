package hec

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer/store"
)

const (
	chanA = "11111111-2222-3333-4444-555555555555"
	chanB = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
)

// faultyStore lets a test force back-pressure or a failed store.
type faultyStore struct {
	*store.Store
	busy   atomic.Bool
	broken atomic.Bool
}

func (f *faultyStore) Busy() bool { return f.busy.Load() || f.Store.Busy() }
func (f *faultyStore) Err() error {
	if f.broken.Load() {
		return errors.New("disk on fire")
	}
	return f.Store.Err()
}

type fixture struct {
	st  *store.Store
	fs  *faultyStore
	srv *httptest.Server
	h   *Handler
}

// fixedNow is the fixture's clock: the receive time of events that name
// none.
var fixedNow = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, opts store.Options) *fixture {
	t.Helper()
	return newFixtureWith(t, opts, nil)
}

// newFixtureWith lets a test adjust the handler's config before it starts.
func newFixtureWith(t *testing.T, opts store.Options, adjust func(*Config)) *fixture {
	t.Helper()
	opts.Dir = t.TempDir()
	opts.GUID = "g1"
	opts.Searchable = true
	st, err := store.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	fs := &faultyStore{Store: st}
	cfg := Config{
		Store: fs,
		Tokens: []Token{
			{Value: "ack", Ack: true},
			{Value: "ack2", Ack: true},
			{Value: "noack"},
			{Value: "qs", AllowQueryStringAuth: true},
			{Value: "web", Indexes: []string{"web", "main"}, Ack: true},
			{Value: "off", Disabled: true, Ack: true},
		},
		MaxBodyBytes:  1 << 20,
		MaxEventBytes: 1000,
		BusyWait:      20 * time.Millisecond,
		DefaultHost:   "peerhost",
		Now:           func() time.Time { return fixedNow },
	}
	if adjust != nil {
		adjust(&cfg)
	}
	h := New(cfg)
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	return &fixture{st: st, fs: fs, srv: srv, h: h}
}

type hecReply struct {
	Text         string `json:"text"`
	Code         int    `json:"code"`
	InvalidEvent *int   `json:"invalid-event-number"`
	AckID        *int64 `json:"ackId"`
}

func (f *fixture) post(t *testing.T, path, auth, channel, body string) (int, hecReply) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if channel != "" {
		req.Header.Set("X-Splunk-Request-Channel", channel)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r hecReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("reply %q: %v", b, err)
	}
	return resp.StatusCode, r
}

func intp(i int) *int { return &i }

const good = `{"time":1767225600.123,"host":"h1","event":"GET /a 200","fields":{"status":"200"}}`

func TestSplunkCodeTable(t *testing.T) {
	f := newFixture(t, store.Options{})
	big := `{"event":"` + strings.Repeat("x", 1001) + `"}`
	huge := strings.Repeat(good+"\n", (1<<20)/len(good)+1)
	cases := []struct {
		name, path, auth, channel, body string
		status, code                    int
		text                            string
		invalid                         *int
		setup                           func()
	}{
		{"token required", "/services/collector/event", "", chanA, good, 401, 2, "Token is required", nil, nil},
		{"bad scheme", "/services/collector/event", "Bearer ack", chanA, good, 401, 3, "Invalid authorization", nil, nil},
		{"bad basic", "/services/collector/event", "Basic !!!", chanA, good, 401, 3, "Invalid authorization", nil, nil},
		{"empty splunk token", "/services/collector/event", "Splunk ", chanA, good, 401, 3, "Invalid authorization", nil, nil},
		{"invalid token", "/services/collector/event", "Splunk nope", chanA, good, 403, 4, "Invalid token", nil, nil},
		{"token disabled", "/services/collector/event", "Splunk off", chanA, good, 403, 1, "Token disabled", nil, nil},
		{"no data", "/services/collector/event", "Splunk ack", chanA, "", 400, 5, "No data", nil, nil},
		{"only blanks", "/services/collector/event", "Splunk ack", chanA, " \n\t", 400, 5, "No data", nil, nil},
		{"raw no data", "/services/collector/raw", "Splunk ack", chanA, "\n\n", 400, 5, "No data", nil, nil},
		{"malformed second", "/services/collector/event", "Splunk ack", chanA, good + `{"event":"x"`, 400, 6, "Invalid data format", intp(1), nil},
		{"not an object", "/services/collector/event", "Splunk ack", chanA, good + good + `[1,2]`, 400, 6, "Invalid data format", intp(2), nil},
		{"bad time", "/services/collector/event", "Splunk ack", chanA, good + `{"time":"soon","event":"x"}`, 400, 6, "Invalid data format", intp(1), nil},
		{"host not a string", "/services/collector/event", "Splunk ack", chanA, `{"host":5,"event":"x"}`, 400, 6, "Invalid data format", intp(0), nil},
		{"event too large", "/services/collector/event", "Splunk ack", chanA, good + big, 400, 6, "Invalid data format", intp(1), nil},
		{"raw line too large", "/services/collector/raw", "Splunk ack", chanA, "ok\n" + strings.Repeat("y", 1001), 400, 6, "Invalid data format", intp(1), nil},
		{"body too large", "/services/collector/event", "Splunk ack", chanA, huge, 413, 6, "Content too large", nil, nil},
		{"index not allowed", "/services/collector/event", "Splunk web", chanA, good + `{"index":"secret","event":"x"}`, 400, 7, "Incorrect index", intp(1), nil},
		{"index invalid", "/services/collector/event", "Splunk ack", chanA, `{"index":"Bad~Idx","event":"x"}`, 400, 7, "Incorrect index", intp(0), nil},
		{"raw index not allowed", "/services/collector/raw?index=secret", "Splunk web", chanA, "a line", 400, 7, "Incorrect index", nil, nil},
		{"internal error", "/services/collector/event", "Splunk ack", chanA, good, 500, 8, "Internal server error", nil, func() { f.fs.broken.Store(true) }},
		{"busy", "/services/collector/event", "Splunk ack", chanA, good, 503, 9, "Server is busy", nil, func() { f.fs.busy.Store(true) }},
		{"channel missing", "/services/collector/event", "Splunk ack", "", good, 400, 10, "Data channel is missing", nil, nil},
		{"raw channel missing", "/services/collector/raw", "Splunk ack", "", "a line", 400, 10, "Data channel is missing", nil, nil},
		{"invalid channel", "/services/collector/event", "Splunk ack", "not-a-guid", good, 400, 11, "Invalid data channel", nil, nil},
		{"event missing", "/services/collector/event", "Splunk ack", chanA, good + `{"host":"h"}`, 400, 12, "Event field is required", intp(1), nil},
		{"event blank", "/services/collector/event", "Splunk ack", chanA, good + good + `{"event":""}`, 400, 13, "Event field cannot be blank", intp(2), nil},
		{"event null", "/services/collector/event", "Splunk ack", chanA, `{"event":null}`, 400, 13, "Event field cannot be blank", intp(0), nil},
		{"ack disabled", "/services/collector/ack", "Splunk noack", chanA, `{"acks":[0]}`, 400, 14, "ACK is disabled", nil, nil},
		{"fields nested", "/services/collector/event", "Splunk ack", chanA, good + `{"event":"x","fields":{"a":{"b":1}}}`, 400, 15, "Error in handling indexed fields", intp(1), nil},
		{"fields not object", "/services/collector/event", "Splunk ack", chanA, `{"event":"x","fields":[1]}`, 400, 15, "Error in handling indexed fields", intp(0), nil},
		{"field shadows host", "/services/collector/event", "Splunk ack", chanA, good + `{"event":"x","fields":{"host":"h2"}}`, 400, 15, "Error in handling indexed fields", intp(1), nil},
		{"field named _time", "/services/collector/event", "Splunk ack", chanA, `{"event":"x","fields":{"_time":"1"}}`, 400, 15, "Error in handling indexed fields", intp(0), nil},
		{"field value bool", "/services/collector/event", "Splunk ack", chanA, `{"event":"x","fields":{"a":true}}`, 400, 15, "Error in handling indexed fields", intp(0), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.fs.busy.Store(false)
			f.fs.broken.Store(false)
			if c.setup != nil {
				c.setup()
			}
			status, r := f.post(t, c.path, c.auth, c.channel, c.body)
			if status != c.status || r.Code != c.code || r.Text != c.text {
				t.Fatalf("got %d %d %q, want %d %d %q", status, r.Code, r.Text, c.status, c.code, c.text)
			}
			switch {
			case c.invalid == nil && r.InvalidEvent != nil:
				t.Fatalf("invalid-event-number %d, want none", *r.InvalidEvent)
			case c.invalid != nil && (r.InvalidEvent == nil || *r.InvalidEvent != *c.invalid):
				t.Fatalf("invalid-event-number %v, want %d", r.InvalidEvent, *c.invalid)
			}
			if r.AckID != nil {
				t.Fatalf("a refused request got ackId %d", *r.AckID)
			}
			if n := f.st.Stats.EventsAppended.Load(); n != 0 {
				t.Fatalf("%d events of a refused request were indexed", n)
			}
		})
	}
	f.fs.busy.Store(false)
	f.fs.broken.Store(false)
	if inv := f.st.Inventory(); len(inv) != 0 {
		t.Fatalf("refused requests created buckets: %+v", inv)
	}
}

func (f *fixture) acks(t *testing.T, auth, channel string, ids ...int64) map[string]bool {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"acks": ids})
	req, _ := http.NewRequest("POST", f.srv.URL+"/services/collector/ack?channel="+channel, strings.NewReader(string(b)))
	req.Header.Set("Authorization", auth)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Acks map[string]bool `json:"acks"`
	}
	if resp.StatusCode != 200 {
		t.Fatalf("ack status %d", resp.StatusCode)
	}
	json.NewDecoder(resp.Body).Decode(&out)
	return out.Acks
}

func TestAckIDsPerChannelAndForgetAfterTrue(t *testing.T) {
	f := newFixture(t, store.Options{BlockInterval: 5 * time.Millisecond})
	want := []struct {
		ch string
		id int64
	}{{chanA, 0}, {chanA, 1}, {chanB, 0}, {chanA, 2}, {chanB, 1}}
	for _, w := range want {
		status, r := f.post(t, "/services/collector/event", "Splunk ack", w.ch, good+good)
		if status != 200 || r.Code != 0 || r.Text != "Success" || r.AckID == nil || *r.AckID != w.id {
			t.Fatalf("channel %s: got %d %+v, want ackId %d", w.ch, status, r, w.id)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		got := f.acks(t, "Splunk ack", chanA, 0)
		if !got["0"] {
			return errors.New("ack 0 not true yet")
		}
		return nil
	})
	// Read as true once, then forgotten.
	if got := f.acks(t, "Splunk ack", chanA, 0, 1, 2, 99); got["0"] || len(got) != 4 || got["99"] {
		t.Fatalf("second read %v: 0 must be false now, 99 unknown false", got)
	}
	if n := f.st.Stats.EventsAppended.Load(); n != 10 {
		t.Fatalf("%d events appended, want 10", n)
	}
	// Basic auth with the token as password, non-ack token: no ackId.
	status, r := f.post(t, "/services/collector/event", "Basic "+base64.StdEncoding.EncodeToString([]byte("x:noack")), "", good)
	if status != 200 || r.Code != 0 || r.AckID != nil {
		t.Fatalf("basic auth: %d %+v", status, r)
	}
}

func TestGzipBody(t *testing.T) {
	f := newFixture(t, store.Options{BlockInterval: 5 * time.Millisecond})
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(good + good + good))
	zw.Close()
	req, _ := http.NewRequest("POST", f.srv.URL+"/services/collector/event", &zb)
	req.Header.Set("Authorization", "Splunk noack")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || f.st.Stats.EventsAppended.Load() != 3 {
		t.Fatalf("gzip body: %d, %d events", resp.StatusCode, f.st.Stats.EventsAppended.Load())
	}
	req, _ = http.NewRequest("POST", f.srv.URL+"/services/collector/event", strings.NewReader("not gzip"))
	req.Header.Set("Authorization", "Splunk noack")
	req.Header.Set("Content-Encoding", "gzip")
	resp, _ = f.srv.Client().Do(req)
	var r hecReply
	json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if resp.StatusCode != 400 || r.Code != 6 {
		t.Fatalf("bad gzip: %d %+v", resp.StatusCode, r)
	}
}

func TestRawLinesAndDefaults(t *testing.T) {
	f := newFixture(t, store.Options{BlockInterval: 5 * time.Millisecond})
	status, r := f.post(t, "/services/collector/raw?sourcetype=syslog&host=h9&index=web", "Splunk web", chanA, "line one\r\n\nline two\nline three")
	if status != 200 || r.Code != 0 || r.AckID == nil || *r.AckID != 0 {
		t.Fatalf("raw: %d %+v", status, r)
	}
	// envelope with multi-valued field and a JSON event
	status, r = f.post(t, "/services/collector/event", "Splunk web", chanA, `{"event":{"a":1},"fields":{"tag":["x","y"],"n":5}}`)
	if status != 200 || r.Code != 0 {
		t.Fatalf("event: %d %+v", status, r)
	}
	f.st.WaitIdle(5 * time.Second)
	got := map[string]int{}
	for _, seg := range f.st.Segments() {
		bm, _ := seg.FieldValue("sourcetype", "syslog")
		if bm != nil {
			got[seg.Index()+" syslog"] += int(bm.GetCardinality())
		}
		bm, _ = seg.FieldValue("host", "h9")
		if bm != nil {
			got["h9"] += int(bm.GetCardinality())
		}
		for _, v := range []string{"x", "y"} {
			if bm, _ := seg.FieldValue("tag", v); bm != nil {
				got["tag="+v] += int(bm.GetCardinality())
			}
		}
		if bm, _ := seg.FieldValue("n", "5"); bm != nil {
			got["n=5"]++
		}
		if bm, _ := seg.Term("a"); bm != nil && seg.Index() == "web" {
			got["json a"]++
		}
	}
	want := map[string]int{"web syslog": 3, "h9": 3, "tag=x": 1, "tag=y": 1, "n=5": 1, "json a": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v want %v", got, want)
	}
}

// TestBackPressure holds the disk back: the peer answers 503 code 9 once
// its bounded queue is full instead of buffering more, and recovers.
func TestBackPressure(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Bool
	held.Store(true)
	opts := store.Options{BlockBytes: 4 << 10, BlockInterval: time.Millisecond, MaxPendingBytes: 64 << 10,
		BeforeWrite: func() {
			if held.Load() {
				<-release
			}
		}}
	f := newFixture(t, opts)
	line := `{"event":"` + strings.Repeat("z", 200) + ` ev","fields":{"k":"v"}}`
	body := strings.Repeat(line, 100) // ~22 KB
	accepted, busy := 0, 0
	for i := 0; i < 200 && busy == 0; i++ {
		status, r := f.post(t, "/services/collector/event", "Splunk ack", chanA, body)
		switch {
		case status == 200 && r.Code == 0:
			accepted++
		case status == 503 && r.Code == 9 && r.Text == "Server is busy":
			busy++
		default:
			t.Fatalf("unexpected reply %d %+v", status, r)
		}
	}
	if busy == 0 {
		t.Fatalf("never answered code 9 after %d accepted requests", accepted)
	}
	if p := f.st.Stats.PendingBytes.Load(); p > (64<<10)+int64(len(body))*2 {
		t.Fatalf("pending bytes grew to %d, beyond the bound", p)
	}
	// /health says unhealthy while busy.
	resp, err := http.Get(f.srv.URL + "/services/collector/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("health while busy: %d", resp.StatusCode)
	}
	held.Store(false)
	close(release)
	testutil.WaitFor(t, 10*time.Second, func() error {
		status, r := f.post(t, "/services/collector/event", "Splunk ack", chanA, body)
		if status != 200 || r.Code != 0 {
			return fmt.Errorf("still %d %d", status, r.Code)
		}
		return nil
	})
	testutil.WaitFor(t, 10*time.Second, func() error {
		got := f.acks(t, "Splunk ack", chanA, 0)
		if !got["0"] {
			return errors.New("first request not durable")
		}
		return nil
	})
	resp, err = http.Get(f.srv.URL + "/services/collector/health")
	if err != nil {
		t.Fatal(err)
	}
	var hr hecReply
	json.NewDecoder(resp.Body).Decode(&hr)
	resp.Body.Close()
	if resp.StatusCode != 200 || hr.Code != 17 || hr.Text != "HEC is healthy" {
		t.Fatalf("health: %d %+v", resp.StatusCode, hr)
	}
}

func TestParseEpoch(t *testing.T) {
	cases := map[string]int64{
		"1767225600":           1767225600_000_000_000,
		"1767225600.123":       1767225600_123_000_000,
		"1767225600.123456789": 1767225600_123_456_789,
		"1.5e9":                1_500_000_000_000_000_000,
	}
	for in, want := range cases {
		got, ok := parseEpoch([]byte(in))
		if !ok || got != want {
			t.Errorf("parseEpoch(%s) = %d %v, want %d", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "abc", "12x", "."} {
		if _, ok := parseEpoch([]byte(bad)); ok {
			t.Errorf("parseEpoch(%q) accepted", bad)
		}
	}
}

func FuzzDecodeEnvelopes(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(good + good))
	f.Add([]byte(`{"event":{"a":[1,2]},"fields":{"x":["a",1]}}`))
	f.Add([]byte(`{"event":"x","time":"1.5"}`))
	f.Add([]byte(`[`))
	f.Add([]byte(`{"event":"metric","fields":{"metric_name":"cpu","_value":1.5,"dc":"a"}}`))
	f.Add([]byte(`{"event":"metric","fields":{"metric_name:a":1,"metric_name:b":"2"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var d decoder
		evs, r := d.decodeEnvelopes(body, Defaults{Index: "main"}, func(string) bool { return true }, 1000)
		if r.Code == 0 && len(evs) == 0 {
			t.Fatal("success without events")
		}
		if r.Code != 0 && evs != nil {
			t.Fatal("events returned with an error")
		}
		for _, e := range evs {
			if len(e.Raw) == 0 || !store.ValidIndexName(e.Index) || eventSize(&e) > 1000 {
				t.Fatalf("accepted a bad event %+v", e)
			}
		}
	})
}

func TestAckBookkeepingIsBounded(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir(), GUID: "g1", Searchable: true, BlockInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := New(Config{Store: st, Tokens: []Token{{Value: "ack", Ack: true}}, MaxChannels: 2, MaxPendingAcks: 2})
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f := &fixture{st: st, srv: srv}
	third := "cccccccc-bbbb-cccc-dddd-eeeeeeeeeeee"
	for _, c := range []struct {
		ch   string
		code int
	}{{chanA, 0}, {chanA, 0}, {chanA, 9}, {chanB, 0}, {third, 9}} {
		status, r := f.post(t, "/services/collector/event", "Splunk ack", c.ch, good)
		if r.Code != c.code || (c.code == 9 && status != 503) {
			t.Fatalf("channel %s: got %d %+v, want code %d", c.ch, status, r, c.code)
		}
	}
	// reading the acks frees room on the channel. A status read as true is
	// forgotten, so the two acks may turn true in different polls: collect.
	seen := map[string]bool{}
	testutil.WaitFor(t, 10*time.Second, func() error {
		for id, ok := range f.acks(t, "Splunk ack", chanA, 0, 1) {
			seen[id] = seen[id] || ok
		}
		if !seen["0"] || !seen["1"] {
			return fmt.Errorf("acks seen true %v", seen)
		}
		return nil
	})
	if status, r := f.post(t, "/services/collector/event", "Splunk ack", chanA, good); status != 200 || r.AckID == nil || *r.AckID != 2 {
		t.Fatalf("after reading acks: %d %+v, want ackId 2", status, r)
	}
}

// TestOptionsAnswered: Docker's Splunk log driver sends OPTIONS to its HEC
// URL before it starts; a 405 made it refuse to start (issue 29).
func TestOptionsAnswered(t *testing.T) {
	f := newFixture(t, store.Options{})
	for path, allow := range map[string]string{
		"/services/collector":            "POST, OPTIONS",
		"/services/collector/event":      "POST, OPTIONS",
		"/services/collector/event/1.0":  "POST, OPTIONS",
		"/services/collector/raw":        "POST, OPTIONS",
		"/services/collector/health/1.0": "GET, OPTIONS",
	} {
		req, _ := http.NewRequest(http.MethodOptions, f.srv.URL+path, nil)
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Allow") != allow {
			t.Errorf("OPTIONS %s: HTTP %d, Allow %q; want 200, %q", path, resp.StatusCode, resp.Header.Get("Allow"), allow)
		}
	}
}
