package query

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// FuzzMergePartial feeds a search head arbitrary bytes as a peer's partial
// answer (what arrives in a search stream's batch): it is refused by
// DecodePartial or by Merge with an error, or merged — never a panic,
// whatever the plan (events, stats, top, timechart, dedup, sort).
func FuzzMergePartial(f *testing.F) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var evs []Event
	for i := 0; i < 40; i++ {
		evs = append(evs, Event{Time: base + int64(i)*int64(time.Second), Host: fmt.Sprintf("web-%d", i%3), Sourcetype: "access", Index: "main",
			Raw: fmt.Sprintf("GET /p/%d status=%d bytes=%d", i%5, 200+100*(i%4), i*13)})
	}
	seg := NewMemSegment("main~1~G", "main", evs)
	queries := []string{
		"status=500",
		"* | stats count dc(bytes) avg(bytes) perc90(bytes) values(status) by host",
		"* | top limit=3 host",
		"* | timechart span=10s count by host",
		"* | dedup host | sort -bytes | head 3",
		"* | stats earliest(_time) latest(_time) by status",
	}
	// plans, then the same plans taking sole partials (a head that asked,
	// distinct.go): which's high bit picks the second
	var plans, dplans []*Plan
	for _, q := range queries {
		plan, err := Compile(Request{Query: q, Now: time.Unix(0, base)})
		if err != nil {
			f.Fatal(err)
		}
		dplan, _ := Compile(Request{Query: q, Now: time.Unix(0, base)})
		dplan.SetSolePartial(true)
		plans, dplans = append(plans, plan), append(dplans, dplan)
		// Seeds: the real wire form of each plan's answer.
		p, err := plan.RunSegment(context.Background(), seg)
		if err != nil {
			f.Fatal(err)
		}
		for _, binary := range []bool{false, true} {
			b, err := p.encode(wireForms{binary, binary, binary, binary, binary})
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, uint8(len(plans)-1))
			f.Add(b, uint8(len(plans)-1)|0x80)
		}
	}
	f.Add([]byte(`{"v":2,"bucket":"b","kind":"agg","counts":{"k":["a","b"],"n":[1]}}`), uint8(2))
	f.Add([]byte(`{"v":2,"bucket":"b","kind":"agg","counts":{"b":"AAFhAQEBYgI="}}`), uint8(2))
	f.Add([]byte(`{"v":2,"bucket":"b","kind":"agg","groups":[{"k":[1,{"$t":"x"}],"a":[null]}]}`), uint8(1))
	f.Add([]byte(`{"v":2,"bucket":"b","kind":"events","events":[{"t":-1,"b":"x","f":{"bytes":{"$t":"9"},"status":[1,"2"]}}]}`), uint8(4))
	f.Add([]byte(`{"v":2,"bucket":"b","kind":"agg","groups":[{"k":["web-1"],"a":[{"n":2},{"dn":-3},{},{},{}]}]}`), uint8(0x81))
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		plan := plans[int(which&0x7f)%len(plans)]
		if which&0x80 != 0 {
			plan = dplans[int(which&0x7f)%len(plans)]
		}
		p, err := DecodePartial(b)
		if err != nil {
			return
		}
		_, _, _ = plan.Merge([]*Partial{p})
		_ = plan.Combine([]*Partial{p})
	})
}
