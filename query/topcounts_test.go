package query

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// boundedAnswer runs q over peers (each a list of segments) as a cluster
// would: each peer combines its segments' partials and encodes them for a
// head that asked for countsTop keys (0: every key); the head decodes and
// merges.
func boundedAnswer(t *testing.T, q string, now time.Time, peers [][]Segment, countsTop int) ([]Row, error) {
	t.Helper()
	head, err := Compile(Request{Query: q, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var parts []*Partial
	for _, segs := range peers {
		pp, err := Compile(Request{Query: q, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		pp.SetBinaryCounts(true)
		pp.SetCountsTop(countsTop)
		var mine []*Partial
		for _, s := range segs {
			pt, err := pp.RunSegment(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			mine = append(mine, pt)
		}
		b, err := pp.EncodePartial(pp.Combine(mine))
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecodePartial(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := head.CheckPartial(d); err != nil {
			t.Fatalf("%s: the head refuses a bounded partial: %v", q, err)
		}
		parts = append(parts, d)
	}
	rows, _, err := head.Merge(parts)
	return rows, err
}

// TestBoundedTopIsExactOrUndecided: over random data split among peers,
// a top merged from bounded partials (each peer's largest counts and a
// bound) is either exactly the answer every key gives, or
// ErrCountsUndecided — never a different answer. On skewed data, with
// the keep a head asks for (CountsTopFor), it decides.
func TestBoundedTopIsExactOrUndecided(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	queries := []string{
		"* | top limit=%d path",
		"* | top limit=%d path showperc=false countfield=n",
		"* | top limit=%d path | eval x=count*2",
	}
	decided, undecided := 0, 0
	for it := 0; it < 300; it++ {
		r := rand.New(rand.NewPCG(uint64(it), 27))
		npeers := 1 + r.IntN(6)
		nkeys := 1 + r.IntN(60)
		skew := r.IntN(3) // 0 flat, 1 mild, 2 steep
		peers := make([][]Segment, npeers)
		for p := range peers {
			for s := 0; s < 1+r.IntN(3); s++ {
				var evs []Event
				for i := 0; i < r.IntN(150); i++ {
					k := r.IntN(nkeys)
					for j := 0; j < skew; j++ {
						k = r.IntN(k + 1)
					}
					evs = append(evs, Event{Time: base.UnixNano() + int64(i), Host: "h", Sourcetype: "s", Index: "main",
						Raw: fmt.Sprintf("path=/p%d", k)})
				}
				peers[p] = append(peers[p], NewMemSegment(fmt.Sprintf("main~%d~%d", p*10+s, it), "main", evs))
			}
		}
		limit := 1 + r.IntN(8)
		keep := limit + r.IntN(3*limit+2)
		q := fmt.Sprintf(queries[it%len(queries)], limit)
		want, err := boundedAnswer(t, q, base, peers, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := boundedAnswer(t, q, base, peers, keep)
		if errors.Is(err, ErrCountsUndecided) {
			undecided++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		decided++
		if ok, diff := sameResults(canon(t, Results(got)), canon(t, Results(want))); !ok {
			t.Fatalf("iteration %d (%s, keep %d, %d peers, %d keys, skew %d): %s", it, q, keep, npeers, nkeys, skew, diff)
		}
	}
	if decided == 0 || undecided == 0 {
		t.Fatalf("decided %d, undecided %d: the cases should cover both", decided, undecided)
	}

	// Skewed like the bench's paths: a few common keys and a long tail
	// of rare ones; the head's keep decides, and ships a fraction.
	var peers [][]Segment
	for p := 0; p < 6; p++ {
		var evs []Event
		for i := 0; i < 5000; i++ {
			path := fmt.Sprintf("/item/%d/%d", p, i) // the tail: once each
			if i%2 == 0 {
				path = fmt.Sprintf("/hot%d", (i/2)%(1+i%37))
			}
			evs = append(evs, Event{Time: base.UnixNano() + int64(i), Host: "h", Sourcetype: "s", Index: "main", Raw: "path=" + path})
		}
		peers = append(peers, []Segment{NewMemSegment(fmt.Sprintf("main~%d~skew", p), "main", evs)})
	}
	q := "* | top limit=10 path"
	want, err := boundedAnswer(t, q, base, peers, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := boundedAnswer(t, q, base, peers, CountsTopFor(10))
	if err != nil {
		t.Fatalf("skewed top: %v", err)
	}
	if ok, diff := sameResults(canon(t, Results(got)), canon(t, Results(want))); !ok {
		t.Fatal(diff)
	}
}

// TestBoundedTopOnlyWhereItHolds: only a plain top bounds its partials;
// a head refuses a bounded partial for anything else, or one whose
// numbers do not add up.
func TestBoundedTopOnlyWhereItHolds(t *testing.T) {
	for q, want := range map[string]int{
		"* | top limit=5 path":             5,
		"* | top path":                     10,
		"* | top limit=0 path":             0,
		"* | top limit=5 path by host":     0,
		"* | rare limit=5 path":            0,
		"* | stats count by path":          0,
		"* | eval x=1 | top limit=3 path":  3, // eval streams on the peer
		"* | top limit=3 path, host":       0,
		"* | head 5 | top limit=3 path":    0,
		"* | stats count by path | head 3": 0,
	} {
		p, err := Compile(Request{Query: q})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.TopLimit(); got != want {
			t.Errorf("%s: TopLimit %d, want %d", q, p.TopLimit(), want)
		}
	}
	top, _ := Compile(Request{Query: "* | top limit=2 path"})
	stats, _ := Compile(Request{Query: "* | stats count by path"})
	for _, c := range []struct {
		plan *Plan
		wire string
	}{
		{stats, `{"v":2,"kind":"agg","counts":{"k":["a","b"],"n":[3,2],"o":1,"t":9}}`},
		{top, `{"v":2,"kind":"agg","counts":{"k":["a","b"],"n":[3,2],"o":1,"t":5}}`},  // total below 3+2+1
		{top, `{"v":2,"kind":"agg","counts":{"k":["a","b"],"n":[3,2],"t":9}}`},        // a total without a bound
		{top, `{"v":2,"kind":"agg","counts":{"k":["a","b"],"n":[3,2],"o":-4,"t":9}}`}, // a negative bound
		{top, `{"v":2,"kind":"agg","counts":{"k":["a","b"],"n":[3,-2],"o":1,"t":9}}`}, // a negative count
	} {
		d, err := DecodePartial([]byte(c.wire))
		if err != nil {
			t.Fatalf("%s: %v", c.wire, err)
		}
		if err := c.plan.CheckPartial(d); err == nil {
			t.Errorf("%s: accepted", c.wire)
		}
		if _, _, err := c.plan.Merge([]*Partial{d}); err == nil {
			t.Errorf("%s: merged", c.wire)
		}
	}
	// A bounded partial whose numbers add up merges; alone, its listed
	// keys decide when the bound is below them.
	d, err := DecodePartial([]byte(`{"v":2,"kind":"agg","counts":{"k":["a","b","c"],"n":[30,20,5],"o":4,"t":80}}`))
	if err != nil {
		t.Fatal(err)
	}
	rows, _, err := top.Merge([]*Partial{d})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(Results(rows)); got != "[map[count:30 path:a percent:37.5] map[count:20 path:b percent:25]]" {
		t.Fatalf("rows %s", got)
	}
}

// TestBoundedTopFromRuns: a peer whose buckets answered from value
// postings (sorted runs) bounds its partial without hashing every key
// (boundedRuns: the pigeonhole threshold); merged at the head it is
// exactly the full answer or undecided, and on skewed runs it decides.
func TestBoundedTopFromRuns(t *testing.T) {
	peerRuns := func(r *rand.Rand, nkeys, skew int) *aggregator {
		a := newAggregator([]AggSpec{{Func: "count"}}, []string{"path"}, 0, false)
		for b := 0; b < 2+r.IntN(5); b++ {
			counts := map[string]int64{}
			for i := 0; i < r.IntN(400); i++ {
				k := r.IntN(nkeys)
				for j := 0; j < skew; j++ {
					k = r.IntN(k + 1)
				}
				counts[fmt.Sprintf("/p%d", k)]++
			}
			var run []keyCount
			for k, n := range counts {
				run = append(run, keyCount{k, n})
			}
			a.addRun(run)
		}
		return a
	}
	decided, fromRuns := 0, 0
	for it := 0; it < 300; it++ {
		limit := 1 + it%7
		q := fmt.Sprintf("* | top limit=%d path", limit)
		answer := func(keep int) ([]Row, error) {
			r := rand.New(rand.NewPCG(uint64(it), 270))
			nkeys, skew := 5+r.IntN(400), r.IntN(4)
			head, _ := Compile(Request{Query: q})
			var parts []*Partial
			for p := 0; p < 1+r.IntN(5); p++ {
				pp, _ := Compile(Request{Query: q})
				pp.SetCountsTop(keep)
				pt := &Partial{V: WireVersion, Kind: "agg", agg: peerRuns(r, nkeys, skew)}
				if keep > 0 && pt.agg.boundedRuns(pp.countsTop, pp.TopLimit()) != nil {
					fromRuns++
				}
				b, err := pp.EncodePartial(pt)
				if err != nil {
					t.Fatal(err)
				}
				d, err := DecodePartial(b)
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, d)
			}
			rows, _, err := head.Merge(parts)
			return rows, err
		}
		want, err := answer(0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := answer(limit + it%11)
		if errors.Is(err, ErrCountsUndecided) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		decided++
		if ok, diff := sameResults(canon(t, Results(got)), canon(t, Results(want))); !ok {
			t.Fatalf("iteration %d (%s): %s", it, q, diff)
		}
	}
	if decided == 0 || fromRuns == 0 {
		t.Fatalf("decided %d, bounded from runs %d: the cases should cover both", decided, fromRuns)
	}
}

// TestBoundedCountsInvariant: whichever way a peer bounds its partial
// (from runs or from folded counts), the listed keys carry their exact
// totals and are the largest (none left out counts more than one kept),
// every key left out counts at most the bound, and T is every count.
func TestBoundedCountsInvariant(t *testing.T) {
	for it := 0; it < 1500; it++ {
		r := rand.New(rand.NewPCG(uint64(it), 2727))
		nkeys, skew, m := 3+r.IntN(300), r.IntN(4), 1+r.IntN(40)
		a := newAggregator([]AggSpec{{Func: "count"}}, []string{"path"}, 0, false)
		truth := map[string]int64{}
		var total int64
		for b := 0; b < 2+r.IntN(6); b++ {
			counts := map[string]int64{}
			for i := 0; i < r.IntN(500); i++ {
				k := r.IntN(nkeys)
				for j := 0; j < skew; j++ {
					k = r.IntN(k + 1)
				}
				key := fmt.Sprintf("/p%d", k)
				counts[key]++
				truth[key]++
				total++
			}
			var run []keyCount
			for k, n := range counts {
				run = append(run, keyCount{k, n})
			}
			a.addRun(run)
		}
		how := "runs"
		if it%2 == 1 {
			how = "folded"
			a.foldRuns()
		}
		l := 1 + r.IntN(m) // the top's limit
		c := a.boundedCounts(m, l)
		listed := map[string]bool{}
		minListed := int64(-1)
		for i, k := range c.K {
			listed[k] = true
			if c.N[i] != truth[k] {
				t.Fatalf("iteration %d (%s): %s listed with %d, counts %d", it, how, k, c.N[i], truth[k])
			}
			if minListed < 0 || c.N[i] < minListed {
				minListed = c.N[i]
			}
		}
		if c.O == 0 {
			if len(c.K) != len(truth) {
				t.Fatalf("iteration %d (%s): unbounded with %d of %d keys", it, how, len(c.K), len(truth))
			}
			continue
		}
		if len(c.K) < l || len(c.K) > m || (how == "folded" && len(c.K) != m) || c.T != total {
			t.Fatalf("iteration %d (%s): %d keys listed (keep %d, limit %d), total %d want %d", it, how, len(c.K), m, l, c.T, total)
		}
		for k, n := range truth {
			if !listed[k] && (n > c.O || n > minListed) {
				t.Fatalf("iteration %d (%s): %s left out with %d, bound %d, smallest kept %d", it, how, k, n, c.O, minListed)
			}
		}
	}
}
