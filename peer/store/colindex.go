package store

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/quarry-dev/quarry/query"
)

// A warm copy written with index version 2 keeps no postings for a field
// that has a column: field=value, a field's values with their events or
// counts, and the events holding a field are all answered from the column,
// which holds the same values per event (disk: the field dictionary and
// its roaring lists were 17.7 B/event of the 5M bench set, the columns
// that replace them were already there).
//
// A colIndex inverts one decoded column: the values in ascending byte
// order and each value's event count, from one pass over the column. A
// value's events are built on demand: for a field of at most keptValues
// values (host, status, method) every value's bitmap at once, from one
// pass setting bits in dense words, and kept, so repeated filters cost
// what postings cost; for any other field the ordinals of every value
// grouped by a counting sort (once), each bitmap from its run.
type colIndex struct {
	values []string // ascending byte order
	counts []uint32 // events per value
	rank   []uint32 // per event: 1 + value index, 0 when missing
	rank8  []uint8  // the same, one byte an event (a query.Column's Small), rank nil
	multi  map[uint32][]uint32
	n      uint32

	bmMu   sync.Mutex
	bms    []*roaring.Bitmap // few values: the bitmaps built so far, by value (guarded by bmMu)
	allBms bool              // every value's bitmap is in bms (guarded by bmMu)
	once   sync.Once         // many values: ords grouped
	start  []uint32          // many values: value i's ordinals are ords[start[i]:start[i+1]]
	ords   []uint32
}

// keptValues is how many values a field may have for its bitmaps to be kept.
var keptValues = 1024 // a variable for tests

func (x *colIndex) count(i int) uint64 { return uint64(x.counts[i]) }

// rankAt is event o's rank (1 + value index, 0 when missing).
func (x *colIndex) rankAt(o uint32) uint32 {
	if x.rank8 != nil {
		return uint32(x.rank8[o])
	}
	return x.rank[o]
}

// rankLen is how many events have a rank.
func (x *colIndex) rankLen() int {
	if x.rank8 != nil {
		return len(x.rank8)
	}
	return len(x.rank)
}

// rankInt are the widths ranks are held in.
type rankInt interface{ ~uint8 | ~uint32 }

// setDense sets event o's bit in value r-1's words of dense for every
// ranked event (single-valued columns).
func setDense[R rankInt](rank []R, dense []uint64, words int) {
	for o, r := range rank {
		if r != 0 {
			dense[(int(r)-1)*words+o>>6] |= 1 << (o & 63)
		}
	}
}

// countRanks adds each ranked event to its value's count.
func countRanks[R rankInt](rank []R, counts []uint32) {
	for _, r := range rank {
		if r != 0 {
			counts[r-1]++
		}
	}
}

// groupRanks places each ranked event's ordinal at its value's next slot.
func groupRanks[R rankInt](rank []R, next, ords []uint32) {
	for o, r := range rank {
		if r != 0 {
			ords[next[r-1]] = uint32(o)
			next[r-1]++
		}
	}
}

// presentRanks sets the bit of every ranked event and counts them.
func presentRanks[R rankInt](rank []R, words []uint64) int {
	held := 0
	for o, r := range rank {
		if r != 0 {
			words[o>>6] |= 1 << (o & 63)
			held++
		}
	}
	return held
}

// eachValue calls fn for event o's values (1 + index), each once.
func (x *colIndex) eachValue(o uint32, r uint32, fn func(r uint32)) {
	fn(r)
	for j, m := range x.multi[o] {
		if m == r || slices.Contains(x.multi[o][:j], m) {
			continue
		}
		fn(m)
	}
}

// denseScratch holds build's dense words between builds.
var denseScratch sync.Pool

// buildDense builds the bitmap of every value bms lacks from one pass
// setting bits in dense words (few values; bmMu held).
func (x *colIndex) buildDense() {
	k := len(x.values)
	words := int(x.n+63) / 64
	// scratch words reused between builds (FromDense copies them): a
	// first walk over host's 50 values in 51 buckets of the 5M set spent
	// most of its time faulting in 32 MB of fresh words
	sp, _ := denseScratch.Get().(*[]uint64)
	if sp == nil {
		sp = new([]uint64)
	}
	defer denseScratch.Put(sp)
	if cap(*sp) < k*words {
		*sp = make([]uint64, k*words)
	}
	dense := (*sp)[:k*words]
	clear(dense)
	switch {
	case x.rank8 != nil:
		setDense(x.rank8, dense, words)
	case x.multi == nil:
		setDense(x.rank, dense, words)
	default:
		for o, r := range x.rank {
			if r != 0 {
				x.eachValue(uint32(o), r, func(r uint32) { dense[int(r-1)*words+o>>6] |= 1 << (o & 63) })
			}
		}
	}
	if x.bms == nil {
		x.bms = make([]*roaring.Bitmap, k)
	}
	for i := range x.bms {
		if x.bms[i] != nil {
			continue
		}
		b := roaring.FromDense(dense[i*words:(i+1)*words], true)
		b.RunOptimize()
		x.bms[i] = b
	}
}

