package store

import (
	"bytes"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/quarry-dev/quarry/query"
)

// termTable maps keys to posting lists while a bucket is hot: an open
// addressing hash table over an append-only arena of keys (COSTS.md lever
// 3), so a term costs its bytes plus ~30 bytes, not a Go map entry and a
// string header. A key's first event is kept inline, so the ~88 % of terms
// that occur once cost no postings slice; later events go to a slice of
// their own. Ordinals are appended in ascending order, so every list is
// sorted and a reader can take the prefix below a snapshot's length.
type termTable struct {
	slots []uint64 // 0 empty, else hash32<<32 | id+1
	n     int
	arena []byte
	off   []uint32 // key i is arena[off[i]:off[i+1]]
	meta  []termMeta
	lists []chunkList
	pool  *postingPool
}

// postingPool holds the second and later ordinals of every list of a hot
// index in chunks (4, 8, 16, 32, then 64 entries, the first entry linking to
// the next chunk) carved from 64 Ki-entry slabs. It holds no pointers but the
// slabs', so the garbage collector does not walk half a million slices, and
// a list wastes at most part of its last chunk instead of an append's
// doubling.
type postingPool struct {
	slabs [][]uint32
	used  int // entries used in the last slab
}

const (
	slabBits     = 16
	slabEntries  = 1 << slabBits
	firstChunk   = 4
	maxChunkSize = 64
)

// termMeta is what a term's update touches, in one cache line's worth.
type termMeta struct {
	first uint32 // first ordinal
	last  uint32 // last ordinal added (per-event dedupe)
	more  int32  // index into lists, -1 for a singleton
}

type chunkList struct {
	head, tail uint32 // chunk positions in the pool
	used, size uint16 // entries used in the tail chunk (link included), its size
}

func (p *postingPool) alloc(n int) uint32 {
	if len(p.slabs) == 0 || p.used+n > slabEntries {
		p.slabs = append(p.slabs, make([]uint32, slabEntries))
		p.used = 0
	}
	pos := uint32(len(p.slabs)-1)<<slabBits | uint32(p.used)
	p.used += n
	return pos
}

func (p *postingPool) at(pos uint32) *uint32 {
	return &p.slabs[pos>>slabBits][pos&(slabEntries-1)]
}

var tableSeed = maphash.MakeSeed()

func newTermTable(hint int, pool *postingPool) *termTable {
	size := 16
	for size*3 < hint*4 {
		size *= 2
	}
	return &termTable{slots: make([]uint64, size), off: []uint32{0}, pool: pool}
}

func (t *termTable) key(id uint32) []byte { return t.arena[t.off[id]:t.off[id+1]] }

func (t *termTable) len() int { return t.n }

// find returns the key's id, or the slot where it would go.
func (t *termTable) find(key []byte) (id uint32, slot int, h32 uint32, ok bool) {
	h32 = uint32(maphash.Bytes(tableSeed, key))
	mask := len(t.slots) - 1
	i := int(h32) & mask
	for {
		v := t.slots[i]
		if v == 0 {
			return 0, i, h32, false
		}
		if uint32(v>>32) == h32 {
			id := uint32(v) - 1
			if bytes.Equal(t.key(id), key) {
				return id, i, h32, true
			}
		}
		i = (i + 1) & mask
	}
}

func (t *termTable) lookup(key []byte) (uint32, bool) {
	id, _, _, ok := t.find(key)
	return id, ok
}

func (t *termTable) grow() {
	old := t.slots
	t.slots = make([]uint64, len(old)*2)
	mask := len(t.slots) - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := int(uint32(v>>32)) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = v
	}
}

// insert adds a new key at slot (from find) and returns its id.
func (t *termTable) insert(key []byte, slot int, h32 uint32, ord uint32) uint32 {
	id := uint32(t.n)
	t.n++
	t.arena = append(t.arena, key...)
	t.off = append(t.off, uint32(len(t.arena)))
	t.meta = append(t.meta, termMeta{first: ord, last: ord, more: -1})
	t.slots[slot] = uint64(h32)<<32 | uint64(id+1)
	if t.n*4 >= len(t.slots)*3 {
		t.grow()
	}
	return id
}

