package store

import (
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/quarry-dev/quarry/query"
)

// A copy longer than its bucket's sealed length (SPEC §4 "Extending a
// seal": blocks a cut-off or restarted origin wrote past the seal, on the
// copy until the managers extend the seal or a truncate cuts them) is
// searched as the sealed copy it contains: its first sealed blocks, when
// the block at the sealed length carries the sealed checksum. Its marker
// then proves exactly the sealed length (SPEC §5 "Completeness"), so the
// search head counts the bucket whole from it instead of refusing a copy
// that merely holds more — the answer is the bucket as the table the
// search used describes it. Once the seal is extended, a new generation
// and the new length make the extra blocks searchable.

// SegmentPrefix is SegmentLength for a bucket the caller knows to be
// sealed at blocks blocks whose last carries checksum: a longer copy whose
// block at that length carries that checksum is searched as its first
// blocks blocks (a prefix segment, length exactly the seal); any other
// copy is returned as SegmentLength returns it (the head judges it).
func (s *Store) SegmentPrefix(id string, blocks int64, checksum string) (query.Segment, CopyLength) {
	seg, l := s.SegmentLength(id)
	if seg == nil || blocks <= 0 || checksum == "" || l.Blocks <= blocks {
		return seg, l
	}
	b := s.bucket(id)
	b.mu.RLock()
	if int64(len(b.blocks)) < blocks || fmt.Sprintf("%08x", b.blocks[blocks-1].crc) != checksum {
		b.mu.RUnlock()
		return seg, l
	}
	last := b.blocks[blocks-1]
	b.mu.RUnlock()
	n := last.firstOrd + last.events
	switch v := seg.(type) {
	case *hotSegment:
		if v.n < n {
			return seg, l
		}
		return &hotSegment{b: v.b, h: v.h, n: n, times: v.times[:n:n]}, CopyLength{Blocks: blocks, Checksum: checksum, Hot: true}
	case *warmSegment:
		if v.r.events < n {
			return seg, l
		}
		return &warmPrefix{w: v, n: n}, CopyLength{Blocks: blocks, Checksum: checksum}
	}
	return seg, l
}

// warmPrefix is a warm copy's first n events (whole blocks): every bitmap
// the copy's index answers is cut to ordinals below n. It implements only
// query.Segment and query.RawSource: the column and counting fast paths
// read whole columns, so the executor takes its general path here.
type warmPrefix struct {
	w *warmSegment
	n uint32
}

var (
	_ query.Segment   = (*warmPrefix)(nil)
	_ query.RawSource = (*warmPrefix)(nil)
)

func (p *warmPrefix) BucketID() string { return p.w.BucketID() }
func (p *warmPrefix) Index() string    { return p.w.Index() }
func (p *warmPrefix) Len() uint32      { return p.n }

func (p *warmPrefix) Bounds() (int64, int64) {
	ts, err := p.Times()
	if err != nil || len(ts) == 0 {
		return p.w.Bounds() // wider than the prefix: only ever used to prune less
	}
	lo, hi := ts[0], ts[0]
	for _, t := range ts {
		lo, hi = min(lo, t), max(hi, t)
	}
	return lo, hi
}

func (p *warmPrefix) Times() ([]int64, error) {
	ts, err := p.w.Times()
	if err != nil {
		return nil, err
	}
	if uint32(len(ts)) > p.n {
		ts = ts[:p.n]
	}
	return ts, nil
}

func (p *warmPrefix) MayContain(term string) bool { return p.w.MayContain(term) }

// cut limits a bitmap to the prefix; nil when nothing is left.
func (p *warmPrefix) cut(bm *roaring.Bitmap) *roaring.Bitmap {
	if bm == nil {
		return nil
	}
	if last, ok := maxOf(bm); ok && last < p.n {
		return bm
	}
	out := bm.Clone()
	out.RemoveRange(uint64(p.n), uint64(1)<<32)
	if out.IsEmpty() {
		return nil
	}
	return out
}

func maxOf(bm *roaring.Bitmap) (uint32, bool) {
	if bm.IsEmpty() {
		return 0, false
	}
	return bm.Maximum(), true
}

func (p *warmPrefix) Term(term string) (*roaring.Bitmap, error) {
	bm, err := p.w.Term(term)
	return p.cut(bm), err
}

func (p *warmPrefix) TermsWithPrefix(prefix string, fn func(string, *roaring.Bitmap) bool) error {
	return p.w.TermsWithPrefix(prefix, func(t string, bm *roaring.Bitmap) bool {
		if c := p.cut(bm); c != nil {
			return fn(t, c)
		}
		return true
	})
}

func (p *warmPrefix) IndexedFields() []string { return p.w.IndexedFields() }

func (p *warmPrefix) FieldValue(field, value string) (*roaring.Bitmap, error) {
	bm, err := p.w.FieldValue(field, value)
	return p.cut(bm), err
}

func (p *warmPrefix) FieldValues(field string, fn func(string, *roaring.Bitmap) bool) error {
	return p.w.FieldValues(field, func(v string, bm *roaring.Bitmap) bool {
		if c := p.cut(bm); c != nil {
			return fn(v, c)
		}
		return true
	})
}

func (p *warmPrefix) Events(ords *roaring.Bitmap, fn func(uint32, *query.Event) bool) error {
	return readEvents(p.w.b, p.w.units(), p.n, ords, fn)
}

func (p *warmPrefix) RawEvents(ords *roaring.Bitmap, fn func(uint32, []byte) bool) error {
	return readRaws(p.w.b, p.w.units(), p.n, ords, fn)
}
