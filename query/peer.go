package query

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
)

// FieldPresence is an optional extra a Segment may implement: the events
// that carry an indexed field at all. Without it the executor unions the
// field's value postings (and caches the union per segment).
type FieldPresence interface {
	FieldEvents(field string) (*roaring.Bitmap, error)
}

// FieldCounter is an optional extra a Segment may implement: the number of
// events holding each value of an indexed field, in ascending byte order of
// value, read from the dictionary without materialising postings (a
// Lucene-style docFreq). Counting queries over all events (`| top path`,
// `| stats count by host`) use it when present.
type FieldCounter interface {
	FieldValueCounts(field string, fn func(value string, events uint64) bool) error
}

// FieldCounterIn is an optional extra a Segment may implement: the number
// of events of set holding each value of an indexed field, in ascending
// byte order of value (values no event of set holds may be left out). A
// segment that answers fields from columns counts in one pass over set
// instead of building every value's bitmap; ok false means it cannot for
// this field (the executor walks FieldValues).
type FieldCounterIn interface {
	FieldValueCountsIn(field string, set *roaring.Bitmap, fn func(value string, events uint64) bool) (ok bool, err error)
}

// bset is a set of ordinals; all means every ordinal of the segment.
type bset struct {
	all bool
	b   *roaring.Bitmap
}

var emptyBitmap = roaring.New()

func none() bset { return bset{b: emptyBitmap} }

func (s bset) card(n uint32) uint64 {
	if s.all {
		return uint64(n)
	}
	return s.b.GetCardinality()
}

func (s bset) isEmpty() bool { return !s.all && s.b.IsEmpty() }

func (s bset) bitmap(n uint32) *roaring.Bitmap {
	if s.all {
		b := roaring.New()
		b.AddRange(0, uint64(n))
		return b
	}
	return s.b
}

func and(a, b bset) bset {
	switch {
	case a.all:
		return b
	case b.all:
		return a
	}
	return bset{b: roaring.And(a.b, b.b)}
}

func or(a, b bset) bset {
	if a.all || b.all {
		return bset{all: true}
	}
	return bset{b: roaring.Or(a.b, b.b)}
}

func andNot(a, b bset, n uint32) bset {
	if b.all {
		return none()
	}
	if b.b.IsEmpty() {
		return a
	}
	return bset{b: roaring.AndNot(a.bitmap(n), b.b)}
}

// cands is what the index proves about a search expression on a segment:
// sure events match; maybe events must be decoded and verified.
type cands struct{ sure, maybe bset }

// segExec is one segment's peer half.
type segExec struct {
	p     *Plan
	seg   Segment
	n     uint32
	idx   map[string]bool
	cache map[string]bset
	ts    []int64
	scope bset // the events in the search's time range
	// held is what rows made large by the streaming commands charged to
	// the search's memory budget (bigRow); released when the bucket ends.
	held int64
}

var presenceCache sync.Map // presenceKey -> *roaring.Bitmap

// presenceKey names a bucket snapshot: a bucket's first n events never
// change (journals are append-only and every copy holds the same events),
// so the union of a field's postings can be reused across searches.
type presenceKey struct {
	bucket string
	n      uint32
	lo, hi int64
	field  string
}

var presenceCount int64
var presenceMu sync.Mutex

// hasField is the set of events carrying indexed field f.
func (x *segExec) hasField(f string) (bset, error) {
	if b, ok := x.cache[f]; ok {
		return b, nil
	}
	var out bset
	if fp, ok := x.seg.(FieldPresence); ok {
		b, err := fp.FieldEvents(f)
		if err != nil {
			return bset{}, err
		}
		if b == nil {
			b = emptyBitmap
		}
		out = bset{b: b}
	} else {
		lo, hi := x.seg.Bounds()
		key := presenceKey{x.seg.BucketID(), x.n, lo, hi, f}
		cacheable := key.bucket != ""
		if cacheable {
			if v, ok := presenceCache.Load(key); ok {
				out = bset{b: v.(*roaring.Bitmap)}
				if out.b.GetCardinality() == uint64(x.n) {
					out = bset{all: true}
				}
				x.cache[f] = out
				return out, nil
			}
		}
		var bs []*roaring.Bitmap
		if err := x.seg.FieldValues(f, func(_ string, b *roaring.Bitmap) bool {
			bs = append(bs, b)
			return true
		}); err != nil {
			return bset{}, err
		}
		b := roaring.FastOr(bs...)
		b.RunOptimize()
		out = bset{b: b}
		if cacheable {
			presenceMu.Lock()
			presenceCount++
			if presenceCount > 4096 {
				presenceCache.Clear()
				presenceCount = 0
			}
			presenceMu.Unlock()
			presenceCache.Store(key, b)
		}
	}
	if out.b.GetCardinality() == uint64(x.n) {
		out = bset{all: true}
	}
	x.cache[f] = out
	return out, nil
}

