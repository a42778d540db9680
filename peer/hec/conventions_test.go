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
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer/store"
	"github.com/quarry-dev/quarry/query"
)

// stored is an event as a search would show it, flattened for comparison.
type stored struct {
	Time                                 time.Time
	Raw, Host, Source, Sourcetype, Index string
	Fields                               string // name=value, in the order sent
}

func (f *fixture) stored(t *testing.T) []stored {
	t.Helper()
	if err := f.st.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.st.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	var out []stored
	for _, seg := range f.st.Segments() {
		err := seg.Events(nil, func(_ uint32, ev *query.Event) bool {
			var fs []string
			for _, fl := range ev.Fields {
				fs = append(fs, fl.Name+"="+fl.Value)
			}
			out = append(out, stored{Time: time.Unix(0, ev.Time).UTC(), Raw: ev.Raw, Host: ev.Host, Source: ev.Source,
				Sourcetype: ev.Sourcetype, Index: ev.Index, Fields: strings.Join(fs, " ")})
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Raw < out[j].Raw })
	return out
}

func gz(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.String()
}

func basic(user, pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
}

// send posts with any headers; it returns the status and the reply.
func (f *fixture) send(t *testing.T, method, path string, hdr map[string]string, body string) (int, hecReply) {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
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

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // 1767225600

// TestSplunkConventions sends what Splunk's HEC accepts, each convention
// on a fresh peer, and checks the reply and exactly the events stored.
func TestSplunkConventions(t *testing.T) {
	type ev = stored
	def := func(raw string, tm time.Time) ev {
		return ev{Time: tm, Raw: raw, Host: "peerhost", Source: "http:hec", Sourcetype: "httpevent", Index: "main"}
	}
	with := func(e ev, mod func(*ev)) ev { mod(&e); return e }
	auth := func(a string) map[string]string { return map[string]string{"Authorization": a} }
	cases := []struct {
		name, method, path string
		hdr                map[string]string
		body               string
		status, code       int
		ackID              *int64
		want               []ev
	}{
		{"/services/collector is /event", "POST", "/services/collector", auth("Splunk noack"),
			`{"time":1767225600,"event":"hello"}`, 200, 0, nil, []ev{def("hello", t0)}},
		{"/event/1.0", "POST", "/services/collector/event/1.0", auth("Splunk noack"),
			`{"time":1767225600,"event":"hello"}`, 200, 0, nil, []ev{def("hello", t0)}},
		{"/raw/1.0 with a channel header", "POST", "/services/collector/raw/1.0",
			map[string]string{"Authorization": "Splunk ack", "X-Splunk-Request-Channel": chanA},
			"one\ntwo", 200, 0, ptr(int64(0)), []ev{def("one", fixedNow), def("two", fixedNow)}},
		{"channel as ?channel=", "POST", "/services/collector/event?channel=" + chanA, auth("Splunk ack"),
			`{"time":1767225600,"event":"hello"}`, 200, 0, ptr(int64(0)), []ev{def("hello", t0)}},
		{"Authorization: Splunk, lower-case scheme", "POST", "/services/collector/event", auth("splunk noack"),
			`{"time":1767225600,"event":"hello"}`, 200, 0, nil, []ev{def("hello", t0)}},
		{"basic auth, token as password", "POST", "/services/collector/event", auth(basic("anyone", "noack")),
			`{"time":1767225600,"event":"hello"}`, 200, 0, nil, []ev{def("hello", t0)}},
		{"basic auth, empty user", "POST", "/services/collector/event", auth(basic("", "noack")),
			`{"time":1767225600,"event":"hello"}`, 200, 0, nil, []ev{def("hello", t0)}},
		{"?token= where the token allows it", "POST", "/services/collector/event?token=qs", nil,
			`{"time":1767225600,"event":"hello"}`, 200, 0, nil, []ev{def("hello", t0)}},
		{"?token= where the token does not allow it", "POST", "/services/collector/event?token=noack", nil,
			`{"time":1767225600,"event":"hello"}`, 401, 2, nil, nil},
		{"?token= unknown", "POST", "/services/collector/event?token=nope", nil,
			`{"time":1767225600,"event":"hello"}`, 401, 2, nil, nil},
		{"time with decimals", "POST", "/services/collector/event", auth("Splunk noack"),
			`{"time":1767225600.125,"event":"hello"}`, 200, 0, nil, []ev{def("hello", t0.Add(125*time.Millisecond))}},
		{"time as a string", "POST", "/services/collector/event", auth("Splunk noack"),
			`{"time":"1767225600.5","event":"hello"}`, 200, 0, nil, []ev{def("hello", t0.Add(500*time.Millisecond))}},
		{"time absent: receive time", "POST", "/services/collector/event", auth("Splunk noack"),
			`{"event":"hello"}`, 200, 0, nil, []ev{def("hello", fixedNow)}},
		{"event as a JSON object kept as JSON _raw", "POST", "/services/collector/event", auth("Splunk noack"),
			`{"time":1767225600,"event":{"user":"ann","n":3,"tags":["a","b"]}}`, 200, 0, nil,
			[]ev{def(`{"user":"ann","n":3,"tags":["a","b"]}`, t0)}},
		{"event as a JSON array", "POST", "/services/collector/event", auth("Splunk noack"),
			`{"time":1767225600,"event":[1,"x"]}`, 200, 0, nil, []ev{def(`[1,"x"]`, t0)}},
		{"fields: string, number, array (multivalue)", "POST", "/services/collector/event", auth("Splunk noack"),
			`{"time":1767225600,"event":"hello","fields":{"s":"v","n":42.5,"m":["x","y",7]}}`, 200, 0, nil,
			[]ev{with(def("hello", t0), func(e *ev) { e.Fields = "s=v n=42.5 m=x m=y m=7" })}},
		{"envelope metadata", "POST", "/services/collector/event", auth("Splunk noack"),
			`{"time":1767225600,"host":"h1","source":"s1","sourcetype":"st1","index":"web","event":"hello"}`, 200, 0, nil,
			[]ev{with(def("hello", t0), func(e *ev) { e.Host, e.Source, e.Sourcetype, e.Index = "h1", "s1", "st1", "web" })}},
		{"concatenated envelopes, newline-free", "POST", "/services/collector/event", auth("Splunk noack"),
			`{"time":1767225600,"event":"a"}{"time":1767225600,"event":"b"}` + "\n\n" + `{"time":1767225600,"event":"c"}`, 200, 0, nil,
			[]ev{def("a", t0), def("b", t0), def("c", t0)}},
		{"/event query parameters as defaults, envelope wins", "POST", "/services/collector/event?host=qh&sourcetype=qst&index=web", auth("Splunk noack"),
			`{"time":1767225600,"event":"a"}{"time":1767225600,"host":"eh","event":"b"}`, 200, 0, nil,
			[]ev{with(def("a", t0), func(e *ev) { e.Host, e.Sourcetype, e.Index = "qh", "qst", "web" }),
				with(def("b", t0), func(e *ev) { e.Host, e.Sourcetype, e.Index = "eh", "qst", "web" })}},
		{"/raw metadata from query parameters", "POST",
			"/services/collector/raw?host=rh&source=rs&sourcetype=syslog&index=web&time=1767225600.25", auth("Splunk noack"),
			"first line\r\nsecond line\n\n", 200, 0, nil,
			[]ev{with(def("first line", t0.Add(250*time.Millisecond)), func(e *ev) { e.Host, e.Source, e.Sourcetype, e.Index = "rh", "rs", "syslog", "web" }),
				with(def("second line", t0.Add(250*time.Millisecond)), func(e *ev) { e.Host, e.Source, e.Sourcetype, e.Index = "rh", "rs", "syslog", "web" })}},
		{"/raw bad ?time=", "POST", "/services/collector/raw?time=soon", auth("Splunk noack"), "x", 400, 6, nil, nil},
		{"/raw line breaking: blank lines and CRLF", "POST", "/services/collector/raw", auth("Splunk noack"),
			"\n a \r\n\r\n\tb\n", 200, 0, nil, []ev{def("\tb", fixedNow), def(" a ", fixedNow)}},
		{"gzip /event", "POST", "/services/collector/event",
			map[string]string{"Authorization": "Splunk noack", "Content-Encoding": "gzip"},
			gz(`{"time":1767225600,"event":"zipped"}`), 200, 0, nil, []ev{def("zipped", t0)}},
		{"gzip /raw", "POST", "/services/collector/raw",
			map[string]string{"Authorization": "Splunk noack", "Content-Encoding": "GZIP"},
			gz("z1\nz2\n"), 200, 0, nil, []ev{def("z1", fixedNow), def("z2", fixedNow)}},
		{"gzip that is not", "POST", "/services/collector/event",
			map[string]string{"Authorization": "Splunk noack", "Content-Encoding": "gzip"},
			`{"event":"plain"}`, 400, 6, nil, nil},
		{"no channel needed without acks, /raw too", "POST", "/services/collector/raw", auth("Splunk noack"),
			"x", 200, 0, nil, []ev{def("x", fixedNow)}},
		{"a token with acks needs its channel", "POST", "/services/collector/event", auth("Splunk ack"),
			`{"event":"x"}`, 400, 10, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, store.Options{})
			status, r := f.send(t, c.method, c.path, c.hdr, c.body)
			if status != c.status || r.Code != c.code {
				t.Fatalf("got %d %+v, want %d code %d", status, r, c.status, c.code)
			}
			switch {
			case c.ackID == nil && r.AckID != nil:
				t.Fatalf("ackId %d, want none", *r.AckID)
			case c.ackID != nil && (r.AckID == nil || *r.AckID != *c.ackID):
				t.Fatalf("ackId %v, want %d", r.AckID, *c.ackID)
			}
			want := append([]ev(nil), c.want...)
			sort.SliceStable(want, func(i, j int) bool { return want[i].Raw < want[j].Raw })
			if got := f.stored(t); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("stored\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestHealthPaths: /health and /health/1.0 answer code 17.
func TestHealthPaths(t *testing.T) {
	f := newFixture(t, store.Options{})
	for _, p := range []string{"/services/collector/health", "/services/collector/health/1.0"} {
		status, r := f.send(t, "GET", p, nil, "")
		if status != 200 || r.Code != 17 || r.Text != "HEC is healthy" {
			t.Fatalf("%s: %d %+v", p, status, r)
		}
	}
}

// TestChannelHeaderAndQueryAreOneChannel: the header and ?channel= name the
// same channel, so ack ids continue across them.
func TestChannelHeaderAndQueryAreOneChannel(t *testing.T) {
	f := newFixture(t, store.Options{})
	_, r := f.post(t, "/services/collector/event", "Splunk ack", chanA, good)
	_, r2 := f.post(t, "/services/collector/event?channel="+chanA, "Splunk ack", "", good)
	if r.AckID == nil || *r.AckID != 0 || r2.AckID == nil || *r2.AckID != 1 {
		t.Fatalf("ack ids %v, %v; want 0 then 1", r.AckID, r2.AckID)
	}
}

// TestChannelsBelongToTheirToken: another token sees none of a channel's
// acks (and does not consume them), and gets its own ack ids on the same
// channel id.
func TestChannelsBelongToTheirToken(t *testing.T) {
	f := newFixture(t, store.Options{BlockInterval: 5 * time.Millisecond})
	_, r := f.post(t, "/services/collector/event", "Splunk ack", chanA, good)
	if r.AckID == nil || *r.AckID != 0 {
		t.Fatalf("first request: %+v", r)
	}
	if err := f.st.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := f.acks(t, "Splunk ack2", chanA, 0); len(got) != 1 || got["0"] {
		t.Fatalf("another token read %v on the channel, want {0:false}", got)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := f.acks(t, "Splunk ack", chanA, 0); !got["0"] {
			return errors.New("the owner's ack 0 is not true")
		}
		return nil
	})
	_, r = f.post(t, "/services/collector/event", "Splunk ack2", chanA, good)
	if r.AckID == nil || *r.AckID != 0 {
		t.Fatalf("the other token's first request on the same channel id: %+v, want ackId 0", r)
	}
	_, r = f.post(t, "/services/collector/event", "Splunk ack", chanA, good)
	if r.AckID == nil || *r.AckID != 1 {
		t.Fatalf("the owner's second request: %+v, want ackId 1", r)
	}
}

// TestChannelCapPerToken: past its cap a token gets 503 code 9 for a new
// channel, its existing channels keep working, and another token still
// opens channels.
func TestChannelCapPerToken(t *testing.T) {
	f := newFixtureWith(t, store.Options{}, func(c *Config) { c.MaxChannels = 2 })
	chans := []string{chanA, chanB, "00000000-0000-0000-0000-000000000003"}
	for i, ch := range chans[:2] {
		if status, r := f.post(t, "/services/collector/event", "Splunk ack", ch, good); status != 200 || r.Code != 0 {
			t.Fatalf("channel %d: %d %+v", i, status, r)
		}
	}
	status, r := f.post(t, "/services/collector/event", "Splunk ack", chans[2], good)
	if status != 503 || r.Code != 9 || r.Text != "Server is busy" {
		t.Fatalf("third channel of one token: %d %+v, want 503 code 9", status, r)
	}
	if status, r := f.post(t, "/services/collector/event", "Splunk ack", chanA, good); status != 200 || r.AckID == nil || *r.AckID != 1 {
		t.Fatalf("an existing channel past the cap: %d %+v", status, r)
	}
	if status, r := f.post(t, "/services/collector/event", "Splunk ack2", chans[2], good); status != 200 || r.Code != 0 {
		t.Fatalf("another token's channel: %d %+v", status, r)
	}
	if n := f.st.Stats.EventsAppended.Load(); n != 4 {
		t.Fatalf("%d events appended, want 4 (the refused request added none)", n)
	}
}

// TestNoAckAnswersOnlyOnceDurable holds the disk back: a token without acks
// gets no answer while its events are not on disk, and 200 once they are.
func TestNoAckAnswersOnlyOnceDurable(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 16)
	var once sync.Once
	f := newFixture(t, store.Options{BlockInterval: time.Hour, BeforeWrite: func() {
		entered <- struct{}{}
		once.Do(func() { <-release })
	}})
	type answer struct {
		status int
		r      hecReply
	}
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", f.srv.URL+"/services/collector/event", strings.NewReader(good+good))
		req.Header.Set("Authorization", "Splunk noack")
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			done <- answer{status: -1}
			return
		}
		var r hecReply
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		done <- answer{resp.StatusCode, r}
	}()
	// The block is sealed at once (not after the hour-long interval), and
	// the writer is held before writing it.
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request's block was never sealed for writing")
	}
	select {
	case a := <-done:
		t.Fatalf("answered %d %+v before the events were durable", a.status, a.r)
	default:
	}
	if inv := f.st.Inventory(); len(inv) != 1 || inv[0].Events != 0 {
		t.Fatalf("inventory before the write: %+v", inv)
	}
	close(release)
	select {
	case a := <-done:
		if a.status != 200 || a.r.Code != 0 || a.r.Text != "Success" || a.r.AckID != nil {
			t.Fatalf("got %d %+v, want 200 Success without ackId", a.status, a.r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after the disk let go")
	}
	if inv := f.st.Inventory(); len(inv) != 1 || inv[0].Events != 2 {
		t.Fatalf("answered, but the inventory holds %+v, want 2 durable events", inv)
	}
}

// heldReplication is a replication hook that holds every block's
// "replicated" until the test lets go, as a slow target would.
type heldReplication struct {
	mu   sync.Mutex
	held []func()
	seen chan struct{}
}

func (h *heldReplication) BlockDurable(_, _ string, _ uint32, replicated func()) {
	h.mu.Lock()
	h.held = append(h.held, replicated)
	h.mu.Unlock()
	h.seen <- struct{}{}
}
func (h *heldReplication) JournalClosed(string, int) {}
func (h *heldReplication) letGo() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.held {
		f()
	}
	h.held = nil
}

// TestNoAckWaitsForTheAckRule: in a cluster the answer of a token without
// acks waits for the copies the ack rule demands — the same condition that
// makes an ack id true.
func TestNoAckWaitsForTheAckRule(t *testing.T) {
	f := newFixture(t, store.Options{BlockInterval: 5 * time.Millisecond})
	hook := &heldReplication{seen: make(chan struct{}, 64)}
	f.st.Replicas().SetReplication(hook)
	_, r := f.post(t, "/services/collector/event", "Splunk ack", chanA, good)
	if r.AckID == nil {
		t.Fatalf("ack token: %+v", r)
	}
	<-hook.seen
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", f.srv.URL+"/services/collector/event", strings.NewReader(good))
		req.Header.Set("Authorization", "Splunk noack")
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case <-hook.seen: // the no-ack request's block is durable here, not replicated
	case <-time.After(10 * time.Second):
		t.Fatal("the no-ack request's block was never written")
	}
	if got := f.acks(t, "Splunk ack", chanA, 0); got["0"] {
		t.Fatal("ack id true before replication")
	}
	select {
	case s := <-done:
		t.Fatalf("no-ack request answered %d before replication", s)
	default:
	}
	hook.letGo()
	select {
	case s := <-done:
		if s != 200 {
			t.Fatalf("no-ack request: %d", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after replication")
	}
	if got := f.acks(t, "Splunk ack", chanA, 0); !got["0"] {
		t.Fatal("ack id still false after replication")
	}
}

// TestSetTokensKeepsChannels: new settings for a token keep its channels
// and ack ids; a removed token is refused; a new one works at once.
func TestSetTokensKeepsChannels(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir(), GUID: "g2", Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := New(Config{Store: st, Tokens: []Token{{Value: "a", Ack: true}, {Value: "gone", Ack: true}}})
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	g := &fixture{st: st, srv: srv}
	if _, r := g.post(t, "/services/collector/event", "Splunk a", chanA, good); r.AckID == nil || *r.AckID != 0 {
		t.Fatalf("first: %+v", r)
	}
	h.SetTokens([]Token{{Value: "a", Ack: true, Indexes: []string{"main"}}, {Value: "new"}})
	if _, r := g.post(t, "/services/collector/event", "Splunk a", chanA, good); r.AckID == nil || *r.AckID != 1 {
		t.Fatalf("after SetTokens the channel restarted: %+v", r)
	}
	if s, r := g.post(t, "/services/collector/event", "Splunk gone", chanA, good); s != 403 || r.Code != 4 {
		t.Fatalf("removed token: %d %+v", s, r)
	}
	if s, r := g.post(t, "/services/collector/event", "Splunk new", "", good); s != 200 || r.Code != 0 {
		t.Fatalf("new token: %d %+v", s, r)
	}
}

// TestTokenDefaults (issue 29 item 2): a token's host, source and
// sourcetype default the events that name none, as an HEC token's
// inputs.conf settings do in Splunk; the request's query parameters come
// before them, and an event's own values before both.
func TestTokenDefaults(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.Tokens = append(c.Tokens, Token{Value: "dflt", Host: "web-7", Source: "/var/log/app.log", Sourcetype: "app_json"})
	})
	for _, r := range []struct{ path, body string }{
		{"/services/collector/event", `{"event":"plain"}`},
		{"/services/collector/event?sourcetype=from_query", `{"event":"query"}`},
		{"/services/collector/event?host=qhost", `{"event":"own","host":"ehost","source":"esrc"}`},
		{"/services/collector/raw", "raw line"},
	} {
		if code, rep := f.send(t, "POST", r.path, map[string]string{"Authorization": "Splunk dflt"}, r.body); code != 200 || rep.Code != 0 {
			t.Fatalf("%s: %d %+v", r.path, code, rep)
		}
	}
	got := map[string]string{}
	for _, s := range f.stored(t) {
		got[s.Raw] = s.Host + " " + s.Source + " " + s.Sourcetype
	}
	want := map[string]string{
		"plain":    "web-7 /var/log/app.log app_json",
		"query":    "web-7 /var/log/app.log from_query",
		"own":      "ehost esrc app_json",
		"raw line": "web-7 /var/log/app.log app_json",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored host source sourcetype:\n got %v\nwant %v", got, want)
	}
}