func (t *termTable) add(key []byte, ord uint32) {
	id, slot, h32, ok := t.find(key)
	if !ok {
		t.insert(key, slot, h32, ord)
		return
	}
	t.addID(id, ord)
}

func (t *termTable) addID(id uint32, ord uint32) {
	tm := &t.meta[id]
	if tm.last == ord {
		return
	}
	tm.last = ord
	m := tm.more
	if m < 0 {
		m = int32(len(t.lists))
		tm.more = m
		c := t.pool.alloc(firstChunk)
		t.lists = append(t.lists, chunkList{head: c, tail: c, used: 1, size: firstChunk})
	}
	l := &t.lists[m]
	if l.used == l.size {
		size := min(l.size*2, maxChunkSize)
		c := t.pool.alloc(int(size))
		*t.pool.at(l.tail) = c + 1
		l.tail, l.used, l.size = c, 1, size
	}
	*t.pool.at(l.tail + uint32(l.used)) = ord
	l.used++
}

// postings appends the key's events below n to dst.
func (t *termTable) postings(id uint32, n uint32, dst []uint32) []uint32 {
	tm := t.meta[id]
	if tm.first >= n {
		return dst
	}
	dst = append(dst, tm.first)
	m := tm.more
	if m < 0 {
		return dst
	}
	l := t.lists[m]
	pos, size := l.head, uint16(firstChunk)
	for {
		used := size
		if pos == l.tail {
			used = l.used
		}
		slab := t.pool.slabs[pos>>slabBits]
		off := pos & (slabEntries - 1)
		chunk := slab[off+1 : off+uint32(used)]
		if len(chunk) > 0 && chunk[len(chunk)-1] < n {
			dst = append(dst, chunk...)
		} else {
			for _, o := range chunk {
				if o >= n {
					return dst
				}
				dst = append(dst, o)
			}
		}
		if pos == l.tail {
			return dst
		}
		pos = slab[off] - 1
		size = min(size*2, maxChunkSize)
	}
}

// sortedTerm is one key of a termTable in sorted order, carrying what
// serialisation needs so that it reads the table's arrays sequentially.
type sortedTerm struct {
	pfx   uint64 // the key's first 8 bytes, big-endian, zero-padded
	id    uint32
	first uint32
	more  int32
}

// sorted returns the keys in ascending byte order. Keys are compared by
// their first 8 bytes as one integer first, so most comparisons touch no
// key bytes.
func (t *termTable) sorted() []sortedTerm {
	es := make([]sortedTerm, t.n)
	for i := range es {
		k := t.arena[t.off[i]:t.off[i+1]]
		var p uint64
		for j := 0; j < 8; j++ {
			p <<= 8
			if j < len(k) {
				p |= uint64(k[j])
			}
		}
		es[i] = sortedTerm{pfx: p, id: uint32(i), first: t.meta[i].first, more: t.meta[i].more}
	}
	radixSortTerms(es)
	// Keys sharing their first 8 bytes are ordered by their whole bytes.
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].pfx == es[i].pfx {
			j++
		}
		if j-i > 1 {
			run := es[i:j]
			slices.SortFunc(run, func(a, b sortedTerm) int { return bytes.Compare(t.key(a.id), t.key(b.id)) })
		}
		i = j
	}
	return es
}

