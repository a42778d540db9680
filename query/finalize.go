package query

import (
	"math"
	"slices"
	"sort"
	"strconv"
)

// Finalization into rows: the head's last step of stats, top, rare and
// timechart, from the merged aggregator to result rows and columns.

func (s StatsCmd) finalize(a *aggregator) ([]Row, []string) {
	cols := append([]string(nil), s.By...)
	for _, sp := range s.Aggs {
		cols = append(cols, aggName(sp))
	}
	gs := a.sortedGroups()
	if len(s.By) == 0 && len(gs) == 0 {
		gs = []*group{a.groupFor(nil)}
	}
	rows := make([]Row, 0, len(gs))
	for _, g := range gs {
		f := make(map[string]any, len(cols))
		for i, b := range s.By {
			f[b] = g.Key[i]
		}
		for i := range s.Aggs {
			if v := g.States[i].final(&s.Aggs[i]); v != nil {
				f[aggName(s.Aggs[i])] = v
			}
			a.valuesCut = a.valuesCut || g.States[i].cut
		}
		rows = append(rows, Row{F: f})
	}
	return rows, cols
}

func (t TopCmd) keys() []string { return append(append([]string(nil), t.By...), t.Fields...) }

func (t TopCmd) finalize(a *aggregator) ([]Row, []string) {
	cols := append(append([]string(nil), t.By...), t.Fields...)
	if t.ShowCount {
		cols = append(cols, t.CountField)
	}
	if t.ShowPerc {
		cols = append(cols, t.PercentField)
	}
	nb := len(t.By)
	store, pruned, prunedTotal := t.entries(a)
	all := make([]*topEntry, len(store))
	for i := range store {
		all[i] = &store[i]
	}
	keyOf := func(e *topEntry) []string {
		if e.key == nil {
			e.key = a.splitKey(e.jk)
		}
		return e.key
	}
	byGroup := map[string][]*topEntry{}
	var order []string
	for _, e := range all {
		k := ""
		if nb > 0 {
			k = joinKey(keyOf(e)[:nb])
		}
		if _, ok := byGroup[k]; !ok {
			order = append(order, k)
		}
		byGroup[k] = append(byGroup[k], e)
	}
	sort.Slice(order, func(i, j int) bool {
		return compareKeys(keyOf(byGroup[order[i]][0])[:nb], keyOf(byGroup[order[j]][0])[:nb]) < 0
	})
	less := func(x, y *topEntry) bool {
		if x.n != y.n {
			return (x.n > y.n) != t.Rare
		}
		return compareKeys(keyOf(x)[nb:], keyOf(y)[nb:]) < 0
	}
	var rows []Row
	for _, k := range order {
		es := byGroup[k]
		var total int64
		for _, e := range es {
			total += e.n
		}
		if pruned {
			total = prunedTotal
		}
		best := firstLimit(es, t.Limit, less)
		for _, e := range best {
			f := map[string]any{}
			key := keyOf(e)
			for i, c := range cols[:len(key)] {
				f[c] = key[i]
			}
			if t.ShowCount {
				f[t.CountField] = e.n
			}
			if t.ShowPerc && total > 0 {
				f[t.PercentField] = math.Round(float64(e.n)*100/float64(total)*1e6) / 1e6
			}
			rows = append(rows, Row{F: f})
		}
	}
	return rows, cols
}

// topEntry is one (by…, field…) key of top/rare and its count: key split,
// or jk joined until keyOf splits it.
type topEntry struct {
	key []string
	jk  string
	n   int64
}

// entries are top/rare's counted keys: the candidates of the pruned runs
// (pruned, with the total of every count), the merged runs, the folded
// counts, or the groups.
func (t TopCmd) entries(a *aggregator) (store []topEntry, pruned bool, prunedTotal int64) {
	if len(a.bounded) > 0 {
		// only a TopLimit search gets bounded partials (Plan.checkBounded)
		cand, total, err := a.topBounded(t.Limit)
		if err != nil {
			a.undecided = true
			return nil, true, 0
		}
		store = make([]topEntry, len(cand))
		for i, kc := range cand {
			store[i] = topEntry{jk: kc.k, n: kc.n}
		}
		return store, true, total
	}
	if !t.Rare && t.Limit > 0 && len(t.By) == 0 && a.countOnly && len(a.counts) == 0 && len(a.runs) > 1 {
		var cand []keyCount
		cand, prunedTotal, _, pruned = a.topCandidates(t.Limit)
		if pruned {
			store = make([]topEntry, len(cand))
			for i, kc := range cand {
				store[i] = topEntry{jk: kc.k, n: kc.n}
			}
		}
	}
	switch {
	case pruned:
	case a.countOnly && len(a.counts) == 0 && len(a.runs) > 0:
		m := a.mergedRuns()
		store = make([]topEntry, len(m))
		for i, kc := range m {
			store[i] = topEntry{jk: kc.k, n: kc.n}
		}
	case a.countOnly:
		a.foldRuns()
		store = make([]topEntry, 0, len(a.counts))
		for jk, n := range a.counts {
			store = append(store, topEntry{jk: jk, n: n})
		}
	default:
		store = make([]topEntry, 0, len(a.groups))
		for _, g := range a.groups {
			store = append(store, topEntry{key: g.Key, n: g.States[0].N})
		}
	}
	return store, pruned, prunedTotal
}

