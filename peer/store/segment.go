package store

import (
	"bytes"
	"fmt"
	"sort"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/quarry-dev/quarry/query"
)

// warmSegment reads a warm copy's index file and journal.
type warmSegment struct {
	b *Bucket
	r *indexReader
}

var _ query.Segment = (*warmSegment)(nil)

func (w *warmSegment) BucketID() string { return w.b.id }
func (w *warmSegment) Index() string    { return w.b.index }
func (w *warmSegment) Len() uint32      { return w.r.events }
func (w *warmSegment) Bounds() (int64, int64) {
	if w.r.events == 0 {
		return 0, -1
	}
	return w.r.earliest, w.r.latest
}
func (w *warmSegment) Times() ([]int64, error) { return w.r.times() }
func (w *warmSegment) MayContain(term string) bool {
	bf, err := w.r.getBloom()
	if err != nil {
		return true // cannot rule it out
	}
	return bf.TestString(term)
}
func (w *warmSegment) Term(term string) (*roaring.Bitmap, error) { return w.r.term(term) }
func (w *warmSegment) TermsWithPrefix(prefix string, fn func(string, *roaring.Bitmap) bool) error {
	return w.r.termsWithPrefix(prefix, fn)
}
func (w *warmSegment) IndexedFields() []string { return append([]string(nil), w.r.fieldNames...) }
func (w *warmSegment) FieldValue(field, value string) (*roaring.Bitmap, error) {
	return w.r.fieldValue(field, value)
}
func (w *warmSegment) FieldValues(field string, fn func(string, *roaring.Bitmap) bool) error {
	return w.r.fieldValues(field, fn)
}

// FieldValueCounts implements query.FieldCounter for a warm copy: each
// value's event count from the dictionary, no postings decoded.
func (w *warmSegment) FieldValueCounts(field string, fn func(string, uint64) bool) error {
	return w.r.fieldValueCounts(field, fn)
}

// FieldValueCountsIn implements query.FieldCounterIn for a warm copy whose
// field is answered from its column (index version 2).
func (w *warmSegment) FieldValueCountsIn(field string, set *roaring.Bitmap, fn func(string, uint64) bool) (bool, error) {
	if !w.r.fromColumns(field) {
		return false, nil
	}
	return true, w.r.cols.fieldValueCountsIn(field, set, fn)
}

// FieldEvents implements query.FieldPresence for a warm copy.
func (w *warmSegment) FieldEvents(field string) (*roaring.Bitmap, error) {
	return w.r.fieldEvents(field)
}

func (w *warmSegment) Events(ords *roaring.Bitmap, fn func(uint32, *query.Event) bool) error {
	return readEvents(w.b, w.units(), w.r.events, ords, fn)
}

// RawEvents implements query.RawSource for a warm copy.
func (w *warmSegment) RawEvents(ords *roaring.Bitmap, fn func(uint32, []byte) bool) error {
	return readRaws(w.b, w.units(), w.r.events, ords, fn)
}

// units are the warm copy's blocks, all on disk.
func (w *warmSegment) units() []eventUnit {
	units := make([]eventUnit, len(w.r.blocks))
	for i, bl := range w.r.blocks {
		units[i] = eventUnit{block: bl}
	}
	return units
}

// eventUnit is a run of events to decode: a block on disk, or a payload in
// memory (sealed but unwritten, or a copy of the open block).
type eventUnit struct {
	block   blockInfo
	payload []byte
	mem     bool
}

// eachUnit walks units in order for the events below n (all of them, or
// those in ords), skipping a unit that holds none of ords unread, and hands
// decode each unit's payload with want: want(i) says whether the unit's
// i-th event is taken and whether the unit holds more to take (false: the
// rest of the unit is not read; the walk goes on with the next unit that
// holds one). decode returns whether the caller's callback stopped it.
func eachUnit(b *Bucket, units []eventUnit, n uint32, ords *roaring.Bitmap,
	decode func(first uint32, p []byte, want func(i int) (take, more bool)) (stop bool, err error)) error {
	bufs := blockBufPool.Get().(*blockBufs)
	defer blockBufPool.Put(bufs)
	it := (roaring.IntPeekable)(nil)
	if ords != nil {
		it = ords.Iterator()
	}
	for _, u := range units {
		first, cnt := u.block.firstOrd, u.block.events
		if first >= n {
			break
		}
		if it != nil {
			it.AdvanceIfNeeded(first)
			if !it.HasNext() {
				return nil
			}
			if it.PeekNext() >= first+cnt {
				continue
			}
		}
		p := u.payload
		if !u.mem {
			var err error
			p, err = bufs.read(b.rd, u.block)
			if err != nil {
				return err
			}
		}
		// the next ordinal wanted, kept here rather than asked of the
		// iterator for every event of the block (a phrase's ~4 candidates
		// a block of ~680 events)
		next, end := uint32(0), first+cnt
		if it != nil {
			next = it.PeekNext()
		}
		want := func(i int) (bool, bool) {
			ord := first + uint32(i)
			if ord >= n {
				return false, false
			}
			if it == nil {
				return true, true
			}
			if ord != next {
				return false, true
			}
			it.Next()
			if !it.HasNext() {
				return true, false
			}
			next = it.PeekNext()
			return true, next < end // no more in this unit: the next unit goes on
		}
		stop, err := decode(first, p, want)
		if err != nil || stop {
			return err
		}
	}
	return nil
}

