package query

// The per-search memory budget (issue 26 item 1, review M1). A search
// holds memory where its results wait: on a peer, the per-bucket partials
// an aggregating search combines before it sends them (rows of a bucket
// before they are sent); on a search head, every partial of a search
// merged at the end (sort, dedup, stats, top…). Each process charges what
// a search holds there to the search's Plan (one Plan per search request
// and process) and releases it when it lets go; past the limit the search
// ends with an ErrLimit error naming the limit — a clear 400
// limit_exceeded, never a process out of memory and never a silent cut.
// The charge is an estimate of the decoded size (MemoryEstimate: string
// bytes plus a fixed overhead per row, field, group, key and distinct
// value), not a measurement of the heap: it errs high, so the heap a
// search holds stays below its budget plus the working set of the buckets
// being scanned (one per core).

import (
	"fmt"
	"sync/atomic"
)

// DefaultSearchMemory is a search's memory budget in one process when its
// role sets none (the --search-memory flag of quarry peer and quarry
// searchhead): 512 MiB.
const DefaultSearchMemory int64 = 512 << 20

// memBudget is one search's budget in one process.
type memBudget struct {
	limit atomic.Int64 // 0: DefaultSearchMemory
	used  atomic.Int64
	peak  atomic.Int64
}

// SetMemoryLimit sets the search's budget in bytes (n <= 0: the default).
func (p *Plan) SetMemoryLimit(n int64) {
	if p.mem != nil {
		p.mem.limit.Store(max(n, 0))
	}
}

// MemoryLimit is the search's budget in bytes.
func (p *Plan) MemoryLimit() int64 {
	if p.mem == nil {
		return DefaultSearchMemory
	}
	if n := p.mem.limit.Load(); n > 0 {
		return n
	}
	return DefaultSearchMemory
}

// MemoryPeak is the most the search held at once, as charged.
func (p *Plan) MemoryPeak() int64 {
	if p.mem == nil {
		return 0
	}
	return p.mem.peak.Load()
}

// Charge adds n bytes the search now holds, where naming what holds them
// (for the error). Past the budget it returns an ErrLimit error; the
// charge stays, so the caller releases it as it would have.
func (p *Plan) Charge(n int64, where string) error {
	if p.mem == nil || n <= 0 {
		return nil
	}
	used := p.mem.used.Add(n)
	for {
		pk := p.mem.peak.Load()
		if used <= pk || p.mem.peak.CompareAndSwap(pk, used) {
			break
		}
	}
	if limit := p.MemoryLimit(); used > limit {
		return &limitError{"search_memory", fmt.Errorf("%w: %s would hold about %s for this search, over its memory budget of %s (--search-memory); narrow the search (fewer events, fewer groups, a head or a limit) or raise the budget",
			ErrLimit, where, sizeText(used), sizeText(limit))}
	}
	return nil
}

// Release gives back n bytes charged before.
func (p *Plan) Release(n int64) {
	if p.mem != nil && n > 0 {
		p.mem.used.Add(-n)
	}
}

// Per-item overheads of MemoryEstimate: a row (its struct and map), a
// field of a row, a group, a count key, a distinct value, an aggregate
// state. Generous round figures for Go's maps, slices and strings.
const (
	rowBytes      = 96
	fieldBytes    = 64
	groupBytes    = 96
	keyBytes      = 48
	distinctBytes = 48
	stateBytes    = 192
)

// MemoryEstimate is about how many bytes the decoded partial holds: its
// rows, groups, count keys and distinct values (see the overheads above).
func (pt *Partial) MemoryEstimate() int64 {
	if pt == nil {
		return 0
	}
	n := int64(0)
	for i := range pt.Events {
		n += rowEstimate(&pt.Events[i])
	}
	for i := range pt.Groups {
		n += groupEstimate(&pt.Groups[i])
	}
	if c := pt.Counts; c != nil {
		for _, k := range c.K {
			n += keyBytes + int64(len(k))
		}
	}
	if a := pt.agg; a != nil {
		n += a.memoryEstimate()
	}
	return n
}

