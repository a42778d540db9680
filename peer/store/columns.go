package store

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"slices"

	"github.com/quarry-dev/quarry/query"
)

// Column file (columns.qc), format version 3: the values of every indexed
// field per event, so that aggregations over field values read a few
// compact arrays instead of decoding _raw. Written with the index when a
// bucket rolls or a copy becomes searchable, atomically (temp file, fsync,
// rename, directory fsync); never modified; rebuilt byte-identically from
// the journal (it depends only on the events, in order).
//
//	header   "QCOL", version byte 3, 3 reserved bytes
//	blobs    zstd frames, each named by the directory with its CRC-32C
//	directory (plain bytes):
//	  uvarint events per column block (colBlockEvents when written)
//	  uvarint column count; per column, in ascending name order:
//	    uvarint len + name, kind byte (1 dictionary, 2 dictionary with
//	    multivalue events, 3 integers, 4 integers with missing events,
//	    5 floats, 6 floats with missing events, 7 integers of at most
//	    127 values in every event)
//	    dictionary kinds: uvarint values, uvarint off, len, crc of the
//	      dictionary blob (values in ascending byte order, front-coded:
//	      uvarint shared prefix, uvarint suffix length, suffix, and in
//	      version 3 a uvarint count of the events holding it); kind 7
//	      the same fields, its blob the values as zigzag varints in byte
//	      order of their text
//	    uvarint blocks; per block: uvarint off, len, crc of its blob;
//	    integer kinds (3, 4, 7) also varint min, max and uvarint present count;
//	    float kinds also min, max (uint64 little-endian IEEE 754 bits
//	    each) and uvarint present count
//	footer   uint64 directory offset, uint64 directory length, uint32
//	         events, uint32 CRC-32C of every byte before it, "QCOLEND1"
//
// Block blobs, per event of the block: kind 1 a uvarint 0 (missing) or
// 1 + the value's dictionary rank; kind 2 a uvarint count then count
// ranks; kinds 3/4 (4: a presence bitmap, one bit per event, first)
// zigzag varints of the present values, each relative to the previous one
// (the first to 0); kinds 5/6 (6: the presence bitmap first) the present
// values as uint64 little-endian IEEE 754 bits; kind 7 one byte an event,
// the value's rank (a first run after a restart decodes status, of ~15
// values, at a byte an event instead of a varint). An integer column holds
// only canonical int64 decimals (query.CanonicalInt), a float column only
// finite numbers written in their shortest form (query.CanonicalFloat:
// "0.25", "-3", mixed ints and floats), so both give each value back byte
// for byte; any other field is a dictionary column. host, source and sourcetype hold the event's metadata;
// an indexed field named like a default field (_raw, host, …) has no
// column (rows never show it). _time is the index file's times section.
//
// Versions 1 (no float kinds; a float field was a dictionary column) and 2
// (no kind 7) are still read: buckets written by older builds open as
// they are.
const (
	colVersion     = 3
	colBlockEvents = 8192
	colFooterLen   = 8 + 8 + 4 + 4 + 8
)

const (
	colDict        = 1
	colDictMulti   = 2
	colInt         = 3
	colIntSparse   = 4
	colFloat       = 5
	colFloatSparse = 6
	colIntFew      = 7 // version 3
)

// colFewInts is how many distinct values an integer column without a
// missing event may have to be written as kind 7: each event's value is
// then one byte, decoded without a varint.
const colFewInts = 127

func colNumeric(kind byte) bool { return kind >= colInt }
func colFloats(kind byte) bool  { return kind == colFloat || kind == colFloatSparse }
func colSparse(kind byte) bool  { return kind == colIntSparse || kind == colFloatSparse }

var (
	colMagic       = [5]byte{'Q', 'C', 'O', 'L', colVersion}
	colFooterMagic = [8]byte{'Q', 'C', 'O', 'L', 'E', 'N', 'D', '1'}
)

// ---- hot side ----

// colAdd records that event ord holds the value id of the field's table.
func (f *fieldTable) colAdd(id, ord uint32) {
	if f.colLast == ord+1 {
		if f.colMulti == nil {
			f.colMulti = map[uint32][]uint32{}
		}
		f.colMulti[ord] = append(f.colMulti[ord], id+1)
		return
	}
	if n := uint32(len(f.col)); n < ord {
		f.col = append(f.col, make([]uint32, ord-n)...)
	}
	f.col = append(f.col, id+1)
	f.colLast = ord + 1
}