// readRaws is readEvents for _raw alone (decodeRaws).
func readRaws(b *Bucket, units []eventUnit, n uint32, ords *roaring.Bitmap, fn func(uint32, []byte) bool) error {
	return eachUnit(b, units, n, ords, func(first uint32, p []byte, want func(int) (bool, bool)) (bool, error) {
		stop := false
		err := decodeRaws(p, want, func(i int, raw []byte) bool {
			if !fn(first+uint32(i), raw) {
				stop = true
				return false
			}
			return true
		})
		return stop, err
	})
}

func readEvents(b *Bucket, units []eventUnit, n uint32, ords *roaring.Bitmap, fn func(uint32, *query.Event) bool) error {
	var qe query.Event
	qe.Index = b.index
	return eachUnit(b, units, n, ords, func(first uint32, p []byte, want func(int) (bool, bool)) (bool, error) {
		stop := false
		err := decodePayload(p, func(i int, e *decodedEvent) bool {
			take, more := want(i)
			if !take {
				return more
			}
			qe.Time = e.Time
			qe.Raw = string(e.Raw)
			qe.Host = string(e.Host)
			qe.Source = string(e.Source)
			qe.Sourcetype = string(e.Sourcetype)
			qe.Fields = qe.Fields[:0]
			for _, f := range e.Fields {
				qe.Fields = append(qe.Fields, query.Field{Name: string(f.Name), Value: string(f.Value)})
			}
			if !fn(first+uint32(i), &qe) {
				stop = true
				return false
			}
			return more
		})
		return stop, err
	})
}

// hotSegment is a consistent snapshot of a hot copy: the first n events.
type hotSegment struct {
	b     *Bucket
	h     *hotIndex
	n     uint32
	times []int64
}

var _ query.Segment = (*hotSegment)(nil)

func (h *hotSegment) BucketID() string { return h.b.id }
func (h *hotSegment) Index() string    { return h.b.index }
func (h *hotSegment) Len() uint32      { return h.n }
func (h *hotSegment) Bounds() (int64, int64) {
	if h.n == 0 {
		return 0, -1
	}
	lo, hi := h.times[0], h.times[0]
	for _, t := range h.times {
		lo, hi = min(lo, t), max(hi, t)
	}
	return lo, hi
}
func (h *hotSegment) Times() ([]int64, error) { return append([]int64(nil), h.times...), nil }

func (h *hotSegment) lookup(t *termTable, key string) *roaring.Bitmap {
	id, ok := t.lookup(unsafe.Slice(unsafe.StringData(key), len(key)))
	if !ok {
		return nil
	}
	ords := t.postings(id, h.n, nil)
	if len(ords) == 0 {
		return nil
	}
	return roaring.BitmapOf(ords...)
}

func (h *hotSegment) MayContain(term string) bool {
	h.h.mu.RLock()
	defer h.h.mu.RUnlock()
	id, ok := h.h.terms.lookup(unsafe.Slice(unsafe.StringData(term), len(term)))
	return ok && h.h.terms.meta[id].first < h.n
}

func (h *hotSegment) Term(term string) (*roaring.Bitmap, error) {
	h.h.mu.RLock()
	defer h.h.mu.RUnlock()
	return h.lookup(h.h.terms, term), nil
}

// sortedMatches returns the bitmaps of keys with prefix, sorted by key.
func (h *hotSegment) sortedMatches(t *termTable, prefix string) ([]string, []*roaring.Bitmap) {
	h.h.mu.RLock()
	var ids []uint32
	for id := 0; id < t.len(); id++ {
		if bytes.HasPrefix(t.key(uint32(id)), []byte(prefix)) && t.meta[id].first < h.n {
			ids = append(ids, uint32(id))
		}
	}
	sort.Slice(ids, func(a, b int) bool { return bytes.Compare(t.key(ids[a]), t.key(ids[b])) < 0 })
	out := make([]string, 0, len(ids))
	bms := make([]*roaring.Bitmap, 0, len(ids))
	for _, id := range ids {
		out = append(out, string(t.key(id)))
		bms = append(bms, roaring.BitmapOf(t.postings(id, h.n, nil)...))
	}
	h.h.mu.RUnlock()
	return out, bms
}