// buildOne builds value i's bitmap alone, from one pass over the ranks
// (few values; bmMu held): `host=web-31` needs one value's events, not
// fifty bitmaps.
func (x *colIndex) buildOne(i int) *roaring.Bitmap {
	ords := make([]uint32, 0, x.counts[i])
	switch {
	case x.rank8 != nil:
		ords = ordsOf(x.rank8, uint8(i+1), ords)
	case x.multi == nil:
		ords = ordsOf(x.rank, uint32(i+1), ords)
	default:
		want := uint32(i + 1)
		for o, r := range x.rank {
			if r == 0 {
				continue
			}
			x.eachValue(uint32(o), r, func(r uint32) {
				if r == want {
					ords = append(ords, uint32(o))
				}
			})
		}
	}
	b := roaring.New()
	b.AddMany(ords)
	b.RunOptimize()
	return b
}

// ordsOf appends the ordinals whose rank is r.
func ordsOf[R rankInt](rank []R, r R, out []uint32) []uint32 {
	for o, x := range rank {
		if x == r {
			out = append(out, uint32(o))
		}
	}
	return out
}

// allBitmaps readies every value's bitmap (few values) before a walk
// over all of them: one dense pass instead of a pass per value.
func (x *colIndex) allBitmaps() {
	if len(x.values) > keptValues {
		return
	}
	x.bmMu.Lock()
	defer x.bmMu.Unlock()
	if !x.allBms {
		x.buildDense()
		x.allBms = true
	}
}

// buildGroups groups the ordinals of every value by a counting sort
// (many values).
func (x *colIndex) buildGroups() {
	k := len(x.values)
	x.start = make([]uint32, k+1)
	for i, c := range x.counts {
		x.start[i+1] = x.start[i] + c
	}
	next := slices.Clone(x.start[:k])
	x.ords = make([]uint32, x.start[k])
	switch {
	case x.rank8 != nil:
		groupRanks(x.rank8, next, x.ords)
	case x.multi == nil:
		groupRanks(x.rank, next, x.ords)
	default:
		for o, r := range x.rank {
			if r != 0 {
				x.eachValue(uint32(o), r, func(r uint32) { x.ords[next[r-1]] = uint32(o); next[r-1]++ })
			}
		}
	}
}

// bitmap returns value i's events; the caller must not modify it. A
// field of at most keptValues values keeps each bitmap once built.
func (x *colIndex) bitmap(i int) *roaring.Bitmap {
	if len(x.values) <= keptValues {
		x.bmMu.Lock()
		defer x.bmMu.Unlock()
		if x.bms == nil {
			x.bms = make([]*roaring.Bitmap, len(x.values))
		}
		if x.bms[i] == nil {
			x.bms[i] = x.buildOne(i)
		}
		return x.bms[i]
	}
	x.once.Do(x.buildGroups)
	b := roaring.New()
	b.AddMany(x.ords[x.start[i]:x.start[i+1]])
	b.RunOptimize()
	return b
}

// find returns the index of value v, -1 when the field never holds it.
func (x *colIndex) find(v string) int {
	i := sort.SearchStrings(x.values, v)
	if i < len(x.values) && x.values[i] == v {
		return i
	}
	return -1
}

