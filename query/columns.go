package query

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
)

// ColumnSource is an optional extra a Segment may implement: the values of
// its indexed fields per event, read from a column store instead of the
// raw events. A Segment without it is searched by decoding events, as
// before; with it, a pipeline that needs only indexed fields (and _time,
// index, splunk_server, _bkt, _cd) reads columns and never decodes _raw
// for the events the index proves (see DESIGN.md, "Columns").
type ColumnSource interface {
	// Column returns the column of an indexed field for the segment's Len()
	// events; nil, nil when the segment keeps no column for it. host,
	// source and sourcetype hold the event's metadata only (an indexed
	// field that reuses a default field's name never reaches a row).
	Column(field string) (*Column, error)
}

// Column is the values of one indexed field for events 0..n-1, in one of
// three forms:
//
//   - dictionary (Ints == nil): Dict holds the distinct values in any order;
//     IDs[ord] is 0 when the event lacks the field, else 1 + the index in
//     Dict of its first value; Multi[ord], when present, lists the further
//     values (1 + index each) of a multivalue event in the order sent.
//   - integers (Ints != nil): every value is a canonical decimal int64
//     (strconv.FormatInt gives it back exactly) and no event holds two;
//     Ints[ord] is the value and Has (a bitset, nil when every event has a
//     value) says which events hold one.
//   - floats (Floats != nil): every value is a finite number whose shortest
//     decimal form (strconv.FormatFloat(v, 'f', -1, 64)) is its exact
//     bytes — fields holding numbers with decimals, or ints and floats
//     mixed — and no event holds two; Floats[ord] and Has as for integers.
//
// A dictionary column of at most 255 values and no multivalue event may
// hold its ids in Small (one byte an event) instead of IDs: Small[ord] is
// what IDs[ord] would be. A column a first run decodes is a quarter the
// memory (sourcetype, host, method: 5 MB instead of 20 on the 5M set).
// One of at most 65,535 values and no multivalue event may hold them in
// IDs16 (two bytes an event) instead: path, ~23k values a bucket.
//
// A Column is owned by the caller once returned (a source may share it
// between searches only if it never changes it).
type Column struct {
	Dict []string
	// DictSorted, set by a source whose dictionary is in ascending byte
	// order (a warm copy's, checked as it is read), spares the executor
	// checking it: `stats dc(clientip) by host` compared every value
	// of every group once more only to find each run sorted.
	DictSorted bool
	IDs        []uint32
	IDs16      []uint16
	Small      []uint8
	Multi      map[uint32][]uint32
	Ints       []int64
	Floats     []float64
	Has        []uint64
}

// numeric reports a column in integer or float form.
func (c *Column) numeric() bool { return c.Ints != nil || c.Floats != nil }

// Num is event ord's value as a float64 (numeric forms only; 0 when absent).
func (c *Column) Num(ord uint32) float64 {
	if c.Ints != nil {
		return float64(c.Ints[ord])
	}
	return c.Floats[ord]
}

// Len is the number of events the column describes.
func (c *Column) Len() int {
	if c.Ints != nil {
		return len(c.Ints)
	}
	if c.Floats != nil {
		return len(c.Floats)
	}
	if c.Small != nil {
		return len(c.Small)
	}
	if c.IDs16 != nil {
		return len(c.IDs16)
	}
	return len(c.IDs)
}

// ID is event ord's dictionary id (dictionary forms only): 0 when absent,
// else 1 + the index in Dict of its first value.
func (c *Column) ID(ord uint32) uint32 {
	if c.Small != nil {
		return uint32(c.Small[ord])
	}
	if c.IDs16 != nil {
		return uint32(c.IDs16[ord])
	}
	return c.IDs[ord]
}

// Present reports whether event ord holds a value.
func (c *Column) Present(ord uint32) bool {
	if c.numeric() {
		if int(ord) >= c.Len() {
			return false
		}
		return c.Has == nil || c.Has[ord>>6]>>(ord&63)&1 != 0
	}
	return int(ord) < c.Len() && c.ID(ord) != 0
}

