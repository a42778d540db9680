package query

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"
)

// Merge is the head half: it merges the partial results of many buckets
// (from any number of peers) — events in time order, aggregates reduced —
// then runs the commands that need the global view and the rest of the
// pipeline. It returns the final rows and their columns.
func (p *Plan) Merge(parts []*Partial) ([]Row, []string, error) {
	p.warnings = nil
	parts = append([]*Partial(nil), parts...)
	sortPartials(parts)
	for _, pt := range parts {
		if err := p.CheckPartial(pt); err != nil {
			return nil, nil, fmt.Errorf("merge bucket %s: %w", pt.Bucket, err)
		}
	}
	var rows []Row
	var cols []string
	if p.Aggregating() {
		a := p.newAggregator()
		for _, pt := range parts {
			switch {
			case pt.agg != nil:
				a.mergeAggregator(pt.agg)
				pt.agg = nil
			case pt.Counts != nil:
				a.mergeCounts(pt.Counts)
			default:
				a.mergeGroups(pt.Groups)
			}
		}
		switch c := p.split.(type) {
		case StatsCmd:
			rows, cols = c.finalize(a)
		case TopCmd:
			rows, cols = c.finalize(a)
		case TimechartCmd:
			rows, cols = c.finalize(a, p.earliest, p.latest, p.Bounded())
		}
		if a.undecided {
			return nil, nil, ErrCountsUndecided
		}
		if a.soleUndecided {
			return nil, nil, ErrSoleUndecided
		}
		if a.valuesCut {
			p.warn(valuesWarning)
		}
	} else {
		rows = mergedEvents(parts)
		if p.split != nil {
			rows = blockingOp(p.split, rows, true)
		}
	}
	more, mcols, err := p.runCommands(p.post, rows)
	if err != nil {
		return nil, nil, err
	}
	rows = more
	if mcols != nil {
		cols = mcols
	}
	return rows, p.columns(rows, cols), nil
}

// mergedEvents is every event of parts in merge order (rowLess).
func mergedEvents(parts []*Partial) []Row {
	n := 0
	for _, pt := range parts {
		n += len(pt.Events)
	}
	rows := make([]Row, 0, n)
	for _, pt := range parts {
		rows = append(rows, pt.Events...)
	}
	sortRows(rows)
	return rows
}

// CheckPartial checks that a decoded partial fits this plan (its kind,
// and for an aggregate a key per by-field and a state per aggregate), so
// a search head can refuse one peer's malformed answer for that bucket
// as it arrives (and search the bucket elsewhere) instead of failing the
// merge. Merge runs the same checks.
func (p *Plan) CheckPartial(pt *Partial) error {
	if pt.V != WireVersion {
		return fmt.Errorf("wire version %d, want %d", pt.V, WireVersion)
	}
	want := "events"
	if p.Aggregating() {
		want = "agg"
	}
	if pt.Kind != want && !(pt.Kind == "" || pt.Skipped) {
		return fmt.Errorf("partial of kind %q, the plan wants %q", pt.Kind, want)
	}
	if p.Aggregating() {
		if err := p.checkBounded(pt); err != nil {
			return err
		}
		if err := p.checkSole(pt); err != nil {
			return err
		}
		return p.newAggregator().checkShape(pt)
	}
	return nil
}

// columns decides the response's fields list: a table's columns, an
// aggregate's columns (plus fields added after it), or every field seen.
func (p *Plan) columns(rows []Row, aggCols []string) []string {
	cmds := p.Query.Commands
	for i := len(cmds) - 1; i >= 0; i-- {
		switch c := cmds[i].(type) {
		case TableCmd:
			return expandColumns(c.Fields, rows)
		case StatsCmd, TopCmd, TimechartCmd:
			return resultColumns(aggCols, rows)
		}
	}
	return resultColumns(nil, rows)
}

// Results renders rows as response results.
func Results(rows []Row) []map[string]any {
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		m := make(map[string]any, len(r.F))
		for k, v := range r.F {
			m[k] = outputValue(v)
		}
		out[i] = m
	}
	return out
}

// RunSegments runs the peer half over segments on up to GOMAXPROCS
// goroutines and returns one Partial per segment that succeeded, with the
// summary of the buckets covered. A bucket that reached a limit of the
// search (ErrLimit) fails the whole search: limitErr is the first such
// error, and the caller answers with it rather than with a partial result.
func (p *Plan) RunSegments(ctx context.Context, segs []Segment) (parts []*Partial, sum BucketSummary, limitErr error) {
	// Buckets of indexes the search does not target are not counted.
	var targeted []Segment
	for _, s := range segs {
		if p.TargetsIndex(s.Index()) {
			targeted = append(targeted, s)
		}
	}
	segs = targeted
	parts = make([]*Partial, len(segs))
	errs := make([]error, len(segs))
	work := make(chan int)
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), len(segs))
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				parts[i], errs[i] = p.RunSegment(ctx, segs[i])
				if errs[i] != nil {
					continue
				}
				// Every partial is held until the merge: charged to the
				// search's budget as it is made; past it the rest stop.
				if err := p.Charge(parts[i].MemoryEstimate(), p.heldHere()); err != nil {
					parts[i], errs[i] = nil, err
					stop()
				}
			}
		}()
	}
