package query

import (
	"context"
	"fmt"
	"reflect"
	"testing"
)

// TestTimechartLimitUseOther: with a split field, timechart shows the
// limit series of the highest sum of values (default 10, Splunk's
// limit=top10) in series order, and the rest merged into OTHER (useother,
// default true; otherstr names it); limit=0 shows them all. Options come
// before the aggregate or after the split field, as in Splunk.
func TestTimechartLimitUseOther(t *testing.T) {
	// Series u00…u14: u00 has 15 events, u01 14, …, u14 1, in one hour.
	var evs []Event
	for u := 0; u < 15; u++ {
		for i := 0; i < 15-u; i++ {
			evs = append(evs, Event{Time: fixedNow.UnixNano() - int64(len(evs))*1e6, Index: "main", Raw: fmt.Sprintf("user=u%02d", u)})
		}
	}
	segs := []Segment{NewMemSegment(uniq("main~0~p"), "main", evs)}
	run := func(q string) *Response {
		t.Helper()
		resp, err := Search(context.Background(), Request{Query: "index=main | " + q, Now: fixedNow}, segs)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		return resp
	}
	total := func(r *Response, col string) int64 {
		var n int64
		for _, row := range r.Results {
			if v, ok := row[col].(int64); ok {
				n += v
			}
		}
		return n
	}
	ten := []string{"_time", "u00", "u01", "u02", "u03", "u04", "u05", "u06", "u07", "u08", "u09"}
	r := run("timechart span=1d count by user")
	if !reflect.DeepEqual(r.Fields, append(ten, "OTHER")) {
		t.Fatalf("default fields %v", r.Fields)
	}
	if got := total(r, "OTHER"); got != 5+4+3+2+1 {
		t.Fatalf("OTHER counts %d, want 15 (u10…u14)", got)
	}
	if got := total(r, "u00"); got != 15 {
		t.Fatalf("u00 counts %d", got)
	}
	for _, q := range []string{"timechart span=1d limit=3 useother=f count by user", "timechart span=1d count by user limit=3 useother=f"} {
		if r := run(q); !reflect.DeepEqual(r.Fields, []string{"_time", "u00", "u01", "u02"}) {
			t.Fatalf("%q: fields %v", q, r.Fields)
		}
	}
	r = run("timechart span=1d count by user limit=2 otherstr=rest")
	if !reflect.DeepEqual(r.Fields, []string{"_time", "u00", "u01", "rest"}) || total(r, "rest") != 120-15-14 {
		t.Fatalf("otherstr: %v, rest %d", r.Fields, total(r, "rest"))
	}
	if r := run("timechart span=1d limit=0 count by user"); len(r.Fields) != 16 {
		t.Fatalf("limit=0: %d fields, want _time and 15 series", len(r.Fields))
	}
	if r := run("timechart span=1d dc(_raw) by user limit=1"); total(r, "OTHER") != 14 {
		t.Fatalf("dc OTHER: %v", r.Results)
	}
}
