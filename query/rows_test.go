package query

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
)

// rawMemSeg is a MemSegment that also hands out _raw alone (RawSource), as
// the peer's stored segments do. The bytes it hands out are overwritten
// after each call, so a row that kept them without a copy would be caught.
type rawMemSeg struct {
	*MemSegment
	calls *atomic.Int64
}

func (s rawMemSeg) RawEvents(ords *roaring.Bitmap, fn func(uint32, []byte) bool) error {
	s.calls.Add(1)
	var buf []byte
	return s.Events(ords, func(o uint32, ev *Event) bool {
		buf = append(buf[:0], ev.Raw...)
		more := fn(o, buf)
		for i := range buf {
			buf[i] = '#'
		}
		return more
	})
}

// TestRowProjection: the fields a plan's peer half reads, or nil when a row
// must be whole.
func TestRowProjection(t *testing.T) {
	for _, c := range []struct {
		q    string
		want []string // nil: whole rows
	}{
		{`* | rex "rt=(?<ms>\d+)ms" | stats avg(ms) max(ms) count(ms)`, []string{"_raw", "ms"}},
		{`| eval x=len(_raw) | stats max(x)`, []string{"_raw"}},
		{`| eval x=bytes*2, y=x+1 | stats sum(y) by host`, []string{"bytes", "host"}},
		{`error status>=500 | stats count by user`, []string{"user", "_raw", "status"}},
		{`| rex field=path "/(?<top>[a-z]+)" | top top`, []string{"path", "top"}},
		{`| where len(_raw) > 10 | timechart span=1h count`, []string{"_raw", "_time"}},
		{`| table host, status`, []string{"host", "status"}},
		{`error | table host, status`, []string{"host", "status", "_raw"}},
		{`| search err* | stats dc(user)`, []string{"_raw", "user"}},
		{`NOT status=200 | stats count`, []string{"status"}},
		{`| stats count`, []string{}},
		{`error`, nil},                     // whole events are the answer
		{`| fields host | sort host`, nil}, // rows handed on whole
		{`| table * | stats count`, nil},   // a pattern names no field
		{`| stats count by *`, nil},
	} {
		p, err := Compile(Request{Query: c.q})
		if err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		var got []string
		if p.rows != nil {
			got = p.rows.names
		}
		if c.want == nil && got != nil || c.want != nil && !slices.Equal(sortedCopy(got), sortedCopy(c.want)) {
			t.Errorf("%s: projection %q, want %q", c.q, got, c.want)
		}
	}
}

// TestRowProjectionLookup: a lookup may write any field of its table, so a
// pipeline with one has no projection.
func TestRowProjectionLookup(t *testing.T) {
	if _, ok := pipelineNeeds([]Command{LookupCmd{}}, StatsCmd{Aggs: []AggSpec{{Func: "count"}}}, []AggSpec{{Func: "count"}}, nil); ok {
		t.Fatal("a pipeline with a lookup got a projection")
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// TestProjectedRowsMatchOracle: searches whose rows are projected, over
// segments that can hand out _raw alone, answer exactly what the oracle
// answers on whole rows.
func TestProjectedRowsMatchOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 5))
	events := genEvents(r, 2000)
	var calls atomic.Int64
	var segs []Segment
	for _, s := range segmentsByIndex(events, 3) {
		segs = append(segs, rawMemSeg{s.(*MemSegment), &calls})
	}
	fixed := []string{
		`* | rex "rt=(?<rtms>\d+)ms" | stats avg(rtms) max(rtms) count(rtms) values(rtms)`,
		`| rex "rt=(?<status>\d+)ms" | stats count by status`,
		`| rex "rt=(?<user>\d)" | stats dc(user) values(user) by index`,
		`| eval x=len(_raw) | stats max(x) min(x) by index`,
		`| rex "(?<level>ERROR|error)" | stats count by level`,
		`| stats values(level) dc(latency) earliest(user) latest(action) by index`,
		`error | stats values(msg) count(score)`,
		`| rex field=path "/(?<top>[a-z]+)" | top top`,
		`| where isnotnull(tags) | stats values(tags) count by index`,
		`NOT user=bob | stats dc(user) by _bkt, _cd`,
		`| stats count by splunk_server, index, host`,
		`| eval s=status*1 | timechart span=30m max(s) values(_time)`,
		`| table user, rtms | stats count by user`,
		// rows that borrow _raw (borrowsRaw): the strings min and max
		// keep must be copies, the buffer is overwritten after each event
		`| rex "(?<w>[a-z]+)=" | stats min(w) max(w) count(w)`,
		`| eval x=substr(_raw, 1, 12) | stats min(x) max(x) perc50(x) avg(x)`,
		`| stats min(level) max(user) min(action) max(msg) sum(latency)`,
		// rex matches folded into stats without a row (rexagg.go); the
		// events it does not match take rows, where extraction may give
		// the group's field (latency, level) as a number, a string or a
		// multivalue
		`* | rex "rt=(?<rtms>\d+)ms" | stats avg(rtms) max(rtms) min(rtms) sum(rtms) count(rtms) count perc50(rtms)`,
		`| rex "rt=(?<latency>\d+)ms" | stats min(latency) max(latency) avg(latency) count(latency) count`,
		`| rex "user=(?<level>\w+)" | stats min(level) max(level) count(level) avg(level) sum(level)`,
		`| rex "user=(?<latency>[a-z]+)" | stats max(latency) min(latency) perc90(latency) count`,
		`error | rex "rt=(?<rtms>\d+)ms" | stats max(rtms) count`,
		// status is a multivalue on some events: each value is parsed
		`| stats avg(status) max(status) min(status) sum(status) perc90(status) count(status) by index`,
	}
	n := 150
	if testing.Short() || raceEnabled {
		n = 60
	}
	matchOracle(t, r, segs, fixed, n, genBase.Add(5*time.Hour))
	if calls.Load() == 0 {
		t.Fatal("no search read _raw alone: the raw path was never taken")
	}
}

// TestKeyBeforeEq: keyBeforeEq is "one of the names followed by '=' occurs
// in raw", on random lines over a small alphabet.
func TestKeyBeforeEq(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	names := [][]string{{"ms"}, {"a", "ms"}, {"user", "x.y"}, {"="}}
	const alpha = "ams=ux.y r"
	for i := 0; i < 20000; i++ {
		b := make([]byte, r.IntN(12))
		for j := range b {
			b[j] = alpha[r.IntN(len(alpha))]
		}
		raw := string(b)
		for _, ns := range names {
			want := false
			for _, n := range ns {
				want = want || strings.Contains(raw, n+"=")
			}
			if got := keyBeforeEq(raw, ns); got != want {
				t.Fatalf("keyBeforeEq(%q, %q) = %v, want %v", raw, ns, got, want)
			}
		}
	}
}
