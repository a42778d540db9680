package query

// Rows from events: decodeRows walks the events a bucket's search must
// decode, verifies them and hands each row to the streaming prefix and then
// to the aggregation (or to the rows a search returns).
//
// When the plan can name every field its peer half reads (rowProj), a row
// holds only those fields: the others are never copied out of the event,
// and search-time extraction keeps only the names read. A bucket where no
// name read is host, source, sourcetype or one of its indexed fields
// decodes no event at all: the rows come from _raw and the bucket's times
// (RawSource). `* | rex "rt=(?<ms>\d+)ms" | stats avg(ms)` reads _raw and
// ms, so a row is those two fields.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2"
)

// rowProj is the fields a plan's peer half reads (pipelineNeeds, and the
// search expression's for verifying a row), in first-read order.
type rowProj struct {
	names []string
	// extract are the names search-time extraction may give: the names
	// that are not default fields.
	extract []string
}

// planRows is the plan's row projection; nil when rows must be whole: a
// pipeline whose reads cannot be named, or a knowledge bundle whose rules
// make a row (they may read and write any field).
func planRows(p *Plan) *rowProj {
	if p.know.rowRules() {
		return nil
	}
	needs, ok := pipelineNeeds(p.pre, p.split, p.aggSpecs, p.aggKeys)
	if !ok {
		return nil
	}
	if p.filter != nil {
		filterFields(p.filter, func(f string) {
			if f == "" || strings.Contains(f, "*") {
				ok = false
			}
			if !slices.Contains(needs, f) {
				needs = append(needs, f)
			}
		})
	}
	if !ok {
		return nil
	}
	pr := &rowProj{names: needs}
	for _, n := range needs {
		if !isDefaultField(n) {
			pr.extract = append(pr.extract, n)
		}
	}
	return pr
}

// rowMap is the map of the next row: prev, cleared, when rows pass only
// into an aggregation (which keeps values, never a row's map) and there is
// one; else a new map for about n fields.
func rowMap(prev map[string]any, reuse bool, n int) map[string]any {
	if reuse && prev != nil {
		clear(prev)
		return prev
	}
	return make(map[string]any, n)
}

// unsafeString is b as a string without a copy, for a look that keeps
// nothing of it (a raw-only filter's verification).
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// fromRaw reports whether the rows of x's bucket can be built without
// decoding events: from _raw, the times and, for each name read that is
// host, source, sourcetype or a field the bucket indexes, its column (cols,
// nil when there is none to read). An event lacking an indexed field has
// no value in its column either, so search-time extraction gives it the
// field as it would on a decoded row. false when the segment cannot hand
// out _raw alone or keeps no column for such a name.
func (pr *rowProj) fromRaw(x *segExec) (RawSource, *colSet, bool, error) {
	rs, ok := x.seg.(RawSource)
	if !ok {
		return nil, nil, false, nil
	}
	var colNames []string
	for _, n := range pr.names {
		switch {
		case n == "host", n == "source", n == "sourcetype", !isDefaultField(n) && x.idx[n]:
			colNames = append(colNames, n)
		}
	}
	if len(colNames) == 0 {
		return rs, nil, true, nil
	}
	cs, ok := x.seg.(ColumnSource)
	if !ok {
		return nil, nil, false, nil
	}
	set, ok, err := x.loadColumnsOf(cs, colNames)
	if err != nil || !ok {
		return nil, nil, false, err
	}
	return rs, set, true, nil
}

// row is the projected row of an event: each name read, as baseRow and the
// search-time extraction would give it. On the raw path (fromRaw) ev is
// nil and cols, when not nil, gives the names that need the event.
//
// f is the map the row fills: a fresh one when rows are kept, the sink's
// own, cleared, when they only pass into an aggregation (no map per event).
func (pr *rowProj) row(x *segExec, f map[string]any, ev *Event, cols *colSet, t int64, raw string, ord uint32, bkt string) Row {
	for _, n := range pr.names {
		switch n {
		case "_time":
			f[n] = Time(t)
		case "_raw":
			f[n] = raw
		case "index":
			if ev != nil {
				f[n] = ev.Index
			} else {
				f[n] = x.seg.Index()
			}
		case "splunk_server":
			f[n] = x.p.server
		case "_bkt":
			f[n] = bkt
		case "_cd":
			f[n] = int64(ord)
		}
		if ev == nil {
			continue
		}
		switch n {
		case "host":
			f[n] = ev.Host
		case "source":
			f[n] = ev.Source
		case "sourcetype":
			f[n] = ev.Sourcetype
		default:
			if !isDefaultField(n) {
				indexedValue(ev.Fields, n, f)
			}
		}
	}
	if cols != nil {
		cols.fill(f, ord, nil, bkt, "", "")
	}
	if len(pr.extract) > 0 {
		extractWanted(raw, f, pr.extract)
	}
	return Row{T: t, B: bkt, C: ord, F: f}
}

// indexedValue sets f[name] to the event's indexed values of name as
// baseRow does: one value, or a multivalue in the order sent.
func indexedValue(fields []Field, name string, f map[string]any) {
	for _, fl := range fields {
		if fl.Name != name {
			continue
		}
		switch old := f[name].(type) {
		case nil:
			f[name] = fl.Value
		case string:
			f[name] = []string{old, fl.Value}
		case []string:
			f[name] = append(old, fl.Value)
		}
	}
}

