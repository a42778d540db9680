package query

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// memSegments is n events of 200 distinct bytes each, spread over
// buckets of 1,000.
func memSegments(n int) []Segment {
	var segs []Segment
	for b := 0; b*1000 < n; b++ {
		var evs []Event
		for i := b * 1000; i < min(n, (b+1)*1000); i++ {
			evs = append(evs, Event{Time: fixedNow.UnixNano() - int64(i)*1e6, Index: "main", Host: "h", Source: "s", Sourcetype: "st",
				Raw: fmt.Sprintf("user=u%06d %s", i, strings.Repeat("x", 180))})
		}
		segs = append(segs, NewMemSegment(uniq(fmt.Sprintf("main~%d~p", b)), "main", evs))
	}
	return segs
}

// TestSearchMemoryBudget (issue 26 item 1, review M1): the partials a
// search holds for its merge — every event of a sort, a group per event
// of a stats by _raw, a distinct value per event of dc — are charged to
// the search's budget. Under a budget that cannot hold them the search
// ends with ErrLimit naming --search-memory and the budget; with the
// default budget the same searches answer exactly. A search whose
// partials are small (a count) passes under the small budget.
func TestSearchMemoryBudget(t *testing.T) {
	segs := memSegments(20000)
	const small = 1 << 20
	for _, tc := range []struct {
		q    string
		want func(*Response) error
	}{
		{"index=main | sort 0 _time", func(r *Response) error {
			if len(r.Results) != 20000 {
				return fmt.Errorf("%d rows", len(r.Results))
			}
			return nil
		}},
		{"index=main | stats count by _raw | stats count", func(r *Response) error {
			if got := fmt.Sprint(r.Results[0]["count"]); got != "20000" {
				return fmt.Errorf("count %s", got)
			}
			return nil
		}},
		{"index=main | stats dc(_raw) as n", func(r *Response) error {
			if got := fmt.Sprint(r.Results[0]["n"]); got != "20000" {
				return fmt.Errorf("dc %s", got)
			}
			return nil
		}},
	} {
		resp, err := Search(context.Background(), Request{Query: tc.q, Now: fixedNow}, segs)
		if err != nil {
			t.Fatalf("%q with the default budget: %v", tc.q, err)
		}
		if err := tc.want(resp); err != nil {
			t.Fatalf("%q with the default budget: %v", tc.q, err)
		}
		_, err = Search(context.Background(), Request{Query: tc.q, Now: fixedNow, MemoryLimit: small}, segs)
		if !IsLimitError(err) || !strings.Contains(err.Error(), "--search-memory") || !strings.Contains(err.Error(), "memory budget of 1 MiB") {
			t.Fatalf("%q under a 1 MiB budget: %v, want the search-memory limit", tc.q, err)
		}
	}
	resp, err := Search(context.Background(), Request{Query: "index=main | stats count", Now: fixedNow, MemoryLimit: small}, segs)
	if err != nil || fmt.Sprint(resp.Results[0]["count"]) != "20000" {
		t.Fatalf("a count under a 1 MiB budget: %v %+v", err, resp)
	}
}

// TestChargeRelease: charges add up to a peak, releases give them back,
// and only a charge past the limit errs.
func TestChargeRelease(t *testing.T) {
	p, err := Compile(Request{Query: "index=main | stats count by host", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	p.SetMemoryLimit(1000)
	if err := p.Charge(600, "a"); err != nil {
		t.Fatal(err)
	}
	p.Release(600)
	if err := p.Charge(900, "b"); err != nil {
		t.Fatalf("900 after releasing 600: %v", err)
	}
	if err := p.Charge(200, "c"); !IsLimitError(err) || !strings.Contains(err.Error(), "c would hold") {
		t.Fatalf("1,100 of 1,000: %v", err)
	}
	if p.MemoryPeak() != 1100 {
		t.Fatalf("peak %d, want 1100", p.MemoryPeak())
	}
	p.SetMemoryLimit(0)
	if p.MemoryLimit() != DefaultSearchMemory {
		t.Fatalf("limit %d after SetMemoryLimit(0)", p.MemoryLimit())
	}
}
