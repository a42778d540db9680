package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Event is one event as the store takes it in. Its byte slices may point
// into a request's buffer: the store copies what it keeps (the journal) and
// reads the rest (for indexing) before it lets go of the batch.
type Event struct {
	Index      string
	Time       int64 // unix nanoseconds, UTC
	Raw        []byte
	Host       []byte
	Source     []byte
	Sourcetype []byte
	Fields     []Field
}

// Field is one HEC indexed field.
type Field struct {
	Name  []byte
	Value []byte
}

// size is the event's uncompressed size as max_hot_bytes counts it.
func (e *Event) size() int {
	n := len(e.Raw) + len(e.Host) + len(e.Source) + len(e.Sourcetype) + 8
	for _, f := range e.Fields {
		n += len(f.Name) + len(f.Value)
	}
	return n
}

// Block payload (before compression), format version 1, columnar so that
// zstd sees like next to like:
//
//	uvarint n                      events in the block
//	uvarint len, times             n zigzag varints: the first event's _time,
//	                               then each relative to the previous event
//	uvarint k, k × (uvarint len, bytes)
//	                               the block's string table (host, source,
//	                               sourcetype values and field names)
//	uvarint len, refs              n × 3 uvarints into the string table
//	uvarint len, lens              n uvarints: len(_raw)
//	uvarint len, fields            per event: uvarint count, then per field
//	                               uvarint name ref, uvarint tag; tag 0 is a
//	                               literal (uvarint len, bytes), tag t>0 is
//	                               the value _raw[t-1 : t-1+len] (uvarint len)
//	raw bytes                      the _raw of every event, concatenated
//
// A field value found verbatim in _raw is stored as a reference, so HEC
// fields that repeat parts of the line (clientip, path, bytes) cost a few
// bytes instead of their text (COSTS.md lever 5).

// minRefLen is the shortest field value stored as a reference into _raw.
const minRefLen = 4

// blockBuilder accumulates the open block of a hot bucket.
type blockBuilder struct {
	n          int
	minT, maxT int64
	prevT      int64
	times      []byte
	strs       map[string]uint64
	strList    [][]byte
	refs       []byte
	lens       []byte
	fields     []byte
	raw        []byte
	// caches of the previous event's metadata refs, which repeat a lot
	lastMeta [3][]byte
	lastRef  [3]uint64
	// keys: the idempotency key records of the block's events (keys.go);
	// lastKey the request the last one belongs to, keyBytes their size.
	keys     []KeyRecord
	lastKey  *RequestKey
	keyBytes int
}

func newBlockBuilder() *blockBuilder {
	return &blockBuilder{strs: make(map[string]uint64)}
}

func (b *blockBuilder) reset() {
	b.n = 0
	b.times = b.times[:0]
	clear(b.strs)
	b.strList = b.strList[:0]
	b.refs = b.refs[:0]
	b.lens = b.lens[:0]
	b.fields = b.fields[:0]
	b.raw = b.raw[:0]
	b.lastMeta = [3][]byte{}
	b.keys, b.lastKey, b.keyBytes = nil, nil, 0
}

// size is the uncompressed payload size so far.
func (b *blockBuilder) size() int {
	return len(b.times) + len(b.refs) + len(b.lens) + len(b.fields) + len(b.raw) + 16*len(b.strList)
}

func (b *blockBuilder) str(s []byte) uint64 {
	if r, ok := b.strs[string(s)]; ok {
		return r
	}
	r := uint64(len(b.strList))
	c := append([]byte(nil), s...)
	b.strs[string(c)] = r
	b.strList = append(b.strList, c)
	return r
}

func (b *blockBuilder) metaRef(i int, s []byte) uint64 {
	if b.lastMeta[i] != nil && bytes.Equal(b.lastMeta[i], s) {
		return b.lastRef[i]
	}
	r := b.str(s)
	b.lastMeta[i] = b.strList[r]
	b.lastRef[i] = r
	return r
}

