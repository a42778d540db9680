package query

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Plan is a compiled search: where the pipeline splits between the peer
// half and the head half (see DESIGN.md), the time range and the compiled
// search expression. A Plan is immutable and safe for concurrent use.
type Plan struct {
	Query    *Query
	filter   *cnode
	earliest int64 // inclusive, unix ns; math.MinInt64 when unbounded
	latest   int64 // exclusive, unix ns; math.MaxInt64 when unbounded
	now      time.Time
	server   string
	// forms: the compact wire forms the head reads (SetBinaryCounts,
	// SetBinarySets, SetBinaryNums, SetBlobs).
	forms wireForms
	// countsTop: a top's partials list their countsTop largest counts
	// and a bound (SetCountsTop, topcounts.go); 0: every key.
	countsTop int

	pre   []Command // streaming commands run on the peer
	split Command   // first command that needs the global view, or nil
	post  []Command // commands after split, run on the head

	// warnings of the last Merge (Warnings); Merge runs on one goroutine.
	warnings []string

	aggSpecs []AggSpec
	aggKeys  []string
	aggSpan  int64
	aggNull  bool

	// colNeeds are the fields the peer half reads when it runs from
	// columns; colOK is false when it cannot (columns.go).
	colNeeds []string
	colOK    bool
	// dedupCols: the split is a dedup with nothing before it whose
	// survivors can be picked from columns, so only they are decoded
	// (dedupPrune).
	dedupCols bool
	// sortCols: the split is a sort with nothing before it whose keys
	// have columns and whose rows are cut to sortKeep (its limit, or a
	// head right after it), so only the events that can make the cut
	// are decoded (sortPrune).
	sortCols bool
	sortKeep int

	// rows: the fields a row decoded from an event holds (rows.go); nil:
	// every field.
	rows *rowProj
	// growsValues: the streaming prefix has an eval or rex, which can
	// make a row larger than its event (segExec.bigRow).
	growsValues bool
	// know is the search-time knowledge bundle (knowledge.go), nil: none.
	know *Knowledge
	// mem is the search's memory budget in this process (memory.go);
	// shared by every goroutine running the plan.
	mem *memBudget
}

// Warnings are what the last Merge cut to a limit (values() past
// MaxValues): the caller puts them in the search's summary.
func (p *Plan) Warnings() []string { return p.warnings }

// warn records a warning once.
func (p *Plan) warn(w string) {
	for _, x := range p.warnings {
		if x == w {
			return
		}
	}
	p.warnings = append(p.warnings, w)
}

// Bounded reports whether both ends of the time range are set.
func (p *Plan) Bounded() bool { return p.earliest != math.MinInt64 && p.latest != math.MaxInt64 }

// TimeRange returns the search's [earliest, latest) in unix ns.
func (p *Plan) TimeRange() (int64, int64) { return p.earliest, p.latest }

// Streamable reports whether the search is a pure event search (only
// streaming commands): its results can be released bucket by bucket.
func (p *Plan) Streamable() bool { return p.split == nil && len(p.post) == 0 }

// Aggregating reports whether peers answer with partial aggregates.
func (p *Plan) Aggregating() bool { return p.aggSpecs != nil }

func isStreaming(c Command) bool {
	switch c.(type) {
	case SearchCmd, WhereCmd, EvalCmd, FieldsCmd, TableCmd, RexCmd, LookupCmd:
		return true
	}
	return false
}

// ErrBadRequest marks every error of a request itself (a bad time range);
// with *SyntaxError these are the caller's fault (HTTP 400), everything else
// a search failure.
var ErrBadRequest = errors.New("bad search request")

// IsRequestError reports whether err is the request's fault: a syntax error
// or a bad time range.
func IsRequestError(err error) bool {
	var se *SyntaxError
	return errors.As(err, &se) || errors.Is(err, ErrBadRequest)
}

