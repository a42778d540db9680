package query

import (
	"container/heap"
	"sort"
)

// Count runs: a count-only aggregation (every aggregate a plain count)
// keeps sorted (key, count) runs — one per bucket's value postings or
// decoded counts partial — and top/rare merge them without hashing every
// key (topCandidates: the pigeonhole threshold of DESIGN.md "top-N across
// buckets"; mergedRuns: a heap merge of the runs).

type keyCount struct {
	k string
	n int64
}

// addRun adds a list of distinct keys with counts (sorted or not).
func (a *aggregator) addRun(run []keyCount) {
	if !sort.SliceIsSorted(run, func(i, j int) bool { return run[i].k < run[j].k }) {
		sort.Slice(run, func(i, j int) bool { return run[i].k < run[j].k })
	}
	a.runs = append(a.runs, run)
}

// foldRuns moves runs into the counts map.
func (a *aggregator) foldRuns() {
	for _, r := range a.runs {
		for _, kc := range r {
			a.counts[kc.k] += kc.n
		}
	}
	a.runs = nil
}

type runHead struct {
	run []keyCount
	i   int
}

type runHeap []*runHead

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return h[i].run[h[i].i].k < h[j].run[h[j].i].k }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(*runHead)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// topCandidates finds, without merging every run, a set of keys with their
// exact total counts that contains every key whose total is among the k
// largest (ties included), the sum of all counts, and the threshold T: a
// key left out totals less than T. A key whose total reaches T over R runs
// has at least T/R in one run (pigeonhole); T is the k-th largest exact
// total among each run's own top k. ok is false when the bound does not
// help (fewer than k candidates).
func (a *aggregator) topCandidates(k int) ([]keyCount, int64, int64, bool) {
	runs := a.runs
	R := int64(len(runs))
	var total int64
	exact := func(key string) int64 {
		var n int64
		for _, r := range runs {
			i := sort.Search(len(r), func(i int) bool { return r[i].k >= key })
			if i < len(r) && r[i].k == key {
				n += r[i].n
			}
		}
		return n
	}
	seed := map[string]bool{}
	for _, r := range runs {
		// this run's k largest counts
		var top []keyCount
		for _, kc := range r {
			total += kc.n
			if len(top) == k && kc.n <= top[k-1].n {
				continue
			}
			i := sort.Search(len(top), func(i int) bool { return kc.n > top[i].n })
			if len(top) < k {
				top = append(top, keyCount{})
			}
			copy(top[i+1:], top[i:len(top)-1])
			top[i] = kc
		}
		for _, kc := range top {
			seed[kc.k] = true
		}
	}
	if len(seed) < k {
		return nil, 0, 0, false
	}
	totals := make([]int64, 0, len(seed))
	for key := range seed {
		totals = append(totals, exact(key))
	}
	sort.Slice(totals, func(i, j int) bool { return totals[i] > totals[j] })
	T := totals[k-1]
	if T <= 0 {
		return nil, 0, 0, false
	}
	entries := 0
	for _, r := range runs {
		entries += len(r)
	}
	// Counts too flat to prune (`top clientip`: 4.3M keys of a few events
	// each, every one a candidate): a binary search in every run per
	// candidate costs more than merging the runs once (3–4 minutes against
	// seconds on the 5M set). Given up as soon as the candidates are that
	// many, not after hashing them all (a bounded top of paths on the 1M
	// set hashed ~30k keys, then merged the runs anyway).
	most := entries / len(runs)
	cand := make(map[string]bool, min(most+1, 1<<16))
	for _, r := range runs {
		for _, kc := range r {
			if kc.n*R >= T && !cand[kc.k] {
				if cand[kc.k] = true; len(cand) > most {
					return nil, 0, 0, false
				}
			}
		}
	}
	out := make([]keyCount, 0, len(cand))
	for key := range cand {
		out = append(out, keyCount{key, exact(key)})
	}
	return out, total, T, true
}

// mergedRuns merges the sorted runs, summing equal keys.
func (a *aggregator) mergedRuns() []keyCount {
	if len(a.runs) == 1 {
		return a.runs[0]
	}
	total := 0
	h := runHeap{}
	for _, r := range a.runs {
		total += len(r)
		if len(r) > 0 {
			h = append(h, &runHead{run: r})
		}
	}
	heap.Init(&h)
	out := make([]keyCount, 0, total)
	for h.Len() > 0 {
		top := h[0]
		kc := top.run[top.i]
		if n := len(out); n > 0 && out[n-1].k == kc.k {
			out[n-1].n += kc.n
		} else {
			out = append(out, kc)
		}
		top.i++
		if top.i == len(top.run) {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
	}
	return out
}
