package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/bits-and-blooms/bloom/v3"
	"github.com/quarry-dev/quarry/query"
)

// Index file (index.qi), format version 2. Written once, when a bucket rolls
// or a journal-only copy becomes searchable, atomically (temp file, fsync,
// rename, directory fsync); never modified.
//
//	header   "QIDX", version byte 2, the inline limit (byte), 2 reserved bytes
//	sections in this order (offsets and lengths in the footer):
//	  0 times       zstd of: uvarint unit; n zigzag varints, the first
//	                absolute, then the deltas divided by the unit (their
//	                greatest common divisor; version 1: no unit, unit 1)
//	  1 blocks      per journal block: uvarint off, frameLen, events;
//	                varint minT, maxT; uvarint crc
//	  2 term dict   dictionary blocks (below) of the _raw terms
//	  3 term sparse per dictionary block: uvarint len+first key, uvarint
//	                offset, compressed length, entries; uvarint crc32c
//	  4 field dict  dictionary blocks of the keys field + 0x00 + value, for
//	                the indexed fields that have no column (columns.go)
//	  5 field sparse
//	  6 postings    the lists longer than the inline limit, each a tag byte
//	                then: 'R' a serialized roaring bitmap; 'D' zstd of the
//	                ordinals as delta uvarints (first absolute), written for
//	                a list of fewer than events/4 ordinals when it is at
//	                most 4/5 of its roaring form
//	  7 bloom       bits-and-blooms/bloom binary form, over the _raw terms
//	  8 field names uvarint count, then uvarint len + name, sorted: every
//	                indexed field, with or without a column
//	footer   9 × (uint64 offset, uint64 length), uint32 events, int64
//	         earliest, int64 latest, uint32 CRC-32C of every byte before it,
//	         "QIDXEND1"
//
// A dictionary block is zstd of its entries, keys in ascending byte order,
// front-coded: uvarint shared prefix, uvarint suffix length, suffix, uvarint
// count; then for count <= the header's inline limit (inlineMax when
// written) a uvarint byte length and the ordinals
// as delta uvarints (first absolute), else uvarint offset and length of its
// list in the postings section. Blocks close at dictBlockBytes.
//
// A field with a column (host, source, sourcetype and every HEC field not
// named like a default field) has no postings: field=value, its values and
// their counts come from the column (colindex.go), which holds the same
// values per event. Version 1 (every field in the field dictionary, the
// postings section bare roaring bitmaps) is still read as it is.
const (
	indexVersion   = 2
	numSections    = 9
	footerLen      = numSections*16 + 4 + 8 + 8 + 4 + 8
	inlineMax      = 96
	dictBlockBytes = 16 << 10
	bloomFP        = 0.02
)

// Tags of a list in the postings section (version 2).
const (
	postRoaring = 'R'
	postDeltas  = 'D'
)

const (
	secTimes = iota
	secBlocks
	secTermDict
	secTermSparse
	secFieldDict
	secFieldSparse
	secPostings
	secBloom
	secFieldNames
)

var (
	indexMagic  = [5]byte{'Q', 'I', 'D', 'X', indexVersion}
	indexMagic1 = [5]byte{'Q', 'I', 'D', 'X', 1}
	footerMagic = [8]byte{'Q', 'I', 'D', 'X', 'E', 'N', 'D', '1'}
)

// dictWriter builds one dictionary (terms or fields).
type dictWriter struct {
	out      []byte // compressed blocks
	sparse   []byte
	cur      []byte
	curFirst []byte
	curN     int
	prev     []byte
	postings *[]byte
	scratch  []byte
	bm       *roaring.Bitmap
	zbuf     []byte
	events   uint32 // of the bucket: a list denser than 1/4 stays roaring
	v1       bool   // untagged roaring lists (format version 1)
}

