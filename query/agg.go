package query

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// aggState is the mergeable partial state of one aggregate in one group.
// Every aggregate is exact: dc and values keep the set of distinct values,
// perc keeps every numeric value, so merging partials from any number of
// buckets gives the same answer as one pass over all events.
type aggState struct {
	N      int64    `json:"n,omitempty"`  // count / count(field)
	Sum    float64  `json:"s,omitempty"`  // sum, avg
	NumN   int64    `json:"nn,omitempty"` // numeric values seen (avg)
	HasNum bool     `json:"hn,omitempty"`
	NumMin float64  `json:"mn,omitempty"`
	NumMax float64  `json:"mx,omitempty"`
	HasStr bool     `json:"hs,omitempty"`
	StrMin string   `json:"sn,omitempty"`
	StrMax string   `json:"sx,omitempty"`
	Set    []string `json:"set,omitempty"` // dc, values: sorted distinct values (wire form)
	// SB is Set front-coded (frontCodeSet), for a head that asked
	// (api.SearchRequest.SetsBinary); never both.
	SB []byte `json:"sb,omitempty"`
	// DN is dc's count sent instead of its set, PV perc's value instead
	// of its numbers, for a head that asked (Plan.SetSolePartial,
	// sole.go); never beside a set or numbers.
	DN   int64     `json:"dn,omitempty"`
	PV   *float64  `json:"pv,omitempty"`
	Nums []float64 `json:"nums,omitempty"`
	// NB is Nums packed (packNums), for a head that asked
	// (api.SearchRequest.NumsBinary); never both.
	NB []byte `json:"nb,omitempty"`
	// SBX and NBX name SB and NB in the blobs after the JSON
	// (wireblobs.go), for a head that asked (Plan.SetBlobs).
	SBX  *blobRef `json:"sbx,omitempty"`
	NBX  *blobRef `json:"nbx,omitempty"`
	HasE bool     `json:"he,omitempty"`
	ET   int64    `json:"et,omitempty"`
	EV   string   `json:"ev,omitempty"`
	HasL bool     `json:"hl,omitempty"`
	LT   int64    `json:"lt,omitempty"`
	LV   string   `json:"lv,omitempty"`

	set map[string]struct{}
	// runs are further distinct values as ascending runs (a bucket's
	// dictionary ids in rank order, a decoded wire Set): the state's set is
	// set ∪ every run, folded by a merge of sorted lists (fold) only when
	// it is read, so merging buckets' dc/values never hashes their values.
	runs [][]string
	// numRuns are further perc values (merged partials' Nums), joined to
	// Nums once when read (nums): appending each bucket's values to one
	// growing slice copied and cleared most of them several times.
	numRuns [][]float64
	// cut: final shortened this state's values() to MaxValues.
	cut bool
}

// nums is every perc value of the state, its pending runs joined.
func (s *aggState) nums() []float64 {
	if len(s.numRuns) > 0 {
		total := len(s.Nums)
		for _, r := range s.numRuns {
			total += len(r)
		}
		out := make([]float64, 0, total)
		out = append(out, s.Nums...)
		for _, r := range s.numRuns {
			out = append(out, r...)
		}
		s.Nums, s.numRuns = out, nil
	}
	return s.Nums
}

// rowValue is one field's value in the row being added, looked up once,
// and its number parsed once, for every aggregate of the row that reads
// that field (`stats avg(ms) max(ms) count(ms)` reads ms once, parses it
// once). It remembers the last field asked for only.
type rowValue struct {
	field  string
	v      any
	looked bool
	single bool // v is one value, not a multivalue
	parsed bool
	num    float64
	isNum  bool
}

// get is field's value in r (_time from r.T when the row has no field).
func (m *rowValue) get(field string, r *Row) any {
	if !m.looked || m.field != field {
		*m = rowValue{field: field, looked: true, v: r.F[field]}
		if m.v == nil && field == "_time" {
			m.v = Time(r.T)
		}
		_, multi := m.v.([]string)
		m.single = !multi
	}
	return m.v
}

