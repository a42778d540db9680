package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"unsafe"

	"github.com/quarry-dev/quarry/query"
)

// Reading a column file (the format is in columns.go): the reader, its
// cache of decoded columns, and the decoders.

type colBlob struct {
	off, n uint64
	crc    uint32
}

type colBlock struct {
	blob    colBlob
	min     int64 // integer kinds
	max     int64
	fmin    float64 // float kinds
	fmax    float64
	present uint64
}

type colMeta struct {
	name   string
	kind   byte
	values uint64
	dict   colBlob
	blocks []colBlock

	// version 3 dictionary kinds: values and counts, read on first use
	countsOnce sync.Once
	dictVals   []string
	dictCnts   []uint64
	countsErr  error

	// kind 7: the values, read on first use
	fewOnce sync.Once
	few     []int64
	fewErr  error
}

// fewInts returns a kind 7 column's values (in rank order).
func (r *colReader) fewInts(ra io.ReaderAt, m *colMeta) ([]int64, error) {
	m.fewOnce.Do(func() {
		raw, err := r.blob(ra, m.dict, nil)
		if err != nil {
			m.fewErr = err
			return
		}
		if m.values > colFewInts || m.values == 0 {
			m.fewErr = fmt.Errorf("%w: column %s of %d few values", ErrCorrupt, m.name, m.values)
			return
		}
		pr := &payloadReader{b: raw}
		vals := make([]int64, m.values)
		for i := range vals {
			vals[i] = pr.varint()
		}
		if pr.err == nil && len(pr.b) != 0 {
			pr.err = fmt.Errorf("%w: stray bytes after column %s's values", ErrCorrupt, m.name)
		}
		m.few, m.fewErr = vals, pr.err
	})
	return m.few, m.fewErr
}

// colReader reads a column file through pread; it keeps the directory.
type colReader struct {
	f       *cachedFile // through the store's file cache (filecache.go)
	version byte
	size    int64
	events  uint32
	per     uint32
	crc     uint32
	cols    map[string]*colMeta

	closed bool // guarded by colCache.mu
}

// openColumnsIn opens a column file whose descriptor the cache fc holds (a
// plain file when fc is nil).
func openColumnsIn(fc *fileCache, path string) (*colReader, error) {
	f := fc.handle(path)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r, err := readColumns(f, st.Size())
	if err == nil {
		// The whole file is checked once at open (a bucket's columns are
		// about a megabyte): a damaged footer or directory can then not
		// make a reader allocate what it says.
		err = r.verify()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("columns %s: %w", path, err)
	}
	return r, nil
}