func (b *blockBuilder) add(e *Event) {
	if b.n == 0 {
		b.minT, b.maxT, b.prevT = e.Time, e.Time, e.Time
	}
	if e.Time < b.minT {
		b.minT = e.Time
	}
	if e.Time > b.maxT {
		b.maxT = e.Time
	}
	if b.n == 0 {
		b.times = binary.AppendVarint(b.times, e.Time)
	} else {
		b.times = binary.AppendVarint(b.times, e.Time-b.prevT)
	}
	b.prevT = e.Time
	b.refs = binary.AppendUvarint(b.refs, b.metaRef(0, e.Host))
	b.refs = binary.AppendUvarint(b.refs, b.metaRef(1, e.Source))
	b.refs = binary.AppendUvarint(b.refs, b.metaRef(2, e.Sourcetype))
	b.lens = binary.AppendUvarint(b.lens, uint64(len(e.Raw)))
	b.fields = binary.AppendUvarint(b.fields, uint64(len(e.Fields)))
	from := 0
	for _, f := range e.Fields {
		b.fields = binary.AppendUvarint(b.fields, b.str(f.Name))
		off := -1
		if len(f.Value) >= minRefLen {
			if i := bytes.Index(e.Raw[from:], f.Value); i >= 0 {
				off = from + i
			} else if from > 0 {
				off = bytes.Index(e.Raw, f.Value)
			}
		}
		if off >= 0 {
			b.fields = binary.AppendUvarint(b.fields, uint64(off+1))
			b.fields = binary.AppendUvarint(b.fields, uint64(len(f.Value)))
			from = off + len(f.Value)
		} else {
			b.fields = binary.AppendUvarint(b.fields, 0)
			b.fields = binary.AppendUvarint(b.fields, uint64(len(f.Value)))
			b.fields = append(b.fields, f.Value...)
		}
	}
	b.raw = append(b.raw, e.Raw...)
	b.n++
}

// payload assembles the block payload into dst.
func (b *blockBuilder) payload(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(b.n))
	dst = binary.AppendUvarint(dst, uint64(len(b.times)))
	dst = append(dst, b.times...)
	dst = binary.AppendUvarint(dst, uint64(len(b.strList)))
	for _, s := range b.strList {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	for _, col := range [][]byte{b.refs, b.lens, b.fields} {
		dst = binary.AppendUvarint(dst, uint64(len(col)))
		dst = append(dst, col...)
	}
	return append(dst, b.raw...)
}

// ErrCorrupt is returned (wrapped, with where) when stored bytes fail their
// checksum or do not decode.
var ErrCorrupt = errors.New("corrupt data")

// decodedEvent is one event of a decoded block (Index unset); its slices
// point into the block's payload.
type decodedEvent = Event

type payloadReader struct {
	b   []byte
	err error
}

