package query

import (
	"fmt"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
)

// NumericBlocks is an optional extra a ColumnSource may implement: a
// numeric column (integer or float form) cut into blocks, each with the
// smallest and largest of its values, so that a numeric comparison
// (`bytes>100000`, `where status >= 500`) skips the blocks that cannot
// match without decoding them (see DESIGN.md, "Columns").
type NumericBlocks interface {
	// NumericBlocks returns the blocks of a field's numeric column; nil,
	// nil when the field has no column in integer or float form.
	NumericBlocks(field string) (*BlockRanges, error)
	// NumericBlock returns block i of that column as a Column of the
	// block's events (ordinal 0 is the block's first event) in integer or
	// float form.
	NumericBlock(field string, i int) (*Column, error)
}

// BlockRanges describes a numeric column's blocks: block i holds events
// [i*Per, min((i+1)*Per, Events)). Per is a multiple of 64.
type BlockRanges struct {
	Per    uint32
	Events uint32
	Blocks []BlockRange
}

// BlockRange is one block's smallest and largest value (as float64, the
// way comparisons see them) and how many of its events hold a value.
type BlockRange struct {
	Min, Max float64
	Present  uint32
}

// numBlockStats counts numeric blocks skipped by their range, taken whole
// by it, and decoded, and comparisons the postings of a field of few
// values answered (tests read them).
var numBlockStats struct{ skipped, whole, decoded, postings atomic.Int64 }

// valid reports ranges the executor can rely on for a segment of n events.
func (b *BlockRanges) valid(n uint32) bool {
	if b == nil || b.Per == 0 || b.Per%64 != 0 || b.Events < n {
		return false
	}
	return uint64(len(b.Blocks)) == (uint64(b.Events)+uint64(b.Per)-1)/uint64(b.Per)
}

// rangeMatch is what a numeric comparison `v op num` says of a block whose
// values lie in [mn, mx]: -1 none can match, 1 all match, 0 decode it.
// float64 conversion is monotone, so the bounds hold for integer values too.
func rangeMatch(op string, num, mn, mx float64) int {
	switch op {
	case ">":
		if mn > num {
			return 1
		}
		if mx <= num {
			return -1
		}
	case ">=":
		if mn >= num {
			return 1
		}
		if mx < num {
			return -1
		}
	case "<":
		if mx < num {
			return 1
		}
		if mn >= num {
			return -1
		}
	case "<=":
		if mx <= num {
			return 1
		}
		if mn > num {
			return -1
		}
	}
	return 0
}

func cmpNum(op string, v, num float64) bool {
	switch op {
	case ">":
		return v > num
	case ">=":
		return v >= num
	case "<":
		return v < num
	case "<=":
		return v <= num
	}
	return false
}

func isCmpOp(op string) bool { return op == "<" || op == "<=" || op == ">" || op == ">=" }

// numericCands answers `field op number` on an indexed field from its
// numeric column's blocks: a block whose range cannot match is skipped
// undecoded, one whose range matches whole and holds the field in every
// event is taken whole, only the others are decoded — unless the field has
// at most fewValues distinct values, whose postings then answer. ok is false when the
// segment keeps no numeric column for the field (the value postings
// answer instead). Every value of a numeric column is a number, so
// valueCmp compares numerically: the answer is the postings' answer.
func (x *segExec) numericCands(nb NumericBlocks, c *cnode) (cands, bool, error) {
	br, err := nb.NumericBlocks(c.field)
	if err != nil {
		return cands{}, false, fmt.Errorf("column %s: %w", c.field, err)
	}
	if !br.valid(x.n) {
		return cands{}, false, nil
	}
	// First the directory alone: what each block's range says.
	verdict := make([]byte, len(br.Blocks))
	full, decodes := x.blockVerdicts(br, c, verdict)
	var sure *roaring.Bitmap
	if decodes > 0 {
		if sure, err = x.fewValuesMatch(c); err != nil {
			return cands{}, false, err
		}
	}
	if sure == nil {
		if sure, err = x.decodeVerdicts(nb, br, verdict, c); err != nil {
			return cands{}, false, err
		}
	}
	maybe := none()
	if !full {
		has, err := x.hasField(c.field)
		if err != nil {
			return cands{}, false, err
		}
		maybe = andNot(bset{all: true}, has, x.n)
	}
	return cands{sure: bset{b: sure}, maybe: maybe}, true, nil
}

