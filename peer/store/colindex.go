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
// order, and the ordinals of each value grouped in one array (a counting
// sort, O(events)). Bitmaps are built from it on demand; for a field of few
// values (host, status, method) they are kept, so repeated filters cost
// what postings cost.
type colIndex struct {
	values []string // ascending byte order
	start  []uint32 // value i's ordinals are ords[start[i]:start[i+1]]
	ords   []uint32 // ascending within each value

	mu  sync.Mutex
	bms []*roaring.Bitmap // kept bitmaps, len(values) when kept
}

// keptValues is how many values a field may have for its bitmaps to be kept.
const keptValues = 1024

func (x *colIndex) count(i int) uint64 { return uint64(x.start[i+1] - x.start[i]) }

// bitmap returns value i's events; the caller must not modify it.
func (x *colIndex) bitmap(i int) *roaring.Bitmap {
	if x.bms != nil {
		x.mu.Lock()
		b := x.bms[i]
		x.mu.Unlock()
		if b != nil {
			return b
		}
	}
	b := roaring.New()
	b.AddMany(x.ords[x.start[i]:x.start[i+1]])
	b.RunOptimize()
	if x.bms != nil {
		x.mu.Lock()
		if x.bms[i] == nil {
			x.bms[i] = b
		} else {
			b = x.bms[i]
		}
		x.mu.Unlock()
	}
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
	if c.Ints == nil && c.Floats == nil {
		x.values = c.Dict
		rank = c.IDs
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
	k := len(x.values)
	x.start = make([]uint32, k+2)
	// counts (shifted by two so the prefix sum leaves each value's start)
	multi := len(c.Multi) > 0
	each := func(fn func(o uint32, r uint32)) {
		for o := uint32(0); o < n; o++ {
			r := uint32(0)
			if o < uint32(len(rank)) {
				r = rank[o]
			}
			if r == 0 {
				continue
			}
			fn(o, r)
			if multi {
				if more := c.Multi[o]; more != nil {
					for j, m := range more {
						// an event counts once per value
						if m == r || slices.Contains(more[:j], m) {
							continue
						}
						fn(o, m)
					}
				}
			}
		}
	}
	each(func(o, r uint32) {
		x.start[r+1]++
	})
	for i := 1; i < len(x.start); i++ {
		x.start[i] += x.start[i-1]
	}
	x.ords = make([]uint32, x.start[k+1])
	each(func(o, r uint32) {
		x.ords[x.start[r]] = o
		x.start[r]++
	})
	x.start = x.start[:k+1]
	if k <= keptValues {
		x.bms = make([]*roaring.Bitmap, k)
	}
	return x
}

// colIdxBytes is the budget of inverted columns (and their kept bitmaps)
// held in memory; like decoded columns, a warm copy's never changes.
const colIdxBytes = 128 << 20

var colIdxCache = struct {
	mu    sync.Mutex
	m     map[colKey]*colIndex
	bytes int64
}{m: map[colKey]*colIndex{}}

func colIndexBytes(x *colIndex) int64 {
	n := int64(len(x.ords))*4 + int64(len(x.start))*4
	// a kept bitmap costs about what its ordinals do
	if x.bms != nil {
		n += int64(len(x.ords)) * 2
	}
	return n + int64(len(x.values))*16
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
	size := colIndexBytes(x)
	colIdxCache.mu.Lock()
	defer colIdxCache.mu.Unlock()
	if old := colIdxCache.m[key]; old != nil {
		return old, nil
	}
	if size > colIdxBytes/4 || r.closed {
		return x, nil
	}
	for k, old := range colIdxCache.m {
		if colIdxCache.bytes+size <= colIdxBytes {
			break
		}
		colIdxCache.bytes -= colIndexBytes(old)
		delete(colIdxCache.m, k)
	}
	colIdxCache.m[key] = x
	colIdxCache.bytes += size
	return x, nil
}

// uncacheIndexes drops a closed reader's inverted columns.
func (r *colReader) uncacheIndexes() {
	colIdxCache.mu.Lock()
	defer colIdxCache.mu.Unlock()
	for k, x := range colIdxCache.m {
		if k.r == r {
			colIdxCache.bytes -= colIndexBytes(x)
			delete(colIdxCache.m, k)
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
	c, err := r.column(field)
	if err != nil {
		return nil, err
	}
	var buf []uint32
	for o := uint32(0); o < r.events; o++ {
		if c.Present(o) {
			buf = append(buf, o)
		}
	}
	b.AddMany(buf)
	return b, nil
}
