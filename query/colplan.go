package query

// Column planning and execution: which fields a plan reads from a
// ColumnSource (planColumns), the rows and aggregates filled from them
// (colSet, runColumns), and the dedup and sort prunes that skip events
// without decoding them.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
)

// columnFree are the row fields a column row gets without a column.
func columnFree(name string) bool {
	switch name {
	case "_time", "splunk_server", "_bkt", "_cd":
		return true
	}
	return false
}

func exprFields(e Expr, fn func(string)) {
	switch x := e.(type) {
	case fieldExpr:
		fn(x.name)
	case unaryExpr:
		exprFields(x.x, fn)
	case binExpr:
		exprFields(x.l, fn)
		exprFields(x.r, fn)
	case callExpr:
		for _, a := range x.args {
			exprFields(a, fn)
		}
	}
}

// planColumns decides whether the peer half can run from columns (every
// row field it can observe is an indexed field or a default field other
// than _raw) and which fields it reads. ok is false for a pipeline that
// needs _raw, a field only search-time extraction can give, or whole
// events (no table and no aggregation).
func planColumns(pre []Command, split Command, aggSpecs []AggSpec, aggKeys []string) (needs []string, ok bool) {
	needs, ok = pipelineNeeds(pre, split, aggSpecs, aggKeys)
	if !ok || slices.Contains(needs, "_raw") {
		return nil, false
	}
	return needs, true
}

// pipelineNeeds lists every row field the peer half can observe: what its
// streaming commands read (a field an eval assigns first is not read), then
// what its aggregation reads. ok is false when that cannot be named: a
// command it does not know, a pattern (table *), an empty name, or a
// pipeline that hands whole rows on (no table and no aggregation).
func pipelineNeeds(pre []Command, split Command, aggSpecs []AggSpec, aggKeys []string) (needs []string, ok bool) {
	seen := map[string]bool{}
	assigned := map[string]bool{}
	ok = true
	need := func(f string) {
		if assigned[f] || seen[f] {
			return
		}
		if f == "" || strings.Contains(f, "*") {
			ok = false
		}
		seen[f] = true
		needs = append(needs, f)
	}
	truncated := false
	for _, c := range pre {
		switch x := c.(type) {
		case WhereCmd:
			exprFields(x.Expr, need)
		case EvalCmd:
			for _, a := range x.Assign {
				exprFields(a.Expr, need)
				assigned[a.Field] = true
			}
		case TableCmd:
			if hasWildcard(x.Fields) {
				return nil, false
			}
			for _, f := range x.Fields {
				need(f)
			}
			truncated = true
		case FieldsCmd:
			// fields only removes fields, and a row from columns goes
			// through it as a decoded one does: the fields it keeps that
			// later commands read are needed there. Without a table or an
			// aggregation after it, the rows keep _raw (below: not ok).
		case RexCmd:
			// rex reads one field and writes its groups; a group that
			// does not match leaves the field as it was (its indexed
			// value), so the groups are read as well.
			need(x.Field)
			for _, g := range x.Re.SubexpNames() {
				if g != "" {
					need(g)
				}
			}
		case SearchCmd:
			// `| search status>=500` compares fields; a word, a phrase
			// or a glob term matches _raw.
			filterFields(compiledSearch(x), need)
		default:
			return nil, false
		}
		if truncated || !ok {
			break
		}
	}
	if !truncated {
		if aggSpecs == nil {
			return nil, false
		}
		for _, f := range aggFields(split, aggSpecs, aggKeys) {
			need(f)
		}
	}
	if !ok {
		return nil, false
	}
	return needs, true
}

// filterFields calls need with every field a compiled search reads: the
// fields it compares, and _raw for a word, a phrase or a glob term.
func filterFields(c *cnode, need func(string)) {
	switch c.kind {
	case 'f':
		need(c.field)
	case 't', 'g':
		need("_raw")
	case '!':
		filterFields(c.l, need)
	case '&', '|':
		filterFields(c.l, need)
		filterFields(c.r, need)
	}
}