// parse is parseNum(x) for a value x of the field get returned; a single
// value is parsed once.
func (m *rowValue) parse(x string) (float64, bool) {
	if !m.single {
		return parseNum(x)
	}
	if !m.parsed {
		m.num, m.isNum = parseNum(x)
		m.parsed = true
	}
	return m.num, m.isNum
}

func (s *aggState) add(spec *AggSpec, r *Row) {
	var m rowValue
	s.addFrom(spec, r, &m)
}

// addFrom is add with the row's value of the spec's field through m.
func (s *aggState) addFrom(spec *AggSpec, r *Row, m *rowValue) {
	if spec.Func == "count" && spec.Field == "" {
		s.N++
		return
	}
	v := m.get(spec.Field, r)
	if v == nil {
		return
	}
	var one [1]string // a single value's list, on the stack
	switch spec.Func {
	case "count":
		s.N++
	case "sum", "avg":
		for _, x := range valuesIn(v, &one) {
			if f, ok := m.parse(x); ok {
				s.Sum += f
				s.NumN++
			}
		}
	case "min", "max":
		for _, x := range valuesIn(v, &one) {
			if f, ok := m.parse(x); ok {
				if !s.HasNum {
					s.NumMin, s.NumMax, s.HasNum = f, f, true
				} else {
					s.NumMin = math.Min(s.NumMin, f)
					s.NumMax = math.Max(s.NumMax, f)
				}
				continue
			}
			// a kept string is copied: the row's may live in a buffer
			// reused for the next event (borrowsRaw)
			if !s.HasStr {
				x = strings.Clone(x)
				s.StrMin, s.StrMax, s.HasStr = x, x, true
			} else {
				if x < s.StrMin {
					s.StrMin = strings.Clone(x)
				}
				if x > s.StrMax {
					s.StrMax = strings.Clone(x)
				}
			}
		}
	case "dc", "values":
		if s.set == nil {
			s.set = map[string]struct{}{}
		}
		for _, x := range valuesIn(v, &one) {
			s.set[x] = struct{}{}
		}
	case "perc":
		for _, x := range valuesIn(v, &one) {
			if f, ok := m.parse(x); ok {
				s.Nums = append(s.Nums, f)
			}
		}
	case "earliest", "latest":
		x, _ := str(v)
		s.observeTime(r.T, x)
	}
}

func (s *aggState) observeTime(t int64, x string) {
	if !s.HasE || t < s.ET || t == s.ET && x < s.EV {
		s.HasE, s.ET, s.EV = true, t, x
	}
	if !s.HasL || t > s.LT || t == s.LT && x < s.LV {
		s.HasL, s.LT, s.LV = true, t, x
	}
}