func (d *dictWriter) add(key []byte, ords []uint32) {
	if d.curN == 0 {
		d.curFirst = append(d.curFirst[:0], key...)
		d.prev = d.prev[:0]
	}
	p := 0
	for p < len(key) && p < len(d.prev) && key[p] == d.prev[p] {
		p++
	}
	d.cur = binary.AppendUvarint(d.cur, uint64(p))
	d.cur = binary.AppendUvarint(d.cur, uint64(len(key)-p))
	d.cur = append(d.cur, key[p:]...)
	d.cur = binary.AppendUvarint(d.cur, uint64(len(ords)))
	if len(ords) <= inlineMax {
		d.scratch = d.scratch[:0]
		prev := uint32(0)
		for _, o := range ords {
			d.scratch = binary.AppendUvarint(d.scratch, uint64(o-prev))
			prev = o
		}
		d.cur = binary.AppendUvarint(d.cur, uint64(len(d.scratch)))
		d.cur = append(d.cur, d.scratch...)
	} else {
		if d.bm == nil {
			d.bm = roaring.New()
		}
		d.bm.Clear()
		d.bm.AddMany(ords)
		d.bm.RunOptimize()
		off := len(*d.postings)
		b, _ := d.bm.ToBytes()
		if !d.v1 {
			// A sparse list (roaring array containers: 2 bytes an event)
			// is smaller as zstd of its delta uvarints; a dense one stays
			// roaring (bitmap or run containers, and cheap to read).
			tag := byte(postRoaring)
			if uint64(len(ords))*4 < uint64(d.events) {
				d.scratch = d.scratch[:0]
				prev := uint32(0)
				for _, o := range ords {
					d.scratch = binary.AppendUvarint(d.scratch, uint64(o-prev))
					prev = o
				}
				d.zbuf = encoder().EncodeAll(d.scratch, d.zbuf[:0])
				if 5*len(d.zbuf) < 4*len(b) {
					tag, b = postDeltas, d.zbuf
				}
			}
			*d.postings = append(*d.postings, tag)
		}
		*d.postings = append(*d.postings, b...)
		d.cur = binary.AppendUvarint(d.cur, uint64(off))
		d.cur = binary.AppendUvarint(d.cur, uint64(len(*d.postings)-off))
	}
	d.prev = append(d.prev[:0], key...)
	d.curN++
	if len(d.cur) >= dictBlockBytes {
		d.flush()
	}
}

func (d *dictWriter) flush() {
	if d.curN == 0 {
		return
	}
	off := len(d.out)
	d.out = encoder().EncodeAll(d.cur, d.out)
	comp := d.out[off:]
	d.sparse = binary.AppendUvarint(d.sparse, uint64(len(d.curFirst)))
	d.sparse = append(d.sparse, d.curFirst...)
	d.sparse = binary.AppendUvarint(d.sparse, uint64(off))
	d.sparse = binary.AppendUvarint(d.sparse, uint64(len(comp)))
	d.sparse = binary.AppendUvarint(d.sparse, uint64(d.curN))
	d.sparse = binary.AppendUvarint(d.sparse, uint64(crc32.Checksum(comp, castagnoli)))
	d.cur = d.cur[:0]
	d.curN = 0
}

// buildIndex serialises a (frozen) hot index of n events and the bucket's
// blocks into the bytes of an index file. The output depends only on the
// events, so an index rebuilt from the journal is byte-identical to the one
// built while ingesting.
func buildIndex(h *hotIndex, blocks []blockInfo) []byte {
	return buildIndexVersion(h, blocks, indexVersion)
}

// buildIndexVersion writes format version 2, or 1 (tests: old copies are
// still read).
func buildIndexVersion(h *hotIndex, blocks []blockInfo, version byte) []byte {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := h.n
	var secs [numSections][]byte
	var earliest, latest int64
	secs[secTimes], earliest, latest = timesSection(h.times[:n], version)
	secs[secBlocks] = blocksSection(blocks)
	var postings []byte
	td := &dictWriter{postings: &postings, events: n, v1: version == 1}
	bf, ords := termSections(h, td, nil)
	secs[secTermDict], secs[secTermSparse] = td.out, td.sparse
	fd := &dictWriter{postings: &postings, events: n, v1: version == 1}
	usedNames := fieldSections(h, fd, ords, version)
	secs[secFieldDict], secs[secFieldSparse] = fd.out, fd.sparse
	secs[secPostings] = postings
	bloomBytes, _ := bf.MarshalBinary()
	secs[secBloom] = bloomBytes
	var nb []byte
	nb = binary.AppendUvarint(nb, uint64(len(usedNames)))
	for _, name := range usedNames {
		nb = binary.AppendUvarint(nb, uint64(len(name)))
		nb = append(nb, name...)
	}
	secs[secFieldNames] = nb
	return assembleIndex(&secs, version, n, earliest, latest)
}

