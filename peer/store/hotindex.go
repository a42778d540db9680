package store

import (
	"bytes"
	"slices"
	"sort"
	"sync"

	"github.com/quarry-dev/quarry/query"
)

// termTable maps keys to posting lists while a bucket is hot. A key's first
// event is kept inline, so the ~88 % of terms that occur once cost no
// postings slice (COSTS.md lever 3); later events go to a slice of their own.
// Ordinals are appended in ascending order, so every list is sorted and a
// reader can take the prefix below a snapshot's length.
type termTable struct {
	ids   map[string]uint32
	first []uint32
	last  []uint32
	more  []int32
	lists [][]uint32
}

func newTermTable(hint int) *termTable {
	return &termTable{ids: make(map[string]uint32, hint)}
}

func (t *termTable) add(key []byte, ord uint32) {
	id, ok := t.ids[string(key)]
	if !ok {
		t.ids[string(key)] = uint32(len(t.first))
		t.first = append(t.first, ord)
		t.last = append(t.last, ord)
		t.more = append(t.more, -1)
		return
	}
	t.addID(id, ord)
}

func (t *termTable) addID(id uint32, ord uint32) {
	if t.last[id] == ord {
		return
	}
	t.last[id] = ord
	m := t.more[id]
	if m < 0 {
		m = int32(len(t.lists))
		t.more[id] = m
		t.lists = append(t.lists, make([]uint32, 0, 2))
	}
	t.lists[m] = append(t.lists[m], ord)
}

// postings appends the key's events below n to dst.
func (t *termTable) postings(id uint32, n uint32, dst []uint32) []uint32 {
	if t.first[id] >= n {
		return dst
	}
	dst = append(dst, t.first[id])
	if m := t.more[id]; m >= 0 {
		for _, o := range t.lists[m] {
			if o >= n {
				break
			}
			dst = append(dst, o)
		}
	}
	return dst
}

// sortedKeys returns the keys in ascending byte order.
func (t *termTable) sortedKeys() []string {
	keys := make([]string, 0, len(t.ids))
	for k := range t.ids {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fieldTable is a termTable for one indexed field; values are case-sensitive.
type fieldTable struct {
	*termTable
	lastVal []byte
	lastID  uint32
	hasLast bool
}

func (f *fieldTable) addValue(v []byte, ord uint32) {
	if f.hasLast && bytes.Equal(v, f.lastVal) {
		f.addID(f.lastID, ord) // same value as the previous event: no map lookup
		return
	}
	id, ok := f.ids[string(v)]
	if !ok {
		id = uint32(len(f.first))
		f.ids[string(v)] = id
		f.first = append(f.first, ord)
		f.last = append(f.last, ord)
		f.more = append(f.more, -1)
	} else {
		f.addID(id, ord)
	}
	f.lastID = id
	f.lastVal = append(f.lastVal[:0], v...)
	f.hasLast = true
}

// hotIndex is the in-memory index of a hot searchable bucket. One writer
// (the store's indexer) adds events; readers take snapshots. It is bounded
// by the bucket's roll limits: a bucket that reaches max_hot_bytes rolls and
// its hotIndex is serialised and dropped.
type hotIndex struct {
	mu     sync.RWMutex
	n      uint32
	times  []int64
	terms  *termTable
	fields map[string]*fieldTable
	tok    query.Tokenizer
}

func newHotIndex() *hotIndex {
	return &hotIndex{terms: newTermTable(1 << 14), fields: make(map[string]*fieldTable)}
}

func (h *hotIndex) field(name []byte) *fieldTable {
	f, ok := h.fields[string(name)]
	if !ok {
		f = &fieldTable{termTable: newTermTable(64)}
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
	h.field([]byte(fieldHost)).addValue(e.Host, ord)
	h.field([]byte(fieldSource)).addValue(e.Source, ord)
	h.field([]byte(fieldSourcetype)).addValue(e.Sourcetype, ord)
	for _, f := range e.Fields {
		h.field(f.Name).addValue(f.Value, ord)
	}
	h.n = ord + 1
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