func (r *payloadReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint in block payload", ErrCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *payloadReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint in block payload", ErrCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *payloadReader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: block payload cut short", ErrCorrupt)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// decodePayload decodes a block payload and calls fn for each event in order
// until fn returns false.
func decodePayload(p []byte, fn func(i int, e *decodedEvent) bool) error {
	r := &payloadReader{b: p}
	n := r.uvarint()
	times := &payloadReader{b: r.bytes(r.uvarint())}
	k := r.uvarint()
	if r.err == nil && k > uint64(len(p)) {
		return fmt.Errorf("%w: string table of %d entries", ErrCorrupt, k)
	}
	strs := make([][]byte, 0, k)
	for i := uint64(0); i < k && r.err == nil; i++ {
		strs = append(strs, r.bytes(r.uvarint()))
	}
	refs := &payloadReader{b: r.bytes(r.uvarint())}
	lens := &payloadReader{b: r.bytes(r.uvarint())}
	fields := &payloadReader{b: r.bytes(r.uvarint())}
	if r.err != nil {
		return r.err
	}
	raw := r.b
	str := func(pr *payloadReader) []byte {
		i := pr.uvarint()
		if pr.err == nil && i >= uint64(len(strs)) {
			pr.err = fmt.Errorf("%w: string ref %d of %d", ErrCorrupt, i, len(strs))
			return nil
		}
		if pr.err != nil {
			return nil
		}
		return strs[i]
	}
	var ev decodedEvent
	t := int64(0)
	rawOff := uint64(0)
	for i := 0; i < int(n); i++ {
		t += times.varint()
		ev.Time = t
		ev.Host, ev.Source, ev.Sourcetype = str(refs), str(refs), str(refs)
		l := lens.uvarint()
		if rawOff+l > uint64(len(raw)) {
			return fmt.Errorf("%w: raw of event %d cut short", ErrCorrupt, i)
		}
		ev.Raw = raw[rawOff : rawOff+l : rawOff+l]
		rawOff += l
		nf := fields.uvarint()
		if nf > uint64(len(fields.b)) {
			return fmt.Errorf("%w: %d fields", ErrCorrupt, nf)
		}
		ev.Fields = ev.Fields[:0]
		for j := uint64(0); j < nf && fields.err == nil; j++ {
			name := str(fields)
			tag := fields.uvarint()
			vl := fields.uvarint()
			var val []byte
			if tag == 0 {
				val = fields.bytes(vl)
			} else if tag-1+vl <= uint64(len(ev.Raw)) {
				val = ev.Raw[tag-1 : tag-1+vl]
			} else {
				return fmt.Errorf("%w: field reference out of _raw in event %d", ErrCorrupt, i)
			}
			ev.Fields = append(ev.Fields, Field{Name: name, Value: val})
		}
		for _, pr := range []*payloadReader{times, refs, lens, fields} {
			if pr.err != nil {
				return pr.err
			}
		}
		if !fn(i, &ev) {
			return nil
		}
	}
	if rawOff != uint64(len(raw)) {
		return fmt.Errorf("%w: %d trailing raw bytes", ErrCorrupt, uint64(len(raw))-rawOff)
	}
	return nil
}

// decodeRaws calls fn with the _raw of each event of a payload for which
// want is true, in order, until fn returns false: only the lens stream is
// read (times, refs and fields are skipped whole), so verifying a phrase
// costs the block's decompression and little more.
func decodeRaws(p []byte, want func(i int) (take, more bool), fn func(i int, raw []byte) bool) error {
	r := &payloadReader{b: p}
	n := r.uvarint()
	r.bytes(r.uvarint()) // times
	k := r.uvarint()
	if r.err == nil && k > uint64(len(p)) {
		return fmt.Errorf("%w: string table of %d entries", ErrCorrupt, k)
	}
	for i := uint64(0); i < k && r.err == nil; i++ {
		r.bytes(r.uvarint())
	}
	r.bytes(r.uvarint()) // refs
	lens := &payloadReader{b: r.bytes(r.uvarint())}
	r.bytes(r.uvarint()) // fields
	if r.err != nil {
		return r.err
	}
	raw := r.b
	off := uint64(0)
	lb := lens.b
	for i := 0; i < int(n); i++ {
		// one length a varint, read here rather than by a call
		// (a phrase walks ~680 of them a block for ~4 candidates)
		var l uint64
		if len(lb) > 0 && lb[0] < 0x80 {
			l, lb = uint64(lb[0]), lb[1:]
		} else if len(lb) > 1 && lb[1] < 0x80 {
			l, lb = uint64(lb[0]&0x7f)|uint64(lb[1])<<7, lb[2:]
		} else {
			v, k := binary.Uvarint(lb)
			if k <= 0 {
				return fmt.Errorf("%w: bad varint in block payload", ErrCorrupt)
			}
			l, lb = v, lb[k:]
		}
		if off+l > uint64(len(raw)) {
			return fmt.Errorf("%w: raw of event %d cut short", ErrCorrupt, i)
		}
		take, more := want(i)
		if take && !fn(i, raw[off:off+l:off+l]) {
			return nil
		}
		if !more {
			return nil
		}
		off += l
	}
	if off != uint64(len(raw)) {
		return fmt.Errorf("%w: %d trailing raw bytes", ErrCorrupt, uint64(len(raw))-off)
	}
	return nil
}