// timesSection is the times section of events at times (zstd of the unit
// and the deltas, version 1 with no unit), and the earliest and latest of
// them (0 and -1 for none).
func timesSection(times []int64, version byte) (sec []byte, earliest, latest int64) {
	var tb []byte
	earliest, latest = 0, -1
	// version 2: the deltas after the first in units of their greatest
	// common divisor (times sent in ms are ns multiples of 1e6)
	unit := uint64(0)
	for i, t := range times {
		if i > 0 {
			d := t - times[i-1]
			unit = gcd(unit, uint64(max(d, -d)))
		}
		if i == 0 || t < earliest {
			earliest = t
		}
		if i == 0 || t > latest {
			latest = t
		}
	}
	if unit == 0 || version == 1 {
		unit = 1
	}
	if version >= 2 {
		tb = binary.AppendUvarint(tb, unit)
	}
	prev := int64(0)
	for i, t := range times {
		if i == 0 {
			tb = binary.AppendVarint(tb, t)
		} else {
			tb = binary.AppendVarint(tb, (t-prev)/int64(unit))
		}
		prev = t
	}
	return encoder().EncodeAll(tb, nil), earliest, latest
}

// blocksSection is the blocks section: each journal block's frame, events,
// time range and CRC.
func blocksSection(blocks []blockInfo) []byte {
	var bb []byte
	for _, b := range blocks {
		bb = binary.AppendUvarint(bb, uint64(b.off))
		bb = binary.AppendUvarint(bb, uint64(b.frameLen))
		bb = binary.AppendUvarint(bb, uint64(b.events))
		bb = binary.AppendVarint(bb, b.minT)
		bb = binary.AppendVarint(bb, b.maxT)
		bb = binary.AppendUvarint(bb, uint64(b.crc))
	}
	return bb
}

// termSections writes the _raw terms of the first h.n events (h.mu held)
// into the term dictionary td (their long lists to its postings) and
// returns the bloom filter of them. ords is a reusable buffer, returned
// grown.
func termSections(h *hotIndex, td *dictWriter, ords []uint32) (*bloom.BloomFilter, []uint32) {
	n := h.n
	terms := h.terms.sorted()
	live := 0
	for i := range terms {
		if terms[i].first < n {
			live++
		}
	}
	bf := bloom.NewWithEstimates(uint(max(live, 1)), bloomFP)
	for i := range terms {
		ords = h.terms.postingsOf(&terms[i], n, ords[:0])
		if len(ords) == 0 {
			continue
		}
		kb := h.terms.key(terms[i].id)
		td.add(kb, ords)
		bf.Add(kb)
	}
	td.flush()
	return bf, ords
}

// fieldSections writes the indexed fields of the first h.n events (h.mu
// held) that have no column (version 2; every field in version 1) into the
// field dictionary fd (their long lists to its postings), and returns the
// names of the fields any event holds, sorted. ords is a reusable buffer.
func fieldSections(h *hotIndex, fd *dictWriter, ords []uint32, version byte) []string {
	n := h.n
	names := h.fieldNamesLocked()
	var key []byte
	var usedNames []string
	for _, name := range names {
		ft := h.fields[name]
		if len(ft.col) > 0 && version >= 2 {
			// A field with a column (buildColumns: the same test) is
			// answered from it; its values are not indexed twice.
			usedNames = append(usedNames, name)
			continue
		}
		used := false
		vals := ft.sorted()
		for i := range vals {
			ords = ft.postingsOf(&vals[i], n, ords[:0])
			if len(ords) == 0 {
				continue
			}
			key = append(append(append(key[:0], name...), 0), ft.key(vals[i].id)...)
			fd.add(key, ords)
			used = true
		}
		if used {
			usedNames = append(usedNames, name)
		}
	}
	fd.flush()
	return usedNames
}

