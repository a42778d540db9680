package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
)

// splitQueries cover every command and aggregate of SPEC §5.
var splitQueries = []string{
	"error",
	"status=5* | stats count by host",
	"| stats count, sum(bytes), avg(bytes), min(bytes), max(bytes), min(user), max(user), dc(user), values(level), earliest(status), latest(status), perc50(bytes), perc90(latency), perc100(bytes), perc0(bytes), count(user) by index",
	"| stats dc(status) values(status) by host, index",
	"| top limit=3 path", "| top status by host", "| rare limit=2 user", "| top limit=0 host method showperc=false",
	"| timechart span=10m count", "| timechart span=15m count by host", "| timechart span=30m avg(bytes) max(latency) dc(user)",
	"earliest=2026-01-01T01:00:00Z latest=2026-01-01T02:30:00Z | timechart span=20m perc50(bytes)",
	"| sort bytes", "| sort 5 -status, host", "| sort 0 num(latency) str(user)", "| head 7", "| tail 4",
	"| dedup host", "| dedup 2 status keepempty=true", "| table _time host status", "| fields host, status, _raw",
	"| fields - _raw", `| eval kb=round(bytes/1024,1), s=if(status>=500,"bad","ok") | stats count by s`,
	"| where status >= 400 OR isnull(status) | stats count", `| rex "rt=(?<rtms>\d+)ms" | stats avg(rtms) max(rtms)`,
	"| search host=web-0* | stats count by host", "err* | head 3 | stats count by host",
	"| stats count by status | sort - count | head 3", "| top limit=5 path | eval p=round(percent) | table path p",
	"NOT status=200 | dedup host | table host _time", "user=bob | tail 2 | fields user",
}

// runSplit runs the peer halves over segments, ships every bucket's partial
// through its wire form, and merges them as a search head would.
func runSplit(t *testing.T, req Request, segs []Segment) []map[string]any {
	t.Helper()
	p, err := Compile(req)
	if err != nil {
		t.Fatalf("compile %q: %v", req.Query, err)
	}
	var parts []*Partial
	for _, s := range segs {
		back, _ := runWire(t, p, s)
		parts = append(parts, back)
	}
	rows, _, err := p.Merge(parts)
	if err != nil {
		t.Fatal(err)
	}
	return Results(rows)
}