// keysColumnar reports whether dedup or sort keys named so can be read
// from columns (dedupPrune, sortPrune): no pattern, no _raw.
func keysColumnar(fields []string) bool {
	if len(fields) == 0 {
		return false
	}
	for _, f := range fields {
		if f == "" || f == "_raw" || strings.Contains(f, "*") {
			return false
		}
	}
	return true
}

// colSet is the columns a search reads on one segment.
type colSet struct {
	names []string
	cols  []*Column // nil for a column-free field (_time, index, …)
	check []*Column // columns whose absence sends an event to decoding
}

// loadColumns reads the columns the plan needs; ok is false when one is
// missing (the segment does not index that field).
func (x *segExec) loadColumns(cs ColumnSource) (*colSet, bool, error) {
	return x.loadColumnsOf(cs, x.p.colNeeds)
}

// loadColumnsOf is loadColumns for the fields named.
func (x *segExec) loadColumnsOf(cs ColumnSource, names []string) (*colSet, bool, error) {
	s := &colSet{}
	for _, f := range names {
		s.names = append(s.names, f)
		if columnFree(f) {
			s.cols = append(s.cols, nil)
			continue
		}
		if !x.idx[f] && !isDefaultField(f) {
			return nil, false, nil
		}
		c, err := cs.Column(f)
		if err != nil {
			return nil, false, fmt.Errorf("column %s: %w", f, err)
		}
		if c == nil && f == "index" {
			// Without an index column every event is in the segment's index.
			s.cols = append(s.cols, nil)
			continue
		}
		if c == nil {
			return nil, false, nil
		}
		if c.Len() < int(x.n) {
			return nil, false, fmt.Errorf("column %s: %d values for %d events", f, c.Len(), x.n)
		}
		s.cols = append(s.cols, c)
		s.check = append(s.check, c)
	}
	return s, true, nil
}

// fill sets f's fields to event o's values as a row holds them: each
// column's value, and the column-free fields from the times, the bucket,
// the segment's index and the server.
func (s *colSet) fill(f map[string]any, o uint32, ts []int64, bucket, index, server string) {
	for i, name := range s.names {
		var v any
		switch name {
		case "_time":
			v = Time(ts[o])
		case "index":
			if c := s.cols[i]; c != nil {
				v = c.Value(o)
			} else {
				v = index
			}
		case "splunk_server":
			v = server
		case "_bkt":
			v = bucket
		case "_cd":
			v = int64(o)
		default:
			v = s.cols[i].Value(o)
		}
		if v != nil {
			f[name] = v
		}
	}
}

// complete reports whether event ord holds every checked column: an event
// lacking an indexed field may still get it from search-time extraction,
// so it is decoded instead.
func (s *colSet) complete(ord uint32) bool {
	for _, c := range s.check {
		if !c.Present(ord) {
			return false
		}
	}
	return true
}

// batchLen is how many ordinals forBatches hands over at once.
const batchLen = 1024

// forBatches calls fn with the ordinals of b below n in ascending order,
// batchLen at a time (all: 0..n-1); the slice is reused between calls.
func forBatches(b bset, n uint32, fn func(ords []uint32)) {
	buf := make([]uint32, batchLen)
	if b.all {
		for lo := uint32(0); lo < n; lo += batchLen {
			k := min(n-lo, batchLen)
			for i := uint32(0); i < k; i++ {
				buf[i] = lo + i
			}
			fn(buf[:k])
		}
		return
	}
	it := b.b.ManyIterator()
	for {
		k := it.NextMany(buf)
		if k == 0 {
			return
		}
		ords := buf[:k]
		for k > 0 && ords[k-1] >= n {
			k--
		}
		if k > 0 {
			fn(ords[:k])
		}
		if k < len(ords) {
			return
		}
	}
}