// What a numeric block's range says of a comparison (blockVerdicts).
const (
	blockSkip   = iota // no event can match, or none is in the time range
	blockWhole         // every event holds a value, and every value matches
	blockDecode        // decode it to know
)

// blockVerdicts reads the blocks' ranges alone: it sets a verdict per
// block (verdict is blockSkip for each when called), and reports full when
// every event of the column holds a value, and how many blocks must be
// decoded.
func (x *segExec) blockVerdicts(br *BlockRanges, c *cnode, verdict []byte) (full bool, decodes int) {
	full = true
	for bi, b := range br.Blocks {
		lo := uint32(bi) * br.Per
		if lo >= x.n {
			break
		}
		end := min(lo+br.Per, br.Events) // the block's events
		hi := min(end, x.n)
		if b.Present != end-lo {
			full = false
		}
		switch {
		case b.Present == 0:
		case x.scope.b != nil && !x.scope.all && !x.scope.b.IntersectsWithInterval(uint64(lo), uint64(hi)):
			// outside the time range: whatever it holds is dropped later
		default:
			switch rangeMatch(c.op, c.num, b.Min, b.Max) {
			case -1:
				numBlockStats.skipped.Add(1)
			case 1:
				if b.Present == end-lo {
					verdict[bi] = blockWhole
					break
				}
				fallthrough
			default:
				verdict[bi] = blockDecode
				decodes++
			}
		}
	}
	return full, decodes
}

// fewValuesMatch answers the comparison from the field's value postings
// when it has at most fewValues distinct values, nil when it has more.
func (x *segExec) fewValuesMatch(c *cnode) (*roaring.Bitmap, error) {
	// A field of few values (status) is cheaper from its postings
	// than from decoded blocks: they answer when the walk ends early.
	var match []*roaring.Bitmap
	seen := 0
	var err error
	if fc, ok := x.seg.(FieldCounter); ok {
		// the values' names first, then the matching values' events
		// alone (`status>=400`: 8 of 15 values, none of them 200)
		var names []string
		err = fc.FieldValueCounts(c.field, func(v string, _ uint64) bool {
			if seen++; seen > fewValues {
				return false
			}
			if c.fieldValueMatches(v) {
				names = append(names, v)
			}
			return true
		})
		for _, v := range names {
			if err != nil || seen > fewValues {
				break
			}
			var b *roaring.Bitmap
			if b, err = x.seg.FieldValue(c.field, v); b != nil {
				match = append(match, b)
			}
		}
	} else {
		err = x.seg.FieldValues(c.field, func(v string, b *roaring.Bitmap) bool {
			if seen++; seen > fewValues {
				return false
			}
			if c.fieldValueMatches(v) {
				match = append(match, b)
			}
			return true
		})
	}
	if err != nil {
		return nil, err
	}
	if seen <= fewValues {
		numBlockStats.postings.Add(1)
		return roaring.FastOr(match...), nil
	}
	return nil, nil
}

// decodeVerdicts gathers the matching events block by block: a whole
// block's events in one range, a block to decode compared event by event,
// nothing of a skipped one.
func (x *segExec) decodeVerdicts(nb NumericBlocks, br *BlockRanges, verdict []byte, c *cnode) (*roaring.Bitmap, error) {
	sure := roaring.New()
	var buf []uint32
	for bi, v := range verdict {
		lo := uint32(bi) * br.Per
		end := min(lo+br.Per, br.Events)
		hi := min(end, x.n)
		switch v {
		case blockWhole:
			sure.AddRange(uint64(lo), uint64(hi))
			numBlockStats.whole.Add(1)
			continue
		case blockSkip:
			continue
		}
		col, err := nb.NumericBlock(c.field, bi)
		if err != nil {
			return nil, fmt.Errorf("column %s block %d: %w", c.field, bi, err)
		}
		if col == nil || !col.numeric() || col.Len() != int(end-lo) {
			return nil, fmt.Errorf("column %s block %d: not a numeric block of %d events", c.field, bi, end-lo)
		}
		numBlockStats.decoded.Add(1)
		buf = buf[:0]
		for o := uint32(0); o < hi-lo; o++ {
			if col.Present(o) && cmpNum(c.op, col.Num(o), c.num) {
				buf = append(buf, lo+o)
			}
		}
		sure.AddMany(buf)
	}
	return sure, nil
}

// fewValues is the most distinct values of a field whose postings answer a
// numeric comparison that some block cannot settle by its range (walking
// them costs less than decoding blocks; bytes, with a value per event or
// so, stops the walk at once).
const fewValues = 64