// runWire runs the plan's peer half over one segment and ships the partial
// through its wire form: the decoded partial and its encoded bytes.
func runWire(t *testing.T, p *Plan, seg Segment) (*Partial, []byte) {
	t.Helper()
	pt, err := p.RunSegment(context.Background(), seg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pt.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	return back, b
}

// TestSplitExecution: for every command and aggregate, merging the peer
// halves over k random partitions (k = 1..8) equals the single-process
// result.
func TestSplitExecution(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	nev := 1500
	if raceEnabled {
		nev = 600
	}
	events := genEvents(r, nev)
	one := []Segment{NewMemSegment(uniq("all~0~p"), "main", events)}
	now := genBase.Add(5 * time.Hour)
	for _, q := range splitQueries {
		req := Request{Query: q, Now: now, Server: "p1"}
		single := canon(t, runSplit(t, req, one), "_bkt", "_cd")
		if len(single) == 0 {
			t.Errorf("query %q: no results at all; the test would prove nothing", q)
		}
		for k := 1; k <= 8; k++ {
			segs := partition(r, events, k)
			// index= constraints rely on segments per index; this test
			// puts every event's index on its own segments as a peer does.
			got := canon(t, runSplit(t, req, segs), "_bkt", "_cd")
			if ok, diff := sameResults(got, single); !ok {
				t.Fatalf("query %q over %d partitions differs from one process: %s", q, k, diff)
			}
		}
	}
}

func TestDecodePartialRefusesOtherVersions(t *testing.T) {
	for _, in := range []string{`{"v":3,"kind":"agg"}`, `{"v":1,"kind":"agg"}`, `{"v":0}`, `nonsense`, `{"v":2,"kind":"weird"}`, `{"v":2,"kind":"agg","counts":{"k":["a","b"],"n":[1]}}`} {
		if _, err := DecodePartial([]byte(in)); err == nil {
			t.Errorf("DecodePartial(%s) succeeded, want an error", in)
		}
	}
}

// decodeCounter counts decoded events, to prove which queries are answered
// from postings alone.
type decodeCounter struct {
	Segment
	n *atomic.Int64
}

func (d decodeCounter) Events(ords *roaring.Bitmap, fn func(uint32, *Event) bool) error {
	return d.Segment.Events(ords, func(o uint32, ev *Event) bool {
		d.n.Add(1)
		return fn(o, ev)
	})
}

// TestPostingsOnly: the bench's query shapes are answered without decoding
// a single event, and with the right answer.
func TestPostingsOnly(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	var evs []Event
	for _, e := range genEvents(r, 4000) {
		// Bench-like: every access event carries its indexed fields.
		if len(e.Fields) == 0 || e.Fields[0].Name != "status" {
			continue
		}
		e.Index = "main"
		evs = append(evs, e)
	}
	var n atomic.Int64
	segs := []Segment{decodeCounter{NewMemSegment(uniq("main~1~p"), "main", evs[:len(evs)/2]), &n}, decodeCounter{NewMemSegment(uniq("main~2~p"), "main", evs[len(evs)/2:]), &n}}
	now := genBase.Add(5 * time.Hour)
	for _, q := range []string{
		"earliest=2026-01-01T01:00:00Z latest=2026-01-01T02:00:00Z | stats count",
		"error | stats count", "timeout | stats count",
		"status=5* | stats count by host",
		"sourcetype=access | top limit=10 path",
		"zqxjk | stats count",
		"| stats count by index, sourcetype",
		"error OR timeout | timechart span=1h count",
		"error | timechart span=30m count by sourcetype", "earliest=2026-01-01T01:10:00Z latest=2026-01-01T02:00:00Z | timechart span=7m count by status",
		"host=web-0* NOT status=200 | rare method",
	} {
		n.Store(0)
		req := Request{Query: q, Now: now}
		resp, err := Search(context.Background(), req, segs)
		if err != nil {
			t.Fatal(err)
		}
		if n.Load() != 0 {
			t.Errorf("query %q decoded %d events, want 0 (postings only)", q, n.Load())
		}
		want := oracleSearch(t, req, segs)
		if ok, diff := sameResults(canon(t, resp.Results), canon(t, want)); !ok {
			t.Errorf("query %q: %s", q, diff)
		}
		if len(resp.Results) == 0 {
			t.Errorf("query %q: no results", q)
		}
	}
}

func TestSearchSummaryAndErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	evs := genEvents(r, 300)
	segs := []Segment{NewMemSegment(uniq("main~1~p"), "main", evs[:150]), NewMemSegment(uniq("main~2~p"), "main", evs[150:])}
	// A time range that only touches the second segment skips the first.
	lo, _ := segs[1].Bounds()
	req := Request{Query: "| stats count", Earliest: time.Unix(0, lo).UTC().Format(time.RFC3339Nano), Latest: "2026-02-01T00:00:00Z", Server: "p9"}
	resp, err := Search(context.Background(), req, segs)
	if err != nil {
		t.Fatal(err)
	}
	b := resp.Summary.Buckets
	if b.Total != 2 || b.Successful != 2 || b.Skipped != 1 || b.Failed != 0 || len(resp.Summary.Peers) != 1 || resp.Summary.Peers[0] != "p9" {
		t.Errorf("summary = %+v peers %v, want 2 total, 2 successful, 1 skipped", b, resp.Summary.Peers)
	}
	if got := resp.Results[0]["count"]; got != int64(150) {
		t.Errorf("count = %v, want 150", got)
	}
	// Only the buckets of the targeted indexes are counted.
	withWeb := append([]Segment{NewMemSegment(uniq("web~1~p"), "web", evs[:10])}, segs...)
	resp, err = Search(context.Background(), Request{Query: "index=web | stats count"}, withWeb)
	if err != nil {
		t.Fatal(err)
	}
	if b := resp.Summary.Buckets; b.Total != 1 || resp.Results[0]["count"] != int64(10) {
		t.Errorf("index=web: summary %+v, results %v; want 1 bucket, count 10", b, resp.Results)
	}
	// Event results carry their provenance.
	resp, err = Search(context.Background(), Request{Query: "| head 1", Server: "p9"}, segs)
	if err != nil {
		t.Fatal(err)
	}
	ev := resp.Results[0]
	for _, f := range []string{"_time", "_raw", "host", "source", "sourcetype", "index", "splunk_server", "_bkt", "_cd"} {
		if _, ok := ev[f]; !ok {
			t.Errorf("event result lacks %s: %v", f, ev)
		}
	}
	if ts, _ := ev["_time"].(string); !strings.HasSuffix(ts, "Z") || !strings.Contains(ts, "T") {
		t.Errorf("_time = %v, want RFC 3339", ev["_time"])
	}
	_, err = Search(context.Background(), Request{Query: "error | stats nope(x)"}, segs)
	var se *SyntaxError
	if !errors.As(err, &se) || se.Pos != 14 {
		t.Errorf("bad query error = %v, want a SyntaxError at offset 14", err)
	}
	if _, err := Search(context.Background(), Request{Query: "error", Earliest: "-3q"}, segs); err == nil {
		t.Errorf("a bad earliest was accepted")
	}
}