// assembleIndex lays out an index file: the header, the sections in order,
// and the footer of their offsets and lengths, the event count, the time
// range and the CRC-32C.
func assembleIndex(secs *[numSections][]byte, version byte, n uint32, earliest, latest int64) []byte {
	size := 8 + footerLen
	for _, s := range secs {
		size += len(s)
	}
	out := make([]byte, 0, size)
	if version == 1 {
		out = append(out, indexMagic1[:]...)
	} else {
		out = append(out, indexMagic[:]...)
	}
	out = append(out, inlineMax, 0, 0)
	var offs [numSections][2]uint64
	for i, s := range secs {
		offs[i] = [2]uint64{uint64(len(out)), uint64(len(s))}
		out = append(out, s...)
	}
	for _, o := range offs {
		out = binary.LittleEndian.AppendUint64(out, o[0])
		out = binary.LittleEndian.AppendUint64(out, o[1])
	}
	out = binary.LittleEndian.AppendUint32(out, n)
	out = binary.LittleEndian.AppendUint64(out, uint64(earliest))
	out = binary.LittleEndian.AppendUint64(out, uint64(latest))
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
	out = append(out, footerMagic[:]...)
	return out
}

type sparseEntry struct {
	first string
	off   uint64
	clen  uint64
	n     uint64
	crc   uint32
}

// indexReader reads an index file through pread; it keeps only the small
// sparse dictionaries (and, once asked, the bloom filter) in memory.
type indexReader struct {
	f        *cachedFile // through the store's file cache (filecache.go)
	size     int64
	secs     [numSections][2]uint64
	events   uint32
	earliest int64
	latest   int64
	crc      uint32
	inline   uint64 // lists of at most this many ordinals are inline
	version  byte   // 1: every field in the field dictionary, untagged postings

	termSparse  []sparseEntry
	fieldSparse []sparseEntry
	fieldNames  []string
	blocks      []blockInfo

	cols *colReader // the bucket's column file (colread.go), nil for none

	closed bool // guarded by colCache.mu (decoded times are cached there)

	// The bloom filter, read on first use. A read that failed is not
	// kept (it may be a want of file descriptors), a damaged one is.
	bloomMu  sync.Mutex
	bloom    *bloom.BloomFilter
	bloomErr error

	// presence caches FieldEvents per field (a warm copy never changes).
	presence sync.Map // field -> *roaring.Bitmap
}

func openIndex(path string) (*indexReader, error) { return openIndexIn(nil, path) }