// full reports whether every one of the first n events holds every checked
// column, so no event needs the per-event check.
func (s *colSet) full(n uint32) bool {
	for _, c := range s.check {
		switch {
		case c.numeric():
			if c.Has != nil {
				return false
			}
		case c.Small != nil:
			if bytes.IndexByte(c.Small[:n], 0) >= 0 {
				return false
			}
		case c.IDs16 != nil:
			if slices.Contains(c.IDs16[:n], 0) {
				return false
			}
		default:
			if slices.Contains(c.IDs[:n], 0) {
				return false
			}
		}
	}
	return true
}

// forEach calls fn for every ordinal of b (all: 0..n-1).
func forEach(b bset, n uint32, fn func(ord uint32)) {
	if b.all {
		for o := uint32(0); o < n; o++ {
			fn(o)
		}
		return
	}
	buf := make([]uint32, 1024)
	it := b.b.ManyIterator()
	for {
		k := it.NextMany(buf)
		if k == 0 {
			return
		}
		for _, o := range buf[:k] {
			if o < n {
				fn(o)
			}
		}
	}
}

// runColumns runs the peer half over the events of set from columns. It
// returns the events it could not serve (lacking a checked field), to be
// decoded.
func (x *segExec) runColumns(set bset, cs *colSet, agg *aggregator, rows *[]Row) (bset, error) {
	rest := roaring.New()
	if agg != nil && len(x.p.pre) == 0 {
		if fa := newFastAgg(x, cs, agg); fa != nil {
			// _time is decoded only for a time span key.
			var ts []int64
			if fa.span > 0 {
				var err error
				if ts, err = x.times(); err != nil {
					return bset{}, err
				}
			}
			full := cs.full(x.n)
			if full && set.all && fa.addAll(x.n) {
				fa.flush()
				return bset{b: rest}, nil
			}
			kept := make([]uint32, 0, batchLen)
			forBatches(set, x.n, func(ords []uint32) {
				if !full {
					kept = kept[:0]
					for _, o := range ords {
						if cs.complete(o) {
							kept = append(kept, o)
						} else {
							rest.Add(o)
						}
					}
					ords = kept
				}
				fa.addBatch(ords, ts)
			})
			fa.flush()
			return bset{b: rest}, nil
		}
	}
	ts, err := x.times()
	if err != nil {
		return bset{}, err
	}
	env := &evalEnv{now: x.p.now, know: x.p.know}
	bucket, index, server := x.seg.BucketID(), x.seg.Index(), x.p.server
	var scratch map[string]any
	// A leading where's numeric conjuncts drop events before their row is
	// built (and before an event lacking another field is sent to decoding:
	// its indexed value would fail the where all the same).
	filters := x.whereFilters(cs)
	forEach(set, x.n, func(o uint32) {
		if env.err != nil {
			return // a value passed a limit: the search fails below
		}
		if filters != nil && dropsRow(filters, o) {
			return
		}
		if !cs.complete(o) {
			rest.Add(o)
			return
		}
		f := rowMap(scratch, agg != nil, len(cs.names)+2)
		cs.fill(f, o, ts, bucket, index, server)
		r := Row{T: ts[o], B: bucket, C: o, F: f}
		for _, cmd := range x.p.pre {
			if !applyStreaming(cmd, &r, env) {
				return
			}
		}
		if env.err == nil {
			env.err = x.bigRow(&r, agg)
		}
		if env.err != nil {
			return
		}
		if agg != nil {
			agg.add(&r)
			scratch = f
		} else {
			*rows = append(*rows, r)
		}
	})
	if env.err != nil {
		return bset{}, env.err
	}
	return bset{b: rest}, nil
}