func (h *hotSegment) TermsWithPrefix(prefix string, fn func(string, *roaring.Bitmap) bool) error {
	keys, bms := h.sortedMatches(h.h.terms, prefix)
	for i, k := range keys {
		if !fn(k, bms[i]) {
			break
		}
	}
	return nil
}

func (h *hotSegment) IndexedFields() []string {
	h.h.mu.RLock()
	defer h.h.mu.RUnlock()
	var out []string
	for _, name := range h.h.fieldNamesLocked() {
		ft := h.h.fields[name]
		if len(ft.meta) > 0 && ft.meta[0].first < h.n {
			out = append(out, name)
		}
	}
	return out
}

func (h *hotSegment) FieldValue(field, value string) (*roaring.Bitmap, error) {
	h.h.mu.RLock()
	defer h.h.mu.RUnlock()
	ft := h.h.fields[field]
	if ft == nil {
		return nil, nil
	}
	return h.lookup(ft.termTable, value), nil
}

func (h *hotSegment) FieldValues(field string, fn func(string, *roaring.Bitmap) bool) error {
	h.h.mu.RLock()
	ft := h.h.fields[field]
	h.h.mu.RUnlock()
	if ft == nil {
		return nil
	}
	keys, bms := h.sortedMatches(ft.termTable, "")
	for i, k := range keys {
		if !fn(k, bms[i]) {
			break
		}
	}
	return nil
}

func (h *hotSegment) Events(ords *roaring.Bitmap, fn func(uint32, *query.Event) bool) error {
	return readEvents(h.b, h.units(), h.n, ords, fn)
}

// RawEvents implements query.RawSource for a hot copy.
func (h *hotSegment) RawEvents(ords *roaring.Bitmap, fn func(uint32, []byte) bool) error {
	return readRaws(h.b, h.units(), h.n, ords, fn)
}

// units snapshots the copy's blocks in one consistent cut.
func (h *hotSegment) units() []eventUnit {
	b := h.b
	s := b.s
	// Snapshot the blocks in one consistent cut: durable blocks, sealed ones
	// waiting for the writer, and a copy of the open block.
	s.mu.Lock()
	b.mu.RLock()
	var units []eventUnit
	for _, bl := range b.blocks {
		units = append(units, eventUnit{block: bl})
	}
	for _, sb := range b.pending {
		units = append(units, eventUnit{block: blockInfo{firstOrd: sb.firstOrd, events: sb.events, minT: sb.minT}, payload: sb.payload, mem: true})
	}
	if b.open != nil && b.open.n > 0 && (b.state == StateHot) {
		units = append(units, eventUnit{block: blockInfo{firstOrd: b.openFirstOrd, events: uint32(b.open.n), minT: b.open.minT},
			payload: b.open.payload(nil), mem: true})
	}
	b.mu.RUnlock()
	s.mu.Unlock()
	return units
}

// CopyLength is how much of its bucket a segment covers: the journal blocks
// whose events it holds and the last one's checksum (LastChecksum's form).
// A search marker carries it so the search head can check that the copy
// it searched is whole (SPEC §5 "Completeness"); Hot says the segment was
// a hot snapshot.
type CopyLength struct {
	Blocks   int64
	Checksum string
	Hot      bool
}

// SegmentLength returns the segment of one bucket (nil when it is not
// searchable) and the length that segment covers, taken under the same
// lock so the two agree: a warm segment covers every block; a hot
// snapshot of n events covers the blocks wholly below n.
func (s *Store) SegmentLength(id string) (query.Segment, CopyLength) {
	b := s.bucket(id)
	if b == nil {
		return nil, CopyLength{}
	}
	seg := b.segment()
	if seg == nil {
		return nil, CopyLength{}
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	n := len(b.blocks)
	hot := false
	if h, ok := seg.(*hotSegment); ok {
		hot = true
		n = 0
		for _, bl := range b.blocks {
			if bl.firstOrd+bl.events > h.n {
				break
			}
			n++
		}
	}
	l := CopyLength{Blocks: int64(n), Hot: hot}
	if n > 0 && n <= len(b.blocks) {
		l.Checksum = fmt.Sprintf("%08x", b.blocks[n-1].crc)
	}
	return seg, l
}