// openIndexIn opens an index file whose descriptor the cache fc holds (a
// plain file when fc is nil).
func openIndexIn(fc *fileCache, path string) (*indexReader, error) {
	f := fc.handle(path)
	r, err := readIndex(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	return r, nil
}

func readIndex(f *cachedFile) (*indexReader, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < int64(8+footerLen) {
		return nil, fmt.Errorf("%w: index file of %d bytes", ErrCorrupt, size)
	}
	head := make([]byte, 8)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, err
	}
	if m := [5]byte(head[:5]); m != indexMagic && m != indexMagic1 {
		return nil, fmt.Errorf("%w: bad index magic %q", ErrCorrupt, head[:5])
	}
	foot := make([]byte, footerLen)
	if _, err := f.ReadAt(foot, size-footerLen); err != nil {
		return nil, err
	}
	if [8]byte(foot[footerLen-8:]) != footerMagic {
		return nil, fmt.Errorf("%w: bad index footer", ErrCorrupt)
	}
	r := &indexReader{f: f, size: size, inline: uint64(head[5]), version: head[4]}
	if r.inline == 0 || r.inline > inlineMax {
		return nil, fmt.Errorf("%w: inline limit %d", ErrCorrupt, head[5])
	}
	p := foot
	for i := range r.secs {
		r.secs[i] = [2]uint64{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])}
		// Compared without adding: a damaged offset + length can wrap.
		if off, n := r.secs[i][0], r.secs[i][1]; off > uint64(size) || n > uint64(size)-off {
			return nil, fmt.Errorf("%w: index section %d out of the file", ErrCorrupt, i)
		}
		p = p[16:]
	}
	r.events = binary.LittleEndian.Uint32(p)
	r.earliest = int64(binary.LittleEndian.Uint64(p[4:]))
	r.latest = int64(binary.LittleEndian.Uint64(p[12:]))
	r.crc = binary.LittleEndian.Uint32(p[20:])
	if r.termSparse, err = r.readSparse(secTermSparse); err != nil {
		return nil, err
	}
	if r.fieldSparse, err = r.readSparse(secFieldSparse); err != nil {
		return nil, err
	}
	nb, err := r.section(secFieldNames)
	if err != nil {
		return nil, err
	}
	pr := &payloadReader{b: nb}
	k := pr.uvarint()
	for i := uint64(0); i < k && pr.err == nil; i++ {
		r.fieldNames = append(r.fieldNames, string(pr.bytes(pr.uvarint())))
	}
	if pr.err != nil {
		return nil, pr.err
	}
	bb, err := r.section(secBlocks)
	if err != nil {
		return nil, err
	}
	pr = &payloadReader{b: bb}
	ord := uint32(0)
	for len(pr.b) > 0 && pr.err == nil {
		b := blockInfo{off: int64(pr.uvarint()), frameLen: int64(pr.uvarint()), events: uint32(pr.uvarint()), firstOrd: ord}
		b.minT, b.maxT = pr.varint(), pr.varint()
		b.crc = uint32(pr.uvarint())
		ord += b.events
		r.blocks = append(r.blocks, b)
	}
	if pr.err != nil {
		return nil, pr.err
	}
	if ord != r.events {
		return nil, fmt.Errorf("%w: index blocks hold %d events, footer says %d", ErrCorrupt, ord, r.events)
	}
	return r, nil
}

// verify checks the whole-file checksum.
func (r *indexReader) verify() error {
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, io.NewSectionReader(r.f, 0, r.size-12)); err != nil {
		return err
	}
	if h.Sum32() != r.crc {
		return fmt.Errorf("%w: index checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, r.crc, h.Sum32())
	}
	return nil
}

func (r *indexReader) section(i int) ([]byte, error) {
	b := make([]byte, r.secs[i][1])
	if _, err := r.f.ReadAt(b, int64(r.secs[i][0])); err != nil {
		return nil, fmt.Errorf("read index section %d: %w", i, err)
	}
	return b, nil
}

func (r *indexReader) readSparse(sec int) ([]sparseEntry, error) {
	b, err := r.section(sec)
	if err != nil {
		return nil, err
	}
	pr := &payloadReader{b: b}
	var out []sparseEntry
	for len(pr.b) > 0 && pr.err == nil {
		e := sparseEntry{first: string(pr.bytes(pr.uvarint()))}
		e.off, e.clen, e.n = pr.uvarint(), pr.uvarint(), pr.uvarint()
		e.crc = uint32(pr.uvarint())
		out = append(out, e)
	}
	return out, pr.err
}

func (r *indexReader) close() error {
	r.cols.close()
	uncacheOwner(r, &r.closed)
	return r.f.Close()
}

// times is every event's time, decoded once and kept with the decoded
// columns (within their budget): a search bounded in time reads them for
// every bucket it does not hold whole, and a timechart for every bucket
// (a 4-hour timechart spent 86 % of its CPU decoding them again).
// Callers share the slice and never change it.
func (r *indexReader) times() ([]int64, error) {
	key := colKey{r, "_time", -1}
	colCache.mu.Lock()
	c := colCache.m[key]
	colCache.mu.Unlock()
	if c != nil {
		return c.Ints, nil
	}
	ts, err := r.decodeTimes()
	if err != nil {
		return nil, err
	}
	cachePut(key, &query.Column{Ints: ts}, &r.closed)
	return ts, nil
}