// dedupPrune picks, among the events of set, those a dedup with no
// command before it could keep: for each combination of the key fields'
// values (read from columns), the first d.N in row order (_time newest
// first, then ordinal highest first: rowLess within one bucket). Events
// whose key the columns cannot give (a field missing, which search-time
// extraction might supply, or multivalue) are kept too, whatever
// keepempty says. ok is false when a key field has no column. The caller decodes what is kept and runs the dedup over the
// whole rows: an event left out has d.N events of its key before it among
// those kept, so the result is the one decoding every event gives.
func (x *segExec) dedupPrune(cs ColumnSource, d DedupCmd, set bset) (bset, bool, error) {
	cols, ok, err := x.loadColumnsOf(cs, d.Fields)
	if err != nil || !ok {
		return bset{}, false, err
	}
	ts, err := x.times()
	if err != nil {
		return bset{}, false, err
	}
	keep := roaring.New()
	type top struct{ ords []uint32 } // up to d.N, first in row order first
	one := map[uint64]*top{}
	many := map[string]*top{}
	var kb []byte
	part := func(i int, o uint32) uint64 {
		c := cols.cols[i]
		switch {
		case c == nil && cols.names[i] == "_time":
			return uint64(ts[o])
		case c == nil && cols.names[i] == "_cd":
			return uint64(o)
		case c == nil: // index without a column, splunk_server, _bkt: one value
			return 0
		case c.Ints != nil:
			return uint64(c.Ints[o])
		case c.Floats != nil:
			return math.Float64bits(c.Floats[o])
		}
		return uint64(c.ID(o))
	}
	forEach(set, x.n, func(o uint32) {
		for _, c := range cols.cols {
			if c == nil {
				continue
			}
			if !c.Present(o) || len(c.Multi[o]) > 0 {
				keep.Add(o)
				return
			}
		}
		var t *top
		if len(cols.cols) == 1 {
			k := part(0, o)
			if t = one[k]; t == nil {
				t = &top{}
				one[k] = t
			}
		} else {
			kb = kb[:0]
			for i := range cols.cols {
				kb = binary.LittleEndian.AppendUint64(kb, part(i, o))
			}
			if t = many[string(kb)]; t == nil {
				t = &top{}
				many[string(kb)] = t
			}
		}
		if len(t.ords) < d.N {
			t.ords = append(t.ords, o)
		} else if ordBefore(ts, o, t.ords[len(t.ords)-1]) {
			t.ords[len(t.ords)-1] = o
		} else {
			return
		}
		for j := len(t.ords) - 1; j > 0 && ordBefore(ts, t.ords[j], t.ords[j-1]); j-- {
			t.ords[j], t.ords[j-1] = t.ords[j-1], t.ords[j]
		}
	})
	for _, t := range one {
		keep.AddMany(t.ords)
	}
	for _, t := range many {
		keep.AddMany(t.ords)
	}
	return bset{b: keep}, true, nil
}

// sortPrune picks, among the events of set, those a sort cut to its first
// keep rows could keep: the first keep by the sort keys read from columns
// (sortLess on rows holding the key fields only, ties in row order, as
// the stable sort over rows in row order has them). Events whose keys the
// columns cannot give (a field missing, or multivalue) are kept too. ok is
// false when a key field has no column. The caller decodes what is kept
// and sorts whole rows: an event left out has keep events before it among
// those kept, so it could not make the cut.
func (x *segExec) sortPrune(cs ColumnSource, keys []SortKey, keep int, set bset) (bset, bool, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Field
	}
	cols, ok, err := x.loadColumnsOf(cs, names)
	if err != nil || !ok {
		return bset{}, false, err
	}
	ts, err := x.times()
	if err != nil {
		return bset{}, false, err
	}
	if len(keys) == 1 && keys[0].Mode != "str" {
		if b, ok := sortPruneNum(cols, keys[0], ts, keep, set, x.n); ok {
			return b, true, nil
		}
	}
	out := roaring.New()
	bucket, index, server := x.seg.BucketID(), x.seg.Index(), x.p.server
	best := newFirstK(keep, func(a, b Row) bool { // ties in row order
		if sortLess(keys, &a, &b) {
			return true
		}
		return !sortLess(keys, &b, &a) && rowLess(&a, &b)
	})
	var scratch map[string]any
	forEach(set, x.n, func(o uint32) {
		for _, c := range cols.cols {
			if c != nil && (!c.Present(o) || len(c.Multi[o]) > 0) {
				out.Add(o)
				return
			}
		}
		if scratch == nil {
			scratch = make(map[string]any, len(names))
		}
		clear(scratch)
		cols.fill(scratch, o, ts, bucket, index, server)
		// the map of the row that drops out is filled again next
		if d, ok := best.offer(Row{T: ts[o], B: bucket, C: o, F: scratch}); ok {
			scratch = d.F
		} else {
			scratch = nil
		}
	})
	for _, r := range best.items {
		out.Add(r.C)
	}
	return bset{b: out}, true, nil
}