// Value is event ord's value as a row holds it: a string, a []string for a
// multivalue event, nil when absent.
func (c *Column) Value(ord uint32) any {
	if !c.Present(ord) {
		return nil
	}
	if c.Ints != nil {
		return strconv.FormatInt(c.Ints[ord], 10)
	}
	if c.Floats != nil {
		return strconv.FormatFloat(c.Floats[ord], 'f', -1, 64)
	}
	first := c.Dict[c.ID(ord)-1]
	more := c.Multi[ord]
	if len(more) == 0 {
		return first
	}
	out := make([]string, 0, 1+len(more))
	out = append(out, first)
	for _, id := range more {
		out = append(out, c.Dict[id-1])
	}
	return out
}

// Validate checks the column's internal references for n events: a
// ColumnSource reading files hands only validated columns to the executor.
func (c *Column) Validate(n uint32) error {
	if c.Ints != nil && c.Floats != nil {
		return fmt.Errorf("column in both integer and float form")
	}
	if c.numeric() {
		if c.Len() != int(n) {
			return fmt.Errorf("numeric column of %d values for %d events", c.Len(), n)
		}
		if c.Has != nil && len(c.Has) != int(n+63)/64 {
			return fmt.Errorf("presence bitset of %d words for %d events", len(c.Has), n)
		}
		if len(c.IDs) != 0 || len(c.IDs16) != 0 || len(c.Small) != 0 || len(c.Multi) != 0 || len(c.Dict) != 0 {
			return fmt.Errorf("numeric column with dictionary ids")
		}
		for _, f := range c.Floats {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("float column holding %v", f)
			}
		}
		return nil
	}
	if c.Small != nil {
		if len(c.IDs) != 0 || len(c.IDs16) != 0 || len(c.Multi) != 0 || len(c.Dict) > 255 {
			return fmt.Errorf("one-byte dictionary column with %d ids, %d multivalue events, %d values", len(c.IDs), len(c.Multi), len(c.Dict))
		}
	}
	if c.IDs16 != nil {
		if len(c.IDs) != 0 || len(c.Multi) != 0 || len(c.Dict) > math.MaxUint16 {
			return fmt.Errorf("two-byte dictionary column with %d ids, %d multivalue events, %d values", len(c.IDs), len(c.Multi), len(c.Dict))
		}
	}
	if c.Len() != int(n) {
		return fmt.Errorf("dictionary column of %d ids for %d events", c.Len(), n)
	}
	d := uint32(len(c.Dict))
	for _, id := range c.Small {
		if uint32(id) > d {
			return fmt.Errorf("dictionary id %d beyond %d values", id, d)
		}
	}
	for _, id := range c.IDs {
		if id > d {
			return fmt.Errorf("dictionary id %d beyond %d values", id, d)
		}
	}
	for _, id := range c.IDs16 {
		if uint32(id) > d {
			return fmt.Errorf("dictionary id %d beyond %d values", id, d)
		}
	}
	for ord, more := range c.Multi {
		if ord >= n || c.IDs[ord] == 0 {
			return fmt.Errorf("multivalue entry for event %d without a first value", ord)
		}
		for _, id := range more {
			if id == 0 || id > d {
				return fmt.Errorf("dictionary id %d beyond %d values", id, d)
			}
		}
	}
	return nil
}

// ---- what a plan needs from columns ----

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
	seen := map[string]bool{}
	assigned := map[string]bool{}
	ok = true
	need := func(f string) {
		if assigned[f] || seen[f] {
			return
		}
		if f == "_raw" || f == "" {
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
			// `| search status>=500` compares fields only; a word or a
			// phrase matches _raw.
			if !searchFields(compiledSearch(x), need) {
				return nil, false
			}
		default:
			return nil, false
		}
		if truncated || !ok {
			break
		}
	}
	if !ok {
		return nil, false
	}
	if !truncated {
		if aggSpecs == nil {
			return nil, false
		}
		for _, f := range aggFields(split, aggSpecs, aggKeys) {
			need(f)
		}
	}
	return needs, ok
}