feed:
	for i := range segs {
		select {
		case work <- i:
		case <-ctx.Done():
			for j := i; j < len(segs); j++ {
				errs[j] = ctx.Err()
			}
			break feed
		}
	}
	close(work)
	wg.Wait()
	sum = BucketSummary{Total: len(segs), Failures: []Failure{}}
	var ok []*Partial
	for i, pt := range parts {
		if errs[i] != nil && IsLimitError(errs[i]) && limitErr == nil {
			limitErr = errs[i]
		}
		if errs[i] != nil {
			sum.Failed++
			sum.Failures = append(sum.Failures, Failure{Bucket: segs[i].BucketID(), Peer: p.server, Reason: errs[i].Error()})
			continue
		}
		sum.Successful++
		if pt.Skipped {
			sum.Skipped++
		}
		ok = append(ok, pt)
	}
	return ok, sum, limitErr
}

// TargetsIndex reports whether the search can match events of an index:
// false when a top-level `index=` term (ANDed with the rest) excludes it.
func (p *Plan) TargetsIndex(index string) bool {
	var walk func(c *cnode) bool
	walk = func(c *cnode) bool {
		switch c.kind {
		case '&':
			return walk(c.l) && walk(c.r)
		case 'f':
			if c.field == "index" && c.op == "=" {
				return c.fieldValueMatches(index)
			}
		}
		return true
	}
	return walk(p.filter)
}

// Search runs a whole search — the peer half and the head half — over local
// segments: the single-peer search of SPEC §5. A parse error is returned as
// a *SyntaxError (HTTP 400).
func Search(ctx context.Context, req Request, segs []Segment) (*Response, error) {
	start := time.Now()
	p, err := Compile(req)
	if err != nil {
		return nil, err
	}
	p.SetMemoryLimit(req.MemoryLimit)
	parts, sum, limitErr := p.RunSegments(ctx, segs)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limitErr != nil {
		return nil, limitErr
	}
	if sum.Failed > 0 && req.AllowPartial != nil && !*req.AllowPartial {
		return nil, fmt.Errorf("search failed on %d bucket(s): %s", sum.Failed, sum.Failures[0].Reason)
	}
	if req.MaxResults > 0 && p.Streamable() {
		// Plain events: the first MaxResults rows in merge order are among
		// each bucket's first MaxResults (its rows are in that order).
		for _, pt := range parts {
			if len(pt.Events) > req.MaxResults+1 {
				pt.Events = pt.Events[:req.MaxResults+1]
			}
		}
	}
	rows, cols, err := p.Merge(parts)
	if err != nil {
		return nil, err
	}
	cut := req.MaxResults > 0 && len(rows) > req.MaxResults
	if cut {
		rows = rows[:req.MaxResults]
	}
	resp := &Response{Results: Results(rows), Fields: cols}
	if resp.Fields == nil {
		resp.Fields = []string{}
	}
	resp.Summary = Summary{Buckets: sum, Peers: []string{}, Warnings: []string{}, Partial: sum.Failed > 0}
	if req.Server != "" {
		resp.Summary.Peers = []string{req.Server}
	}
	for _, f := range sum.Failures {
		resp.Summary.Warnings = append(resp.Summary.Warnings, fmt.Sprintf("bucket %s failed: %s", f.Bucket, f.Reason))
	}
	resp.Summary.Warnings = append(resp.Summary.Warnings, p.Warnings()...)
	if cut {
		resp.Summary.Warnings = append(resp.Summary.Warnings, fmt.Sprintf("result limit of %d rows reached: results are truncated; narrow the search or add | head", req.MaxResults))
	}
	resp.Summary.TookMS = float64(time.Since(start).Microseconds()) / 1000
	return resp, nil
}

// ErrNotBuilt was returned before the search language landed; kept for
// callers that still compare against it.
var ErrNotBuilt = errors.New("search is not built yet")

// Combine merges the aggregate partials of several buckets into one
// partial, as the head's merge would, without finalising: a peer sends one
// partial for all the buckets it searched instead of one per bucket (far
// fewer groups to encode when values repeat across buckets). Skipped and
// event partials are not combined; the caller keeps those per bucket.
func (p *Plan) Combine(parts []*Partial) *Partial {
	a := p.newAggregator()
	var scanned int64
	for _, pt := range parts {
		if pt == nil || pt.Skipped {
			continue
		}
		switch {
		case pt.agg != nil:
			a.mergeAggregator(pt.agg)
			pt.agg = nil
		case pt.Counts != nil:
			a.mergeCounts(pt.Counts)
		default:
			a.mergeGroups(pt.Groups)
		}
		scanned += pt.Scanned
	}
	return &Partial{V: WireVersion, Kind: "agg", Scanned: scanned, agg: a}
}

// IndexNames lists the index names the search's filter asks for by
// equality without a wildcard (index=web, in any branch of an OR; not
// under a NOT), sorted and deduplicated: a head warns about the ones that
// do not exist instead of answering an empty result in silence.
func (p *Plan) IndexNames() []string {
	seen := map[string]bool{}
	var walk func(c *cnode)
	walk = func(c *cnode) {
		if c == nil {
			return
		}
		switch c.kind {
		case '&', '|':
			walk(c.l)
			walk(c.r)
		case 'f':
			if c.field == "index" && c.op == "=" && !c.wild {
				seen[c.text] = true
			}
		}
	}
	walk(p.filter)
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