func rowEstimate(r *Row) int64 {
	n := int64(rowBytes + len(r.B))
	for k, v := range r.F {
		n += fieldBytes + int64(len(k)) + valueEstimate(v)
	}
	return n
}

func valueEstimate(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x))
	case []string:
		n := int64(24)
		for _, s := range x {
			n += 16 + int64(len(s))
		}
		return n
	}
	return 16
}

func groupEstimate(g *group) int64 {
	n := int64(groupBytes + 2*len(g.jk))
	for _, k := range g.Key {
		n += 16 + int64(len(k))
	}
	for _, s := range g.States {
		n += s.memoryEstimate()
	}
	return n
}

func (s *aggState) memoryEstimate() int64 {
	if s == nil {
		return 0
	}
	n := int64(stateBytes + len(s.StrMin) + len(s.StrMax) + len(s.EV) + len(s.LV))
	for x := range s.set {
		n += distinctBytes + int64(len(x))
	}
	for _, x := range s.Set {
		n += 16 + int64(len(x))
	}
	for _, r := range s.runs {
		for _, x := range r {
			n += 16 + int64(len(x))
		}
	}
	n += 8 * int64(len(s.Nums))
	for _, r := range s.numRuns {
		n += 8 * int64(len(r))
	}
	return n
}

func (a *aggregator) memoryEstimate() int64 {
	n := int64(0)
	for k := range a.counts {
		n += keyBytes + int64(len(k))
	}
	for _, r := range a.runs {
		for _, kc := range r {
			n += 24 + int64(len(kc.k))
		}
	}
	for _, g := range a.groups {
		n += groupEstimate(g)
	}
	return n
}

// retainsValues reports whether the aggregation may keep a row's values:
// it groups by fields, or keeps distinct values (dc, values).
func (a *aggregator) retainsValues() bool {
	if len(a.keys) > 0 {
		return true
	}
	for _, s := range a.specs {
		if s.Func == "dc" || s.Func == "values" {
			return true
		}
	}
	return false
}

// heldHere names the partials a single-peer search holds, for a budget
// error.
func (p *Plan) heldHere() string {
	if p.server == "" {
		return "the partial results held by this search"
	}
	return "the partial results held on peer " + p.server
}

// sizeText is n bytes in MiB, or KiB under one MiB.
func sizeText(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", (n+1023)>>10)
	}
	return fmt.Sprintf("%d MiB", (n+(1<<20)-1)>>20)
}

// SortKeep says how many rows of a merge-at-end search a head needs to
// keep while partials arrive, when that is fewer than all: the head half
// is a sort of events, alone or followed by one head N, so its answer is
// the first rows of the merged sort. maxResults is the head's result cap;
// one row past it is kept so that a cut is still seen (and said). ok is
// false for any other plan.
func (p *Plan) SortKeep(maxResults int) (k int, ok bool) {
	sc, isSort := p.split.(SortCmd)
	if !isSort || p.Aggregating() || maxResults <= 0 {
		return 0, false
	}
	k = maxResults + 1
	if sc.Limit > 0 {
		k = min(k, sc.Limit)
	}
	switch {
	case len(p.post) == 0:
	case len(p.post) == 1:
		h, isHead := p.post[0].(HeadCmd)
		if !isHead {
			return 0, false
		}
		k = min(k, h.N)
	default:
		return 0, false
	}
	return k, k > 0
}

// PruneSorted merges events partials into one holding their first k rows
// in the order Merge gives them (time order, then the sort's keys, which
// is a total order: rowLess breaks every tie). A head that keeps SortKeep
// rows this way while partials arrive answers exactly what merging every
// partial at the end would, holding k rows instead of all.
func (p *Plan) PruneSorted(parts []*Partial, k int) *Partial {
	rows := mergedEvents(parts)
	sc := p.split.(SortCmd)
	sc.Limit = k
	rows = blockingOp(sc, rows, false)
	return &Partial{V: WireVersion, Kind: "events", Bucket: "(kept rows of a sort)", Events: rows}
}

// growsValues reports whether streaming command c can make a row larger
// than its event (eval, rex): such rows are charged (segExec.bigRow).
func growsValues(c Command) bool {
	switch c.(type) {
	case EvalCmd, RexCmd:
		return true
	}
	return false
}
