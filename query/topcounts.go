package query

import (
	"container/heap"
	"errors"
	"fmt"
	"iter"
	"sort"
)

// Bounded top partials (issue 27; DESIGN.md "top over bounded partials").
// A `top limit=N field` partial of a high-cardinality field lists every
// distinct value (340k paths on the 5M set), yet the answer needs ten. A
// head that asks (api.SearchRequest.CountsTop, Plan.SetCountsTop) gets from
// each peer only its M largest counts, plus two numbers: O, the largest
// count among the keys left out, and T, the sum of every count. The head
// then knows each key's total within [listed sum, listed sum + the O of
// every bounded partial that does not list it], and a key no partial
// lists totals at most the sum of every O. When the N best listed keys
// are exact (every bounded partial lists them) and the N-th beats every
// other key's upper bound, that is the answer — exactly the one a full
// merge gives; otherwise Merge says ErrCountsUndecided and the head runs
// the search again without the bound (one more search, never a guess).

// ErrCountsUndecided is Merge's answer when bounded top partials cannot
// prove the top: the caller searches again with SetCountsTop(0).
var ErrCountsUndecided = errors.New("the bounded top partials do not decide the top; search again without the bound")

// MaxCountsTop caps what a head may ask a peer to keep per partial
// (SetCountsTop): past it the bound saves nothing worth the check.
const MaxCountsTop = 100_000

// boundedRun is a decoded bounded top partial: its listed keys (sorted),
// the largest count of a key it left out, and the sum of all its counts.
type boundedRun struct {
	run   []keyCount
	bound int64
	total int64
}

// TopLimit is N when the search is a `top limit=N` whose partials a peer
// may bound: count-only, not rare, one field and no by-clause, N > 0,
// nothing before the top on the head half. 0 otherwise.
func (p *Plan) TopLimit() int {
	t, ok := p.split.(TopCmd)
	if !ok || t.Rare || t.Limit <= 0 || len(t.By) > 0 || len(t.Fields) != 1 || !p.countOnly() {
		return 0
	}
	return t.Limit
}

// CountsTopFor is how many keys a head asks each peer to keep for a top of
// limit N: 3N+20. Enough that on skewed data (the bench's paths: the 10th
// path has 2 % of the events, the 50th a fraction of that) the bound
// decides in one search; small, because a peer finds its largest counts
// from postings runs by a threshold (topCandidates) that is only cheap
// while few keys reach it — with 328 keys kept, a peer of the 1M bench
// set spent half its search time there.
func CountsTopFor(limit int) int {
	if limit <= 0 {
		return 0
	}
	return min(3*limit+20, MaxCountsTop)
}

// SetCountsTop makes EncodePartial bound a top's count-only partials to
// their m largest counts (the head asked, api.SearchRequest.CountsTop);
// 0, or a search TopLimit refuses, sends every key. m is clamped to
// MaxCountsTop and to at least the top's limit.
func (p *Plan) SetCountsTop(m int) {
	l := p.TopLimit()
	if m <= 0 || l == 0 {
		p.countsTop = 0
		return
	}
	p.countsTop = min(max(m, l), MaxCountsTop)
}

// boundedCounts is the count-only aggregator's wire form keeping only its
// m largest counts (keys sorted; from runs, at times fewer but at least the
// top's limit l, boundedRuns), with O and T set when it left any out.
// Runs (one per bucket's value postings) are never hashed: one run is
// read as it is, several go through boundedRuns' threshold or, when the
// counts are too flat for it, a merge of the sorted runs.
func (a *aggregator) boundedCounts(m, l int) *countsWire {
	if len(a.counts) == 0 && len(a.runs) > 0 {
		if len(a.runs) > 1 {
			if c := a.boundedRuns(m, l); c != nil {
				return c
			}
		}
		run := a.mergedRuns()
		return selectBounded(m, len(run), func(yield func(string, int64) bool) {
			for _, kc := range run {
				if !yield(kc.k, kc.n) {
					return
				}
			}
		})
	}
	a.foldRuns()
	return selectBounded(m, len(a.counts), func(yield func(string, int64) bool) {
		for k, n := range a.counts {
			if !yield(k, n) {
				return
			}
		}
	})
}

// selectBounded is the bounded wire form of n distinct keys with their
// exact counts: every key when n ≤ m or when every key past the m largest
// counts 0 (a short top shows those too), else the m largest with O and T.
func selectBounded(m, n int, all iter.Seq2[string, int64]) *countsWire {
	if n <= m {
		return listAll(n, all)
	}
	var total int64
	h := make(minCountHeap, 0, m+1)
	var bound int64 // the largest count pushed out of the heap or never in
	for k, c := range all {
		total += c
		switch {
		case len(h) < m:
			heap.Push(&h, keyCount{k, c})
		case c > h[0].n:
			bound = max(bound, h[0].n)
			h[0] = keyCount{k, c}
			heap.Fix(&h, 0)
		default:
			bound = max(bound, c)
		}
	}
	if bound == 0 {
		return listAll(n, all)
	}
	return countsOf(h, bound, total)
}

// listAll is every key with its count, keys sorted.
func listAll(n int, all iter.Seq2[string, int64]) *countsWire {
	kcs := make([]keyCount, 0, n)
	for k, c := range all {
		kcs = append(kcs, keyCount{k, c})
	}
	return countsOf(kcs, 0, 0)
}