func (r *indexReader) decodeTimes() ([]int64, error) {
	b, err := r.section(secTimes)
	if err != nil {
		return nil, err
	}
	raw, err := decoder().DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: times: %v", ErrCorrupt, err)
	}
	out := make([]int64, 0, r.events)
	pr := &payloadReader{b: raw}
	unit := int64(1)
	if r.version >= 2 {
		u := pr.uvarint()
		if pr.err == nil && u == 0 {
			return nil, fmt.Errorf("%w: times in units of %d", ErrCorrupt, u)
		}
		unit = int64(u)
	}
	t := int64(0)
	for i := uint32(0); i < r.events; i++ {
		if i == 0 {
			t = pr.varint()
		} else {
			t += pr.varint() * unit
		}
		out = append(out, t)
	}
	if pr.err != nil {
		return nil, pr.err
	}
	return out, nil
}

func (r *indexReader) getBloom() (*bloom.BloomFilter, error) {
	r.bloomMu.Lock()
	defer r.bloomMu.Unlock()
	if r.bloom != nil || r.bloomErr != nil {
		return r.bloom, r.bloomErr
	}
	b, err := r.section(secBloom)
	if err != nil {
		return nil, err // not kept: the next search tries again
	}
	if err := checkBloomSize(b); err != nil {
		r.bloomErr = fmt.Errorf("%w: bloom: %v", ErrCorrupt, err)
		return nil, r.bloomErr
	}
	bf := &bloom.BloomFilter{}
	if err := bf.UnmarshalBinary(b); err != nil {
		r.bloomErr = fmt.Errorf("%w: bloom: %v", ErrCorrupt, err)
		return nil, r.bloomErr
	}
	r.bloom = bf
	return bf, nil
}

// checkBloomSize checks the bloom section's declared sizes against its
// length before the library decodes it: bloom/bitset allocate whatever a
// damaged header says (a makeslice panic, found by FuzzReadIndex). The form
// is m, k (8 bytes each), the bitset's bit length (8 bytes), then its words,
// all big-endian.
func checkBloomSize(b []byte) error {
	if len(b) < 24 {
		return fmt.Errorf("section of %d bytes, want at least 24", len(b))
	}
	bits := binary.BigEndian.Uint64(b[16:24])
	words := bits/64 + min(bits%64, 1)
	if words > uint64(len(b)-24)/8 {
		return fmt.Errorf("bitset of %d bits does not fit in %d bytes", bits, len(b)-24)
	}
	return nil
}

// dictEntry is one decoded dictionary entry; key and inline are only valid
// until the next entry.
type dictEntry struct {
	key    []byte
	count  uint64
	inline []byte // delta uvarints when count <= inlineMax
	off    uint64 // roaring bitmap in the postings section otherwise
	blen   uint64
}

func (r *indexReader) dictSection(sparse int) int {
	if sparse == secTermSparse {
		return secTermDict
	}
	return secFieldDict
}

// scanDict calls fn for each entry starting at the block that may hold
// from, in key order, until fn returns false.
func (r *indexReader) scanDict(sparseSec int, sparse []sparseEntry, from string, fn func(e *dictEntry) bool) error {
	i := sort.Search(len(sparse), func(i int) bool { return sparse[i].first > from }) - 1
	if i < 0 {
		i = 0
	}
	base := r.secs[r.dictSection(sparseSec)][0]
	var e dictEntry
	var comp, raw []byte
	for ; i < len(sparse); i++ {
		s := sparse[i]
		if uint64(cap(comp)) < s.clen {
			comp = make([]byte, s.clen)
		}
		comp = comp[:s.clen]
		if _, err := r.f.ReadAt(comp, int64(base+s.off)); err != nil {
			return fmt.Errorf("read dictionary block: %w", err)
		}
		if crc32.Checksum(comp, castagnoli) != s.crc {
			return fmt.Errorf("%w: dictionary block %d checksum mismatch", ErrCorrupt, i)
		}
		var err error
		raw, err = decoder().DecodeAll(comp, raw[:0])
		if err != nil {
			return fmt.Errorf("%w: dictionary block %d: %v", ErrCorrupt, i, err)
		}
		pr := &payloadReader{b: raw}
		e.key = e.key[:0]
		for j := uint64(0); j < s.n; j++ {
			p := pr.uvarint()
			suf := pr.bytes(pr.uvarint())
			if pr.err != nil || p > uint64(len(e.key)) {
				return fmt.Errorf("%w: dictionary entry", ErrCorrupt)
			}
			e.key = append(e.key[:p], suf...)
			e.count = pr.uvarint()
			if e.count <= r.inline {
				e.inline = pr.bytes(pr.uvarint())
			} else {
				e.inline = nil
				e.off, e.blen = pr.uvarint(), pr.uvarint()
			}
			if pr.err != nil {
				return pr.err
			}
			if string(e.key) < from {
				continue
			}
			if !fn(&e) {
				return nil
			}
		}
	}
	return nil
}

