package hec

// The JSON decoder choice (issue 3): encoding/json, goccy/go-json and
// valyala/fastjson decode the bench envelopes into the same events; the
// benchmarks below measure them. Run:
//
//	go test -run XXX -bench Decode -benchmem ./peer/hec/
//
// with QUARRY_BENCH_HEC pointing at a file of gen_events.go -format hec (by
// default ../../benchdata/events-1m.hec when present, else a synthetic set
// of the same shape).

import (
	"bufio"
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"

	gojson "github.com/goccy/go-json"
	"github.com/quarry-dev/quarry/peer/store"
	"pgregory.net/rapid"
)

// envelope is the struct the reflection-based decoders fill.
type envelope struct {
	Time       stdjson.Number    `json:"time"`
	Host       string            `json:"host"`
	Source     string            `json:"source"`
	Sourcetype string            `json:"sourcetype"`
	Index      string            `json:"index"`
	Event      string            `json:"event"`
	Fields     map[string]string `json:"fields"`
}

func benchBody(tb testing.TB, n int) []byte {
	path := os.Getenv("QUARRY_BENCH_HEC")
	if path == "" {
		path = "../../benchdata/events-1m.hec"
	}
	var out bytes.Buffer
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for i := 0; i < n && sc.Scan(); i++ {
			out.Write(sc.Bytes())
			out.WriteByte('\n')
		}
		return out.Bytes()
	}
	for i := 0; i < n; i++ {
		fmt.Fprintf(&out, `{"time":1767225600.%03d,"host":"web-%02d","source":"/var/log/nginx/access.log","sourcetype":"nginx","index":"main","event":"10.%d.%d.%d - - [01/Jan/2026:00:00:00 +0000] \"GET /api/v1/products/%d HTTP/1.1\" 200 %d \"-\" \"Mozilla/5.0 (X11; Linux x86_64)\" rt=%dms","fields":{"clientip":"10.%d.%d.%d","method":"GET","path":"/api/v1/products/%d","status":"200","bytes":"%d","user_agent":"Mozilla/5.0 (X11; Linux x86_64)"}}`+"\n",
			i%1000, i%50, i%256, i%7, i%251, i, 100+i*7, i%900, i%256, i%7, i%251, i, 100+i*7)
	}
	return out.Bytes()
}