// defaultFieldName reports the names rows take from the event itself; an
// indexed field with such a name never reaches a row, so it has no column.
func defaultFieldName(name []byte) bool {
	switch string(name) {
	case "_time", "_raw", "host", "source", "sourcetype", "index", "splunk_server", "_bkt", "_cd":
		return true
	}
	return false
}

// hotColumn is a snapshot of a hot field's column for the first n events.
func (h *hotSegment) Column(field string) (*query.Column, error) {
	h.h.mu.RLock()
	ft := h.h.fields[field]
	if ft == nil || len(ft.col) == 0 {
		h.h.mu.RUnlock()
		return nil, nil
	}
	col := ft.col
	t := ft.termTable
	arena, off, count := t.arena, t.off, t.n
	var multi map[uint32][]uint32
	for o, m := range ft.colMulti {
		if o < h.n {
			if multi == nil {
				multi = map[uint32][]uint32{}
			}
			multi[o] = append([]uint32(nil), m...)
		}
	}
	h.h.mu.RUnlock()
	// Below n the column and the table's keys never change: appends go
	// past them (a reallocation leaves the old array as it was).
	ids := make([]uint32, h.n)
	copy(ids, col[:min(uint32(len(col)), h.n)])
	dict := make([]string, count)
	for i := range dict {
		dict[i] = string(arena[off[i]:off[i+1]])
	}
	return &query.Column{Dict: dict, IDs: ids, Multi: multi}, nil
}

// ---- writing ----

// buildColumns serialises the columns of a frozen hot index of n events.
func buildColumns(h *hotIndex) []byte { return buildColumnsVersion(h, colVersion) }

// buildColumnsVersion writes format version 3, or an older one (tests:
// version 2 has no kind 7, version 1 no float kinds either).
func buildColumnsVersion(h *hotIndex, version byte) []byte {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := h.n
	w := &colWriter{}
	w.out = append([]byte(nil), colMagic[:4]...)
	w.out = append(w.out, version)
	w.out = append(w.out, 0, 0, 0)
	w.dir = binary.AppendUvarint(w.dir, colBlockEvents)
	var names []string
	for _, name := range h.fieldNamesLocked() {
		if len(h.fields[name].col) > 0 {
			names = append(names, name)
		}
	}
	w.dir = binary.AppendUvarint(w.dir, uint64(len(names)))
	for _, name := range names {
		w.writeColumn(name, h.fields[name], n, version)
	}
	out := w.out
	dirOff := len(out)
	out = append(out, w.dir...)
	out = binary.LittleEndian.AppendUint64(out, uint64(dirOff))
	out = binary.LittleEndian.AppendUint64(out, uint64(len(w.dir)))
	out = binary.LittleEndian.AppendUint32(out, n)
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
	out = append(out, colFooterMagic[:]...)
	return out
}

// colWriter accumulates a column file being written: out is the header
// and the blobs so far, dir the directory, raw a blob's bytes before
// compression (reused from blob to blob).
type colWriter struct {
	out, dir, raw []byte
}

// blob appends b's zstd frame to the file and its offset, length and
// CRC-32C to the directory.
func (w *colWriter) blob(b []byte) {
	o := len(w.out)
	w.out = encoder().EncodeAll(b, w.out)
	c := w.out[o:]
	w.dir = binary.AppendUvarint(w.dir, uint64(o))
	w.dir = binary.AppendUvarint(w.dir, uint64(len(c)))
	w.dir = binary.AppendUvarint(w.dir, uint64(crc32.Checksum(c, castagnoli)))
}

// colValues is one field's column as it is written: the values its first n
// events use, ranked in byte order, and the kind they make it.
type colValues struct {
	ft    *fieldTable
	col   []uint32 // per event, table id + 1 (0 when missing); may end before n
	n     uint32
	keys  []uint32 // table ids of the values used, in byte order
	rank  []uint32 // table id -> rank in keys
	nums  []int64  // integer kinds: the value of each rank
	fnums []float64
	ints  bool // every value a canonical integer (kinds 3, 4, 7)
	// floats: every value a canonical float, not all integers (kinds 5, 6)
	floats bool
	kind   byte
}

// at is event o's table id + 1, 0 when it has no value.
func (v *colValues) at(o uint32) uint32 {
	if o < uint32(len(v.col)) {
		return v.col[o]
	}
	return 0
}

