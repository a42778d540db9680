package query

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
	if LimitName(p.Charge(1, "d")) != "search_memory" {
		t.Fatalf("a budget error is named %q", LimitName(p.Charge(1, "d")))
	}
	env := &evalEnv{}
	env.valueTooLarge("replace", 2<<20)
	if !IsLimitError(env.err) || LimitName(env.err) != "eval_value" {
		t.Fatalf("a value error: %v named %q", env.err, LimitName(env.err))
	}
	p.SetMemoryLimit(0)
	if p.MemoryLimit() != DefaultSearchMemory {
		t.Fatalf("limit %d after SetMemoryLimit(0)", p.MemoryLimit())
	}
}

// TestBigRowsCharged: rows an eval blew up (each near 40 KB, far under
// the 1 MiB value cap) are charged as a bucket makes them when they are
// kept — as events, or as the values of groups — so the search ends
// inside the bucket instead of holding gigabytes first; a count over the
// same rows holds none of them and passes.
func TestBigRowsCharged(t *testing.T) {
	segs := memSegments(2000)
	grow := `index=main | eval x=replace(_raw,"(.+)","$1$1$1$1$1$1$1$1$1$1") | eval y=replace(x,"(.+)","$1$1$1$1$1$1$1$1$1$1") | eval z=y.y `
	const budget = 16 << 20
	for _, q := range []string{grow + "| sort 0 _time", grow + "| stats count by z"} {
		_, err := Search(context.Background(), Request{Query: q, Now: fixedNow, MemoryLimit: budget}, segs)
		if !IsLimitError(err) || !strings.Contains(err.Error(), "rows with large eval or rex values in bucket") {
			t.Fatalf("%q: %v, want the budget reached while the bucket's rows were made", q, err)
		}
	}
	// On the head half too: rows made large after the split are held to
	// the end.
	post := strings.Replace(grow, "index=main |", "index=main | stats count by _raw |", 1)
	if _, err := Search(context.Background(), Request{Query: post, Now: fixedNow, MemoryLimit: budget}, segs); !IsLimitError(err) || !strings.Contains(err.Error(), "rows with large eval or rex values after eval") {
		t.Fatalf("%q: %v, want the budget reached by the head half's rows", post, err)
	}
	resp, err := Search(context.Background(), Request{Query: grow + "| stats count", Now: fixedNow, MemoryLimit: budget}, segs)
	if err != nil || fmt.Sprint(resp.Results[0]["count"]) != "2000" {
		t.Fatalf("a count of big rows: %v %+v", err, resp)
	}
}

// FuzzSearchBudget (issue 26): any query over a fixed 10,000-event set,
// under a 32 MiB budget and a 2 s time limit, either answers within a
// bounded cost or fails with an error. It fails when one input holds more
// than four times the budget (plus 64 MiB for the run itself) of live
// heap at any moment, or runs past 5 s, and still answers without error —
// a cost no limit stopped.
func FuzzSearchBudget(f *testing.F) {
	for _, q := range []string{
		"index=main | stats count",
		"index=main | sort 0 _raw",
		"index=main | stats count by _raw",
		"index=main | stats dc(_raw) values(_raw) by user",
		"index=main | rex \"user=(?<u>\\w+)\" | top limit=0 u",
		`index=main | eval x=replace(_raw,"(.+)","$1$1$1$1$1$1$1$1$1$1") | eval y=replace(x,"(.+)","$1$1$1$1$1$1$1$1$1$1") | sort 0 y`,
		`index=main | eval x=replace(_raw,"(.+)","$1$1$1$1$1$1$1$1$1$1") | eval y=replace(x,"(.+)","$1$1$1$1$1$1$1$1$1$1") | stats count by y`,
		"index=main | dedup _raw | table _raw",
		"index=main | timechart span=1s count by user",
		`index=main | stats count by _raw | eval x=replace(_raw,"(.+)","$1$1$1$1$1$1$1$1$1$1") | eval y=replace(x,"(.+)","$1$1$1$1$1$1$1$1$1$1")`,
	} {
		f.Add(q)
	}
	segs := memSegments(10000)
	const budget = 32 << 20
	f.Fuzz(func(t *testing.T, q string) {
		if _, err := Parse(q); err != nil {
			return
		}
		runtime.GC()
		base := heapLive()
		var peak atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				if h := heapLive(); h > peak.Load() {
					peak.Store(h)
				}
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		_, err := Search(ctx, Request{Query: q, Now: fixedNow, MemoryLimit: budget}, segs)
		took := time.Since(start)
		cancel()
		close(stop)
		<-sampled
		if err != nil {
			return
		}
		if took > 5*time.Second {
			t.Fatalf("%q answered after %v without an error: past its 2 s limit", q, took)
		}
		if grew := int64(peak.Load()) - int64(base); grew > 4*budget+64<<20 {
			t.Fatalf("%q answered without an error while holding %d MiB more live heap, over 4 × its %d MiB budget", q, grew>>20, budget>>20)
		}
	})
}

// heapLive is the heap's bytes in live and not yet swept objects.
func heapLive() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestPruneSortedExact: keeping SortKeep rows while partials arrive
// (PruneSorted every few buckets) gives exactly the rows of merging every
// partial at the end, for sorts with ties, limits, a head after, and a
// result cap; plans it cannot prune say so.
func TestPruneSortedExact(t *testing.T) {
	segs := memSegments(6000)
	for _, tc := range []struct {
		q          string
		maxResults int
	}{
		{"index=main | sort 0 _raw", 100},
		{"index=main | sort 0 host, -_time", 250},
		{"index=main | rex \"user=u(?<n>\\d+)\" | eval m=n % 7 | sort 0 m", 333},
		{"index=main | sort 50 -_raw", 100},
		{"index=main | sort 0 _raw | head 20", 100},
	} {
		plan, err := Compile(Request{Query: tc.q, Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		k, ok := plan.SortKeep(tc.maxResults)
		if !ok {
			t.Fatalf("%q: not prunable", tc.q)
		}
		var parts []*Partial
		for _, s := range segs {
			pt, err := plan.RunSegment(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, pt)
		}
		want, _, err := plan.Merge(parts)
		if err != nil {
			t.Fatal(err)
		}
		var held []*Partial
		for i, pt := range parts {
			held = append(held, pt)
			if i%2 == 1 {
				held = []*Partial{plan.PruneSorted(held, k)}
			}
		}
		got, _, err := plan.Merge(held)
		if err != nil {
			t.Fatal(err)
		}
		n := min(len(want), k)
		if len(got) != n {
			t.Fatalf("%q: %d rows kept, want %d", tc.q, len(got), n)
		}
		for i := range got {
			if got[i].B != want[i].B || got[i].C != want[i].C {
				t.Fatalf("%q: row %d is %s/%d, merging everything gives %s/%d", tc.q, i, got[i].B, got[i].C, want[i].B, want[i].C)
			}
		}
	}
	for _, q := range []string{"index=main | sort 0 _raw | where len(_raw) > 3", "index=main | stats count by host", "index=main | dedup host"} {
		plan, _ := Compile(Request{Query: q, Now: fixedNow})
		if _, ok := plan.SortKeep(100); ok {
			t.Fatalf("%q: prunable", q)
		}
	}
}