// searchFields calls need with every field a compiled search compares;
// false when it also matches _raw (a word, a phrase, a glob term).
func searchFields(c *cnode, need func(string)) bool {
	switch c.kind {
	case '*':
		return true
	case 'f':
		need(c.field)
		return true
	case '!':
		return searchFields(c.l, need)
	case '&', '|':
		return searchFields(c.l, need) && searchFields(c.r, need)
	}
	return false
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

// ---- execution over columns ----

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
	env := &evalEnv{now: x.p.now}
	bucket, index, server := x.seg.BucketID(), x.seg.Index(), x.p.server
	var scratch map[string]any
	// A leading where's numeric conjuncts drop events before their row is
	// built (and before an event lacking another field is sent to decoding:
	// its indexed value would fail the where all the same).
	filters := x.whereFilters(cs)
	forEach(set, x.n, func(o uint32) {
		if filters != nil && dropsRow(filters, o) {
			return
		}
		if !cs.complete(o) {
			rest.Add(o)
			return
		}
		var f map[string]any
		if agg != nil && scratch != nil {
			f = scratch
			clear(f)
		} else {
			f = make(map[string]any, len(cs.names)+2)
		}
		cs.fill(f, o, ts, bucket, index, server)
		r := Row{T: ts[o], B: bucket, C: o, F: f}
		for _, cmd := range x.p.pre {
			if !applyStreaming(cmd, &r, env) {
				return
			}
		}
		if agg != nil {
			agg.add(&r)
			scratch = f
		} else {
			*rows = append(*rows, r)
		}
	})
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

// ---- fast aggregation over dictionary ids ----

// fastAgg aggregates straight from column ids: groups are keyed by the key
// columns' ids (and the time span), aggregates read precomputed numbers per
// dictionary value. It serves stats/timechart/top/rare with no streaming
// command before, single-valued columns and every aggregate but
// earliest/latest; it hands the aggregator exactly the states a row-by-row
// pass would build.
type fastAgg struct {
	agg   *aggregator
	keys  []*numCol // nil for the span key
	specs []*numCol // nil for plain count
	span  int64
	base  int64 // floorSpan of the segment's first time
	dense bool  // one dictionary key: group = id-1
	gidx  map[uint64]int32
	gkeys []uint64
	st    [][]colState // per group, per spec
	gbuf  []int32      // addBatch's group indexes
}

// numCol is a column with the number of each dictionary value.
type numCol struct {
	c     *Column
	num   []float64
	isNum []bool
	// an integer key column's values, numbered as first met
	ikeys map[int64]uint32
	ivals []int64
	small []uint32 // ids+1 of key values in [0, smallKeys)
}

// smallKeys is the range [0, smallKeys) of integer key values numbered
// through a table instead of the map (status codes, small counts).
const smallKeys = 1024

// keyID is event o's key number in an key column.
func (nc *numCol) keyID(o uint32) uint32 {
	if nc.ikeys == nil {
		return nc.c.ID(o) - 1
	}
	v := nc.c.Ints[o]
	if v >= 0 && v < smallKeys {
		if nc.small == nil {
			nc.small = make([]uint32, smallKeys) // id+1, 0 unseen
		}
		if id := nc.small[v]; id != 0 {
			return id - 1
		}
	}
	id, ok := nc.ikeys[v]
	if !ok {
		id = uint32(len(nc.ivals))
		nc.ikeys[v] = id
		nc.ivals = append(nc.ivals, v)
	}
	if v >= 0 && v < smallKeys {
		nc.small[v] = id + 1
	}
	return id
}

// keyString is the value of key number id.
func (nc *numCol) keyString(id uint32) string {
	if nc.ikeys == nil {
		return nc.c.Dict[id]
	}
	return strconv.FormatInt(nc.ivals[id], 10)
}

type colState struct {
	n      int64
	sum    float64
	numN   int64
	hasNum bool
	mn, mx float64
	hasStr bool
	smn    string
	smx    string
	ids    []uint64 // dc/values over a dictionary: bitset of ids
	ints   map[int64]struct{}
	floats map[uint64]struct{} // float64 bits
	nums   []float64
}

func fastAggOK(f string) bool {
	switch f {
	case "count", "sum", "avg", "min", "max", "dc", "values", "perc":
		return true
	}
	return false
}

func newFastAgg(x *segExec, cs *colSet, agg *aggregator) *fastAgg {
	byName := map[string]*Column{}
	for i, n := range cs.names {
		if cs.cols[i] != nil {
			if len(cs.cols[i].Multi) > 0 {
				return nil
			}
			byName[n] = cs.cols[i]
		}
	}
	numOf := map[*Column]*numCol{}
	// numbers are parsed once per dictionary value, and only for the
	// columns a numeric aggregate reads (a dc over 100k paths parses none)
	numeric := map[string]bool{}
	for _, s := range agg.specs {
		switch s.Func {
		case "sum", "avg", "min", "max", "perc":
			numeric[s.Field] = true
		}
	}
	prep := func(c *Column, name string) *numCol {
		if nc := numOf[c]; nc != nil {
			return nc
		}
		nc := &numCol{c: c}
		if !c.numeric() && numeric[name] {
			nc.num = make([]float64, len(c.Dict))
			nc.isNum = make([]bool, len(c.Dict))
			for i, v := range c.Dict {
				nc.num[i], nc.isNum[i] = parseNum(v)
			}
		}
		numOf[c] = nc
		return nc
	}
	fa := &fastAgg{agg: agg, span: agg.span, gidx: map[uint64]int32{}}
	for _, k := range agg.keys {
		if k == spanKey {
			fa.keys = append(fa.keys, nil)
			continue
		}
		c := byName[k]
		if c == nil || c.Floats != nil {
			return nil // float keys group through rows
		}
		nc := prep(c, k)
		if c.Ints != nil && nc.ikeys == nil {
			nc.ikeys = map[int64]uint32{}
		}
		fa.keys = append(fa.keys, nc)
	}
	if len(fa.keys) > 2 {
		return nil
	}
	for _, s := range agg.specs {
		if !fastAggOK(s.Func) {
			return nil
		}
		if s.Func == "count" && s.Field == "" {
			fa.specs = append(fa.specs, nil)
			continue
		}
		c := byName[s.Field]
		if c == nil {
			return nil
		}
		fa.specs = append(fa.specs, prep(c, s.Field))
	}
	if fa.span > 0 {
		lo, _ := x.seg.Bounds()
		fa.base = floorSpan(lo, fa.span)
	}
	fa.dense = len(fa.keys) == 1 && fa.keys[0] != nil && fa.keys[0].ikeys == nil
	if fa.dense {
		fa.st = make([][]colState, len(fa.keys[0].c.Dict))
	}
	return fa
}

// newGroup is a new group's states, one per spec.
func (fa *fastAgg) newGroup() []colState { return make([]colState, len(fa.specs)) }

// groupIndex is the index in fa.st of event o's group (created when new),
// for the shapes groups does not handle in a loop of their own.
func (fa *fastAgg) groupIndex(o uint32, t int64) int32 {
	var k uint64
	for i, kc := range fa.keys {
		var part uint64
		if kc == nil {
			part = uint64((floorSpan(t, fa.span) - fa.base) / fa.span)
		} else {
			part = uint64(kc.keyID(o))
		}
		k |= part << (32 * i)
	}
	gi, ok := fa.gidx[k]
	if !ok {
		gi = int32(len(fa.st))
		fa.gidx[k] = gi
		fa.gkeys = append(fa.gkeys, k)
		fa.st = append(fa.st, fa.newGroup())
	}
	return gi
}

// groups fills gs with the group index of each of ords (ts[o] their times
// when a span key needs them): one tight loop per common key shape — one
// dictionary key (the group is the value's id), one integer key (the
// group is its key number), no key — else through the map of keys.
// denseGroups appends the group of each event in ords under one dictionary
// key read from ids (one, two or four bytes an event: each width is its own
// instantiation, so the loop stays as tight as a hand-written one); the
// group is the value's id less one, made on first use.
func denseGroups[T uint8 | uint16 | uint32](fa *fastAgg, ids []T, ords []uint32, gs []int32) []int32 {
	for _, o := range ords {
		g := int32(ids[o]) - 1
		if fa.st[g] == nil {
			fa.st[g] = fa.newGroup()
		}
		gs = append(gs, g)
	}
	return gs
}

func (fa *fastAgg) groups(ords []uint32, ts []int64, gs []int32) []int32 {
	gs = gs[:0]
	switch {
	case fa.dense && fa.keys[0].c.Small != nil:
		gs = denseGroups(fa, fa.keys[0].c.Small, ords, gs)
	case fa.dense && fa.keys[0].c.IDs16 != nil:
		gs = denseGroups(fa, fa.keys[0].c.IDs16, ords, gs)
	case fa.dense:
		gs = denseGroups(fa, fa.keys[0].c.IDs, ords, gs)
	case len(fa.keys) == 0:
		if len(fa.st) == 0 {
			fa.gkeys = append(fa.gkeys, 0)
			fa.st = append(fa.st, fa.newGroup())
		}
		for range ords {
			gs = append(gs, 0)
		}
	case len(fa.keys) == 1 && fa.keys[0] != nil:
		// one integer key: key numbers are handed out densely as met
		kc := fa.keys[0]
		for _, o := range ords {
			id := kc.keyID(o)
			for int(id) >= len(fa.st) {
				fa.gkeys = append(fa.gkeys, uint64(len(fa.st)))
				fa.st = append(fa.st, fa.newGroup())
			}
			gs = append(gs, int32(id))
		}
	default:
		for _, o := range ords {
			var t int64
			if ts != nil {
				t = ts[o]
			}
			gs = append(gs, fa.groupIndex(o, t))
		}
	}
	return gs
}

// addBatch adds events ords (ascending; ts[o] their times when a span key
// needs them): group indexes first, then one loop per aggregate, the
// common shapes (count, sum/avg over a numeric column) without a
// per-event switch. Each group's values are still taken in ordinal order,
// so sums are the ones a row pass makes.
func (fa *fastAgg) addBatch(ords []uint32, ts []int64) {
	if len(ords) == 0 {
		return
	}
	gs := fa.groups(ords, ts, fa.gbuf)
	fa.gbuf = gs
	for i, nc := range fa.specs {
		fn := fa.agg.specs[i].Func
		switch {
		case nc == nil || fn == "count":
			for _, g := range gs {
				fa.st[g][i].n++
			}
		case (fn == "sum" || fn == "avg") && nc.c.Ints != nil:
			vals := nc.c.Ints
			for k, o := range ords {
				s := &fa.st[gs[k]][i]
				s.sum += float64(vals[o])
				s.numN++
			}
		case (fn == "sum" || fn == "avg") && nc.c.Floats != nil:
			vals := nc.c.Floats
			for k, o := range ords {
				s := &fa.st[gs[k]][i]
				s.sum += vals[o]
				s.numN++
			}
		case fn == "perc" && nc.c.Ints != nil:
			vals := nc.c.Ints
			for k, o := range ords {
				s := &fa.st[gs[k]][i]
				s.nums = append(s.nums, float64(vals[o]))
			}
		case (fn == "min" || fn == "max") && nc.c.Ints != nil:
			vals := nc.c.Ints
			for k, o := range ords {
				s := &fa.st[gs[k]][i]
				f := float64(vals[o])
				if !s.hasNum {
					s.mn, s.mx, s.hasNum = f, f, true
					continue
				}
				s.mn = math.Min(s.mn, f)
				s.mx = math.Max(s.mx, f)
			}
		case (fn == "dc" || fn == "values") && !nc.c.numeric():
			c := nc.c
			words := (len(c.Dict) + 63) / 64
			for k, o := range ords {
				s := &fa.st[gs[k]][i]
				if s.ids == nil {
					s.ids = make([]uint64, words)
				}
				id := c.ID(o) - 1
				s.ids[id>>6] |= 1 << (id & 63)
			}
		default:
			for k, o := range ords {
				fa.addOne(&fa.st[gs[k]][i], fn, nc, o)
			}
		}
	}
}

// addAll adds events 0..n-1, every one holding every column, when the
// shape allows a loop over the columns alone — one dictionary key, each
// aggregate a count or a sum/avg over a numeric column (`* | stats
// avg(bytes) by sourcetype`): per-value accumulators in plain arrays,
// each value's sum still taken in ordinal order. It reports false, having
// added nothing, for any other shape.
func (fa *fastAgg) addAll(n uint32) bool {
	if !fa.dense || len(fa.st) > 1<<16 {
		return false
	}
	for i, nc := range fa.specs {
		fn := fa.agg.specs[i].Func
		if !(nc == nil || fn == "count" || (fn == "sum" || fn == "avg") && nc.c.numeric()) {
			return false
		}
	}
	key := fa.keys[0].c
	groups := len(fa.st) + 1 // by id, 0 unused
	cnt := make([]int64, groups)
	if key.Small != nil {
		for _, id := range key.Small[:n] {
			cnt[id]++
		}
	} else if key.IDs16 != nil {
		for _, id := range key.IDs16[:n] {
			cnt[id]++
		}
	} else {
		for _, id := range key.IDs[:n] {
			cnt[id]++
		}
	}
	sums := make([]float64, groups)
	for i, nc := range fa.specs {
		if nc == nil || fa.agg.specs[i].Func == "count" {
			continue
		}
		clear(sums)
		switch {
		case key.Small != nil && nc.c.Ints != nil:
			sumBy(key.Small[:n], nc.c.Ints[:n], sums)
		case key.Small != nil:
			sumBy(key.Small[:n], nc.c.Floats[:n], sums)
		case key.IDs16 != nil && nc.c.Ints != nil:
			sumBy(key.IDs16[:n], nc.c.Ints[:n], sums)
		case key.IDs16 != nil:
			sumBy(key.IDs16[:n], nc.c.Floats[:n], sums)
		case nc.c.Ints != nil:
			sumBy(key.IDs[:n], nc.c.Ints[:n], sums)
		default:
			sumBy(key.IDs[:n], nc.c.Floats[:n], sums)
		}
		for id := 1; id < groups; id++ {
			if cnt[id] == 0 {
				continue
			}
			g := id - 1
			if fa.st[g] == nil {
				fa.st[g] = fa.newGroup()
			}
			fa.st[g][i].sum = sums[id]
			fa.st[g][i].numN = cnt[id]
		}
	}
	for id := 1; id < groups; id++ {
		if cnt[id] == 0 {
			continue
		}
		g := id - 1
		if fa.st[g] == nil {
			fa.st[g] = fa.newGroup()
		}
		for i, nc := range fa.specs {
			if nc == nil || fa.agg.specs[i].Func == "count" {
				fa.st[g][i].n = cnt[id]
			}
		}
	}
	return true
}

// sumBy adds each value to its key's sum, in order.
func sumBy[K uint8 | uint16 | uint32, V int64 | float64](keys []K, vals []V, sums []float64) {
	vals = vals[:len(keys)]
	for o, k := range keys {
		sums[k] += float64(vals[o])
	}
}

// addOne adds event o's value of column nc to one aggregate state.
func (fa *fastAgg) addOne(s *colState, fn string, nc *numCol, o uint32) {
	c := nc.c
	var f float64
	var isNum bool
	var id uint32
	if c.Ints != nil {
		f, isNum = float64(c.Ints[o]), true
	} else if c.Floats != nil {
		f, isNum = c.Floats[o], true
	} else {
		id = c.ID(o) - 1
		if nc.num != nil {
			f, isNum = nc.num[id], nc.isNum[id]
		}
	}
	switch fn {
	case "count":
		s.n++
	case "sum", "avg":
		if isNum {
			s.sum += f
			s.numN++
		}
	case "min", "max":
		if isNum {
			if !s.hasNum {
				s.mn, s.mx, s.hasNum = f, f, true
			} else {
				s.mn = math.Min(s.mn, f)
				s.mx = math.Max(s.mx, f)
			}
		} else {
			v := c.Dict[id]
			if !s.hasStr {
				s.smn, s.smx, s.hasStr = v, v, true
			} else {
				if v < s.smn {
					s.smn = v
				}
				if v > s.smx {
					s.smx = v
				}
			}
		}
	case "dc", "values":
		if c.Ints != nil {
			if s.ints == nil {
				s.ints = map[int64]struct{}{}
			}
			s.ints[c.Ints[o]] = struct{}{}
		} else if c.Floats != nil {
			// by bits: 0 and -0 are two values ("0", "-0")
			if s.floats == nil {
				s.floats = map[uint64]struct{}{}
			}
			s.floats[math.Float64bits(c.Floats[o])] = struct{}{}
		} else {
			if s.ids == nil {
				s.ids = make([]uint64, (len(c.Dict)+63)/64)
			}
			s.ids[id>>6] |= 1 << (id & 63)
		}
	case "perc":
		if isNum {
			s.nums = append(s.nums, f)
		}
	}
}

// flush hands the groups to the aggregator as partial states.
func (fa *fastAgg) flush() {
	key := make([]string, len(fa.keys))
	emit := func(k uint64, st []colState) {
		for i, kc := range fa.keys {
			part := uint32(k >> (32 * i))
			if kc == nil {
				key[i] = strconv.FormatInt(fa.base+int64(part)*fa.span, 10)
			} else {
				key[i] = kc.keyString(part)
			}
		}
		if fa.agg.countOnly {
			fa.agg.addCount(key, st[0].n)
			return
		}
		g := fa.agg.groupFor(key)
		for i := range st {
			g.States[i].merge(st[i].state(fa.specs[i]))
		}
	}
	if fa.dense {
		for g, st := range fa.st {
			if st != nil {
				emit(uint64(g), st)
			}
		}
		return
	}
	for gi, k := range fa.gkeys {
		emit(k, fa.st[gi])
	}
}

func (s *colState) state(nc *numCol) *aggState {
	a := &aggState{N: s.n, Sum: s.sum, NumN: s.numN, HasNum: s.hasNum, NumMin: s.mn, NumMax: s.mx,
		HasStr: s.hasStr, StrMin: s.smn, StrMax: s.smx, Nums: s.nums}
	if s.ids != nil || s.ints != nil || s.floats != nil {
		// one run of distinct values: dictionary ids in rank order (a
		// warm dictionary is sorted, so the run usually needs no sort)
		size := len(s.ints) + len(s.floats)
		for _, word := range s.ids {
			size += bits.OnesCount64(word)
		}
		run := make([]string, 0, size)
		for w, word := range s.ids {
			for word != 0 {
				b := bits.TrailingZeros64(word)
				run = append(run, nc.c.Dict[w*64+b])
				word &= word - 1
			}
		}
		for v := range s.ints {
			run = append(run, strconv.FormatInt(v, 10))
		}
		for b := range s.floats {
			run = append(run, strconv.FormatFloat(math.Float64frombits(b), 'f', -1, 64))
		}
		if !(nc.c.DictSorted && len(s.ints) == 0 && len(s.floats) == 0) && !slices.IsSorted(run) {
			slices.Sort(run)
		}
		a.runs = [][]string{run}
	}
	return a
}

// ---- building columns ----

// CanonicalInt returns s as an int64 when s is exactly the decimal form
// strconv.FormatInt gives (no sign plus, no leading zeros, no spaces), so
// an integer column gives every value back byte for byte.
func CanonicalInt(s string) (int64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != s {
		return 0, false
	}
	return v, true
}

// CanonicalFloat returns s as a float64 when s is a finite number written
// exactly as strconv.FormatFloat(v, 'f', -1, 64) writes it (the shortest
// decimal that reads back as v: "0.25", "-3", "1.5"; not "1.50", "1e5",
// "+2", "NaN"), so a float column gives every value back byte for byte.
func CanonicalFloat(s string) (float64, bool) {
	if s == "" || len(s) > 40 {
		return 0, false
	}
	if c := s[0]; !(c >= '0' && c <= '9' || c == '-') {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || strconv.FormatFloat(v, 'f', -1, 64) != s {
		return 0, false
	}
	return v, true
}

// ColumnBuilder builds the columns of a run of events, one per indexed
// field, the way a row sees them: host, source and sourcetype from the
// event's metadata, every other field from its indexed fields (a field
// named like a default field is left out, as rows leave it out; a repeated
// name is a multivalue).
type ColumnBuilder struct {
	// Index adds an "index" column from Event.Index (segments whose
	// events may belong to other indexes than Segment.Index).
	Index bool
	n     uint32
	cols  map[string]*colBuild
}

type colBuild struct {
	ids   []uint32
	multi map[uint32][]uint32
	dict  map[string]uint32
	vals  []string
	last  uint32 // ordinal+1 of the last event that set a value
}

// Add appends the next event.
func (b *ColumnBuilder) Add(ev *Event) {
	if b.cols == nil {
		b.cols = map[string]*colBuild{}
	}
	ord := b.n
	b.add("host", ev.Host, ord)
	b.add("source", ev.Source, ord)
	b.add("sourcetype", ev.Sourcetype, ord)
	if b.Index {
		b.add("index", ev.Index, ord)
	}
	for _, f := range ev.Fields {
		if !isDefaultField(f.Name) {
			b.add(f.Name, f.Value, ord)
		}
	}
	b.n++
}

func (b *ColumnBuilder) add(name, v string, ord uint32) {
	c := b.cols[name]
	if c == nil {
		c = &colBuild{dict: map[string]uint32{}}
		b.cols[name] = c
	}
	id, ok := c.dict[v]
	if !ok {
		c.vals = append(c.vals, v)
		id = uint32(len(c.vals))
		c.dict[v] = id
	}
	if c.last == ord+1 {
		if c.multi == nil {
			c.multi = map[uint32][]uint32{}
		}
		c.multi[ord] = append(c.multi[ord], id)
		return
	}
	for uint32(len(c.ids)) < ord {
		c.ids = append(c.ids, 0)
	}
	c.ids = append(c.ids, id)
	c.last = ord + 1
}

// Columns returns the columns of the events added so far: integer form
// when every value of a single-valued field is a canonical integer.
func (b *ColumnBuilder) Columns() map[string]*Column {
	out := make(map[string]*Column, len(b.cols))
	for name, c := range b.cols {
		ids := append([]uint32(nil), c.ids...)
		for uint32(len(ids)) < b.n {
			ids = append(ids, 0)
		}
		col := &Column{Dict: append([]string(nil), c.vals...), IDs: ids}
		if len(c.multi) > 0 {
			col.Multi = make(map[uint32][]uint32, len(c.multi))
			for o, m := range c.multi {
				col.Multi[o] = append([]uint32(nil), m...)
			}
		}
		out[name] = SmallColumn(NumericColumn(col))
	}
	return out
}

// wideIDs returns a column whose ids are in IDs16 with them in IDs (a
// copy), else c itself: for the conversions below, which read IDs.
func wideIDs(c *Column) *Column {
	if c.IDs16 == nil {
		return c
	}
	out := *c
	out.IDs16 = nil
	out.IDs = make([]uint32, len(c.IDs16))
	for o, id := range c.IDs16 {
		out.IDs[o] = uint32(id)
	}
	return &out
}

// SmallColumn returns a dictionary column of at most 255 values and no
// multivalue event with its ids in Small, else c itself.
func SmallColumn(c *Column) *Column {
	if c.numeric() || c.Small != nil || c.IDs16 != nil || len(c.Multi) > 0 || len(c.Dict) > 255 {
		return c
	}
	out := &Column{Dict: c.Dict, Small: make([]uint8, len(c.IDs))}
	for o, id := range c.IDs {
		out.Small[o] = uint8(id)
	}
	return out
}

// NumericColumn returns c in integer form when it qualifies, else in float
// form when it qualifies (single-valued, every value a CanonicalFloat),
// else c itself.
func NumericColumn(c *Column) *Column {
	if c.IDs16 != nil {
		if out := NumericColumn(wideIDs(c)); out.numeric() {
			return out
		}
		return c
	}
	if out := IntColumn(c); out != c {
		return out
	}
	if c.Ints != nil || c.Floats != nil || c.Small != nil || len(c.Multi) > 0 || len(c.Dict) == 0 {
		return c
	}
	nums := make([]float64, len(c.Dict))
	for i, v := range c.Dict {
		x, ok := CanonicalFloat(v)
		if !ok {
			return c
		}
		nums[i] = x
	}
	out := &Column{Floats: make([]float64, len(c.IDs))}
	for o, id := range c.IDs {
		if id == 0 {
			if out.Has == nil {
				out.Has = make([]uint64, (len(c.IDs)+63)/64)
				for p := 0; p < o; p++ {
					out.Has[p>>6] |= 1 << (p & 63)
				}
			}
			continue
		}
		out.Floats[o] = nums[id-1]
		if out.Has != nil {
			out.Has[o>>6] |= 1 << (o & 63)
		}
	}
	return out
}

// IntColumn returns c in integer form when it qualifies (single-valued,
// every value a canonical integer), else c itself.
func IntColumn(c *Column) *Column {
	if c.IDs16 != nil {
		if out := IntColumn(wideIDs(c)); out.Ints != nil {
			return out
		}
		return c
	}
	if c.Ints != nil || c.Floats != nil || c.Small != nil || len(c.Multi) > 0 || len(c.Dict) == 0 {
		return c
	}
	nums := make([]int64, len(c.Dict))
	for i, v := range c.Dict {
		x, ok := CanonicalInt(v)
		if !ok {
			return c
		}
		nums[i] = x
	}
	out := &Column{Ints: make([]int64, len(c.IDs))}
	all := true
	for _, id := range c.IDs {
		if id == 0 {
			all = false
			break
		}
	}
	if !all {
		out.Has = make([]uint64, (len(c.IDs)+63)/64)
	}
	for o, id := range c.IDs {
		if id == 0 {
			continue
		}
		out.Ints[o] = nums[id-1]
		if out.Has != nil {
			out.Has[o>>6] |= 1 << (o & 63)
		}
	}
	return out
}