// firstLimit is the first limit entries of es in less's order (all of
// them, sorted, when limit is 0 or not below len(es)).
func firstLimit(es []*topEntry, limit int, less func(x, y *topEntry) bool) []*topEntry {
	var best []*topEntry
	if limit > 0 && len(es) > limit {
		// Partial selection: keep the best limit entries in order.
		for _, e := range es {
			if len(best) == limit && !less(e, best[len(best)-1]) {
				continue
			}
			i := sort.Search(len(best), func(i int) bool { return less(e, best[i]) })
			if len(best) < limit {
				best = append(best, nil)
			}
			copy(best[i+1:], best[i:len(best)-1])
			best[i] = e
		}
	} else {
		best = es
		sort.Slice(best, func(i, j int) bool { return less(best[i], best[j]) })
	}
	return best
}

func (tc TimechartCmd) keys() []string {
	if tc.By != "" {
		return []string{spanKey, tc.By}
	}
	return []string{spanKey}
}

// finalize pivots time buckets into rows, filling empty buckets between
// lo and hi (the search's bounds when both are set, else the data's).
func (tc TimechartCmd) finalize(a *aggregator, lo, hi int64, bounded bool) ([]Row, []string) {
	type cell struct {
		t int64
		s string
	}
	a.materialize()
	cells := map[cell]*group{}
	seriesSet := map[string]bool{}
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	for _, g := range a.groups {
		t, _ := strconv.ParseInt(g.Key[0], 10, 64)
		s := ""
		if tc.By != "" {
			s = g.Key[1]
			seriesSet[s] = true
		}
		cells[cell{t, s}] = g
		first = min(first, t)
		last = max(last, t)
	}
	if bounded {
		first = floorSpan(lo, tc.Span)
		last = floorSpan(hi-1, tc.Span)
	}
	var series []string
	if tc.By != "" {
		for s := range seriesSet {
			series = append(series, s)
		}
		sort.Slice(series, func(i, j int) bool { return compareKeys([]string{series[i]}, []string{series[j]}) < 0 })
	} else {
		for _, sp := range tc.Aggs {
			series = append(series, aggName(sp))
		}
	}
	var other []string // series merged into tc.OtherStr
	if tc.By != "" && tc.Limit > 0 && len(series) > tc.Limit {
		series, other = tc.topSeries(series, a.groups)
		if !tc.UseOther {
			other = nil
		}
	}
	cols := append([]string{"_time"}, series...)
	if len(other) > 0 {
		cols = append(cols, tc.OtherStr)
	}
	otherCell := func(t int64) any {
		var st *aggState
		for _, s := range other {
			if g := cells[cell{t, s}]; g != nil {
				if st == nil {
					st = &aggState{}
				}
				st.merge(g.States[0])
			}
		}
		if st != nil {
			return st.final(&tc.Aggs[0])
		}
		if f := tc.Aggs[0].Func; f == "count" || f == "dc" {
			return int64(0)
		}
		return nil
	}
	var rows []Row
	if first > last || (last-first)/tc.Span > 100000 {
		return rows, cols
	}
	for t := first; t <= last; t += tc.Span {
		f := map[string]any{"_time": Time(t)}
		for i, s := range series {
			var g *group
			spec := &tc.Aggs[0]
			if tc.By != "" {
				g = cells[cell{t, s}]
			} else {
				g = cells[cell{t, ""}]
				spec = &tc.Aggs[i]
			}
			var v any
			if g != nil {
				st := g.States[0]
				if tc.By == "" {
					st = g.States[i]
				}
				v = st.final(spec)
				a.valuesCut = a.valuesCut || st.cut
			} else if spec.Func == "count" || spec.Func == "dc" {
				v = int64(0)
			}
			if v != nil {
				f[s] = v
			}
		}
		if len(other) > 0 {
			if v := otherCell(t); v != nil {
				f[tc.OtherStr] = v
			}
		}
		rows = append(rows, Row{T: t, F: f})
	}
	return rows, cols
}

// topSeries keeps the tc.Limit series of the highest sum of values over
// every time bucket (ties by series order; Splunk's limit=topN) and
// returns them and the others, each in series order.
func (tc TimechartCmd) topSeries(series []string, groups map[string]*group) (kept, other []string) {
	score := map[string]float64{}
	for _, g := range groups {
		if f, ok := num(g.States[0].final(&tc.Aggs[0])); ok {
			score[g.Key[1]] += f
		}
	}
	ranked := slices.Clone(series)
	sort.SliceStable(ranked, func(i, j int) bool { return score[ranked[i]] > score[ranked[j]] })
	keep := map[string]bool{}
	for _, s := range ranked[:tc.Limit] {
		keep[s] = true
	}
	for _, s := range series {
		if keep[s] {
			kept = append(kept, s)
		} else {
			other = append(other, s)
		}
	}
	return kept, other
}