// merge folds another partial state of the same aggregate into s; o is
// spent (its distinct-value set may now be s's).
func (s *aggState) merge(o *aggState) {
	s.N += o.N
	s.Sum += o.Sum
	s.NumN += o.NumN
	if o.HasNum {
		if !s.HasNum {
			s.NumMin, s.NumMax, s.HasNum = o.NumMin, o.NumMax, true
		} else {
			s.NumMin = math.Min(s.NumMin, o.NumMin)
			s.NumMax = math.Max(s.NumMax, o.NumMax)
		}
	}
	if o.HasStr {
		if !s.HasStr {
			s.StrMin, s.StrMax, s.HasStr = o.StrMin, o.StrMax, true
		} else {
			if o.StrMin < s.StrMin {
				s.StrMin = o.StrMin
			}
			if o.StrMax > s.StrMax {
				s.StrMax = o.StrMax
			}
		}
	}
	if len(o.set) > 0 {
		// o is spent by a merge: its set is taken whole when it is the
		// larger one, and the smaller is added to it.
		if len(o.set) > len(s.set) {
			s.set, o.set = o.set, s.set
		}
		if s.set == nil {
			s.set = map[string]struct{}{}
		}
		for k := range o.set {
			s.set[k] = struct{}{}
		}
	}
	for _, r := range o.runs {
		if len(r) > 0 {
			s.runs = append(s.runs, r)
		}
	}
	if len(o.Set) > 0 {
		// the wire form is sorted and distinct; a partial that is not (of
		// another build, or damaged) is made so rather than trusted
		r := o.Set
		if !ascendingDistinct(r) {
			r = slices.Clone(r)
			slices.Sort(r)
			r = slices.Compact(r)
		}
		s.runs = append(s.runs, r)
	}
	o.runs = nil
	switch {
	case len(o.Nums) == 0:
	case len(s.Nums) == 0 && len(s.numRuns) == 0:
		s.Nums = o.Nums // o is spent
	default:
		s.numRuns = append(s.numRuns, o.Nums)
	}
	s.numRuns = append(s.numRuns, o.numRuns...)
	o.Nums, o.numRuns = nil, nil
	if o.HasE {
		s.observeTime(o.ET, o.EV)
	}
	if o.HasL {
		if !s.HasL || o.LT > s.LT || o.LT == s.LT && o.LV < s.LV {
			s.HasL, s.LT, s.LV = true, o.LT, o.LV
		}
	}
}

// wire fills the exported set/nums fields in a canonical order.
func (s *aggState) wire() {
	if d := s.distinct(); len(d) > 0 {
		s.Set = append(s.Set[:0], d...)
	}
	sort.Float64s(s.nums())
}