// bitmap materialises an entry's postings.
func (r *indexReader) bitmap(e *dictEntry) (*roaring.Bitmap, error) {
	if e.count <= r.inline {
		pr := &payloadReader{b: e.inline}
		var ords [inlineMax]uint32
		o := uint32(0)
		for i := uint64(0); i < e.count; i++ {
			o += uint32(pr.uvarint())
			ords[i] = o
		}
		if pr.err != nil {
			return nil, pr.err
		}
		return roaring.BitmapOf(ords[:e.count]...), nil
	}
	if e.off > r.secs[secPostings][1] || e.blen > r.secs[secPostings][1]-e.off {
		return nil, fmt.Errorf("%w: postings list out of its section", ErrCorrupt)
	}
	b := make([]byte, e.blen)
	if _, err := r.f.ReadAt(b, int64(r.secs[secPostings][0]+e.off)); err != nil {
		return nil, fmt.Errorf("read postings: %w", err)
	}
	if r.version >= 2 {
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: empty postings list", ErrCorrupt)
		}
		tag := b[0]
		b = b[1:]
		switch tag {
		case postRoaring:
		case postDeltas:
			return deltaBitmap(b, e.count, r.events)
		default:
			return nil, fmt.Errorf("%w: postings list of tag %d", ErrCorrupt, tag)
		}
	}
	bm := roaring.New()
	if err := bm.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%w: postings: %v", ErrCorrupt, err)
	}
	return bm, nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// deltaBitmap decodes a 'D' list of count ordinals below events.
func deltaBitmap(comp []byte, count uint64, events uint32) (*roaring.Bitmap, error) {
	if count > uint64(events) {
		return nil, fmt.Errorf("%w: postings list of %d of %d events", ErrCorrupt, count, events)
	}
	raw, err := decoder().DecodeAll(comp, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: postings: %v", ErrCorrupt, err)
	}
	ords := make([]uint32, 0, count)
	pr := &payloadReader{b: raw}
	o := uint64(0)
	for i := uint64(0); i < count; i++ {
		d := pr.uvarint()
		if pr.err != nil {
			return nil, pr.err
		}
		if (i > 0 && d == 0) || d >= uint64(events) || o+d >= uint64(events) {
			return nil, fmt.Errorf("%w: postings ordinal out of order or range", ErrCorrupt)
		}
		o += d
		ords = append(ords, uint32(o))
	}
	if len(pr.b) != 0 {
		return nil, fmt.Errorf("%w: stray bytes after a postings list", ErrCorrupt)
	}
	bm := roaring.New()
	bm.AddMany(ords)
	return bm, nil
}