// writeColumn writes the column of field name (table ft) over the first
// n events: its directory entry, its dictionary or values blob, its
// blocks. The values it uses are ranked in byte order and choose its kind
// (version limits the kinds: 1 has no floats, 2 no kind 7).
func (w *colWriter) writeColumn(name string, ft *fieldTable, n uint32, version byte) {
	v := colValues{ft: ft, n: n, col: ft.col[:min(uint32(len(ft.col)), n)]}
	// the values this column uses, ranked in byte order
	used := make([]bool, ft.len())
	missing, multi := v.markUsed(used)
	var keys []uint32
	for _, e := range ft.sorted() {
		if used[e.id] {
			keys = append(keys, e.id)
		}
	}
	v.keys = keys
	v.rank = make([]uint32, ft.len())
	v.ints = !multi
	v.nums = make([]int64, 0, len(v.keys))
	for r, id := range v.keys {
		v.rank[id] = uint32(r)
		if v.ints {
			x, ok := query.CanonicalInt(string(ft.key(id)))
			v.ints = ok
			v.nums = append(v.nums, x)
		}
	}
	v.floats = !multi && !v.ints && version >= 2
	var fnums []float64
	for _, id := range v.keys {
		if !v.floats {
			break
		}
		x, ok := query.CanonicalFloat(string(ft.key(id)))
		v.floats = ok
		fnums = append(fnums, x)
	}
	v.fnums = fnums
	v.kind = v.chooseKind(missing, multi, version)
	w.dir = binary.AppendUvarint(w.dir, uint64(len(name)))
	w.dir = append(w.dir, name...)
	w.dir = append(w.dir, v.kind)
	if !colNumeric(v.kind) {
		// version 3: each value's event count after it, so that
		// counts by value need no block decoded (`| top path`)
		var counts []uint64
		if version >= 3 {
			counts = make([]uint64, len(v.keys))
			v.countValues(counts)
		}
		w.writeDict(&v, counts)
	}
	if v.kind == colIntFew {
		w.writeFewInts(&v)
	}
	w.writeBlocks(&v)
}

// markUsed marks in used the table ids of the values the column's events
// hold, and reports whether an event holds none and whether one holds
// several.
func (v *colValues) markUsed(used []bool) (missing, multi bool) {
	for o := uint32(0); o < v.n; o++ {
		if id := v.at(o); id > 0 {
			used[id-1] = true
		} else {
			missing = true
		}
	}
	for o, m := range v.ft.colMulti {
		if o < v.n {
			multi = true
			for _, id := range m {
				used[id-1] = true
			}
		}
	}
	return missing, multi
}

// chooseKind is the column's kind, from what its values are (v.ints,
// v.floats, how many) and whether an event holds none or several.
func (v *colValues) chooseKind(missing, multi bool, version byte) byte {
	kind := byte(colDict)
	switch {
	case v.ints && missing:
		kind = colIntSparse
	case v.ints && len(v.keys) <= colFewInts && version >= 3:
		kind = colIntFew
	case v.ints:
		kind = colInt
	case v.floats && missing:
		kind = colFloatSparse
	case v.floats:
		kind = colFloat
	case multi:
		kind = colDictMulti
	}
	return kind
}

// countValues sets counts[r] to the number of events holding the value of
// rank r (an event holding a value twice counts once).
func (v *colValues) countValues(counts []uint64) {
	for o := uint32(0); o < v.n; o++ {
		id := v.at(o)
		if id == 0 {
			continue
		}
		counts[v.rank[id-1]]++
		if more := v.ft.colMulti[o]; more != nil {
			for j, m := range more {
				if m == id || slices.Contains(more[:j], m) {
					continue
				}
				counts[v.rank[m-1]]++
			}
		}
	}
}

// writeDict writes a dictionary column's value count and its dictionary
// blob: the values front-coded in byte order, each followed by its event
// count when counts is not nil (version 3).
func (w *colWriter) writeDict(v *colValues, counts []uint64) {
	w.raw = w.raw[:0]
	var prev []byte
	for r, id := range v.keys {
		k := v.ft.key(id)
		p := 0
		for p < len(k) && p < len(prev) && k[p] == prev[p] {
			p++
		}
		w.raw = binary.AppendUvarint(w.raw, uint64(p))
		w.raw = binary.AppendUvarint(w.raw, uint64(len(k)-p))
		w.raw = append(w.raw, k[p:]...)
		if counts != nil {
			w.raw = binary.AppendUvarint(w.raw, counts[r])
		}
		prev = k
	}
	w.dir = binary.AppendUvarint(w.dir, uint64(len(v.keys)))
	w.blob(w.raw)
}

