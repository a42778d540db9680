package query

// The fast aggregation: stats, timechart, top and rare straight from
// column dictionary ids (fastAgg), handing the aggregator the states a
// row-by-row pass would build.

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
)

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
