package hec

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer/store"
	"github.com/valyala/fastjson"
)

// defaults leaves the handler's limits at their defaults (the fixture
// otherwise sets small ones for the code table).
func defaults(c *Config) {
	c.MaxBodyBytes, c.MaxEventBytes, c.BusyWait = 0, 0, 0
}

// gzipped compresses n bytes of pattern, repeated, without holding them.
func gzipped(t testing.TB, pattern string, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	chunk := []byte(strings.Repeat(pattern, (64<<10)/len(pattern)))
	for left := n; left > 0; left -= len(chunk) {
		if _, err := zw.Write(chunk[:min(left, len(chunk))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func (f *fixture) postGzip(t *testing.T, path, auth string, body []byte) (int, hecReply, error) {
	req, _ := http.NewRequest("POST", f.srv.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		return 0, hecReply{}, err
	}
	defer resp.Body.Close()
	var r hecReply
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &r); err != nil {
		return resp.StatusCode, r, fmt.Errorf("reply %q: %v", b, err)
	}
	return resp.StatusCode, r, nil
}

// TestGzipBombsStayWithinBudget: 100 concurrent gzip bodies of 64 KB, each
// inflating to 64 MiB (four times MaxBodyBytes), with the default limits.
// Each is refused — 413 code 6 once it inflated past 16 MiB, or 503 code 9
// when the shared 64 MiB budget had no room within the busy wait — nothing
// is stored, the budget is whole again afterwards, and the live heap grows
// by less than 100 MB — and, without the race detector (whose shadow
// memory inflates the RSS and whose sync.Pool drops a quarter of what is
// put back, leaving garbage), so do the heap in use and the RSS.
func TestGzipBombsStayWithinBudget(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, defaults)
	bomb := gzipped(t, "\x00", 64<<20)
	f.srv.Client().Transport.(*http.Transport).MaxIdleConnsPerHost = 100
	m := testutil.StartMemPeak()
	type answer struct {
		status int
		r      hecReply
		err    error
	}
	answers := make(chan answer, 100)
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, r, err := f.postGzip(t, "/services/collector/event", "Splunk noack", bomb)
			answers <- answer{status, r, err}
		}()
	}
	wg.Wait()
	close(answers)
	heap, live, rss := m.End()
	tooLarge, busy := 0, 0
	for a := range answers {
		switch {
		case a.err != nil:
			t.Fatalf("bomb: %v", a.err)
		case a.status == 413 && a.r.Code == 6 && a.r.Text == "Content too large":
			tooLarge++
		case a.status == 503 && a.r.Code == 9 && a.r.Text == "Server is busy":
			busy++
		default:
			t.Fatalf("bomb answered %d %+v", a.status, a.r)
		}
	}
	t.Logf("100 gzip bombs of %d bytes (64 MiB inflated each): %d × 413, %d × 503; peak growth: live heap %.1f MB, heap in use %.1f MB, RSS %.1f MB (from %.1f MB); race detector %v",
		len(bomb), tooLarge, busy, float64(live)/1e6, float64(heap)/1e6, float64(rss)/1e6, float64(m.RSSBase)/1e6, raceEnabled)
	if live >= 100e6 {
		t.Fatalf("live heap grew by %d bytes under 100 gzip bombs", live)
	}
	if !raceEnabled && (heap >= 100e6 || rss >= 100e6) {
		t.Fatalf("heap in use grew by %d bytes, RSS by %d under 100 gzip bombs", heap, rss)
	}
	if n := f.st.Stats.EventsAppended.Load(); n != 0 || len(f.st.Inventory()) != 0 {
		t.Fatalf("bombs stored %d events, %d buckets", n, len(f.st.Inventory()))
	}
	if n := f.h.InFlightBytes(); n != 0 {
		t.Fatalf("%d bytes of the budget still held after every bomb was answered", n)
	}
	// The peer still takes a gzip body.
	status, r, err := f.postGzip(t, "/services/collector/event", "Splunk noack", []byte(gz(good+good)))
	if err != nil || status != 200 || r.Code != 0 || f.st.Stats.EventsAppended.Load() != 2 {
		t.Fatalf("after the bombs: %d %+v %v", status, r, err)
	}
}