// lookup returns the postings of key, nil when absent.
func (r *indexReader) lookup(sparseSec int, sparse []sparseEntry, key string) (*roaring.Bitmap, error) {
	var out *roaring.Bitmap
	var ierr error
	err := r.scanDict(sparseSec, sparse, key, func(e *dictEntry) bool {
		if string(e.key) == key {
			out, ierr = r.bitmap(e)
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return out, ierr
}

// prefix calls fn for every key with the prefix.
func (r *indexReader) prefix(sparseSec int, sparse []sparseEntry, prefix string, fn func(key string, bm *roaring.Bitmap) bool) error {
	var ierr error
	err := r.scanDict(sparseSec, sparse, prefix, func(e *dictEntry) bool {
		if !bytes.HasPrefix(e.key, []byte(prefix)) {
			return false
		}
		bm, err := r.bitmap(e)
		if err != nil {
			ierr = err
			return false
		}
		return fn(string(e.key), bm)
	})
	if err != nil {
		return err
	}
	return ierr
}

func fieldKey(field, value string) string { return field + "\x00" + value }

func (r *indexReader) term(t string) (*roaring.Bitmap, error) {
	return r.lookup(secTermSparse, r.termSparse, t)
}

func (r *indexReader) termsWithPrefix(p string, fn func(string, *roaring.Bitmap) bool) error {
	return r.prefix(secTermSparse, r.termSparse, p, fn)
}

// fromColumns reports a field answered from its column (version 2).
func (r *indexReader) fromColumns(f string) bool {
	return r.version >= 2 && r.cols.meta(f) != nil
}

func (r *indexReader) fieldValue(f, v string) (*roaring.Bitmap, error) {
	if strings.IndexByte(f, 0) >= 0 {
		return nil, nil
	}
	if r.fromColumns(f) {
		return r.cols.fieldValue(f, v)
	}
	return r.lookup(secFieldSparse, r.fieldSparse, fieldKey(f, v))
}

func (r *indexReader) fieldValues(f string, fn func(string, *roaring.Bitmap) bool) error {
	if strings.IndexByte(f, 0) >= 0 {
		return nil
	}
	if r.fromColumns(f) {
		return r.cols.fieldValues(f, fn)
	}
	p := f + "\x00"
	return r.prefix(secFieldSparse, r.fieldSparse, p, func(k string, bm *roaring.Bitmap) bool {
		return fn(k[len(p):], bm)
	})
}

// fieldValueCounts calls fn with each value of field f and the number of
// events holding it, in ascending value order, from the dictionary alone
// (no postings are read).
func (r *indexReader) fieldValueCounts(f string, fn func(string, uint64) bool) error {
	if strings.IndexByte(f, 0) >= 0 {
		return nil
	}
	if r.fromColumns(f) {
		return r.cols.fieldValueCounts(f, fn)
	}
	p := []byte(f + "\x00")
	return r.scanDict(secFieldSparse, r.fieldSparse, string(p), func(e *dictEntry) bool {
		if !bytes.HasPrefix(e.key, p) {
			return false
		}
		return fn(string(e.key[len(p):]), e.count)
	})
}

// fieldEvents is the set of events holding indexed field f. A field whose
// column says every event holds exactly one value (a numeric column with
// no missing event, or a single-valued dictionary column whose values'
// counts add up to every event) holds all events without a postings read;
// any other field is the union of its value postings. Cached per reader.
func (r *indexReader) fieldEvents(f string) (*roaring.Bitmap, error) {
	if v, ok := r.presence.Load(f); ok {
		return v.(*roaring.Bitmap), nil
	}
	if r.fromColumns(f) {
		b, err := r.cols.fieldEvents(f)
		if err != nil {
			return nil, err
		}
		b.RunOptimize()
		r.presence.Store(f, b)
		return b, nil
	}
	all := false
	if m := r.cols.meta(f); m != nil && !defaultFieldName([]byte(f)) {
		switch m.kind {
		case colInt, colFloat:
			all = true
		case colDict:
			// single-valued: each event holding the field counts once
			var sum uint64
			if err := r.fieldValueCounts(f, func(_ string, c uint64) bool { sum += c; return true }); err != nil {
				return nil, err
			}
			all = sum == uint64(r.events)
		}
	}
	b := roaring.New()
	if all {
		b.AddRange(0, uint64(r.events))
	} else {
		var bs []*roaring.Bitmap
		if err := r.fieldValues(f, func(_ string, vb *roaring.Bitmap) bool {
			bs = append(bs, vb)
			return true
		}); err != nil {
			return nil, err
		}
		b = roaring.FastOr(bs...)
	}
	b.RunOptimize()
	r.presence.Store(f, b)
	return b, nil
}