// buildColIndex inverts a decoded column of n events.
func buildColIndex(c *query.Column, n uint32) *colIndex {
	x := &colIndex{}
	var rank []uint32 // per event: 1 + value index, 0 when missing
	if c.Small != nil {
		x.values = c.Dict
		x.rank8 = c.Small[:min(len(c.Small), int(n))]
		x.n = n
		x.counts = make([]uint32, len(x.values))
		countRanks(x.rank8, x.counts)
		return x
	}
	if c.Ints == nil && c.Floats == nil {
		x.values = c.Dict
		rank = c.IDs
		if c.IDs16 != nil {
			rank = make([]uint32, len(c.IDs16))
			for o, id := range c.IDs16 {
				rank[o] = uint32(id)
			}
		}
	} else {
		// distinct numbers (by their bits: -0 and 0 are two texts) in
		// order of first use, then their texts in byte order; a small
		// direct-mapped table in front of the map serves a field of few
		// values (status) without hashing
		rank = make([]uint32, n)
		present := func(o uint32) bool { return c.Has == nil || c.Has[o>>6]>>(o&63)&1 != 0 }
		bits := func(o uint32) uint64 {
			if c.Floats != nil {
				return math.Float64bits(c.Floats[o])
			}
			return uint64(c.Ints[o])
		}
		ids := map[uint64]uint32{}
		var distinct []uint64
		var slot [64]struct {
			key uint64
			id  uint32 // 1 + provisional id, 0 empty
		}
		for o := uint32(0); o < n; o++ {
			if !present(o) {
				continue
			}
			v := bits(o)
			sl := &slot[(v^v>>17)&63]
			if sl.id != 0 && sl.key == v {
				rank[o] = sl.id
				continue
			}
			id, ok := ids[v]
			if !ok {
				id = uint32(len(distinct))
				ids[v] = id
				distinct = append(distinct, v)
			}
			sl.key, sl.id = v, id+1
			rank[o] = id + 1
		}
		texts := make([]string, len(distinct))
		for i, v := range distinct {
			if c.Floats != nil {
				texts[i] = strconv.FormatFloat(math.Float64frombits(v), 'f', -1, 64)
			} else {
				texts[i] = strconv.FormatInt(int64(v), 10)
			}
		}
		order := make([]int, len(texts))
		for i := range order {
			order[i] = i
		}
		sort.Slice(order, func(a, b int) bool { return texts[order[a]] < texts[order[b]] })
		byText := make([]uint32, len(texts)) // provisional id -> text rank
		x.values = make([]string, len(texts))
		for r, i := range order {
			x.values[r] = texts[i]
			byText[i] = uint32(r)
		}
		for o, r := range rank {
			if r != 0 {
				rank[o] = byText[r-1] + 1
			}
		}
	}
	if len(rank) > int(n) {
		rank = rank[:n]
	}
	x.rank, x.n = rank, n
	if len(c.Multi) > 0 {
		x.multi = c.Multi
	}
	x.counts = make([]uint32, len(x.values))
	if x.multi == nil {
		countRanks(rank, x.counts)
		return x
	}
	for o, r := range rank {
		if r != 0 {
			x.eachValue(uint32(o), r, func(r uint32) { x.counts[r-1]++ })
		}
	}
	return x
}

// colIdxBytes is the budget of inverted columns (and their kept bitmaps)
// held in memory; like decoded columns, a warm copy's never changes.
const colIdxBytes = 128 << 20

var colIdxCache = struct {
	mu    sync.Mutex
	m     map[colKey]*colIndex
	size  map[colKey]int64 // as counted when kept
	bytes int64
}{m: map[colKey]*colIndex{}, size: map[colKey]int64{}}

// colIndexBytes is what an inverted column may grow to: its ranks when
// they are its own (a numeric column's; a dictionary column's are the
// decoded column's IDs, counted in that cache), counts and value texts,
// and either its kept bitmaps (about 2 bytes an event at most for a field
// of few values) or its grouped ordinals (4 bytes an event).
func colIndexBytes(x *colIndex, own bool) int64 {
	n := int64(len(x.values)) * 28
	if own {
		n += int64(x.n) * 4
	}
	if len(x.values) <= keptValues {
		return n + int64(x.n)*2
	}
	return n + int64(x.n)*4
}

// index returns the inverted column of field, nil when the file has none.
func (r *colReader) index(field string) (*colIndex, error) {
	if r.cols[field] == nil {
		return nil, nil
	}
	key := colKey{r, field, -2}
	colIdxCache.mu.Lock()
	x := colIdxCache.m[key]
	colIdxCache.mu.Unlock()
	if x != nil {
		return x, nil
	}
	c, err := r.column(field)
	if err != nil {
		return nil, err
	}
	x = buildColIndex(c, r.events)
	size := colIndexBytes(x, c.Ints != nil || c.Floats != nil)
	colIdxCache.mu.Lock()
	defer colIdxCache.mu.Unlock()
	if old := colIdxCache.m[key]; old != nil {
		return old, nil
	}
	if size > colIdxBytes/4 || r.closed {
		return x, nil
	}
	for k := range colIdxCache.m {
		if colIdxCache.bytes+size <= colIdxBytes {
			break
		}
		colIdxCache.bytes -= colIdxCache.size[k]
		delete(colIdxCache.m, k)
		delete(colIdxCache.size, k)
	}
	colIdxCache.m[key] = x
	colIdxCache.size[key] = size
	colIdxCache.bytes += size
	return x, nil
}