// TestBodyBudgetSharedByRequests: a body being read holds its share of the
// in-flight budget; a request that needs more than is left waits BusyWait
// and gets 503 code 9 with nothing stored, and the first request, once
// whole, is indexed; afterwards the budget is whole again, the waiting
// request goes through, and one that alone needs more than the whole
// budget (an /event body with the decoder's copy of it) gets 413.
func TestBodyBudgetSharedByRequests(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.MaxBodyBytes, c.MaxInFlightBytes, c.MaxEventBytes, c.BusyWait = 8<<20, 8<<20, 0, 50*time.Millisecond
		c.TokenShare = 1 // the budget shared by requests; the token share has its own test
	})
	ev := `{"event":"` + strings.Repeat("a", 1000) + `"}` + "\n"
	first := strings.Repeat(ev, (5<<20)/(2*len(ev))) // 2.5 MiB
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", f.srv.URL+"/services/collector/event", pr) // chunked: length unknown
	req.Header.Set("Authorization", "Splunk noack")
	firstDone := make(chan int, 1)
	go func() {
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			firstDone <- 0
			return
		}
		resp.Body.Close()
		firstDone <- resp.StatusCode
	}()
	if _, err := io.WriteString(pw, first); err != nil { // returns once the server has read it all
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := f.h.InFlightBytes(); n < 3<<20 {
			return fmt.Errorf("first request holds %d bytes", n)
		}
		return nil
	})
	line := strings.Repeat("b", 1000) + "\n"
	second := strings.Repeat(line, (11<<20)/(2*len(line))) // 5.5 MiB, more than the 5 MiB left
	status, r := f.post(t, "/services/collector/raw", "Splunk noack", "", second)
	if status != 503 || r.Code != 9 || r.Text != "Server is busy" {
		t.Fatalf("second request: %d %+v, want 503 code 9", status, r)
	}
	pw.Close()
	if s := <-firstDone; s != 200 {
		t.Fatalf("first request: %d", s)
	}
	want := strings.Count(first, "\n")
	if n := f.st.Stats.EventsAppended.Load(); n != int64(want) {
		t.Fatalf("%d events stored, want the first request's %d", n, want)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := f.h.InFlightBytes(); n != 0 {
			return fmt.Errorf("%d bytes still held", n)
		}
		return nil
	})
	if status, r := f.post(t, "/services/collector/raw", "Splunk noack", "", second); status != 200 || r.Code != 0 {
		t.Fatalf("second request with room: %d %+v", status, r)
	}
	want += strings.Count(second, "\n")
	testutil.WaitFor(t, 5*time.Second, func() error { // its body is held until the store has indexed it
		if n := f.h.InFlightBytes(); n != 0 {
			return fmt.Errorf("%d bytes still held", n)
		}
		return nil
	})
	envelopes := strings.Repeat(ev, (11<<20)/(2*len(ev)))
	if status, r := f.post(t, "/services/collector/event", "Splunk noack", "", envelopes); status != 413 || r.Code != 6 || r.Text != "Content too large" {
		t.Fatalf("an /event body needing twice its 5.5 MiB of an 8 MiB budget: %d %+v, want 413 code 6", status, r)
	}
	if n := f.st.Stats.EventsAppended.Load(); n != int64(want) {
		t.Fatalf("%d events stored, want %d", n, want)
	}
}