// TestHeadDecodesOnlyN: head/tail over events the index proves pick their
// events by Times and decode only those.
func TestHeadDecodesOnlyN(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	evs := genEvents(r, 2000)
	for i := range evs {
		evs[i].Index = "main"
	}
	var n atomic.Int64
	segs := []Segment{decodeCounter{NewMemSegment(uniq("main~1~p"), "main", evs[:1000]), &n}, decodeCounter{NewMemSegment(uniq("main~2~p"), "main", evs[1000:]), &n}}
	for _, c := range []struct {
		q   string
		max int
	}{{"error | head 3", 6}, {"| head 5", 10}, {"timeout | eval x=1 | tail 4", 8}, {"| head 0", 0}, {"error | where 1=1 | head 2", 2000}} {
		n.Store(0)
		req := Request{Query: c.q, Now: genBase}
		resp, err := Search(context.Background(), req, segs)
		if err != nil {
			t.Fatal(err)
		}
		if int(n.Load()) > c.max {
			t.Errorf("query %q decoded %d events, want at most %d", c.q, n.Load(), c.max)
		}
		want := oracleSearch(t, req, segs)
		if ok, diff := sameResults(canon(t, resp.Results), canon(t, want)); !ok {
			t.Errorf("query %q: %s", c.q, diff)
		}
	}
}

// TestTopPruningMatchesFullMerge: top-N over many buckets' runs, pruned by
// the pigeonhole bound, equals top-N over the fully merged counts, ties at
// the threshold included.
func TestTopPruningMatchesFullMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	for it := 0; it < 400; it++ {
		nruns := 2 + r.IntN(6)
		keys := 3 + r.IntN(30)
		build := func() *aggregator {
			a := newAggregator([]AggSpec{{Func: "count"}}, []string{"path"}, 0, false)
			rr := rand.New(rand.NewPCG(uint64(it), 2))
			for i := 0; i < nruns; i++ {
				var run []keyCount
				for k := 0; k < keys; k++ {
					if rr.IntN(3) > 0 {
						run = append(run, keyCount{fmt.Sprintf("/p%02d", k), int64(1 + rr.IntN(4)*rr.IntN(4))})
					}
				}
				a.addRun(run)
			}
			return a
		}
		limit := 1 + r.IntN(8)
		top := TopCmd{Limit: limit, Fields: []string{"path"}, CountField: "count", PercentField: "percent", ShowCount: true, ShowPerc: true}
		got, _ := top.finalize(build())
		full := build()
		full.foldRuns() // forces the unpruned path
		want, _ := top.finalize(full)
		if ok, diff := sameResults(canon(t, Results(got)), canon(t, Results(want))); !ok {
			t.Fatalf("iteration %d (limit %d, %d runs): %s", it, limit, nruns, diff)
		}
	}
}