func (x *segExec) term(t string) (bset, error) {
	if len(t) > MaxTokenLen {
		t = t[:MaxTokenLen]
	}
	if !x.seg.MayContain(t) {
		return none(), nil
	}
	b, err := x.seg.Term(t)
	if err != nil || b == nil {
		return none(), err
	}
	return bset{b: b}, nil
}

func (x *segExec) candidates(c *cnode) (cands, error) {
	switch c.kind {
	case '*':
		return cands{sure: bset{all: true}, maybe: none()}, nil
	case '&', '|':
		l, err := x.candidates(c.l)
		if err != nil {
			return cands{}, err
		}
		if c.kind == '&' && l.sure.isEmpty() && l.maybe.isEmpty() {
			return l, nil
		}
		r, err := x.candidates(c.r)
		if err != nil {
			return cands{}, err
		}
		if c.kind == '&' {
			sure := and(l.sure, r.sure)
			any := and(or(l.sure, l.maybe), or(r.sure, r.maybe))
			return cands{sure: sure, maybe: andNot(any, sure, x.n)}, nil
		}
		sure := or(l.sure, r.sure)
		return cands{sure: sure, maybe: andNot(or(l.maybe, r.maybe), sure, x.n)}, nil
	case '!':
		a, err := x.candidates(c.l)
		if err != nil {
			return cands{}, err
		}
		return cands{sure: andNot(bset{all: true}, or(a.sure, a.maybe), x.n), maybe: a.maybe}, nil
	case 't':
		if c.exactTokens {
			s, err := x.term(c.text)
			return cands{sure: s, maybe: none()}, err
		}
		m := bset{all: true}
		for _, a := range c.atoms {
			s, err := x.term(a)
			if err != nil {
				return cands{}, err
			}
			m = and(m, s)
			if m.isEmpty() {
				break
			}
		}
		sure := none()
		if c.wholeToken && !m.isEmpty() {
			// An event whose whole major segment is the term holds it at
			// token boundaries: sure without verification.
			s, err := x.term(c.text)
			if err != nil {
				return cands{}, err
			}
			sure = and(s, m)
		}
		return cands{sure: sure, maybe: andNot(m, sure, x.n)}, nil
	case 'g':
		prefix := c.text
		for i := 0; i < len(prefix); i++ {
			if prefix[i] == '*' {
				prefix = prefix[:i]
				break
			}
		}
		var bs []*roaring.Bitmap
		err := x.seg.TermsWithPrefix(prefix, func(term string, b *roaring.Bitmap) bool {
			if globMatch(c.text, term) {
				bs = append(bs, b)
			}
			return true
		})
		if err != nil {
			return cands{}, err
		}
		if len(bs) == 0 {
			return cands{sure: none(), maybe: none()}, nil
		}
		return cands{sure: bset{b: roaring.FastOr(bs...)}, maybe: none()}, nil
	case 'f':
		return x.fieldCands(c)
	}
	return cands{}, fmt.Errorf("unknown node kind %q", c.kind)
}