// writeFewInts writes a kind 7 column's value count and its values blob:
// the values in byte order of their text, zigzag varints.
func (w *colWriter) writeFewInts(v *colValues) {
	w.raw = w.raw[:0]
	for _, x := range v.nums {
		w.raw = binary.AppendVarint(w.raw, x)
	}
	w.dir = binary.AppendUvarint(w.dir, uint64(len(v.keys)))
	w.blob(w.raw)
}

// colBlockStats is what the directory says of a numeric block: the range
// of its values and how many events hold one.
type colBlockStats struct {
	mn, mx   int64
	fmn, fmx float64
	present  uint64
}

// writeBlocks writes the column's block count, then each block's blob and
// directory entry.
func (w *colWriter) writeBlocks(v *colValues) {
	n := v.n
	nb := (n + colBlockEvents - 1) / colBlockEvents
	w.dir = binary.AppendUvarint(w.dir, uint64(nb))
	for b := uint32(0); b < nb; b++ {
		lo, hi := b*colBlockEvents, min((b+1)*colBlockEvents, n)
		w.raw = w.raw[:0]
		if colSparse(v.kind) {
			bm := make([]byte, (hi-lo+7)/8)
			for o := lo; o < hi; o++ {
				if v.at(o) > 0 {
					bm[(o-lo)/8] |= 1 << ((o - lo) % 8)
				}
			}
			w.raw = append(w.raw, bm...)
		}
		var st colBlockStats
		w.raw = appendBlockEvents(w.raw, v, lo, hi, &st)
		w.blob(w.raw)
		switch {
		case v.ints:
			w.dir = binary.AppendVarint(w.dir, st.mn)
			w.dir = binary.AppendVarint(w.dir, st.mx)
			w.dir = binary.AppendUvarint(w.dir, st.present)
		case v.floats:
			w.dir = binary.LittleEndian.AppendUint64(w.dir, math.Float64bits(st.fmn))
			w.dir = binary.LittleEndian.AppendUint64(w.dir, math.Float64bits(st.fmx))
			w.dir = binary.AppendUvarint(w.dir, st.present)
		}
	}
}

// appendBlockEvents appends to raw the values of events [lo, hi) in the
// column's kind (after the presence bitmap of a sparse kind), and adds up
// in st the block's numeric range and present count.
func appendBlockEvents(raw []byte, v *colValues, lo, hi uint32, st *colBlockStats) []byte {
	rank := v.rank
	prev := int64(0)
	for o := lo; o < hi; o++ {
		id := v.at(o)
		switch v.kind {
		case colDict:
			if id == 0 {
				raw = append(raw, 0)
			} else {
				raw = binary.AppendUvarint(raw, uint64(rank[id-1])+1)
			}
		case colDictMulti:
			if id == 0 {
				raw = append(raw, 0)
				continue
			}
			more := v.ft.colMulti[o]
			raw = binary.AppendUvarint(raw, uint64(1+len(more)))
			raw = binary.AppendUvarint(raw, uint64(rank[id-1]))
			for _, m := range more {
				raw = binary.AppendUvarint(raw, uint64(rank[m-1]))
			}
		case colIntFew:
			x := v.nums[rank[id-1]]
			if st.present == 0 || x < st.mn {
				st.mn = x
			}
			if st.present == 0 || x > st.mx {
				st.mx = x
			}
			st.present++
			raw = append(raw, byte(rank[id-1]))
		case colFloat, colFloatSparse:
			if id == 0 {
				continue
			}
			x := v.fnums[rank[id-1]]
			if st.present == 0 || x < st.fmn {
				st.fmn = x
			}
			if st.present == 0 || x > st.fmx {
				st.fmx = x
			}
			st.present++
			raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(x))
		default:
			if id == 0 {
				continue
			}
			x := v.nums[rank[id-1]]
			if st.present == 0 || x < st.mn {
				st.mn = x
			}
			if st.present == 0 || x > st.mx {
				st.mx = x
			}
			st.present++
			raw = binary.AppendVarint(raw, x-prev)
			prev = x
		}
	}
	return raw
}