func readColumns(f io.ReaderAt, size int64) (*colReader, error) {
	if size < int64(8+colFooterLen) {
		return nil, fmt.Errorf("%w: column file of %d bytes", ErrCorrupt, size)
	}
	head := make([]byte, 8)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, err
	}
	if [4]byte(head[:4]) != [4]byte(colMagic[:4]) {
		return nil, fmt.Errorf("%w: bad column file magic %q", ErrCorrupt, head[:5])
	}
	if v := head[4]; v < 1 || v > colVersion {
		return nil, fmt.Errorf("%w: column file version %d", ErrUnsupported, v)
	}
	foot := make([]byte, colFooterLen)
	if _, err := f.ReadAt(foot, size-colFooterLen); err != nil {
		return nil, err
	}
	if [8]byte(foot[colFooterLen-8:]) != colFooterMagic {
		return nil, fmt.Errorf("%w: bad column file footer", ErrCorrupt)
	}
	dirOff, dirLen := binary.LittleEndian.Uint64(foot), binary.LittleEndian.Uint64(foot[8:])
	body := uint64(size - colFooterLen)
	if dirOff < 8 || dirOff > body || dirLen > body-dirOff {
		return nil, fmt.Errorf("%w: column directory out of the file", ErrCorrupt)
	}
	r := &colReader{version: head[4], size: size, events: binary.LittleEndian.Uint32(foot[16:]), crc: binary.LittleEndian.Uint32(foot[20:]),
		cols: map[string]*colMeta{}}
	if fl, ok := f.(*cachedFile); ok {
		r.f = fl
	}
	dir := make([]byte, dirLen)
	if _, err := f.ReadAt(dir, int64(dirOff)); err != nil {
		return nil, err
	}
	pr := &payloadReader{b: dir}
	per := pr.uvarint()
	if pr.err == nil && (per == 0 || per > 1<<24) {
		return nil, fmt.Errorf("%w: column block of %d events", ErrCorrupt, per)
	}
	r.per = uint32(per)
	wantBlocks := (uint64(r.events) + per - 1) / max(per, 1)
	blobOK := func(b colBlob) bool { return b.off >= 8 && b.off <= dirOff && b.n <= dirOff-b.off }
	readBlob := func() colBlob {
		return colBlob{off: pr.uvarint(), n: pr.uvarint(), crc: uint32(pr.uvarint())}
	}
	ncols := pr.uvarint()
	prev := ""
	for i := uint64(0); i < ncols && pr.err == nil; i++ {
		m := &colMeta{name: string(pr.bytes(pr.uvarint()))}
		kb := pr.bytes(1)
		if pr.err != nil {
			break
		}
		m.kind = kb[0]
		maxKind := byte(colIntFew)
		switch r.version {
		case 1:
			maxKind = colIntSparse
		case 2:
			maxKind = colFloatSparse
		}
		if m.kind < colDict || m.kind > maxKind {
			return nil, fmt.Errorf("%w: column %q of kind %d", ErrCorrupt, m.name, m.kind)
		}
		if i > 0 && m.name <= prev {
			return nil, fmt.Errorf("%w: column names out of order", ErrCorrupt)
		}
		prev = m.name
		if m.kind <= colDictMulti || m.kind == colIntFew {
			m.values = pr.uvarint()
			m.dict = readBlob()
			if pr.err == nil && !blobOK(m.dict) {
				return nil, fmt.Errorf("%w: column %q dictionary out of the file", ErrCorrupt, m.name)
			}
		}
		nb := pr.uvarint()
		if pr.err == nil && nb != wantBlocks {
			return nil, fmt.Errorf("%w: column %q has %d blocks, want %d", ErrCorrupt, m.name, nb, wantBlocks)
		}
		for b := uint64(0); b < nb && pr.err == nil; b++ {
			bl := colBlock{blob: readBlob()}
			switch {
			case colFloats(m.kind):
				mn, mx := pr.bytes(8), pr.bytes(8)
				if pr.err != nil {
					break
				}
				bl.fmin = math.Float64frombits(binary.LittleEndian.Uint64(mn))
				bl.fmax = math.Float64frombits(binary.LittleEndian.Uint64(mx))
				bl.present = pr.uvarint()
				if bl.present > 0 && !(bl.fmin <= bl.fmax) || math.IsInf(bl.fmin, 0) || math.IsInf(bl.fmax, 0) {
					return nil, fmt.Errorf("%w: column %q block %d range [%v, %v]", ErrCorrupt, m.name, b, bl.fmin, bl.fmax)
				}
			case colNumeric(m.kind):
				bl.min, bl.max, bl.present = pr.varint(), pr.varint(), pr.uvarint()
			}
			if lo := b * per; pr.err == nil && bl.present > min(lo+per, uint64(r.events))-min(lo, uint64(r.events)) {
				return nil, fmt.Errorf("%w: column %q block %d claims %d values", ErrCorrupt, m.name, b, bl.present)
			}
			if pr.err == nil && !blobOK(bl.blob) {
				return nil, fmt.Errorf("%w: column %q block %d out of the file", ErrCorrupt, m.name, b)
			}
			m.blocks = append(m.blocks, bl)
		}
		r.cols[m.name] = m
	}
	if pr.err != nil {
		return nil, pr.err
	}
	if len(pr.b) != 0 {
		return nil, fmt.Errorf("%w: %d stray bytes after the column directory", ErrCorrupt, len(pr.b))
	}
	return r, nil
}

func (r *colReader) close() error {
	if r == nil || r.f == nil {
		return nil
	}
	r.uncache()
	r.uncacheIndexes()
	return r.f.Close()
}