func (x *segExec) fieldCands(c *cnode) (cands, error) {
	if c.field == "index" {
		if c.fieldValueMatches(x.seg.Index()) {
			return cands{sure: bset{all: true}, maybe: none()}, nil
		}
		return cands{sure: none(), maybe: none()}, nil
	}
	if !x.idx[c.field] {
		// Not indexed here: the value's atoms, when it has some and must
		// appear in _raw, narrow the events to extract from — unless a
		// knowledge bundle may make the field from anything (knowledge.go).
		if c.op == "=" && !c.wild && !isDefaultField(c.field) && !x.p.know.rowRules() {
			tc := compileNode(TermNode{Text: c.text})
			if tc.kind == 't' {
				m := bset{all: true}
				for _, a := range tc.atoms {
					s, err := x.term(a)
					if err != nil {
						return cands{}, err
					}
					m = and(m, s)
				}
				return cands{sure: none(), maybe: m}, nil
			}
		}
		return cands{sure: none(), maybe: bset{all: true}}, nil
	}
	if c.isNum && isCmpOp(c.op) {
		if nb, ok := x.seg.(NumericBlocks); ok {
			got, ok, err := x.numericCands(nb, c)
			if err != nil || ok {
				return got, err
			}
		}
	}
	var match, miss []*roaring.Bitmap
	if c.op == "=" && !c.wild && !c.hasLetters {
		b, err := x.seg.FieldValue(c.field, c.text)
		if err != nil {
			return cands{}, err
		}
		if b != nil {
			match = append(match, b)
		}
	} else if names, ok, err := x.matchingNames(c); err != nil {
		return cands{}, err
	} else if ok {
		// only the matching values' events: `host=web-31` (a value with
		// letters is a case-insensitive glob) needs one bitmap, not fifty
		for _, v := range names {
			b, err := x.seg.FieldValue(c.field, v)
			if err != nil {
				return cands{}, err
			}
			if b != nil {
				match = append(match, b)
			}
		}
	} else {
		err := x.seg.FieldValues(c.field, func(v string, b *roaring.Bitmap) bool {
			if c.fieldValueMatches(v) {
				match = append(match, b)
			} else if c.op == "!=" {
				miss = append(miss, b)
			}
			return true
		})
		if err != nil {
			return cands{}, err
		}
	}
	var sure bset
	if c.op == "!=" {
		sure = bset{b: roaring.AndNot(roaring.FastOr(miss...), roaring.FastOr(match...))}
	} else {
		sure = bset{b: roaring.FastOr(match...)}
	}
	has, err := x.hasField(c.field)
	if err != nil {
		return cands{}, err
	}
	lacking := andNot(bset{all: true}, has, x.n)
	return cands{sure: sure, maybe: lacking}, nil
}

// fewNames is how many values a field=value glob may match for them to be
// fetched one by one (FieldValue each) rather than by one walk over every
// value's events.
const fewNames = 32

// matchingNames lists the values of c's field that c (op "=") matches,
// from the value names alone (FieldCounter); ok is false when the segment
// cannot list them or more than fewNames match.
func (x *segExec) matchingNames(c *cnode) (names []string, ok bool, err error) {
	fc, isCounter := x.seg.(FieldCounter)
	if !isCounter || c.op != "=" {
		return nil, false, nil
	}
	err = fc.FieldValueCounts(c.field, func(v string, _ uint64) bool {
		if c.fieldValueMatches(v) {
			names = append(names, v)
		}
		return len(names) <= fewNames
	})
	return names, err == nil && len(names) <= fewNames, err
}

// times reads the segment's Times once per search.
func (x *segExec) times() ([]int64, error) {
	if x.ts == nil {
		ts, err := x.seg.Times()
		if err != nil {
			return nil, err
		}
		if len(ts) < int(x.n) {
			return nil, fmt.Errorf("times: %d entries for %d events", len(ts), x.n)
		}
		x.ts = ts[:x.n]
	}
	return x.ts, nil
}

// timeSet is the set of events inside the search's time range, or all.
func (x *segExec) timeSet() (bset, error) {
	lo, hi := x.seg.Bounds()
	if lo >= x.p.earliest && hi < x.p.latest {
		return bset{all: true}, nil
	}
	ts, err := x.times()
	if err != nil {
		return bset{}, err
	}
	b := roaring.New()
	start := -1
	for i, t := range ts {
		in := t >= x.p.earliest && t < x.p.latest
		if in && start < 0 {
			start = i
		} else if !in && start >= 0 {
			b.AddRange(uint64(start), uint64(i))
			start = -1
		}
	}
	if start >= 0 {
		b.AddRange(uint64(start), uint64(len(ts)))
	}
	return bset{b: b}, nil
}