// countsOf is the wire form of kcs (sorted here by key), with bound O and
// total T (0, 0: unbounded).
func countsOf(kcs []keyCount, bound, total int64) *countsWire {
	sort.Slice(kcs, func(i, j int) bool { return kcs[i].k < kcs[j].k })
	c := &countsWire{K: make([]string, len(kcs)), N: make([]int64, len(kcs)), O: bound, T: total}
	for i, kc := range kcs {
		c.K[i], c.N[i] = kc.k, kc.n
	}
	return c
}

// boundedRuns is boundedCounts straight from sorted runs (one per bucket's
// value postings) without hashing every key: topCandidates' pigeonhole
// threshold T (the k-th largest total among the runs' own top keys) gives
// every key totalling T or more, with its exact total, and any other key
// totals at most T-1. The keys of T or more are listed, the m largest of
// them, and the bound is the larger of T-1 and the largest one not kept.
// nil when the runs are too flat for the threshold (the caller folds
// them).
//
// k is m first; when that threshold lets too many keys through, the one
// of the (m/3)-th largest, at least the top's limit l: fewer keys listed,
// with a looser bound, which a head still proves the top from when the
// counts are skewed (or it searches again; never a different row). A
// bounded `top limit=10 path` over the 1M bench set's 11 runs let ~30k
// keys through at the 50th count and gave up; at the 17th, a few hundred.
func (a *aggregator) boundedRuns(m, l int) *countsWire {
	ks := []int{m}
	if k := max(l, m/3, 1); k < m {
		ks = append(ks, k)
	}
	for _, k := range ks {
		cand, total, thr, ok := a.topCandidates(k)
		if !ok {
			continue
		}
		sort.Slice(cand, func(i, j int) bool { return cand[i].n > cand[j].n })
		n := sort.Search(len(cand), func(i int) bool { return cand[i].n < thr }) // the keys of thr or more
		bound := thr - 1
		if n > m {
			bound, n = max(bound, cand[m].n), m
		}
		var listed int64
		for _, kc := range cand[:n] {
			listed += kc.n
		}
		// No key left out counts more than all of them together.
		if bound = min(bound, total-listed); bound <= 0 || n < k {
			return nil
		}
		return countsOf(cand[:n], bound, total)
	}
	return nil
}

type minCountHeap []keyCount

func (h minCountHeap) Len() int           { return len(h) }
func (h minCountHeap) Less(i, j int) bool { return h[i].n < h[j].n }
func (h minCountHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minCountHeap) Push(x any)        { *h = append(*h, x.(keyCount)) }
func (h *minCountHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// checkBounded refuses a partial's bound where the plan allows none, or
// one that does not add up (T below the listed counts plus O).
func (p *Plan) checkBounded(pt *Partial) error {
	c := pt.Counts
	if c == nil || (c.O == 0 && c.T == 0) {
		return nil
	}
	if p.TopLimit() == 0 {
		return fmt.Errorf("a bounded counts partial for a search that is not a top")
	}
	if c.O <= 0 {
		return fmt.Errorf("a counts total %d without a bound", c.T)
	}
	sum := c.O
	for _, n := range c.N {
		if n < 0 {
			return fmt.Errorf("a negative count in a bounded counts partial")
		}
		if sum += n; sum < 0 {
			return fmt.Errorf("bounded counts overflow")
		}
	}
	if c.T < sum {
		return fmt.Errorf("a counts total %d below the listed counts and the bound (%d)", c.T, sum)
	}
	return nil
}

// topBounded decides top limit=k over the aggregator's bounded runs, plain
// runs and counts: the k keys of the answer with their exact totals and
// the total of every count, or ErrCountsUndecided.
func (a *aggregator) topBounded(k int) ([]keyCount, int64, error) {
	type acc struct{ n, cov int64 } // cov: the bounds of the runs listing it
	keys := map[string]*acc{}
	var all, total int64
	add := func(key string, n, bound int64) {
		e := keys[key]
		if e == nil {
			e = &acc{}
			keys[key] = e
		}
		e.n += n
		e.cov += bound
	}
	for _, br := range a.bounded {
		all += br.bound
		total += br.total
		for _, kc := range br.run {
			add(kc.k, kc.n, br.bound)
		}
	}
	for _, r := range a.runs {
		for _, kc := range r {
			add(kc.k, kc.n, 0)
			total += kc.n
		}
	}
	for key, n := range a.counts {
		add(key, n, 0)
		total += n
	}
	if len(keys) < k {
		return nil, 0, ErrCountsUndecided
	}
	type ent struct {
		key string
		acc
	}
	es := make([]ent, 0, len(keys))
	for key, e := range keys {
		es = append(es, ent{key, *e})
	}
	// top's order: count descending, then the key (TopCmd.finalize).
	less := func(x, y *ent) bool {
		if x.n != y.n {
			return x.n > y.n
		}
		return compareKeys([]string{x.key}, []string{y.key}) < 0
	}
	sort.Slice(es, func(i, j int) bool { return less(&es[i], &es[j]) })
	for i := 0; i < k; i++ {
		if es[i].cov != all { // a bounded run left it out: its total is unknown
			return nil, 0, ErrCountsUndecided
		}
	}
	last := &es[k-1]
	if last.n <= all { // a key no partial lists could reach it
		return nil, 0, ErrCountsUndecided
	}
	for i := k; i < len(es); i++ {
		y := es[i]
		y.n += all - y.cov // its upper bound
		if !less(last, &y) {
			return nil, 0, ErrCountsUndecided
		}
	}
	out := make([]keyCount, k)
	for i := range out {
		out[i] = keyCount{es[i].key, es[i].n}
	}
	return out, total, nil
}