// borrowsRaw reports whether agg keeps no string of a row beyond the row
// itself: no group keys, and only aggregates that keep numbers or copy the
// strings they keep (min and max). Its rows may then hold the event's _raw
// in the segment's buffer, uncopied: every value the row gets from it (a
// rex group, an extracted field) is gone with the row, which is reused for
// the next event.
func borrowsRaw(agg *aggregator) bool {
	if agg == nil || len(agg.keys) > 0 {
		return false
	}
	for _, s := range agg.specs {
		switch s.Func {
		case "count", "sum", "avg", "min", "max", "perc":
		default:
			return false
		}
	}
	return true
}

// rowSink is where decodeRows hands the rows of one bucket.
type rowSink struct {
	x     *segExec
	vb    *roaring.Bitmap // events to verify on the row
	agg   *aggregator
	env   *evalEnv
	rows  *[]Row
	err   error // a limit the streaming commands passed, or ctx's
	check bool  // the current row is verified on the row
	// row is the row being taken; with an aggregation, which keeps values
	// but never a row, its map is reused from event to event.
	row Row
}

// projected fills s.row with p.rows' projection of an event (rowProj.row).
func (s *rowSink) projected(ev *Event, cols *colSet, t int64, raw string, ord uint32, bkt string) *Row {
	f := rowMap(s.row.F, s.agg != nil, len(s.x.p.rows.names)+2)
	s.row = s.x.p.rows.row(s.x, f, ev, cols, t, raw, ord, bkt)
	return &s.row
}

// take verifies r when it must be, runs the streaming prefix on it and
// hands it on; false stops the walk (s.err says why).
func (s *rowSink) take(r *Row) bool {
	p := s.x.p
	if s.check && !p.filter.matchRow(r) {
		return true
	}
	for _, cmd := range p.pre {
		if !applyStreaming(cmd, r, s.env) {
			if s.err = s.env.err; s.err != nil {
				return false // a value passed a limit
			}
			return true
		}
	}
	if s.err = s.x.bigRow(r, s.agg); s.err != nil {
		return false
	}
	if s.agg != nil {
		s.agg.add(r)
	} else {
		*s.rows = append(*s.rows, *r)
	}
	return true
}

// decodeRows decodes the events of decode (verifying those of verify on
// the row) through the streaming prefix into agg, or into rows when the
// search does not aggregate; a plain count decodes only _raw, or nothing
// but the verification.
func (x *segExec) decodeRows(ctx context.Context, part *Partial, decode, verify bset, agg *aggregator, env *evalEnv, rows *[]Row) error {
	p, seg := x.p, x.seg
	s := &rowSink{x: x, agg: agg, env: env, rows: rows}
	if !verify.isEmpty() {
		s.vb = verify.bitmap(x.n)
	}
	var db *roaring.Bitmap
	if !decode.all {
		db = decode.b
	}
	rawOnly := p.filter.rawOnly()
	// A plain count needs no row once the event is verified.
	justCount := agg != nil && len(p.pre) == 0 && p.countOnly() && len(agg.keys) == 0 && rawOnly
	// every 4096 events the walk looks whether the search was cancelled
	alive := func() bool {
		part.Scanned++
		if part.Scanned%4096 == 0 {
			if s.err = ctx.Err(); s.err != nil {
				return false
			}
		}
		return true
	}
	// verified: the event passes a raw-only filter, or is left to check on
	// the row (s.check)
	verified := func(ord uint32, raw string) bool {
		s.check = s.vb != nil && s.vb.Contains(ord)
		if s.check && rawOnly {
			var lower string
			if !p.filter.matchRaw(raw, &lower) {
				return false
			}
			s.check = false
		}
		return true
	}
	var counted int64
	var err error
	var rs RawSource
	var cols *colSet
	rawRows := false
	switch {
	case justCount:
		rs, rawRows = seg.(RawSource)
	case p.rows != nil:
		var err error
		if rs, cols, rawRows, err = p.rows.fromRaw(x); err != nil {
			return fmt.Errorf("search bucket %s: %w", seg.BucketID(), err)
		}
	}
	switch {
	case rawRows && justCount:
		// only _raw is looked at: decode nothing else
		err = rs.RawEvents(db, func(ord uint32, raw []byte) bool {
			if !alive() {
				return false
			}
			if verified(ord, unsafeString(raw)) {
				counted++
			}
			return true
		})
	case rawRows:
		// the rows need _raw and times alone (rowProj.fromRaw)
		var ts []int64
		if ts, err = x.times(); err != nil {
			break
		}
		borrow := borrowsRaw(agg)
		var fold *rexFold
		if rx := fusedRex(p, agg); rx != nil && cols == nil {
			fold = newRexFold(rx, agg)
		}
		err = rs.RawEvents(db, func(ord uint32, raw []byte) bool {
			if !alive() {
				return false
			}
			r := unsafeString(raw)
			if !verified(ord, r) {
				return true
			}
			if fold != nil && !s.check && fold.add(r) {
				return true
			}
			if !borrow {
				r = string(raw)
			}
			return s.take(s.projected(nil, cols, ts[ord], r, ord, part.Bucket))
		})
	default:
		err = seg.Events(db, func(ord uint32, ev *Event) bool {
			if !alive() {
				return false
			}
			if !verified(ord, ev.Raw) {
				return true
			}
			if justCount {
				counted++
				return true
			}
			if p.rows != nil {
				return s.take(s.projected(ev, nil, ev.Time, ev.Raw, ord, part.Bucket))
			}
			s.row = p.eventRow(ev, part.Bucket, ord)
			return s.take(&s.row)
		})
	}
	if err == nil {
		err = s.err
	}
	if err != nil {
		return fmt.Errorf("search bucket %s: decode: %w", seg.BucketID(), err)
	}
	if counted > 0 {
		agg.addCount(nil, counted)
	}
	return nil
}