// RunSegment is the peer half over one segment: it filters through the
// index, decodes only candidates, runs the streaming commands and answers
// with the bucket's partial result (events, pre-reduced, or partial
// aggregates).
func (p *Plan) RunSegment(ctx context.Context, seg Segment) (*Partial, error) {
	part := &Partial{V: WireVersion, Bucket: seg.BucketID(), Index: seg.Index()}
	if p.Aggregating() {
		part.Kind = "agg"
	} else {
		part.Kind = "events"
	}
	lo, hi := seg.Bounds()
	n := seg.Len()
	if n == 0 || hi < lo || hi < p.earliest || lo >= p.latest {
		part.Skipped = n > 0 && hi >= lo
		return part, nil
	}
	x := &segExec{p: p, seg: seg, n: n, idx: map[string]bool{}, cache: map[string]bset{}}
	defer func() { p.Release(x.held) }()
	for _, f := range seg.IndexedFields() {
		x.idx[f] = true
	}
	ts, err := x.timeSet()
	if err != nil {
		return nil, fmt.Errorf("search bucket %s: times: %w", seg.BucketID(), err)
	}
	x.scope = ts
	c, err := x.candidates(p.filter)
	if err != nil {
		return nil, fmt.Errorf("search bucket %s: %w", seg.BucketID(), err)
	}
	c.sure, c.maybe = and(c.sure, ts), and(c.maybe, ts)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	var agg *aggregator
	if p.Aggregating() {
		agg = p.newAggregator()
	}
	// decode: the events to decode, and verify the subset of them that
	// must pass the search expression on the row.
	decode, verify := or(c.sure, c.maybe), c.maybe
	if agg != nil && len(p.pre) == 0 && p.countOnly() {
		rest, err := x.countFromPostings(agg, c.sure)
		if err != nil {
			return nil, fmt.Errorf("search bucket %s: %w", seg.BucketID(), err)
		}
		decode = or(rest, c.maybe)
	}
	if agg == nil && verify.isEmpty() && !decode.isEmpty() {
		// head N / tail N over sure events: pick the N newest (oldest) by
		// Times and decode only those, when nothing before can drop rows.
		if n, oldest, ok := p.timeLimit(); ok && decode.card(x.n) > uint64(n) {
			b, err := x.pickByTime(decode, n, oldest)
			if err != nil {
				return nil, fmt.Errorf("search bucket %s: times: %w", seg.BucketID(), err)
			}
			decode = bset{b: b}
		}
	}
	if cs, ok := seg.(ColumnSource); ok && (p.dedupCols || p.sortCols) && !decode.isEmpty() {
		// dedup, sort N (or sort | head N): of the events the index
		// proves, only those the columns say can be kept are decoded
		// (each key's first N; the first N by the sort keys); the dedup
		// or sort below runs over whole rows as before.
		if served := andNot(decode, verify, x.n); !served.isEmpty() {
			var keep bset
			var ok bool
			var err error
			if p.dedupCols {
				keep, ok, err = x.dedupPrune(cs, p.split.(DedupCmd), served)
			} else {
				keep, ok, err = x.sortPrune(cs, p.split.(SortCmd).Keys, p.sortKeep, served)
			}
			if err != nil {
				return nil, fmt.Errorf("search bucket %s: columns: %w", seg.BucketID(), err)
			}
			if ok {
				decode = or(keep, verify)
			}
		}
	}
	var rows []Row
	env := &evalEnv{now: p.now, know: p.know}
	if cs, ok := seg.(ColumnSource); ok && p.colOK && !decode.isEmpty() {
		// Events the index proves are served from columns; only those
		// needing verification or lacking an indexed field are decoded.
		served := andNot(decode, verify, x.n)
		if !served.isEmpty() {
			cols, ok, err := x.loadColumns(cs)
			if err != nil {
				return nil, fmt.Errorf("search bucket %s: %w", seg.BucketID(), err)
			}
			if ok {
				rest, err := x.runColumns(served, cols, agg, &rows)
				if err != nil {
					return nil, fmt.Errorf("search bucket %s: columns: %w", seg.BucketID(), err)
				}
				decode = or(rest, verify)
			}
		}
	}
	if !decode.isEmpty() {
		if err := x.decodeRows(ctx, part, decode, verify, agg, env, &rows); err != nil {
			return nil, err
		}
	}
	if agg != nil {
		part.agg = agg
		return part, nil
	}
	sortRows(rows)
	if p.split != nil {
		rows = blockingOp(p.split, rows, false)
	}
	part.Events = rows
	return part, nil
}

// rowAllowance is what a row may hold before bigRow charges it.
const rowAllowance = 16 << 10

// bigRow charges a row that the streaming commands (eval, rex) made larger
// than rowAllowance to the search's memory budget: each value is capped
// at MaxValueBytes, but a bucket of rows each near that cap would hold
// gigabytes before any partial is charged (review N4's shape, one level
// below the value cap). Ordinary rows are not measured: without an eval
// or rex a row is an event, and an event is at most 1 MiB on disk too.
//
// A row an aggregation only counts or sums is not held; one it groups by,
// or keeps distinct values of, may be (charged as if it were).
func (x *segExec) bigRow(r *Row, agg *aggregator) error {
	if !x.p.growsValues || agg != nil && !agg.retainsValues() {
		return nil
	}
	est := rowEstimate(r)
	if est <= rowAllowance {
		return nil
	}
	x.held += est
	return x.p.Charge(est, "rows with large eval or rex values in bucket "+x.seg.BucketID())
}