// TestAckBodyBounded: an /ack body over 256 KiB or naming more than 10,000
// ids gets 413 code 6 and reads nothing — the durable ack it names is still
// unread, and a bounded query then reads it as true once.
func TestAckBodyBounded(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, defaults)
	status, r := f.post(t, "/services/collector/event", "Splunk ack", chanA, good)
	if status != 200 || r.AckID == nil || *r.AckID != 0 {
		t.Fatalf("event: %d %+v", status, r)
	}
	if err := f.st.Flush(); err != nil { // ack 0 durable: a query would read it as true
		t.Fatal(err)
	}
	ids := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"acks":[0`)
		for i := 1; i < n; i++ {
			b.WriteString(",")
			b.WriteString(strconv.Itoa(i))
		}
		b.WriteString("]}")
		return b.String()
	}
	for name, body := range map[string]string{
		"10,001 ids":          ids(10001),
		"8 MiB of ids":        `{"acks":[0` + strings.Repeat(",0", 4<<20) + `]}`,
		"300 KiB body":        `{"acks":[0]}` + strings.Repeat(" ", 300<<10),
		"ids in another key":  `{"acks":[0],"x":[` + strings.Repeat("1,", 20000) + `1]}`,
		"gzip inflating past": gz(`{"acks":[0]}` + strings.Repeat(" ", 1<<20)),
	} {
		hdr := map[string]string{"Authorization": "Splunk ack", "X-Splunk-Request-Channel": chanA}
		if strings.HasPrefix(name, "gzip") {
			hdr["Content-Encoding"] = "gzip"
		}
		status, r := f.send(t, "POST", "/services/collector/ack", hdr, body)
		if status != 413 || r.Code != 6 || r.Text != "Content too large" {
			t.Fatalf("%s: %d %+v, want 413 code 6", name, status, r)
		}
	}
	// Nothing was read: ack 0 is still there, true once (it is durable).
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := f.acks(t, "Splunk ack", chanA, 0); !got["0"] {
			return fmt.Errorf("ack 0 read as %v", got)
		}
		return nil
	})
	if got := f.acks(t, "Splunk ack", chanA, 0); got["0"] {
		t.Fatal("ack 0 true twice")
	}
	// 10,000 ids is within the bound.
	if status, _ := f.send(t, "POST", "/services/collector/ack", map[string]string{"Authorization": "Splunk ack", "X-Splunk-Request-Channel": chanA}, ids(10000)); status != 200 {
		t.Fatalf("10,000 ids: %d", status)
	}
}

// TestWholeEventLimit: MaxEventBytes (1 MiB by default) measures the whole
// event — _raw, host, source, sourcetype, index and every field's name and
// value — on /event and /raw; a larger one is 400 code 6 with its number
// and nothing of the request is stored; an event of exactly 1 MiB is taken.
func TestWholeEventLimit(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, defaults)
	big := strings.Repeat("h", 2<<20)
	half := strings.Repeat("v", 600<<10)
	cases := map[string]string{
		"host":            `{"event":"x","host":"` + big + `"}`,
		"source":          `{"event":"x","source":"` + big + `"}`,
		"sourcetype":      `{"event":"x","sourcetype":"` + big + `"}`,
		"index":           `{"event":"x","index":"` + big + `"}`,
		"field value":     `{"event":"x","fields":{"k":"` + big + `"}}`,
		"field name":      `{"event":"x","fields":{"` + big + `":"v"}}`,
		"multivalue sum":  `{"event":"x","fields":{"k":["` + half + `","` + half + `"]}}`,
		"raw + host":      `{"event":"` + half + `","host":"` + half + `"}`,
		"json event+meta": `{"event":{"a":"` + half + `"},"source":"` + half + `"}`,
	}
	for name, bad := range cases {
		status, r := f.post(t, "/services/collector/event", "Splunk noack", "", good+bad)
		if status != 400 || r.Code != 6 || r.Text != "Invalid data format" || r.InvalidEvent == nil || *r.InvalidEvent != 1 {
			t.Fatalf("%s: %d %+v, want 400 code 6 at event 1", name, status, r)
		}
	}
	status, r := f.post(t, "/services/collector/raw?host="+strings.Repeat("q", 500<<10), "Splunk noack", "", "ok\n"+half)
	if status != 400 || r.Code != 6 || r.InvalidEvent == nil || *r.InvalidEvent != 1 {
		t.Fatalf("raw line + host: %d %+v, want 400 code 6 at event 1", status, r)
	}
	if n := f.st.Stats.EventsAppended.Load(); n != 0 || len(f.st.Inventory()) != 0 {
		t.Fatalf("refused requests stored %d events", n)
	}
	// Exactly the limit: _raw + host "h1" + source "http:hec" + sourcetype
	// "httpevent" + index "main" + field k=v.
	raw := strings.Repeat("r", 1<<20-len("h1http:hechttpeventmainkv"))
	status, r = f.post(t, "/services/collector/event", "Splunk noack", "", `{"event":"`+raw+`","host":"h1","fields":{"k":"v"}}`)
	if status != 200 || r.Code != 0 {
		t.Fatalf("an event of exactly 1 MiB: %d %+v", status, r)
	}
	if n := f.st.Stats.EventsAppended.Load(); n != 1 {
		t.Fatalf("%d events stored, want 1", n)
	}
}

// TestEnvelopeValuesBounded: an envelope of more than 65,536 JSON values
// (here 8 MiB of "0," — 4 million of them) is refused with 400 code 6
// before it is parsed, plain or gzip (8 KB on the wire), a top-level array
// too; the request allocates a few times its size, not the 2 GB fastjson
// would spend on it.
func TestEnvelopeValuesBounded(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, defaults)
	zeros := strings.Repeat("0,", 4<<20) + "0"
	for name, body := range map[string]string{
		"event array": good + `{"event":[` + zeros + `]}`,
		"field array": good + `{"event":"x","fields":{"k":[` + zeros + `]}}`,
		"top array":   good + `[` + zeros + `]`,
	} {
		var status int
		var r hecReply
		alloc := allocated(func() { status, r = f.post(t, "/services/collector/event", "Splunk noack", "", body) })
		if status != 400 || r.Code != 6 || r.InvalidEvent == nil || *r.InvalidEvent != 1 {
			t.Fatalf("%s: %d %+v, want 400 code 6 at event 1", name, status, r)
		}
		t.Logf("%s: %d MiB body refused, %.1f MB allocated", name, len(body)>>20, float64(alloc)/1e6)
		if alloc > 5*uint64(len(body)) {
			t.Fatalf("%s: refusing a %d-byte body allocated %d bytes", name, len(body), alloc)
		}
	}
	zb := gzipped(t, "0,", 8<<20)
	body := append([]byte(gz(`{"event":[`)), zb...) // two gzip members: `{"event":[` then the zeros
	status, r, err := f.postGzip(t, "/services/collector/event", "Splunk noack", body)
	if err != nil || status != 400 || r.Code != 6 || r.InvalidEvent == nil || *r.InvalidEvent != 0 {
		t.Fatalf("gzip values bomb (%d bytes): %d %+v %v", len(body), status, r, err)
	}
	if n := f.st.Stats.EventsAppended.Load(); n != 0 {
		t.Fatalf("refused requests stored %d events", n)
	}
}

func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestTokenLookupIsExact: tokens are found by their hash and compared in
// constant time; a prefix, an extension or a one-byte change of a token is
// an invalid token (403 code 4) and stores nothing.
func TestTokenLookupIsExact(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.Tokens = []Token{{Value: "s3cret-token-0001"}}
	})
	for _, tok := range []string{"s3cret-token-000", "s3cret-token-00011", "s3cret-token-0002", "S3cret-token-0001", "s3cret"} {
		status, r := f.post(t, "/services/collector/event", "Splunk "+tok, "", good)
		if status != 403 || r.Code != 4 || r.Text != "Invalid token" {
			t.Fatalf("token %q: %d %+v, want 403 code 4", tok, status, r)
		}
	}
	if n := f.st.Stats.EventsAppended.Load(); n != 0 {
		t.Fatalf("%d events stored with wrong tokens", n)
	}
	if status, r := f.post(t, "/services/collector/event", "Splunk s3cret-token-0001", "", good); status != 200 || r.Code != 0 {
		t.Fatalf("the token itself: %d %+v", status, r)
	}
}

// instantStore takes events and lets them go at once, always durable: the
// fuzz target checks the handler's own bookkeeping.
type instantStore struct{}

func (instantStore) AppendRelease(evs []store.Event, release func()) (*store.Ack, error) {
	release()
	return &store.Ack{}, nil
}
func (s instantStore) AppendKeyed(evs []store.Event, release func(), _ *store.RequestKey) (*store.Ack, error) {
	return s.AppendRelease(evs, release)
}
func (instantStore) SealOpen(*store.Ack)                    {}
func (instantStore) Wait(context.Context, *store.Ack) error { return nil }
func (instantStore) Busy() bool                             { return false }
func (instantStore) Err() error                             { return nil }

// FuzzGzipBody: any bytes as a gzip body (inflated under a 64 KiB cap,
// with a 1 MiB budget) get one of the expected answers and give the whole
// in-flight budget back.
func FuzzGzipBody(f *testing.F) {
	f.Add([]byte(gz(good + good)))
	f.Add([]byte(gz(good))[:20])
	f.Add(append([]byte(gz(good)), gz(good)...))
	f.Add(gzipped(f, "\x00", 1<<20))
	f.Add(gzipped(f, good, 1<<20))
	f.Add([]byte("not gzip"))
	f.Add([]byte{})
	h := New(Config{Store: instantStore{}, Tokens: []Token{{Value: "t"}}, MaxBodyBytes: 64 << 10,
		MaxInFlightBytes: 1 << 20, BusyWait: -1})
	mux := http.NewServeMux()
	h.Register(mux)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/services/collector/event", "/services/collector/raw"} {
			req := httptest.NewRequest("POST", path, bytes.NewReader(body))
			req.Header.Set("Authorization", "Splunk t")
			req.Header.Set("Content-Encoding", "gzip")
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, req)
			var r hecReply
			if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
				t.Fatalf("%s: reply %q", path, w.Body.Bytes())
			}
			switch {
			case w.Code == 200 && r.Code == 0:
			case w.Code == 400 && (r.Code == 5 || r.Code == 6 || r.Code == 12 || r.Code == 13 || r.Code == 15):
			case w.Code == 413 && r.Code == 6:
			default:
				t.Fatalf("%s: answered %d %+v", path, w.Code, r)
			}
			if n := h.InFlightBytes(); n != 0 {
				t.Fatalf("%s: %d bytes of the budget held after the answer", path, n)
			}
		}
	})
}

// FuzzEnvelopeValues: the bounds the decoder checks before parsing (the
// body's separators, and envelope by envelope) are never below the values
// the parser then builds for any envelope of a body it accepts, and a
// decoder that accepts a body counts them all (its footprint holds them).
func FuzzEnvelopeValues(f *testing.F) {
	f.Add([]byte(good + good))
	f.Add([]byte(`{"event":[0,[1,{"a":"b\",[:"}],2]]} [1,2,3] {"x":{"y":[]}}`))
	f.Add([]byte(`{"a":"\\\\"}{"b":"\\"[,:"}`))
	f.Add([]byte(`{"event":{"a":[1,2,{"b":null}]},"fields":{"k":["x",1]},"other":[[],{}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var sc fastjson.Scanner
		sc.InitBytes(body)
		most := 0
		for sc.Next() {
			v := sc.Value()
			if tp := v.Type(); tp != fastjson.TypeObject && tp != fastjson.TypeArray {
				return // the bound stops at such a value; the decoder refuses it
			}
			most = max(most, countValues(v))
		}
		if sc.Error() != nil {
			return
		}
		if got, bad := envelopeValues(body, 1<<30); bad >= 0 || got < most || valuesBound(body) < most {
			t.Fatalf("bounds %d (bad %d), %d below the %d values parsed", got, bad, valuesBound(body), most)
		}
		var d decoder
		if _, r := d.decodeEnvelopes(body, Defaults{Index: "main"}, func(string) bool { return true }, 1<<20); r.Code == 0 && d.valuesCap < most {
			t.Fatalf("decoder counted %d values, the parser built %d", d.valuesCap, most)
		}
	})
}

// TestSilentBodiesDoNotTakeTheBudget: review 2026-12-06 M2 — four
// connections that declare a 16 MiB body, send 10 bytes and go silent held
// the whole 64 MiB budget (reserved from Content-Length), and every other
// request got 503 code 9. Now each holds only what its buffer has grown
// to (1 MiB), a normal request from another token is served at once,
// closing them gives everything back, and the process's RSS grows by less
// than 64 MB over it all.
func TestSilentBodiesDoNotTakeTheBudget(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.MaxBodyBytes, c.MaxInFlightBytes, c.MaxEventBytes = 16<<20, 64<<20, 0
	})
	mem := testutil.StartMemPeak()
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	var conns []net.Conn
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /services/collector/event HTTP/1.1\r\nHost: x\r\nAuthorization: Splunk noack\r\nContent-Length: 16777000\r\n\r\n{\"event\":")
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := f.h.InFlightBytes(); n < 4<<20 {
			return fmt.Errorf("the silent bodies hold %d bytes", n)
		}
		return nil
	})
	if n := f.h.InFlightBytes(); n > 4<<20 {
		t.Fatalf("four silent 16 MiB bodies hold %d bytes, want at most 4 MiB", n)
	}
	start := time.Now()
	status, r := f.post(t, "/services/collector/event", "Splunk ack2", chanB, good)
	if status != 200 || r.Code != 0 {
		t.Fatalf("a normal request beside them: %d %+v", status, r)
	}
	t.Logf("a normal request beside four silent 16 MiB bodies: %v", time.Since(start))
	for _, c := range conns {
		c.Close()
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := f.h.InFlightBytes(); n != 0 {
			return fmt.Errorf("%d bytes still held", n)
		}
		return nil
	})
	_, live, rss := mem.End()
	t.Logf("peak growth: RSS %.1f MB, live heap %.1f MB", float64(rss)/1e6, float64(live)/1e6)
	if rss >= 64e6 {
		t.Fatalf("RSS grew by %d bytes under four silent 16 MiB bodies", rss)
	}
}

// TestStalledBodyGivesBackItsShare: a body that stops arriving has
// BodyReadPerMiB for its next size class or MiB; then its reservation is
// given back and its connection answered and closed, long before the
// server's 5-minute ReadTimeout.
func TestStalledBodyGivesBackItsShare(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.MaxBodyBytes, c.MaxInFlightBytes, c.MaxEventBytes, c.BodyReadPerMiB = 16<<20, 64<<20, 0, 300*time.Millisecond
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /services/collector/event HTTP/1.1\r\nHost: x\r\nAuthorization: Splunk noack\r\nContent-Length: 16777000\r\n\r\n{\"event\":")
	start := time.Now()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := f.h.InFlightBytes(); n == 0 {
			return errors.New("the body holds nothing yet")
		}
		return nil
	})
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := f.h.InFlightBytes(); n != 0 {
			return fmt.Errorf("the stalled body still holds %d bytes", n)
		}
		return nil
	})
	t.Logf("a stalled 16 MiB body gave its share back after %v", time.Since(start))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("the stalled connection: %v", err)
	}
}

// TestTokenShareOfTheBudget: one token's requests hold at most TokenShare
// of the in-flight budget together. Eight silent bodies of token noack
// hold 6 of 8 MiB; its next request waits and gets 503 code 9, while
// another token's request is served from the room left.
func TestTokenShareOfTheBudget(t *testing.T) {
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.MaxBodyBytes, c.MaxInFlightBytes, c.MaxEventBytes, c.BusyWait = 4<<20, 8<<20, 0, 50*time.Millisecond
	})
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /services/collector/event HTTP/1.1\r\nHost: x\r\nAuthorization: Splunk noack\r\nContent-Length: 4000000\r\n\r\n{\"event\":")
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := f.h.InFlightBytes(); n != 6<<20 {
			return fmt.Errorf("token noack holds %d bytes, want its share, 6 MiB", n)
		}
		return nil
	})
	if status, r := f.post(t, "/services/collector/event", "Splunk noack", "", good); status != 503 || r.Code != 9 {
		t.Fatalf("token noack past its share: %d %+v, want 503 code 9", status, r)
	}
	if status, r := f.post(t, "/services/collector/event", "Splunk ack2", chanB, good); status != 200 || r.Code != 0 {
		t.Fatalf("another token beside it: %d %+v", status, r)
	}
}

// TestKeyedTokenLookup: a token given by its keyed digest (a cluster
// peer's, once the cluster has a token key) takes its secret and nothing
// else — not a near miss, not the digest itself, not the secret's unkeyed
// digest — and the same tokens reset with the key's switch still work.
func TestKeyedTokenLookup(t *testing.T) {
	key := bytes.Repeat([]byte{7}, fsm.TokenKeySize)
	const secret = "s3cret-token-0001"
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.Tokens = []Token{{Value: fsm.TokenDigest(secret)}}
	})
	post := func(tok string) int {
		status, _ := f.post(t, "/services/collector/event", "Splunk "+tok, "", good)
		return status
	}
	if s := post(secret); s != 200 {
		t.Fatalf("unkeyed digest: the secret got %d", s)
	}
	f.h.SetTokens([]Token{{Value: fsm.KeyedDigest(key, secret), Key: key}})
	for _, tok := range []string{"s3cret-token-000", "s3cret-token-0002", fsm.KeyedDigest(key, secret), fsm.TokenDigest(secret)} {
		if s := post(tok); s != 403 {
			t.Fatalf("keyed digest: token %q got %d, want 403", tok, s)
		}
	}
	if s := post(secret); s != 200 {
		t.Fatalf("keyed digest: the secret got %d", s)
	}
	// A keyed digest without its key matches nothing.
	f.h.SetTokens([]Token{{Value: fsm.KeyedDigest(key, secret)}})
	if s := post(secret); s != 403 {
		t.Fatalf("keyed digest without a key: the secret got %d", s)
	}
}

// TestAckChannelsSurviveTheKey: when the cluster's token key arrives and a
// token comes back as its keyed digest, its channel goes on (the next ack
// id follows the last, unread acks still answer) instead of starting
// afresh; another token's secret does not adopt it.
func TestAckChannelsSurviveTheKey(t *testing.T) {
	key := bytes.Repeat([]byte{8}, fsm.TokenKeySize)
	const secret, other = "ack-secret-0001", "ack-secret-0002"
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.Tokens = []Token{{Value: fsm.TokenDigest(secret), Ack: true}, {Value: fsm.TokenDigest(other), Ack: true}}
	})
	for want := int64(0); want < 2; want++ {
		if s, r := f.post(t, "/services/collector/event", "Splunk "+secret, chanA, good); s != 200 || r.AckID == nil || *r.AckID != want {
			t.Fatalf("before the key: %d %+v, want ack id %d", s, r, want)
		}
	}
	f.h.SetTokens([]Token{{Value: fsm.KeyedDigest(key, secret), Ack: true, Key: key}, {Value: fsm.KeyedDigest(key, other), Ack: true, Key: key}})
	if s, r := f.post(t, "/services/collector/event", "Splunk "+other, chanA, good); s != 200 || r.AckID == nil || *r.AckID != 0 {
		t.Fatalf("another token on the same channel id: %d %+v, want its own channel (ack id 0)", s, r)
	}
	if s, r := f.post(t, "/services/collector/event", "Splunk "+secret, chanA, good); s != 200 || r.AckID == nil || *r.AckID != 2 {
		t.Fatalf("after the key: %d %+v, want ack id 2 (the channel goes on)", s, r)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if a := f.acks(t, "Splunk "+secret, chanA, 0, 1, 2); !a["0"] || !a["1"] || !a["2"] {
			return fmt.Errorf("acks %v", a)
		}
		return nil
	})
}