func decodeStd(body []byte, unmarshal func([]byte, any) error) ([]store.Event, error) {
	var evs []store.Event
	for _, line := range bytes.Split(body, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e envelope
		if err := unmarshal(line, &e); err != nil {
			return nil, err
		}
		t, ok := parseEpoch([]byte(e.Time))
		if !ok {
			return nil, fmt.Errorf("bad time %q", e.Time)
		}
		ev := store.Event{Index: e.Index, Time: t, Raw: []byte(e.Event), Host: []byte(e.Host), Source: []byte(e.Source), Sourcetype: []byte(e.Sourcetype)}
		for k, v := range e.Fields {
			ev.Fields = append(ev.Fields, store.Field{Name: []byte(k), Value: []byte(v)})
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func TestDecodersAgree(t *testing.T) {
	body := benchBody(t, 500)
	var d decoder
	fast, r := d.decodeEnvelopes(body, Defaults{Index: "main"}, func(string) bool { return true }, 1<<20)
	if r.Code != 0 {
		t.Fatalf("fastjson: %+v", r)
	}
	for name, un := range map[string]func([]byte, any) error{"encoding/json": stdjson.Unmarshal, "goccy/go-json": gojson.Unmarshal} {
		evs, err := decodeStd(body, un)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(evs) != len(fast) {
			t.Fatalf("%s: %d events, fastjson %d", name, len(evs), len(fast))
		}
		for i := range evs {
			a, b := evs[i], fast[i]
			if a.Time != b.Time || !bytes.Equal(a.Raw, b.Raw) || !bytes.Equal(a.Host, b.Host) || a.Index != b.Index || len(a.Fields) != len(b.Fields) {
				t.Fatalf("%s: event %d differs", name, i)
			}
			m := map[string]string{}
			for _, f := range b.Fields {
				m[string(f.Name)] = string(f.Value)
			}
			for _, f := range a.Fields {
				if m[string(f.Name)] != string(f.Value) {
					t.Fatalf("%s: event %d field %s differs", name, i, f.Name)
				}
			}
		}
	}
}

func benchDecode(b *testing.B, fn func([]byte) int) {
	body := benchBody(b, 1000)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		n = fn(body)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
}

func BenchmarkDecodeEncodingJSON(b *testing.B) {
	benchDecode(b, func(body []byte) int {
		evs, err := decodeStd(body, stdjson.Unmarshal)
		if err != nil {
			b.Fatal(err)
		}
		return len(evs)
	})
}

func BenchmarkDecodeGoccyJSON(b *testing.B) {
	benchDecode(b, func(body []byte) int {
		evs, err := decodeStd(body, gojson.Unmarshal)
		if err != nil {
			b.Fatal(err)
		}
		return len(evs)
	})
}

func BenchmarkDecodeFastJSON(b *testing.B) {
	var d decoder
	benchDecode(b, func(body []byte) int {
		evs, r := d.decodeEnvelopes(body, Defaults{Index: "main"}, func(string) bool { return true }, 1<<20)
		if r.Code != 0 {
			b.Fatal(r)
		}
		return len(evs)
	})
}

// BenchmarkIngestPipeline is decode + append + index (rolls included) on one
// goroutine's worth of requests, for profiling the server's per-event cost:
//
//	go test -run XXX -bench IngestPipeline -cpuprofile cpu.prof ./peer/hec/
func BenchmarkIngestPipeline(b *testing.B) {
	body := benchBody(b, 300000)
	var reqs [][]byte
	lines := bytes.SplitAfter(bytes.TrimSpace(body), []byte("\n"))
	for i := 0; i < len(lines); i += 1000 {
		reqs = append(reqs, bytes.Join(lines[i:min(i+1000, len(lines))], nil))
	}
	st, err := store.Open(store.Options{Dir: b.TempDir(), GUID: "bench", Searchable: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	b.ResetTimer()
	events := 0
	var pool sync.Pool
	pool.New = func() any { return &decoder{} }
	for i := 0; i < b.N; i++ {
		for _, r := range reqs {
			d := pool.Get().(*decoder)
			evs, rp := d.decodeEnvelopes(r, Defaults{Index: "main"}, func(string) bool { return true }, 1<<20)
			if rp.Code != 0 {
				b.Fatal(rp)
			}
			events += len(evs)
			for st.Busy() {
				st.WaitIdle(10e9)
			}
			if _, err := st.AppendRelease(evs, func() { pool.Put(d) }); err != nil {
				b.Fatal(err)
			}
		}
	}
	st.WaitIdle(60e9)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// TestDecodersAgreeProperty: envelopes with arbitrary strings (quotes,
// escapes, unicode) decode to the same events with fastjson as with
// encoding/json.
func TestDecodersAgreeProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(rt, "n")
		var body bytes.Buffer
		for i := 0; i < n; i++ {
			fields := map[string]string{}
			for j, k := 0, rapid.IntRange(0, 3).Draw(rt, "nf"); j < k; j++ {
				fields[rapid.StringMatching(`f[a-z_]{0,7}`).Draw(rt, "fk")] = rapid.String().Draw(rt, "fv")
			}
			env := map[string]any{
				"time":   stdjson.Number(fmt.Sprintf("%d.%03d", rapid.IntRange(0, 2000000000).Draw(rt, "s"), rapid.IntRange(0, 999).Draw(rt, "ms"))),
				"host":   rapid.String().Draw(rt, "host"),
				"event":  rapid.StringN(1, 40, -1).Draw(rt, "event"),
				"fields": fields,
			}
			b, err := stdjson.Marshal(env)
			if err != nil {
				rt.Fatal(err)
			}
			body.Write(b)
			body.WriteString(rapid.SampledFrom([]string{"", "\n", " \r\n"}).Draw(rt, "sep"))
		}
		var d decoder
		fast, r := d.decodeEnvelopes(body.Bytes(), Defaults{Index: "main"}, func(string) bool { return true }, 1<<20)
		if r.Code != 0 {
			rt.Fatalf("fastjson refused %q: %+v", body.Bytes(), r)
		}
		dec := stdjson.NewDecoder(bytes.NewReader(body.Bytes()))
		dec.UseNumber()
		for i := 0; i < n; i++ {
			var e envelope
			if err := dec.Decode(&e); err != nil {
				rt.Fatal(err)
			}
			tm, _ := parseEpoch([]byte(e.Time))
			f := fast[i]
			if f.Time != tm || string(f.Raw) != e.Event || string(f.Host) != e.Host || len(f.Fields) != len(e.Fields) {
				rt.Fatalf("event %d: fastjson %+v, encoding/json %+v", i, f, e)
			}
			for _, fl := range f.Fields {
				if e.Fields[string(fl.Name)] != string(fl.Value) {
					rt.Fatalf("event %d field %q: %q vs %q", i, fl.Name, fl.Value, e.Fields[string(fl.Name)])
				}
			}
		}
	})
}