// radixSortTerms sorts by pfx: an LSD radix sort on 16-bit digits, several
// times faster than a comparison sort on the ~500k keys of a bucket.
func radixSortTerms(es []sortedTerm) {
	if len(es) < 2 {
		return
	}
	tmp := make([]sortedTerm, len(es))
	count := make([]int, 1<<16)
	src, dst := es, tmp
	for shift := uint(0); shift < 64; shift += 16 {
		clear(count)
		for i := range src {
			count[(src[i].pfx>>shift)&0xffff]++
		}
		if count[(src[0].pfx>>shift)&0xffff] == len(src) {
			continue // every key has this digit
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for i := range src {
			d := (src[i].pfx >> shift) & 0xffff
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &es[0] {
		copy(es, src)
	}
}

// postingsOf is postings for a sortedTerm of a frozen table (every ordinal
// below n).
func (t *termTable) postingsOf(e *sortedTerm, n uint32, dst []uint32) []uint32 {
	if e.more < 0 {
		if e.first >= n {
			return dst
		}
		return append(dst, e.first)
	}
	return t.postings(e.id, n, dst)
}

// fieldTable is a termTable for one indexed field; values are case-sensitive.
type fieldTable struct {
	*termTable
	lastVal []byte
	lastID  uint32
	hasLast bool

	// The column (columns.go): per event, 1 + the table id of its first
	// value, 0 when it has none; further values of multivalue events.
	col      []uint32
	colMulti map[uint32][]uint32
	colLast  uint32 // 1 + the last ordinal given a value
}

// addValue adds the value to the postings and returns its table id.
func (f *fieldTable) addValue(v []byte, ord uint32) uint32 {
	if f.hasLast && bytes.Equal(v, f.lastVal) {
		f.addID(f.lastID, ord) // same value as the previous event: no map lookup
		return f.lastID
	}
	id, slot, h32, ok := f.find(v)
	if !ok {
		id = f.insert(v, slot, h32, ord)
	} else {
		f.addID(id, ord)
	}
	f.lastID = id
	f.lastVal = append(f.lastVal[:0], v...)
	f.hasLast = true
	return id
}

// hotIndex is the in-memory index of a hot searchable bucket. One writer
// (the store's indexer) adds events; readers take snapshots. It is bounded
// by the bucket's roll limits: a bucket that reaches max_hot_bytes rolls and
// its hotIndex is serialised and dropped.
type hotIndex struct {
	mu     sync.RWMutex
	pool   *postingPool
	n      uint32
	times  []int64
	terms  *termTable
	fields map[string]*fieldTable
	meta   [3]*fieldTable // host, source, sourcetype
	tok    query.Tokenizer
}

var metaFields = [3]string{fieldHost, fieldSource, fieldSourcetype}

func newHotIndex() *hotIndex {
	pool := &postingPool{}
	return &hotIndex{pool: pool, terms: newTermTable(1<<14, pool), fields: make(map[string]*fieldTable)}
}

func (h *hotIndex) field(name []byte) *fieldTable {
	f, ok := h.fields[string(name)]
	if !ok {
		f = &fieldTable{termTable: newTermTable(64, h.pool)}
		h.fields[string(name)] = f
	}
	return f
}

// Names of the metadata fields with postings.
const (
	fieldHost       = "host"
	fieldSource     = "source"
	fieldSourcetype = "sourcetype"
)

// addLocked indexes one event as the next ordinal; the caller holds mu.
func (h *hotIndex) addLocked(e *decodedEvent) {
	ord := h.n
	h.times = append(h.times, e.Time)
	terms := h.terms
	h.tok.Tokenize(e.Raw, func(tok []byte) { terms.add(tok, ord) })
	for i, v := range [3][]byte{e.Host, e.Source, e.Sourcetype} {
		ft := h.meta[i]
		if ft == nil {
			ft = h.field([]byte(metaFields[i]))
			h.meta[i] = ft
		}
		ft.colAdd(ft.addValue(v, ord), ord)
	}
	for _, f := range e.Fields {
		if metaFieldName(f.Name) {
			// rows take host, source and sourcetype from the event, never
			// from an indexed field of that name: its postings and column
			// hold the event's own values only
			continue
		}
		ft := h.field(f.Name)
		id := ft.addValue(f.Value, ord)
		if !defaultFieldName(f.Name) {
			ft.colAdd(id, ord)
		}
	}
	h.n = ord + 1
}

// metaFieldName reports host, source and sourcetype.
func metaFieldName(name []byte) bool {
	switch string(name) {
	case "host", "source", "sourcetype":
		return true
	}
	return false
}

// snapshot returns the current length.
func (h *hotIndex) length() uint32 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.n
}

// fieldNames returns the indexed field names, sorted.
func (h *hotIndex) fieldNamesLocked() []string {
	names := make([]string, 0, len(h.fields))
	for n := range h.fields {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