// verify checks the whole-file checksum.
func (r *colReader) verify() error {
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, io.NewSectionReader(r.f, 0, r.size-12)); err != nil {
		return err
	}
	if h.Sum32() != r.crc {
		return fmt.Errorf("%w: column file checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, r.crc, h.Sum32())
	}
	return nil
}

func (r *colReader) blob(ra io.ReaderAt, b colBlob, buf []byte) ([]byte, error) {
	// the compressed bytes in a buffer reused between blobs: a first run
	// reads a thousand blocks, each into fresh memory before
	cp, _ := compScratch.Get().(*[]byte)
	if cp == nil {
		cp = new([]byte)
	}
	defer compScratch.Put(cp)
	if uint64(cap(*cp)) < b.n {
		*cp = make([]byte, b.n)
	}
	comp := (*cp)[:b.n]
	if _, err := ra.ReadAt(comp, int64(b.off)); err != nil {
		return nil, fmt.Errorf("read column blob: %w", err)
	}
	if crc32.Checksum(comp, castagnoli) != b.crc {
		return nil, fmt.Errorf("%w: column blob at %d checksum mismatch", ErrCorrupt, b.off)
	}
	out, err := decoder().DecodeAll(comp, buf[:0])
	if err != nil {
		return nil, fmt.Errorf("%w: column blob at %d: %v", ErrCorrupt, b.off, err)
	}
	return out, nil
}

// compScratch holds blob's compressed bytes between reads.
var compScratch sync.Pool

// column decodes one column. Decoded columns are cached across searches
// (a warm column never changes) within a global byte budget, so repeated
// aggregations over the same fields skip the decompression.
func (r *colReader) column(field string) (*query.Column, error) {
	m := r.cols[field]
	if m == nil {
		return nil, nil
	}
	key := colKey{r, field, -1}
	colCache.mu.Lock()
	c := colCache.m[key]
	colCache.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := r.decode(r.f, m)
	if err != nil {
		return nil, fmt.Errorf("column %s: %w", field, err)
	}
	r.cacheColumn(key, c)
	return c, nil
}

// cacheColumn keeps a decoded column (or block) within the budget.
func (r *colReader) cacheColumn(key colKey, c *query.Column) { cachePut(key, c, &r.closed) }

// cachePut keeps c under key within the budget unless its owner is closed
// (*closed is guarded by colCache.mu).
func cachePut(key colKey, c *query.Column, closed *bool) {
	size := columnBytes(c)
	colCache.mu.Lock()
	defer colCache.mu.Unlock()
	if _, ok := colCache.m[key]; ok {
		return
	}
	if size > colCacheBytes/4 || *closed {
		return
	}
	// evict entries (map order: random) until this one fits, rather than
	// dropping every column at once
	for k, old := range colCache.m {
		if colCache.bytes+size <= colCacheBytes {
			break
		}
		colCache.bytes -= columnBytes(old)
		delete(colCache.m, k)
	}
	colCache.m[key] = c
	colCache.bytes += size
}

// colCacheBytes is the budget of decoded warm columns kept in memory: the
// field-value bench queries read about 300 MB of decoded columns on the 5M
// set; 96 MiB made each query's first run decode them again.
const colCacheBytes = 256 << 20

type colKey struct {
	r     any // the *colReader (or *indexReader: its times) that read it
	field string
	block int32 // -1: the whole column
}

var colCache = struct {
	mu    sync.Mutex
	m     map[colKey]*query.Column
	bytes int64
}{m: map[colKey]*query.Column{}}

func columnBytes(c *query.Column) int64 {
	n := int64(len(c.IDs))*4 + int64(len(c.IDs16))*2 + int64(len(c.Small)) + int64(len(c.Ints))*8 + int64(len(c.Floats))*8 + int64(len(c.Has))*8 + int64(len(c.Multi))*48
	for _, v := range c.Dict {
		n += int64(len(v)) + 16
	}
	return n
}

// uncache drops a closed reader's columns from the cache.
func (r *colReader) uncache() { uncacheOwner(r, &r.closed) }

