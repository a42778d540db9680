// Package querytest holds the naive search oracle that query's executor is
// checked against, in the tests of query and peer/store and in the bench.
//
// Reference (and ReferenceSearch) scans every row it is given, never an
// index, and implements matching, value comparison, grouping, sorting and
// every aggregate with its own simple code: it imports query only for what
// defines the language rather than executes it — the parser and its types,
// time modifiers, the row of an event (query.EventRow: default fields,
// indexed fields, search-time extraction), the streaming row functions of
// eval, where, rex, fields and table (query.ApplyRow) and the output form
// of a result (query.Results). An oracle that shared the executor's
// comparison or aggregation code could share its bugs.
package querytest

import (
	"cmp"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/query"
)

// Reference is the naive oracle of the tests and the bench: it looks at
// every row it is given and never uses an index. It is not used to serve
// searches. Feed it rows with Add (several References can share one scan),
// then read Results.
type Reference struct {
	keep   map[string]bool // fields a matching row keeps; nil: all (keepFields)
	q      *query.Query
	lo, hi int64
	now    time.Time
	rows   []query.Row
}

// NewReference parses and prepares a request for the oracle.
func NewReference(req query.Request) (*Reference, error) {
	q, err := query.Parse(req.Query)
	if err != nil {
		return nil, err
	}
	r := &Reference{q: q, now: req.Now, keep: keepFields(q.Commands)}
	if r.now.IsZero() {
		r.now = time.Now()
	}
	// The query's own earliest=/latest= win over the request's.
	if r.lo, err = bound(q.Earliest, req.Earliest, r.now, math.MinInt64); err != nil {
		return nil, err
	}
	if r.hi, err = bound(q.Latest, req.Latest, r.now, math.MaxInt64); err != nil {
		return nil, err
	}
	return r, nil
}

// bound is a time bound in unix nanoseconds: the query's modifier, else the
// request's, else open (def).
func bound(inQuery, inRequest string, now time.Time, def int64) (int64, error) {
	s := inQuery
	if s == "" {
		s = inRequest
	}
	if s == "" {
		return def, nil
	}
	tm, err := query.ParseTime(s, now)
	if err != nil {
		return 0, err
	}
	return tm.UnixNano(), nil
}

// Add looks at one event row; a matching row is copied.
func (o *Reference) Add(r query.Row) {
	if r.T < o.lo || r.T >= o.hi || !matches(o.q.Search, &r) {
		return
	}
	f := make(map[string]any, len(r.F))
	for k, v := range r.F {
		if o.keep == nil || o.keep[k] {
			f[k] = v
		}
	}
	r.F = f
	o.rows = append(o.rows, r)
}

// keepFields is the fields a pipeline that starts with stats, top, rare or
// timechart can observe (its by-fields and aggregated fields, and _time):
// a matching row keeps only those, so the oracle holds millions of small
// rows instead of whole events (the 5M bench set: `* | stats dc(path)`).
// Any other pipeline keeps every field (nil).
func keepFields(cmds []query.Command) map[string]bool {
	if len(cmds) == 0 {
		return nil
	}
	keep := map[string]bool{"_time": true}
	var aggs []query.AggSpec
	switch x := cmds[0].(type) {
	case query.StatsCmd:
		aggs = x.Aggs
		for _, f := range x.By {
			keep[f] = true
		}
	case query.TopCmd:
		for _, f := range append(append([]string(nil), x.Fields...), x.By...) {
			keep[f] = true
		}
	case query.TimechartCmd:
		aggs = x.Aggs
		if x.By != "" {
			keep[x.By] = true
		}
	default:
		return nil
	}
	for _, a := range aggs {
		if a.Field != "" {
			keep[a.Field] = true
		}
	}
	return keep
}

// Results runs the commands over the matching rows, newest first.
func (o *Reference) Results() []map[string]any {
	rows := o.rows
	// Newest first: _time descending, bucket ascending, _cd descending.
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		return cmp.Or(cmp.Compare(b.T, a.T), strings.Compare(a.B, b.B), cmp.Compare(b.C, a.C)) < 0
	})
	for _, c := range o.q.Commands {
		rows = o.command(c, rows)
	}
	return query.Results(rows)
}

// ReferenceSearch answers one request with the oracle over every row scan
// yields.
func ReferenceSearch(req query.Request, scan func(fn func(query.Row) bool) error) ([]map[string]any, error) {
	o, err := NewReference(req)
	if err != nil {
		return nil, err
	}
	if err := scan(func(r query.Row) bool { o.Add(r); return true }); err != nil {
		return nil, err
	}
	return o.Results(), nil
}

// SegmentRows scans every event of segments as rows, for ReferenceSearch.
func SegmentRows(segs []query.Segment, server string) func(fn func(query.Row) bool) error {
	return func(fn func(query.Row) bool) error {
		for _, s := range segs {
			stop := false
			err := s.Events(nil, func(ord uint32, ev *query.Event) bool {
				stop = !fn(query.EventRow(ev, s.BucketID(), ord, server))
				return !stop
			})
			if err != nil || stop {
				return err
			}
		}
		return nil
	}
}
