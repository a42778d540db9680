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
	out := append([]byte(nil), colMagic[:4]...)
	out = append(out, version)
	out = append(out, 0, 0, 0)
	var dir []byte
	dir = binary.AppendUvarint(dir, colBlockEvents)
	var names []string
	for _, name := range h.fieldNamesLocked() {
		if len(h.fields[name].col) > 0 {
			names = append(names, name)
		}
	}
	dir = binary.AppendUvarint(dir, uint64(len(names)))
	var raw []byte
	blob := func(b []byte) {
		o := len(out)
		out = encoder().EncodeAll(b, out)
		c := out[o:]
		dir = binary.AppendUvarint(dir, uint64(o))
		dir = binary.AppendUvarint(dir, uint64(len(c)))
		dir = binary.AppendUvarint(dir, uint64(crc32.Checksum(c, castagnoli)))
	}
	for _, name := range names {
		ft := h.fields[name]
		col := ft.col[:min(uint32(len(ft.col)), n)]
		at := func(o uint32) uint32 { // table id + 1, 0 when missing
			if o < uint32(len(col)) {
				return col[o]
			}
			return 0
		}
		// the values this column uses, ranked in byte order
		used := make([]bool, ft.len())
		missing := false
		for o := uint32(0); o < n; o++ {
			if id := at(o); id > 0 {
				used[id-1] = true
			} else {
				missing = true
			}
		}
		multi := false
		for o, m := range ft.colMulti {
			if o < n {
				multi = true
				for _, id := range m {
					used[id-1] = true
				}
			}
		}
		var keys []uint32
		for _, e := range ft.sorted() {
			if used[e.id] {
				keys = append(keys, e.id)
			}
		}
		rank := make([]uint32, ft.len())
		ints := !multi
		nums := make([]int64, 0, len(keys))
		for r, id := range keys {
			rank[id] = uint32(r)
			if ints {
				v, ok := query.CanonicalInt(string(ft.key(id)))
				ints = ok
				nums = append(nums, v)
			}
		}
		floats := !multi && !ints && version >= 2
		var fnums []float64
		for _, id := range keys {
			if !floats {
				break
			}
			v, ok := query.CanonicalFloat(string(ft.key(id)))
			floats = ok
			fnums = append(fnums, v)
		}
		dir = binary.AppendUvarint(dir, uint64(len(name)))
		dir = append(dir, name...)
		kind := byte(colDict)
		switch {
		case ints && missing:
			kind = colIntSparse
		case ints && len(keys) <= colFewInts && version >= 3:
			kind = colIntFew
		case ints:
			kind = colInt
		case floats && missing:
			kind = colFloatSparse
		case floats:
			kind = colFloat
		case multi:
			kind = colDictMulti
		}
		dir = append(dir, kind)
		if !colNumeric(kind) {
			// version 3: each value's event count after it, so that
			// counts by value need no block decoded (`| top path`)
			var counts []uint64
			if version >= 3 {
				counts = make([]uint64, len(keys))
				for o := uint32(0); o < n; o++ {
					id := at(o)
					if id == 0 {
						continue
					}
					counts[rank[id-1]]++
					if more := ft.colMulti[o]; more != nil {
						for j, m := range more {
							if m == id || slices.Contains(more[:j], m) {
								continue
							}
							counts[rank[m-1]]++
						}
					}
				}
			}
			raw = raw[:0]
			var prev []byte
			for r, id := range keys {
				k := ft.key(id)
				p := 0
				for p < len(k) && p < len(prev) && k[p] == prev[p] {
					p++
				}
				raw = binary.AppendUvarint(raw, uint64(p))
				raw = binary.AppendUvarint(raw, uint64(len(k)-p))
				raw = append(raw, k[p:]...)
				if counts != nil {
					raw = binary.AppendUvarint(raw, counts[r])
				}
				prev = k
			}
			dir = binary.AppendUvarint(dir, uint64(len(keys)))
			blob(raw)
		}
		if kind == colIntFew {
			// the values in byte order of their text, zigzag varints
			raw = raw[:0]
			for _, v := range nums {
				raw = binary.AppendVarint(raw, v)
			}
			dir = binary.AppendUvarint(dir, uint64(len(keys)))
			blob(raw)
		}
		nb := (n + colBlockEvents - 1) / colBlockEvents
		dir = binary.AppendUvarint(dir, uint64(nb))
		for b := uint32(0); b < nb; b++ {
			lo, hi := b*colBlockEvents, min((b+1)*colBlockEvents, n)
			raw = raw[:0]
			var mn, mx int64
			var fmn, fmx float64
			present := uint64(0)
			if colSparse(kind) {
				bm := make([]byte, (hi-lo+7)/8)
				for o := lo; o < hi; o++ {
					if at(o) > 0 {
						bm[(o-lo)/8] |= 1 << ((o - lo) % 8)
					}
				}
				raw = append(raw, bm...)
			}
			prev := int64(0)
			for o := lo; o < hi; o++ {
				id := at(o)
				switch kind {
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
					more := ft.colMulti[o]
					raw = binary.AppendUvarint(raw, uint64(1+len(more)))
					raw = binary.AppendUvarint(raw, uint64(rank[id-1]))
					for _, m := range more {
						raw = binary.AppendUvarint(raw, uint64(rank[m-1]))
					}
				case colIntFew:
					v := nums[rank[id-1]]
					if present == 0 || v < mn {
						mn = v
					}
					if present == 0 || v > mx {
						mx = v
					}
					present++
					raw = append(raw, byte(rank[id-1]))
				case colFloat, colFloatSparse:
					if id == 0 {
						continue
					}
					v := fnums[rank[id-1]]
					if present == 0 || v < fmn {
						fmn = v
					}
					if present == 0 || v > fmx {
						fmx = v
					}
					present++
					raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(v))
				default:
					if id == 0 {
						continue
					}
					v := nums[rank[id-1]]
					if present == 0 || v < mn {
						mn = v
					}
					if present == 0 || v > mx {
						mx = v
					}
					present++
					raw = binary.AppendVarint(raw, v-prev)
					prev = v
				}
			}
			blob(raw)
			switch {
			case ints:
				dir = binary.AppendVarint(dir, mn)
				dir = binary.AppendVarint(dir, mx)
				dir = binary.AppendUvarint(dir, present)
			case floats:
				dir = binary.LittleEndian.AppendUint64(dir, math.Float64bits(fmn))
				dir = binary.LittleEndian.AppendUint64(dir, math.Float64bits(fmx))
				dir = binary.AppendUvarint(dir, present)
			}
		}
	}
	dirOff := len(out)
	out = append(out, dir...)
	out = binary.LittleEndian.AppendUint64(out, uint64(dirOff))
	out = binary.LittleEndian.AppendUint64(out, uint64(len(dir)))
	out = binary.LittleEndian.AppendUint32(out, n)
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
	out = append(out, colFooterMagic[:]...)
	return out
}
