package query

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// A peer's combined partial (Plan.Combine, sent once for all its buckets)
// merges to exactly what the per-bucket partials merge to, through the
// wire form.
func TestCombineEqualsPerBucketMerge(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var segs []Segment
	for b := 0; b < 5; b++ {
		var evs []Event
		for i := 0; i < 300; i++ {
			n := b*300 + i
			evs = append(evs, Event{Time: base + int64(n)*int64(time.Second), Host: fmt.Sprintf("web-%d", n%7), Sourcetype: "access", Index: "main",
				Raw: fmt.Sprintf("GET /p/%d status=%d bytes=%d user=u%d", n%41, 200+100*(n%4), n*13%997, n%11)})
		}
		segs = append(segs, NewMemSegment(fmt.Sprintf("main~%d~G", b), "main", evs))
	}
	for _, q := range []string{
		"* | stats count", "* | stats count dc(user) avg(bytes) perc90(bytes) min(bytes) max(bytes) values(status) by host",
		"* | top limit=5 user", "* | rare limit=3 host", "status=500 | stats sum(bytes) by user",
		"* | timechart span=1m count by host", "* | stats earliest(_time) latest(_time) by status",
	} {
		plan, err := Compile(Request{Query: q, Now: time.Unix(0, base)})
		if err != nil {
			t.Fatal(err)
		}
		wire := func(parts []*Partial) []*Partial {
			var out []*Partial
			for _, p := range parts {
				b, err := p.Encode()
				if err != nil {
					t.Fatal(err)
				}
				d, err := DecodePartial(b)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, d)
			}
			return out
		}
		run := func() []*Partial {
			var parts []*Partial
			for _, s := range segs {
				p, err := plan.RunSegment(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, p)
			}
			return parts
		}
		want, wcols, err := plan.Merge(wire(run()))
		if err != nil {
			t.Fatal(err)
		}
		got, gcols, err := plan.Merge(wire([]*Partial{plan.Combine(run()[:2]), plan.Combine(run()[2:])}))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(Results(got), Results(want)) || !reflect.DeepEqual(gcols, wcols) {
			t.Fatalf("%s: combined %v, per bucket %v", q, Results(got), Results(want))
		}
	}
}