// uncacheOwner marks a reader closed and drops what it cached.
func uncacheOwner(owner any, closed *bool) {
	colCache.mu.Lock()
	defer colCache.mu.Unlock()
	*closed = true
	for k, c := range colCache.m {
		if k.r == owner {
			colCache.bytes -= columnBytes(c)
			delete(colCache.m, k)
		}
	}
}

func (r *colReader) decode(ra io.ReaderAt, m *colMeta) (*query.Column, error) {
	n := r.events
	c := &query.Column{}
	var raw []byte
	var err error
	if m.kind <= colDictMulti {
		if c.Dict, _, err = r.readDict(ra, m, false); err != nil {
			return nil, err
		}
		c.DictSorted = true // readDict refuses a dictionary out of order
		if m.kind == colDict && len(c.Dict) <= 255 {
			// one byte an event (query.Column.Small): a quarter of the
			// memory a first run faults in and of what the cache holds
			c.Small = make([]uint8, 0, n)
		} else if m.kind == colDict && len(c.Dict) <= math.MaxUint16 {
			// two bytes an event (query.Column.IDs16): path on the 5M
			// set, ~23k values a bucket, 10 MB instead of 20 to fault in
			c.IDs16 = make([]uint16, 0, n)
		} else {
			c.IDs = make([]uint32, 0, n)
		}
	} else if m.kind == colIntFew {
		// a whole column of few integers is read as a dictionary of their
		// texts with one byte an event (the values' texts are in byte
		// order, as a dictionary's): status over the 5M set is 5 MB to
		// fault in and keep instead of 40 MB of int64 (and 20 more of
		// ranks to invert it). Row values are the same texts, and an
		// aggregate parses each once (a canonical integer parses to the
		// float64 its int64 converts to). Blocks read alone
		// (numericBlock) stay integers.
		few, err := r.fewInts(ra, m)
		if err != nil {
			return nil, err
		}
		c.Dict = make([]string, len(few))
		for i, v := range few {
			c.Dict[i] = strconv.FormatInt(v, 10)
			if i > 0 && c.Dict[i] <= c.Dict[i-1] {
				return nil, fmt.Errorf("%w: column %s's values out of order", ErrCorrupt, m.name)
			}
		}
		c.DictSorted = true
		c.Small = make([]uint8, 0, n)
	} else {
		newNumeric(c, m.kind, n)
	}
	for bi := range m.blocks {
		if raw, err = r.decodeBlock(ra, m, bi, c, 0, raw); err != nil {
			return nil, err
		}
	}
	if err := c.Validate(n); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return c, nil
}