// TestResponseFields: the fields list names a table's columns, an
// aggregate's columns in order, or the events' fields default ones first.
func TestResponseFields(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	segs := []Segment{NewMemSegment(uniq("main~1~p"), "main", genEvents(r, 200))}
	for _, c := range []struct {
		q    string
		want string
	}{
		{"| top limit=2 host", "host count percent"},
		{"| rare user showperc=false countfield=n", "user n"},
		{"| stats count, avg(bytes) by host, index", "host index count avg(bytes)"},
		{"| stats count by host | eval x=1", "host count x"},
		{"| table host _time", "host _time"},
		{"| timechart span=1h count", "_time count"},
		{"| head 1 | fields host", "_time _raw host _bkt _cd"},
	} {
		resp, err := Search(context.Background(), Request{Query: c.q, Now: genBase}, segs)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(resp.Fields, " "); got != c.want {
			t.Errorf("query %q fields = %q, want %q", c.q, got, c.want)
		}
	}
	resp, _ := Search(context.Background(), Request{Query: "| head 1"}, segs)
	if got := strings.Join(resp.Fields[:9], " "); got != "_time _raw host source sourcetype index splunk_server _bkt _cd" {
		t.Errorf("event fields start %q", got)
	}
}

// A count-only aggregate travels as compact counts (no group objects), an
// aggregate with any other function as groups; both merge to the same
// results as one process (TestSplitExecution), and the counts form of a
// many-key count is several times smaller.
func TestCountOnlyWireForm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	seg := NewMemSegment(uniq("w~0~p"), "main", genEvents(r, 800))
	now := genBase.Add(5 * time.Hour)
	enc := func(q string) (*Partial, []byte) {
		p, err := Compile(Request{Query: q, Now: now, Server: "p1"})
		if err != nil {
			t.Fatal(err)
		}
		return runWire(t, p, seg)
	}
	for _, q := range []string{"| stats count by _raw", "| top limit=3 path", "| stats count, count as n by host, status"} {
		back, b := enc(q)
		if back.Counts == nil || len(back.Groups) != 0 || len(back.Counts.K) == 0 || len(back.Counts.K) != len(back.Counts.N) {
			t.Fatalf("%q: wire form %.200s: want counts only", q, b)
		}
		for i := 1; i < len(back.Counts.K); i++ {
			if back.Counts.K[i-1] >= back.Counts.K[i] {
				t.Fatalf("%q: counts keys not sorted: %q then %q", q, back.Counts.K[i-1], back.Counts.K[i])
			}
		}
	}
	back, _ := enc("| stats count, avg(bytes) by host")
	if back.Counts != nil || len(back.Groups) == 0 {
		t.Fatalf("count+avg: want groups, got counts %v", back.Counts)
	}
	// Size: the same many-key count in both forms.
	p, _ := Compile(Request{Query: "| stats count by _raw", Now: now, Server: "p1"})
	pt, _ := p.RunSegment(context.Background(), seg)
	groups, _ := json.Marshal(&Partial{V: WireVersion, Kind: "agg", Groups: pt.agg.wireGroups()})
	_, counts := enc("| stats count by _raw")
	if len(counts) >= len(groups) {
		t.Fatalf("counts form %d bytes, groups form %d: want smaller", len(counts), len(groups))
	}
	t.Logf("800 keys: counts form %d bytes, groups form %d (%.100s)", len(counts), len(groups), groups[40:])
}