// uncacheIndexes drops a closed reader's inverted columns.
func (r *colReader) uncacheIndexes() {
	colIdxCache.mu.Lock()
	defer colIdxCache.mu.Unlock()
	for k := range colIdxCache.m {
		if k.r == r {
			colIdxCache.bytes -= colIdxCache.size[k]
			delete(colIdxCache.m, k)
			delete(colIdxCache.size, k)
		}
	}
}

// fieldValue is the events whose field equals v exactly, nil when none.
func (r *colReader) fieldValue(field, v string) (*roaring.Bitmap, error) {
	m := r.cols[field]
	if m == nil {
		return nil, nil
	}
	if colNumeric(m.kind) {
		// Only a canonical number can be a numeric column's value.
		ok := false
		if colFloats(m.kind) {
			_, ok = query.CanonicalFloat(v)
		} else {
			_, ok = query.CanonicalInt(v)
		}
		if !ok {
			return nil, nil
		}
	}
	x, err := r.index(field)
	if err != nil || x == nil {
		return nil, err
	}
	i := x.find(v)
	if i < 0 || x.count(i) == 0 {
		return nil, nil
	}
	return x.bitmap(i), nil
}

func (r *colReader) fieldValues(field string, fn func(string, *roaring.Bitmap) bool) error {
	x, err := r.index(field)
	if err != nil || x == nil {
		return err
	}
	x.allBitmaps()
	for i, v := range x.values {
		if x.count(i) == 0 {
			continue
		}
		if !fn(v, x.bitmap(i)) {
			return nil
		}
	}
	return nil
}

func (r *colReader) fieldValueCounts(field string, fn func(string, uint64) bool) error {
	if m := r.cols[field]; m != nil {
		// version 3: from the dictionary, no block decoded
		vals, counts, err := r.dictCounts(m)
		if err != nil {
			return err
		}
		if vals != nil {
			for i, v := range vals {
				if !fn(v, counts[i]) {
					return nil
				}
			}
			return nil
		}
	}
	x, err := r.index(field)
	if err != nil || x == nil {
		return err
	}
	for i, v := range x.values {
		if c := x.count(i); c > 0 && !fn(v, c) {
			return nil
		}
	}
	return nil
}

// fieldEvents is the set of events holding the field.
func (r *colReader) fieldEvents(field string) (*roaring.Bitmap, error) {
	m := r.cols[field]
	if m == nil {
		return roaring.New(), nil
	}
	b := roaring.New()
	if colNumeric(m.kind) && !colSparse(m.kind) {
		b.AddRange(0, uint64(r.events))
		return b, nil
	}
	if m.kind == colDict {
		// single-valued: the events holding the field are as many as the
		// values' counts add up to (version 3: from the dictionary alone)
		vals, counts, err := r.dictCounts(m)
		if err != nil {
			return nil, err
		}
		if vals != nil {
			sum := uint64(0)
			for _, c := range counts {
				sum += c
			}
			if sum == uint64(r.events) {
				b.AddRange(0, uint64(r.events))
				return b, nil
			}
		}
	}
	x, err := r.index(field)
	if err != nil {
		return nil, err
	}
	words := make([]uint64, (r.events+63)/64)
	var held int
	if x.rank8 != nil {
		held = presentRanks(x.rank8, words)
	} else {
		held = presentRanks(x.rank, words)
	}
	if held == int(r.events) {
		b.AddRange(0, uint64(r.events))
		return b, nil
	}
	return roaring.FromDense(words, false), nil
}

// fieldValueCountsIn counts the events of set holding each value, in one
// pass over set.
func (r *colReader) fieldValueCountsIn(field string, set *roaring.Bitmap, fn func(string, uint64) bool) error {
	x, err := r.index(field)
	if err != nil || x == nil {
		return err
	}
	counts := make([]uint32, len(x.values))
	buf := make([]uint32, 256)
	it := set.ManyIterator()
	for {
		k := it.NextMany(buf)
		if k == 0 {
			break
		}
		for _, o := range buf[:k] {
			if o >= uint32(x.rankLen()) {
				continue
			}
			rk := x.rankAt(o)
			if rk == 0 {
				continue
			}
			if x.multi == nil {
				counts[rk-1]++
				continue
			}
			x.eachValue(o, rk, func(rk uint32) { counts[rk-1]++ })
		}
	}
	for i, c := range counts {
		if c > 0 && !fn(x.values[i], uint64(c)) {
			return nil
		}
	}
	return nil
}