// readDict reads a dictionary column's values and (version 3) their
// event counts, nil before.
func (r *colReader) readDict(ra io.ReaderAt, m *colMeta, wantCounts bool) ([]string, []uint64, error) {
	raw, err := r.blob(ra, m.dict, nil)
	if err != nil {
		return nil, nil, err
	}
	if m.values > uint64(len(raw)) {
		return nil, nil, fmt.Errorf("%w: %d dictionary values in %d bytes", ErrCorrupt, m.values, len(raw))
	}
	hasCounts := r.version >= 3
	var counts []uint64
	if hasCounts && wantCounts {
		counts = make([]uint64, 0, m.values)
	}
	// A first pass adds up the values' lengths, so that their text is one
	// allocation of its size, never moved, from which each value is cut
	// as it is read: appending grew it by copies, then copied it into a
	// string, beside a slice of ends (a third of the first run of
	// `status=500 | stats dc(path) avg(bytes)`, and fresh memory there
	// costs ~15 µs a page). A value is at most len(raw) bytes and there
	// are at most len(raw) values: the sum cannot overflow.
	total, prev := uint64(0), uint64(0)
	pr := &payloadReader{b: raw}
	for i := uint64(0); i < m.values && pr.err == nil; i++ {
		p := pr.uvarint()
		n := pr.uvarint()
		pr.bytes(n)
		if hasCounts {
			pr.uvarint()
		}
		if p > prev {
			return nil, nil, fmt.Errorf("%w: column dictionary entry %d", ErrCorrupt, i)
		}
		prev = p + n
		total += prev
	}
	if pr.err != nil {
		return nil, nil, fmt.Errorf("%w: column dictionary of %d values in %d bytes", ErrCorrupt, m.values, len(raw))
	}
	pr = &payloadReader{b: raw}
	var key []byte
	all := make([]byte, 0, total)
	dict := make([]string, 0, m.values)
	for i := uint64(0); i < m.values; i++ {
		p := pr.uvarint()
		suf := pr.bytes(pr.uvarint())
		if pr.err != nil || p > uint64(len(key)) {
			return nil, nil, fmt.Errorf("%w: column dictionary entry %d", ErrCorrupt, i)
		}
		key = append(key[:p], suf...)
		if i > 0 && string(key) <= dict[i-1] {
			return nil, nil, fmt.Errorf("%w: column dictionary out of order", ErrCorrupt)
		}
		v := ""
		if len(key) > 0 {
			start := len(all)
			all = append(all, key...) // within total: all never moves
			v = unsafe.String(&all[start], len(key))
		}
		dict = append(dict, v)
		if hasCounts {
			c := pr.uvarint()
			if pr.err != nil || c == 0 || c > uint64(r.events) {
				return nil, nil, fmt.Errorf("%w: column dictionary count %d", ErrCorrupt, c)
			}
			if counts != nil {
				counts = append(counts, c)
			}
		}
	}
	if len(pr.b) != 0 {
		return nil, nil, fmt.Errorf("%w: stray bytes after the column dictionary", ErrCorrupt)
	}
	return dict, counts, nil
}

// dictCounts is a version 3 dictionary column's values and counts (read
// once), nil for any other column.
func (r *colReader) dictCounts(m *colMeta) ([]string, []uint64, error) {
	if r.version < 3 || m.kind > colDictMulti {
		return nil, nil, nil
	}
	m.countsOnce.Do(func() {
		m.dictVals, m.dictCnts, m.countsErr = r.readDict(r.f, m, true)
	})
	return m.dictVals, m.dictCnts, m.countsErr
}

// appendIDs appends n dictionary ids (uvarints, each at most d) read from
// b to ids (the caller chose T wide enough for d): one tight loop, a
// one-byte id without a call. It returns what is left of b.
func appendIDs[T uint16 | uint32](ids []T, b []byte, n int, d uint64) ([]T, []byte, error) {
	for range n {
		var id uint64
		if len(b) > 0 && b[0] < 0x80 {
			id, b = uint64(b[0]), b[1:]
		} else {
			v, k := binary.Uvarint(b)
			if k <= 0 {
				return ids, b, fmt.Errorf("%w: bad uvarint", ErrCorrupt)
			}
			id, b = v, b[k:]
		}
		if id > d {
			return ids, b, fmt.Errorf("%w: column value %d of %d", ErrCorrupt, id, d)
		}
		ids = append(ids, T(id))
	}
	return ids, b, nil
}

// newNumeric readies c to receive n events of a numeric kind.
func newNumeric(c *query.Column, kind byte, n uint32) {
	if colFloats(kind) {
		c.Floats = make([]float64, 0, n)
	} else {
		c.Ints = make([]int64, 0, n)
	}
	if colSparse(kind) {
		c.Has = make([]uint64, (n+63)/64)
	}
}