// numFilter is one conjunct `field op number` of a leading where, checked
// on a numeric column before a row is built: an event holding the field
// whose value fails it cannot pass the where (false AND anything is
// false), and a block whose range fails it is passed over whole.
type numFilter struct {
	c    *Column
	op   string
	num  float64
	per  uint32
	dead []bool // per block: no value can pass
}

// whereFilters extracts the numeric conjuncts of a leading where over the
// numeric columns of cs.
func (x *segExec) whereFilters(cs *colSet) []numFilter {
	if len(x.p.pre) == 0 {
		return nil
	}
	w, ok := x.p.pre[0].(WhereCmd)
	if !ok {
		return nil
	}
	var out []numFilter
	var walk func(e Expr)
	walk = func(e Expr) {
		b, ok := e.(binExpr)
		if !ok {
			return
		}
		if b.op == "AND" {
			walk(b.l)
			walk(b.r)
			return
		}
		if !isCmpOp(b.op) {
			return
		}
		op := b.op
		f, fok := b.l.(fieldExpr)
		l, lok := b.r.(litExpr)
		if !fok || !lok {
			// number op field: the mirrored comparison
			f, fok = b.r.(fieldExpr)
			l, lok = b.l.(litExpr)
			op = map[string]string{"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
		}
		num, nok := l.v.(float64)
		if !fok || !lok || !nok {
			return
		}
		for i, name := range cs.names {
			if name != f.name || cs.cols[i] == nil || !cs.cols[i].numeric() {
				continue
			}
			nf := numFilter{c: cs.cols[i], op: op, num: num}
			if nb, ok := x.seg.(NumericBlocks); ok {
				if br, err := nb.NumericBlocks(name); err == nil && br.valid(x.n) {
					nf.per = br.Per
					nf.dead = make([]bool, len(br.Blocks))
					for bi, r := range br.Blocks {
						nf.dead[bi] = r.Present > 0 && rangeMatch(op, num, r.Min, r.Max) < 0
					}
				}
			}
			out = append(out, nf)
		}
	}
	walk(w.Expr)
	return out
}

// drops reports an event the filters prove fails the where.
func dropsRow(fs []numFilter, o uint32) bool {
	for i := range fs {
		f := &fs[i]
		if !f.c.Present(o) {
			continue
		}
		if f.dead != nil && f.dead[o/f.per] {
			return true
		}
		if !cmpNum(f.op, f.c.Num(o), f.num) {
			return true
		}
	}
	return false
}

// ---- MemSegment ----

// memBlockEvents is MemSegment's numeric block size: small, so tests over
// a few hundred events cross many blocks.
const memBlockEvents = 64

// NumericBlocks implements NumericBlocks.
func (m *MemSegment) NumericBlocks(field string) (*BlockRanges, error) {
	c := m.cols[field]
	if c == nil || !c.numeric() {
		return nil, nil
	}
	n := uint32(c.Len())
	br := &BlockRanges{Per: memBlockEvents, Events: n}
	for lo := uint32(0); lo < n; lo += memBlockEvents {
		var r BlockRange
		for o := lo; o < min(lo+memBlockEvents, n); o++ {
			if !c.Present(o) {
				continue
			}
			v := c.Num(o)
			if r.Present == 0 || v < r.Min {
				r.Min = v
			}
			if r.Present == 0 || v > r.Max {
				r.Max = v
			}
			r.Present++
		}
		br.Blocks = append(br.Blocks, r)
	}
	return br, nil
}

// NumericBlock implements NumericBlocks.
func (m *MemSegment) NumericBlock(field string, i int) (*Column, error) {
	c := m.cols[field]
	if c == nil || !c.numeric() {
		return nil, fmt.Errorf("no numeric column %q", field)
	}
	return c.Block(uint32(i)*memBlockEvents, memBlockEvents), nil
}

// Block is the numeric column's events [lo, lo+per) as a column of their
// own (sharing the arrays); lo must be a multiple of 64.
func (c *Column) Block(lo, per uint32) *Column {
	n := uint32(c.Len())
	hi := min(lo+per, n)
	out := &Column{}
	if c.Ints != nil {
		out.Ints = c.Ints[lo:hi:hi]
	} else {
		out.Floats = c.Floats[lo:hi:hi]
	}
	if c.Has != nil {
		out.Has = c.Has[lo/64 : (hi+63)/64]
	}
	return out
}