// distinct folds set and runs into one ascending run of distinct values
// and returns it (shared with s: callers copy before changing it).
func (s *aggState) distinct() []string {
	runs := s.runs
	if len(s.set) > 0 {
		keys := make([]string, 0, len(s.set))
		for k := range s.set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		runs = append(runs, keys)
		s.set = nil
	}
	// pairwise, so each value is compared about log2(runs) times; the
	// pairs of a level are merged on up to GOMAXPROCS goroutines. A level
	// writes its runs into one of two arenas by turns (the level before
	// last is consumed by then): a slice per merge made `* | stats
	// dc(path)` (51 runs, 1.2M values) take ~80 MB of fresh memory a
	// search, two arenas take ~37 MB.
	var arenas [2][]string
	var last []string
	for level := 0; len(runs) > 1; level++ {
		total := 0
		for _, r := range runs {
			total += len(r)
		}
		if cap(arenas[level%2]) < total {
			arenas[level%2] = make([]string, total)
		}
		ar := arenas[level%2][:cap(arenas[level%2])]
		last = ar
		next := make([][]string, (len(runs)+1)/2)
		var wg sync.WaitGroup
		sem := make(chan struct{}, runtime.GOMAXPROCS(0))
		off := 0
		for i := 0; i < len(runs); i += 2 {
			var b []string // an odd run out is copied: its arena is written two levels on
			if i+1 < len(runs) {
				b = runs[i+1]
			}
			n := len(runs[i]) + len(b)
			dst := ar[off : off : off+n]
			off += n
			if n < 4096 {
				next[i/2] = unionSorted(dst, runs[i], b)
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func(i int) {
				defer wg.Done()
				next[i/2] = unionSorted(dst, runs[i], b)
				<-sem
			}(i)
		}
		wg.Wait()
		runs = next
	}
	if len(runs) == 1 && last != nil {
		// the result is the last arena's head: what else it holds is
		// dropped, so no stale value keeps a dictionary alive
		clear(last[len(runs[0]):])
	}
	s.runs = runs
	if len(runs) == 0 {
		return nil
	}
	return runs[0]
}

func ascendingDistinct(r []string) bool {
	for i := 1; i < len(r); i++ {
		if r[i-1] >= r[i] {
			return false
		}
	}
	return true
}

// unionSorted merges two ascending runs of distinct values into out (empty,
// with room for both: two buckets' runs share few values, and growing
// from the longer one copied the union once more, 40 % of the CPU of
// `* | stats dc(path)` after a restart).
func unionSorted(out, a, b []string) []string {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := strings.Compare(a[i], b[j]); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

func (s *aggState) final(spec *AggSpec) any {
	switch spec.Func {
	case "count":
		return s.N
	case "sum":
		if s.NumN == 0 {
			return nil
		}
		return s.Sum
	case "avg":
		if s.NumN == 0 {
			return nil
		}
		return s.Sum / float64(s.NumN)
	case "min", "max":
		if s.HasNum {
			if spec.Func == "min" {
				return s.NumMin
			}
			return s.NumMax
		}
		if s.HasStr {
			if spec.Func == "min" {
				return s.StrMin
			}
			return s.StrMax
		}
		return nil
	case "dc":
		if s.DN > 0 {
			return s.DN
		}
		if len(s.runs) == 0 {
			return int64(len(s.set))
		}
		return int64(len(s.distinct()))
	case "values":
		d := s.distinct()
		if len(d) == 0 {
			return nil
		}
		if len(d) > MaxValues {
			s.cut = true
			d = d[:MaxValues]
		}
		return append([]string(nil), d...)
	case "perc":
		if s.PV != nil {
			return *s.PV
		}
		nums := s.nums()
		if len(nums) == 0 {
			return nil
		}
		// Nearest rank: the smallest value with at least p% of values at or below it.
		k := int(math.Ceil(spec.Perc/100*float64(len(nums)))) - 1
		k = max(0, min(k, len(nums)-1))
		return nthFloat(nums, k)
	case "earliest":
		if !s.HasE {
			return nil
		}
		return s.EV
	case "latest":
		if !s.HasL {
			return nil
		}
		return s.LV
	}
	return nil
}

// group is one group of an aggregation.
type group struct {
	Key    []string    `json:"k"`
	States []*aggState `json:"s"`
	jk     string
}

// aggregator groups rows and keeps partial states. Its key fields are
// ordinary fields, except "\x00span" (timechart's time bucket).
type aggregator struct {
	specs  []AggSpec
	keys   []string
	span   int64
	nullBy bool // timechart: a missing split field is the NULL series
	groups map[string]*group
	kbuf   []string
	// valuesCut: a finalize shortened some group's values() to MaxValues;
	// the search's summary says so (Plan.Warnings).
	valuesCut bool

	// countOnly aggregators (every aggregate a plain count) keep just a
	// count per joined key: postings answers add millions of groups.
	countOnly bool
	counts    map[string]int64
	// runs are sorted (key, count) lists straight from value postings of a
	// single-key count; merged without hashing when top/rare finalize.
	runs [][]keyCount
	// bounded are top partials that list only their largest counts
	// (topcounts.go); undecided: they did not decide the top
	// (Merge answers ErrCountsUndecided).
	bounded   []boundedRun
	undecided bool
	// soleUndecided: a final count or value met another part of its aggregate
	// (sole.go; Merge answers ErrSoleUndecided).
	soleUndecided bool
}

const spanKey = "\x00span"

func newAggregator(specs []AggSpec, keys []string, span int64, nullBy bool) *aggregator {
	a := &aggregator{specs: specs, keys: keys, span: span, nullBy: nullBy, groups: map[string]*group{}}
	a.countOnly = len(specs) > 0
	for _, s := range specs {
		if s.Func != "count" || s.Field != "" {
			a.countOnly = false
		}
	}
	if a.countOnly {
		a.counts = map[string]int64{}
	}
	return a
}

func (a *aggregator) jkOf(k []string) string {
	if len(k) == 1 {
		return k[0]
	}
	return joinKey(k)
}

func (a *aggregator) splitKey(jk string) []string {
	if len(a.keys) == 1 {
		return []string{jk}
	}
	if len(a.keys) == 0 {
		return nil
	}
	return strings.Split(jk, "\x00")
}

// materialize turns counts into groups (before a finalize that needs them).
func (a *aggregator) materialize() {
	if !a.countOnly {
		return
	}
	a.foldRuns()
	for jk, n := range a.counts {
		g := a.groupForJK(jk, a.splitKey(jk))
		for _, s := range g.States {
			s.N += n
		}
	}
	a.counts = map[string]int64{}
}

func joinKey(k []string) string { return strings.Join(k, "\x00") }

func (a *aggregator) groupFor(k []string) *group {
	return a.groupForJK(a.jkOf(k), k)
}

func (a *aggregator) groupForJK(jk string, k []string) *group {
	g := a.groups[jk]
	if g == nil {
		g = &group{Key: append([]string(nil), k...), States: make([]*aggState, len(a.specs)), jk: jk}
		for i := range g.States {
			g.States[i] = &aggState{}
		}
		a.groups[jk] = g
	}
	return g
}

func floorSpan(t, span int64) int64 {
	q := t / span
	if t%span != 0 && t < 0 {
		q--
	}
	return q * span
}

// add feeds one row: it lands in one group per combination of its key
// values (a multivalue key field expands); a row missing a key is dropped.
func (a *aggregator) add(r *Row) {
	a.kbuf = a.kbuf[:0]
	a.addFrom(r, 0)
}

func (a *aggregator) addFrom(r *Row, i int) {
	if i == len(a.keys) {
		if a.countOnly {
			a.counts[a.jkOf(a.kbuf)]++
			return
		}
		g := a.groupFor(a.kbuf)
		var m rowValue
		for j := range a.specs {
			g.States[j].addFrom(&a.specs[j], r, &m)
		}
		return
	}
	k := a.keys[i]
	if k == spanKey {
		a.kbuf = append(a.kbuf, strconv.FormatInt(floorSpan(r.T, a.span), 10))
		a.addFrom(r, i+1)
		a.kbuf = a.kbuf[:i]
		return
	}
	v := r.F[k]
	if v == nil && k == "_time" {
		v = Time(r.T)
	}
	vals := values(v)
	if len(vals) == 0 {
		if !a.nullBy {
			return
		}
		vals = []string{"NULL"}
	}
	seen := map[string]bool{}
	for _, x := range vals {
		if seen[x] {
			continue
		}
		seen[x] = true
		a.kbuf = append(a.kbuf, x)
		a.addFrom(r, i+1)
		a.kbuf = a.kbuf[:i]
	}
}

// addCount adds n events to a group whose aggregates are all plain count
// (the postings path).
func (a *aggregator) addCount(k []string, n int64) {
	if a.countOnly {
		a.counts[a.jkOf(k)] += n
		return
	}
	g := a.groupFor(k)
	for _, s := range g.States {
		s.N += n
	}
}

func (a *aggregator) mergeGroups(gs []group) {
	for i := range gs {
		if a.countOnly {
			if len(gs[i].States) > 0 && gs[i].States[0] != nil {
				a.counts[a.jkOf(gs[i].Key)] += gs[i].States[0].N
			}
			continue
		}
		g := a.groupFor(gs[i].Key)
		for j, s := range gs[i].States {
			if j < len(g.States) && s != nil {
				if !g.States[j].mergeSole(s) {
					a.soleUndecided = true
				}
				g.States[j].merge(s)
			}
		}
	}
}

// checkShape refuses a decoded partial whose groups or counts do not fit
// this aggregator (a key per by-field, a state per aggregate): a peer of
// another build, or a damaged or forged message, is an error for that
// bucket, never a search head that panics (FuzzMergePartial).
func (a *aggregator) checkShape(pt *Partial) error {
	if pt.agg != nil {
		return nil
	}
	for i := range pt.Groups {
		g := &pt.Groups[i]
		if len(g.Key) != len(a.keys) {
			return fmt.Errorf("a group of %d keys, the search groups by %d", len(g.Key), len(a.keys))
		}
		if len(g.States) != len(a.specs) {
			return fmt.Errorf("a group of %d aggregate states, the search has %d aggregates", len(g.States), len(a.specs))
		}
		for _, st := range g.States {
			if st == nil {
				return fmt.Errorf("a group with an empty aggregate state")
			}
		}
	}
	if c := pt.Counts; c != nil {
		if len(c.K) != len(c.N) {
			return fmt.Errorf("counts of %d keys with %d numbers", len(c.K), len(c.N))
		}
		for i, k := range c.K {
			if i > 0 && c.K[i-1] >= k {
				return fmt.Errorf("counts keys not in strictly ascending order at %d", i)
			}
			if len(a.keys) > 1 && strings.Count(k, "\x00") != len(a.keys)-1 {
				return fmt.Errorf("a counts key of %d parts, the search groups by %d", strings.Count(k, "\x00")+1, len(a.keys))
			}
		}
	}
	return nil
}

// wireCounts is a count-only aggregator's compact wire form, keys sorted.
func (a *aggregator) wireCounts() *countsWire {
	a.foldRuns()
	c := &countsWire{K: make([]string, 0, len(a.counts)), N: make([]int64, 0, len(a.counts))}
	for jk := range a.counts {
		c.K = append(c.K, jk)
	}
	sort.Strings(c.K)
	for _, jk := range c.K {
		c.N = append(c.N, a.counts[jk])
	}
	return c
}

// mergeCounts folds a count-only wire form in: as a sorted run when this
// aggregator is count-only too (top/rare merge runs without hashing), else
// into groups.
func (a *aggregator) mergeCounts(c *countsWire) {
	if a.countOnly {
		run := make([]keyCount, len(c.K))
		for i, k := range c.K {
			run[i] = keyCount{k: k, n: c.N[i]}
		}
		if c.O > 0 { // bounded (Plan.checkBounded let it in)
			a.bounded = append(a.bounded, boundedRun{run: run, bound: c.O, total: c.T})
			return
		}
		a.addRun(run)
		return
	}
	for i, jk := range c.K {
		g := a.groupForJK(jk, a.splitKey(jk))
		if len(g.States) > 0 {
			g.States[0].N += c.N[i]
		}
	}
}

// wireGroups lists the groups in key order with canonical states.
func (a *aggregator) wireGroups() []group {
	a.materialize()
	out := make([]group, 0, len(a.groups))
	for _, g := range a.groups {
		for _, s := range g.States {
			s.wire()
		}
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].jk < out[j].jk })
	return out
}