// decodeBlock appends block bi's events to c, whose ordinal 0 is event
// base of the file (0 for a whole column, the block's first event for a
// block alone); raw is a reusable buffer, returned grown.
func (r *colReader) decodeBlock(ra io.ReaderAt, m *colMeta, bi int, c *query.Column, base uint32, raw []byte) ([]byte, error) {
	bl := m.blocks[bi]
	lo := uint32(bi) * r.per
	hi := min(lo+r.per, r.events)
	raw, err := r.blob(ra, bl.blob, raw)
	if err != nil {
		return raw, err
	}
	d := uint64(len(c.Dict))
	if m.kind == colDict && len(raw) == int(hi-lo) && appendByteRanks(c, raw, d) {
		return raw, nil
	}
	if m.kind == colIntFew {
		return raw, r.decodeFewIntsBlock(ra, m, bi, &bl, c, raw, lo, hi)
	}
	if m.kind == colInt {
		return raw, decodeIntBlock(raw, bi, &bl, c, lo, hi)
	}
	if m.kind == colDict && c.Small == nil {
		return raw, decodeDictIDsBlock(raw, bi, c, lo, hi, d)
	}
	pr := &payloadReader{b: raw}
	present := uint64(0)
	if colNumeric(m.kind) {
		present, err = decodeNumericEvents(pr, &bl, c, m.kind, lo, hi, base)
	} else {
		err = decodeDictEvents(pr, c, m.kind, lo, hi, base, d)
	}
	if err != nil {
		return raw, err
	}
	if pr.err != nil {
		return raw, pr.err
	}
	if len(pr.b) != 0 {
		return raw, fmt.Errorf("%w: stray bytes in column block %d", ErrCorrupt, bi)
	}
	if colNumeric(m.kind) && present != bl.present {
		return raw, fmt.Errorf("%w: column block %d holds %d values, directory says %d", ErrCorrupt, bi, present, bl.present)
	}
	return raw, nil
}

// appendByteRanks appends a kind 1 block of one byte an event to c when
// every rank in raw is under 128 (a field of few values) and at most d, and
// reports whether it did; it appends nothing when it does not.
func appendByteRanks(c *query.Column, raw []byte, d uint64) bool {
	for _, b := range raw {
		if b >= 0x80 || uint64(b) > d {
			return false
		}
	}
	if c.Small != nil {
		c.Small = append(c.Small, raw...)
		return true
	}
	if c.IDs16 != nil {
		for _, b := range raw {
			c.IDs16 = append(c.IDs16, uint16(b))
		}
		return true
	}
	for _, b := range raw {
		c.IDs = append(c.IDs, uint32(b))
	}
	return true
}

// decodeFewIntsBlock appends a kind 7 block's events [lo, hi) to c: each a
// byte, the rank of its value, kept as it is for a column read whole as a
// dictionary (c.Small), else looked up as an integer.
func (r *colReader) decodeFewIntsBlock(ra io.ReaderAt, m *colMeta, bi int, bl *colBlock, c *query.Column, raw []byte, lo, hi uint32) error {
	few, err := r.fewInts(ra, m)
	if err != nil {
		return err
	}
	if len(raw) != int(hi-lo) || uint64(hi-lo) != bl.present {
		return fmt.Errorf("%w: column block %d of %d bytes for %d events", ErrCorrupt, bi, len(raw), hi-lo)
	}
	for _, b := range raw {
		if int(b) >= len(few) {
			return fmt.Errorf("%w: column value %d of %d", ErrCorrupt, b, len(few))
		}
		v := few[b]
		if v < bl.min || v > bl.max {
			return fmt.Errorf("%w: column value %d outside its block's [%d, %d]", ErrCorrupt, v, bl.min, bl.max)
		}
		if c.Small != nil {
			c.Small = append(c.Small, b+1) // b < len(few) ≤ 127
			continue
		}
		c.Ints = append(c.Ints, v)
	}
	return nil
}

// decodeIntBlock appends a kind 3 block's events [lo, hi) to c: every
// event holds a value, a zigzag varint relative to the one before, read in
// one tight loop.
func decodeIntBlock(raw []byte, bi int, bl *colBlock, c *query.Column, lo, hi uint32) error {
	prev := int64(0)
	b := raw
	for o := lo; o < hi; o++ {
		d, k := binary.Varint(b)
		if k <= 0 {
			return fmt.Errorf("%w: bad varint in column block %d", ErrCorrupt, bi)
		}
		b = b[k:]
		v := prev + d
		if v < bl.min || v > bl.max {
			return fmt.Errorf("%w: column value %d outside its block's [%d, %d]", ErrCorrupt, v, bl.min, bl.max)
		}
		c.Ints = append(c.Ints, v)
		prev = v
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: stray bytes in column block %d", ErrCorrupt, bi)
	}
	if uint64(hi-lo) != bl.present {
		return fmt.Errorf("%w: column block %d holds %d values, directory says %d", ErrCorrupt, bi, hi-lo, bl.present)
	}
	return nil
}