// Compile parses a request's query and plans it. Errors are *SyntaxError
// for a bad query and ErrBadRequest-wrapped errors for a bad time range.
func Compile(req Request) (*Plan, error) {
	q, err := Parse(req.Query)
	if err != nil {
		return nil, err
	}
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	if err := req.Knowledge.prepare(q); err != nil {
		return nil, err
	}
	p := &Plan{Query: q, filter: compileNode(q.Search), now: now.UTC(), server: req.Server,
		earliest: math.MinInt64, latest: math.MaxInt64, mem: &memBudget{}, know: req.Knowledge}
	e, l := req.Earliest, req.Latest
	if q.Earliest != "" {
		e = q.Earliest
	}
	if q.Latest != "" {
		l = q.Latest
	}
	if e != "" {
		t, err := ParseTime(e, p.now)
		if err != nil {
			return nil, fmt.Errorf("%w: earliest: %w", ErrBadRequest, err)
		}
		p.earliest = t.UnixNano()
	}
	if l != "" {
		t, err := ParseTime(l, p.now)
		if err != nil {
			return nil, fmt.Errorf("%w: latest: %w", ErrBadRequest, err)
		}
		p.latest = t.UnixNano()
	}
	i := 0
	for i < len(q.Commands) && isStreaming(q.Commands[i]) {
		i++
	}
	p.pre = q.Commands[:i]
	// A `| search` right after the search is the same filter ANDed onto
	// it: folded in, the index answers it (postings, columns) instead of
	// every event being decoded to a row first.
	for len(p.pre) > 0 {
		sc, ok := p.pre[0].(SearchCmd)
		if !ok {
			break
		}
		p.filter = &cnode{kind: '&', l: p.filter, r: compiledSearch(sc)}
		p.pre = p.pre[1:]
	}
	if i < len(q.Commands) {
		p.split = q.Commands[i]
		p.post = q.Commands[i+1:]
	}
	switch c := p.split.(type) {
	case StatsCmd:
		p.aggSpecs, p.aggKeys = c.Aggs, c.By
	case TopCmd:
		p.aggSpecs, p.aggKeys = []AggSpec{{Func: "count"}}, c.keys()
	case TimechartCmd:
		p.aggSpecs, p.aggKeys, p.aggSpan, p.aggNull = c.Aggs, c.keys(), c.Span, c.By != ""
	}
	if p.aggSpecs != nil && fieldsKeep(p.pre, aggFields(p.split, p.aggSpecs, p.aggKeys)) {
		// fields commands that keep everything the aggregation reads
		// change nothing it sees: dropped, the aggregation runs as if
		// nothing came before it (postings, columns by id).
		p.pre = nil
	}
	p.growsValues = slices.ContainsFunc(p.pre, growsValues)
	p.colNeeds, p.colOK = planColumns(p.pre, p.split, p.aggSpecs, p.aggKeys)
	if d, ok := p.split.(DedupCmd); ok && len(p.pre) == 0 {
		p.dedupCols = keysColumnar(d.Fields)
	}
	if sc, ok := p.split.(SortCmd); ok && len(p.pre) == 0 {
		keep := sc.Limit
		if len(p.post) > 0 {
			if h, ok := p.post[0].(HeadCmd); ok && (keep <= 0 || h.N < keep) {
				keep = h.N // the head keeps the first N of the merged sort
			}
		}
		fields := make([]string, len(sc.Keys))
		for i, k := range sc.Keys {
			fields[i] = k.Field
		}
		p.sortCols, p.sortKeep = keep > 0 && keysColumnar(fields), keep
	}
	p.rows = planRows(p)
	if p.know.rowRules() {
		// columns hold what the built-in extraction sees, not the bundle's
		p.colOK, p.dedupCols, p.sortCols = false, false, false
	}
	return p, nil
}

// aggFields are the fields an aggregation split reads: its keys but the
// time span, its aggregates' fields and, for timechart, _time.
func aggFields(split Command, specs []AggSpec, keys []string) []string {
	var fs []string
	for _, k := range keys {
		if k != spanKey {
			fs = append(fs, k)
		}
	}
	for _, s := range specs {
		if s.Field != "" {
			fs = append(fs, s.Field)
		}
	}
	if _, ok := split.(TimechartCmd); ok {
		fs = append(fs, "_time")
	}
	return fs
}

// fieldsKeep reports whether cmds are all fields commands and every one of
// them keeps each of fs.
func fieldsKeep(cmds []Command, fs []string) bool {
	if len(cmds) == 0 {
		return false
	}
	for _, c := range cmds {
		fc, ok := c.(FieldsCmd)
		if !ok {
			return false
		}
		for _, f := range fs {
			if !fc.keeps(f) {
				return false
			}
		}
	}
	return true
}

func (p *Plan) newAggregator() *aggregator {
	return newAggregator(p.aggSpecs, p.aggKeys, p.aggSpan, p.aggNull)
}

// countOnly reports whether every aggregate is a plain count, so postings
// can answer it.
func (p *Plan) countOnly() bool {
	for _, s := range p.aggSpecs {
		if s.Func != "count" || s.Field != "" {
			return false
		}
	}
	return p.aggSpecs != nil
}

// resultColumns lists cols first, then every other field of rows (default
// fields first, the rest sorted).
func resultColumns(cols []string, rows []Row) []string {
	cols = append([]string(nil), cols...)
	seen := map[string]bool{}
	for _, c := range cols {
		seen[c] = true
	}
	var rest []string
	for _, r := range rows {
		for k := range r.F {
			if !seen[k] {
				seen[k] = true
				rest = append(rest, k)
			}
		}
	}
	sortFieldNames(rest)
	return append(cols, rest...)
}

var defaultOrder = map[string]int{"_time": 0, "_raw": 1, "host": 2, "source": 3, "sourcetype": 4, "index": 5, "splunk_server": 6, "_bkt": 7, "_cd": 8}

func sortFieldNames(names []string) {
	rank := func(s string) int {
		if r, ok := defaultOrder[s]; ok {
			return r
		}
		return 100
	}
	sortStrings(names, func(a, b string) bool {
		ra, rb := rank(a), rank(b)
		if ra != rb {
			return ra < rb
		}
		return a < b
	})
}

func hasWildcard(fs []string) bool {
	for _, f := range fs {
		if strings.Contains(f, "*") {
			return true
		}
	}
	return false
}

func expandColumns(pats []string, rows []Row) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range pats {
		if !strings.Contains(p, "*") {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
			continue
		}
		var m []string
		for _, r := range rows {
			for k := range r.F {
				if !seen[k] && globMatch(p, k) {
					seen[k] = true
					m = append(m, k)
				}
			}
		}
		sortFieldNames(m)
		out = append(out, m...)
	}
	return out
}