// mergeAggregator folds another aggregator of the same plan into a.
func (a *aggregator) mergeAggregator(o *aggregator) {
	if a.countOnly && o.countOnly {
		a.runs = append(a.runs, o.runs...)
		a.bounded = append(a.bounded, o.bounded...)
		o.runs, o.bounded = nil, nil
		if len(a.counts) == 0 {
			a.counts, o.counts = o.counts, map[string]int64{}
			return
		}
		for k, n := range o.counts {
			a.counts[k] += n
		}
		return
	}
	a.materialize()
	o.materialize()
	if len(a.groups) == 0 {
		a.groups, o.groups = o.groups, map[string]*group{}
		return
	}
	for jk, g := range o.groups {
		mine := a.groups[jk]
		if mine == nil {
			a.groups[jk] = g
			continue
		}
		for j, s := range g.States {
			mine.States[j].merge(s)
		}
	}
}

func compareKeys(a, b []string) int {
	for i := range a {
		if i >= len(b) {
			return 1
		}
		if c := compareValues(a[i], b[i]); c != 0 {
			return c
		}
		if c := strings.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	if len(a) < len(b) {
		return -1
	}
	return 0
}

func (a *aggregator) sortedGroups() []*group {
	a.materialize()
	out := make([]*group, 0, len(a.groups))
	for _, g := range a.groups {
		out = append(out, g)
	}
	sortByKeys(out, func(g *group) []string { return g.Key })
	return out
}

// sortByKeys sorts items by compareKeys of their keys, parsing each key
// value as a number once instead of at every comparison (`stats count by
// clientip` over 4.3M groups spent 55 s in ParseFloat doing it per
// comparison).
func sortByKeys[T any](items []T, key func(T) []string) {
	type dk struct {
		keys []string
		nums []float64
		isN  []bool
		item T
	}
	ds := make([]dk, len(items))
	width := 0
	if len(items) > 0 {
		width = len(key(items[0]))
	}
	nums, isN := make([]float64, 0, len(items)*width), make([]bool, 0, len(items)*width)
	for i, it := range items {
		k := key(it)
		lo := len(nums)
		for _, v := range k {
			f, ok := parseNum(v)
			nums, isN = append(nums, f), append(isN, ok)
		}
		ds[i] = dk{keys: k, nums: nums[lo:len(nums):len(nums)], isN: isN[lo:len(isN):len(isN)], item: it}
	}
	slices.SortFunc(ds, func(x, y dk) int {
		for i := range x.keys {
			if i >= len(y.keys) {
				return 1
			}
			// compareValues on two strings, then bytewise (compareKeys)
			switch {
			case x.isN[i] && y.isN[i]:
				if x.nums[i] < y.nums[i] {
					return -1
				}
				if x.nums[i] > y.nums[i] {
					return 1
				}
			case x.isN[i]:
				return -1
			case y.isN[i]:
				return 1
			}
			if c := strings.Compare(x.keys[i], y.keys[i]); c != 0 {
				return c
			}
		}
		if len(x.keys) < len(y.keys) {
			return -1
		}
		return 0
	})
	for i := range ds {
		items[i] = ds[i].item
	}
}

// nthFloat returns the value a sort.Float64s of nums would put at index
// k, reordering nums: a selection (expected linear time) instead of a
// sort of every value — a percentile over 100k values spent most of its
// time sorting them. Values equal as numbers (0 and -0) are ordered by
// sign so the answer does not depend on the input order; NaN (never a
// parsed number) falls back to the sort.
func nthFloat(nums []float64, k int) float64 {
	if len(nums) <= 64 || slices.ContainsFunc(nums, math.IsNaN) {
		sort.Float64s(nums)
		return nums[k]
	}
	less := func(a, b float64) bool { return a < b || a == b && math.Signbit(a) && !math.Signbit(b) }
	lo, hi := 0, len(nums)-1
	for round := 0; hi > lo; round++ {
		if round == 64 {
			// pivots this bad are a pattern, not chance: sort the rest
			slices.SortFunc(nums[lo:hi+1], func(a, b float64) int {
				if less(a, b) {
					return -1
				}
				if less(b, a) {
					return 1
				}
				return 0
			})
			return nums[k]
		}
		if hi-lo < 16 {
			// insertion sort of the small remainder
			for i := lo + 1; i <= hi; i++ {
				for j := i; j > lo && less(nums[j], nums[j-1]); j-- {
					nums[j], nums[j-1] = nums[j-1], nums[j]
				}
			}
			return nums[k]
		}
		// median of three as the pivot, then a three-way partition
		// (values equal to the pivot are many in integer data)
		m := lo + (hi-lo)/2
		a, b, c := nums[lo], nums[m], nums[hi]
		p := c
		if less(a, b) != less(a, c) {
			p = a
		} else if less(b, a) != less(b, c) {
			p = b
		}
		lt, i, gt := lo, lo, hi
		for i <= gt {
			switch v := nums[i]; {
			case less(v, p):
				nums[lt], nums[i] = nums[i], nums[lt]
				lt++
				i++
			case less(p, v):
				nums[i], nums[gt] = nums[gt], nums[i]
				gt--
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt - 1
		case k > gt:
			lo = gt + 1
		default:
			return p
		}
	}
	return nums[k]
}