// timeLimit reports a head/tail split whose streaming prefix keeps every row.
func (p *Plan) timeLimit() (int, bool, bool) {
	for _, c := range p.pre {
		switch c.(type) {
		case SearchCmd, WhereCmd:
			return 0, false, false
		}
	}
	switch c := p.split.(type) {
	case HeadCmd:
		return c.N, false, true
	case TailCmd:
		return c.N, true, true
	}
	return 0, false, false
}

// pickByTime returns the n newest (or oldest) ordinals of s in the order
// rowLess uses within a bucket: _time, then ordinal.
func (x *segExec) pickByTime(s bset, n int, oldest bool) (*roaring.Bitmap, error) {
	if n <= 0 {
		return roaring.New(), nil
	}
	ts, err := x.times()
	if err != nil {
		return nil, err
	}
	type pick struct {
		t int64
		o uint32
	}
	better := func(a, b pick) bool { // a comes before b in the result order
		if a.t != b.t {
			return (a.t > b.t) != oldest
		}
		return (a.o > b.o) != oldest
	}
	best := make([]pick, 0, n+1)
	consider := func(o uint32) {
		c := pick{ts[o], o}
		if len(best) == n && !better(c, best[n-1]) {
			return
		}
		i := sort.Search(len(best), func(i int) bool { return better(c, best[i]) })
		if len(best) < n {
			best = append(best, pick{})
		}
		copy(best[i+1:], best[i:len(best)-1])
		best[i] = c
	}
	if s.all {
		for o := uint32(0); o < x.n; o++ {
			consider(o)
		}
	} else {
		it := s.b.Iterator()
		for it.HasNext() {
			consider(it.Next())
		}
	}
	out := roaring.New()
	for _, b := range best {
		out.Add(b.o)
	}
	return out, nil
}

// countFromPostings answers count aggregates over the sure events from
// postings: with no key the cardinality, with indexed keys the value
// postings intersected, with timechart the Times array. It returns the sure
// events it could not count (those lacking an indexed key field, which
// search-time extraction may still supply), to be decoded.
func (x *segExec) countFromPostings(agg *aggregator, sure bset) (bset, error) {
	keys := agg.keys
	if sure.isEmpty() {
		return none(), nil
	}
	if len(keys) == 0 {
		agg.addCount(nil, int64(sure.card(x.n)))
		return none(), nil
	}
	hasSpan := keys[0] == spanKey
	fkeys := keys
	if hasSpan {
		fkeys = keys[1:]
	}
	for _, k := range fkeys {
		if k != "index" && !x.idx[k] {
			return sure, nil // a key that is not indexed here: scan
		}
	}
	var ts []int64
	if hasSpan {
		var err error
		if ts, err = x.times(); err != nil {
			return bset{}, err
		}
	}
	covered := sure
	for _, k := range fkeys {
		if k == "index" {
			continue
		}
		h, err := x.hasField(k)
		if err != nil {
			return bset{}, err
		}
		covered = and(covered, h)
	}
	rest := andNot(sure, covered, x.n)
	if covered.isEmpty() {
		return rest, nil
	}
	w := &postingsCount{x: x, agg: agg, keys: keys, fkeys: fkeys, hasSpan: hasSpan, ts: ts}
	w.key = make([]string, 0, len(keys))
	if hasSpan {
		w.key = append(w.key, "")
	}
	w.base = len(w.key)
	if err := w.walk(0, covered); err != nil {
		return bset{}, err
	}
	return rest, nil
}

// postingsCount is countFromPostings's walk down the key fields' value
// postings: key is the group key so far (the time bucket first under a
// span, then a value per field walked), base where the field values start.
type postingsCount struct {
	x       *segExec
	agg     *aggregator
	keys    []string // the aggregator's keys
	fkeys   []string // the field keys (keys without the span)
	hasSpan bool
	ts      []int64 // the segment's times, under a span
	key     []string
	base    int
}