// sortPruneNum is sortPrune for one key whose every value is a number (an
// integer or float column, or _time): the key is the float64 that
// sortLess compares (num of the row's value), so the order and its ties
// are the same without building rows. ok is false for another column.
func sortPruneNum(cols *colSet, k SortKey, ts []int64, keep int, set bset, n uint32) (bset, bool) {
	c := cols.cols[0]
	var key func(o uint32) float64
	switch {
	case c == nil && cols.names[0] == "_time":
		key = func(o uint32) float64 { return float64(ts[o]) / 1e9 }
	case c != nil && c.Ints != nil:
		key = func(o uint32) float64 { return float64(c.Ints[o]) }
	case c != nil && c.Floats != nil:
		key = func(o uint32) float64 { return c.Floats[o] }
	default:
		return bset{}, false
	}
	type ent struct {
		k float64
		o uint32
	}
	best := newFirstK(keep, func(a, b ent) bool {
		if a.k != b.k {
			return (a.k < b.k) != k.Desc
		}
		return ordBefore(ts, a.o, b.o)
	})
	out := roaring.New()
	forEach(set, n, func(o uint32) {
		if c != nil && !c.Present(o) {
			out.Add(o) // extraction may give it a value: decoded
			return
		}
		best.offer(ent{key(o), o})
	})
	for _, e := range best.items {
		out.Add(e.o)
	}
	return bset{b: out}, true
}

// ordBefore reports whether event a comes before event b of one bucket in
// row order (rowLess: _time newest first, then ordinal highest first).
func ordBefore(ts []int64, a, b uint32) bool {
	if ts[a] != ts[b] {
		return ts[a] > ts[b]
	}
	return a > b
}

// firstK keeps the first k items offered, by before: a heap whose root is
// the last of those kept.
type firstK[T any] struct {
	k      int
	before func(a, b T) bool
	items  []T
}

func newFirstK[T any](k int, before func(a, b T) bool) *firstK[T] {
	return &firstK[T]{k: k, before: before, items: make([]T, 0, min(k, 1024))}
}

// offer keeps x when it is among the first k so far. dropped is the item
// that is no longer kept (x itself, or the one x displaced); ok is false
// when none is (there was room).
func (h *firstK[T]) offer(x T) (dropped T, ok bool) {
	it := h.items
	if len(it) < h.k {
		it = append(it, x)
		for i := len(it) - 1; i > 0; {
			p := (i - 1) / 2
			if !h.before(it[p], it[i]) {
				break
			}
			it[p], it[i] = it[i], it[p]
			i = p
		}
		h.items = it
		return dropped, false
	}
	if !h.before(x, it[0]) {
		return x, true
	}
	dropped, it[0] = it[0], x
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(it) {
			break
		}
		if r := l + 1; r < len(it) && h.before(it[l], it[r]) {
			l = r
		}
		if !h.before(it[i], it[l]) {
			break
		}
		it[i], it[l] = it[l], it[i]
		i = l
	}
	return dropped, true
}