// decodeDictIDsBlock appends a kind 1 block's events [lo, hi) to c as two-
// or four-byte ids (a dictionary of many values: path, clientip), each at
// most d: one tight loop, a one-byte id without a call.
func decodeDictIDsBlock(raw []byte, bi int, c *query.Column, lo, hi uint32, d uint64) error {
	var b []byte
	var err error
	if c.IDs16 != nil {
		c.IDs16, b, err = appendIDs(c.IDs16, raw, int(hi-lo), d)
	} else {
		c.IDs, b, err = appendIDs(c.IDs, raw, int(hi-lo), d)
	}
	if err != nil {
		return fmt.Errorf("%w in column block %d", err, bi)
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: stray bytes in column block %d", ErrCorrupt, bi)
	}
	return nil
}

// decodeDictEvents appends the events [lo, hi) of a dictionary block (kind
// 1 into c.Small, or kind 2) read from pr to c, whose ordinal 0 is event
// base; ids are at most d. A bad varint stops it with pr.err set.
func decodeDictEvents(pr *payloadReader, c *query.Column, kind byte, lo, hi, base uint32, d uint64) error {
	for o := lo; o < hi && pr.err == nil; o++ {
		switch kind {
		case colDict:
			id := pr.uvarint()
			if id > d {
				return fmt.Errorf("%w: column value %d of %d", ErrCorrupt, id, d)
			}
			if c.Small != nil {
				c.Small = append(c.Small, uint8(id)) // d ≤ 255
				continue
			}
			c.IDs = append(c.IDs, uint32(id))
		case colDictMulti:
			k := pr.uvarint()
			if k == 0 {
				c.IDs = append(c.IDs, 0)
				continue
			}
			if k > uint64(len(pr.b)) {
				return fmt.Errorf("%w: %d values of one event", ErrCorrupt, k)
			}
			for j := uint64(0); j < k; j++ {
				id := pr.uvarint()
				if id >= d {
					return fmt.Errorf("%w: column value %d of %d", ErrCorrupt, id, d)
				}
				if j == 0 {
					c.IDs = append(c.IDs, uint32(id)+1)
					continue
				}
				if c.Multi == nil {
					c.Multi = map[uint32][]uint32{}
				}
				c.Multi[o-base] = append(c.Multi[o-base], uint32(id)+1)
			}
		}
	}
	return nil
}

// decodeNumericEvents appends the events [lo, hi) of a block of sparse
// integers or of floats (kinds 4, 5, 6) read from pr to c, whose ordinal 0
// is event base, and returns how many hold a value. A bad varint or a
// block cut short stops it with pr.err set.
func decodeNumericEvents(pr *payloadReader, bl *colBlock, c *query.Column, kind byte, lo, hi, base uint32) (uint64, error) {
	var bm []byte
	if colSparse(kind) {
		bm = pr.bytes(uint64(hi-lo+7) / 8)
	}
	prev := int64(0)
	present := uint64(0)
	floats := colFloats(kind)
	for o := lo; o < hi && pr.err == nil; o++ {
		if bm != nil && bm[(o-lo)/8]>>((o-lo)%8)&1 == 0 {
			if floats {
				c.Floats = append(c.Floats, 0)
			} else {
				c.Ints = append(c.Ints, 0)
			}
			continue
		}
		if c.Has != nil {
			c.Has[(o-base)>>6] |= 1 << ((o - base) & 63)
		}
		present++
		if floats {
			b := pr.bytes(8)
			if pr.err != nil {
				break
			}
			v := math.Float64frombits(binary.LittleEndian.Uint64(b))
			if !(v >= bl.fmin && v <= bl.fmax) {
				return present, fmt.Errorf("%w: column value %v outside its block's [%v, %v]", ErrCorrupt, v, bl.fmin, bl.fmax)
			}
			c.Floats = append(c.Floats, v)
			continue
		}
		v := prev + pr.varint()
		if pr.err == nil && (v < bl.min || v > bl.max) {
			return present, fmt.Errorf("%w: column value %d outside its block's [%d, %d]", ErrCorrupt, v, bl.min, bl.max)
		}
		c.Ints = append(c.Ints, v)
		prev = v
	}
	return present, nil
}