// leaf counts the events of b under key (with their time buckets).
func (w *postingsCount) leaf(b bset) {
	x, agg, key, ts := w.x, w.agg, w.key, w.ts
	if !w.hasSpan {
		agg.addCount(key, int64(b.card(x.n)))
		return
	}
	counts := map[int64]int64{}
	if b.all {
		for _, t := range ts {
			counts[floorSpan(t, agg.span)]++
		}
	} else {
		it := b.b.Iterator()
		for it.HasNext() {
			counts[floorSpan(ts[it.Next()], agg.span)]++
		}
	}
	for t, c := range counts {
		key[0] = strconv.FormatInt(t, 10)
		agg.addCount(key, c)
	}
}

// walk counts the events of b by the values of key fields i on: the index
// from the segment, a field's values from its postings, each intersected
// with b before the next field; the last field's values are counted by
// lastField.
func (w *postingsCount) walk(i int, b bset) error {
	if i == len(w.fkeys) {
		w.leaf(b)
		return nil
	}
	if w.fkeys[i] == "index" {
		w.key = append(w.key, w.x.seg.Index())
		err := w.walk(i+1, b)
		w.key = w.key[:w.base+i]
		return err
	}
	if i == len(w.fkeys)-1 && !w.hasSpan {
		return w.lastField(i, b)
	}
	var werr error
	err := w.x.seg.FieldValues(w.fkeys[i], func(v string, vb *roaring.Bitmap) bool {
		nb := and(b, bset{b: vb})
		if nb.isEmpty() {
			return true
		}
		w.key = append(w.key, v)
		werr = w.walk(i+1, nb)
		w.key = w.key[:w.base+i]
		return werr == nil
	})
	if err == nil {
		err = werr
	}
	return err
}

// lastField counts the events of b by the values of the last key field
// (i, with no span after it): from the segment's value counts when it
// keeps them (for all events, or for b), else from the value postings. A
// single key's counts go to the aggregator as one sorted run.
func (w *postingsCount) lastField(i int, b bset) error {
	x, agg := w.x, w.agg
	var run []keyCount
	single := len(w.keys) == 1
	count := func(v string, c uint64) {
		if c == 0 {
			return
		}
		if single {
			run = append(run, keyCount{v, int64(c)})
			return
		}
		w.key = append(w.key, v)
		agg.addCount(w.key, int64(c))
		w.key = w.key[:w.base+i]
	}
	if fc, ok := x.seg.(FieldCounter); ok && b.all {
		err := fc.FieldValueCounts(w.fkeys[i], func(v string, c uint64) bool {
			count(v, c)
			return true
		})
		if single && err == nil {
			agg.addRun(run)
		}
		return err
	}
	if fc, ok := x.seg.(FieldCounterIn); ok && !b.all {
		done, err := fc.FieldValueCountsIn(w.fkeys[i], b.b, func(v string, c uint64) bool {
			count(v, c)
			return true
		})
		if done {
			if single && err == nil {
				agg.addRun(run)
			}
			return err
		}
	}
	var dense denseSet
	if !b.all {
		dense = newDenseSet(b.b, x.n)
	}
	err := x.seg.FieldValues(w.fkeys[i], func(v string, vb *roaring.Bitmap) bool {
		if b.all {
			count(v, vb.GetCardinality())
		} else {
			count(v, dense.countIn(vb))
		}
		return true
	})
	if single && err == nil {
		agg.addRun(run)
	}
	return err
}

// denseSet is a bitset of ordinals: counting a value's events in it costs
// one bit test per event of the value, whatever the size of the set.
type denseSet struct {
	words []uint64
	buf   []uint32
}

func newDenseSet(b *roaring.Bitmap, n uint32) denseSet {
	d := denseSet{words: make([]uint64, (n+64)/64), buf: make([]uint32, 256)}
	it := b.ManyIterator()
	for {
		k := it.NextMany(d.buf)
		if k == 0 {
			break
		}
		for _, o := range d.buf[:k] {
			if int(o>>6) < len(d.words) {
				d.words[o>>6] |= 1 << (o & 63)
			}
		}
	}
	return d
}

func (d *denseSet) countIn(vb *roaring.Bitmap) uint64 {
	var c uint64
	it := vb.ManyIterator()
	for {
		k := it.NextMany(d.buf)
		if k == 0 {
			return c
		}
		for _, o := range d.buf[:k] {
			if int(o>>6) < len(d.words) {
				c += d.words[o>>6] >> (o & 63) & 1
			}
		}
	}
}

// sortPartials orders partials by bucket id so merges are deterministic.
func sortPartials(parts []*Partial) {
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].Bucket < parts[j].Bucket })
}