// Column implements query.ColumnSource for a warm copy.
func (w *warmSegment) Column(field string) (*query.Column, error) {
	if w.r.cols == nil {
		return nil, nil
	}
	return w.r.cols.column(field)
}

// meta is a column's directory entry, nil when the file (or r) has none.
func (r *colReader) meta(field string) *colMeta {
	if r == nil {
		return nil
	}
	return r.cols[field]
}

// columnNames lists the columns of a file (tests, tools).
func (r *colReader) columnNames() []string {
	names := make([]string, 0, len(r.cols))
	for n := range r.cols {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NumericBlocks implements query.NumericBlocks for a warm copy: the
// directory's per-block min/max of an integer or float column (no blob is
// read).
func (w *warmSegment) NumericBlocks(field string) (*query.BlockRanges, error) {
	if w.r.cols == nil {
		return nil, nil
	}
	return w.r.cols.numericBlocks(field), nil
}

// NumericBlock implements query.NumericBlocks for a warm copy.
func (w *warmSegment) NumericBlock(field string, i int) (*query.Column, error) {
	if w.r.cols == nil {
		return nil, fmt.Errorf("no columns")
	}
	return w.r.cols.numericBlock(field, i)
}

func (r *colReader) numericBlocks(field string) *query.BlockRanges {
	m := r.cols[field]
	if m == nil || !colNumeric(m.kind) || r.per%64 != 0 {
		return nil
	}
	br := &query.BlockRanges{Per: r.per, Events: r.events, Blocks: make([]query.BlockRange, len(m.blocks))}
	for i, b := range m.blocks {
		br.Blocks[i] = query.BlockRange{Min: float64(b.min), Max: float64(b.max), Present: uint32(b.present)}
		if colFloats(m.kind) {
			br.Blocks[i].Min, br.Blocks[i].Max = b.fmin, b.fmax
		}
	}
	return br
}

// numericBlock decodes block i of a numeric column alone (a slice of the
// whole column when that is cached); decoded blocks are cached like
// columns.
func (r *colReader) numericBlock(field string, i int) (*query.Column, error) {
	m := r.cols[field]
	if m == nil || !colNumeric(m.kind) || i < 0 || i >= len(m.blocks) {
		return nil, fmt.Errorf("column %s has no numeric block %d", field, i)
	}
	lo := uint32(i) * r.per
	colCache.mu.Lock()
	whole := colCache.m[colKey{r, field, -1}]
	c := colCache.m[colKey{r, field, int32(i)}]
	colCache.mu.Unlock()
	if whole != nil && (whole.Ints != nil || whole.Floats != nil) {
		return whole.Block(lo, r.per), nil
	}
	if whole != nil && whole.Small != nil && m.kind == colIntFew && c == nil {
		// few integers read whole as a dictionary: the block's values
		// from its ranks, no blob read
		few, err := r.fewInts(r.f, m)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", field, err)
		}
		hi := min(lo+r.per, r.events)
		c = &query.Column{Ints: make([]int64, hi-lo)}
		for o, id := range whole.Small[lo:hi] {
			c.Ints[o] = few[id-1] // every event holds a value (kind 7)
		}
		r.cacheColumn(colKey{r, field, int32(i)}, c)
		return c, nil
	}
	if c != nil {
		return c, nil
	}
	c = &query.Column{}
	n := min(lo+r.per, r.events) - lo
	newNumeric(c, m.kind, n)
	if _, err := r.decodeBlock(r.f, m, i, c, lo, nil); err != nil {
		return nil, fmt.Errorf("column %s block %d: %w", field, i, err)
	}
	if err := c.Validate(n); err != nil {
		return nil, fmt.Errorf("column %s block %d: %w: %v", field, i, ErrCorrupt, err)
	}
	r.cacheColumn(colKey{r, field, int32(i)}, c)
	return c, nil
}
