package query

// The column model: ColumnSource, Column and its encodings, and the
// ColumnBuilder the store writes columns with. Planning and execution over
// columns are in colplan.go, the dictionary-id aggregation in fastagg.go.

import (
	"fmt"
	"math"
	"strconv"
)

// ColumnSource is an optional extra a Segment may implement: the values of
// its indexed fields per event, read from a column store instead of the
// raw events. A Segment without it is searched by decoding events, as
// before; with it, a pipeline that needs only indexed fields (and _time,
// index, splunk_server, _bkt, _cd) reads columns and never decodes _raw
// for the events the index proves (see DESIGN.md, "Columns").
type ColumnSource interface {
	// Column returns the column of an indexed field for the segment's Len()
	// events; nil, nil when the segment keeps no column for it. host,
	// source and sourcetype hold the event's metadata only (an indexed
	// field that reuses a default field's name never reaches a row).
	Column(field string) (*Column, error)
}

// Column is the values of one indexed field for events 0..n-1, in one of
// three forms:
//
//   - dictionary (Ints == nil): Dict holds the distinct values in any order;
//     IDs[ord] is 0 when the event lacks the field, else 1 + the index in
//     Dict of its first value; Multi[ord], when present, lists the further
//     values (1 + index each) of a multivalue event in the order sent.
//   - integers (Ints != nil): every value is a canonical decimal int64
//     (strconv.FormatInt gives it back exactly) and no event holds two;
//     Ints[ord] is the value and Has (a bitset, nil when every event has a
//     value) says which events hold one.
//   - floats (Floats != nil): every value is a finite number whose shortest
//     decimal form (strconv.FormatFloat(v, 'f', -1, 64)) is its exact
//     bytes — fields holding numbers with decimals, or ints and floats
//     mixed — and no event holds two; Floats[ord] and Has as for integers.
//
// A dictionary column of at most 255 values and no multivalue event may
// hold its ids in Small (one byte an event) instead of IDs: Small[ord] is
// what IDs[ord] would be. A column a first run decodes is a quarter the
// memory (sourcetype, host, method: 5 MB instead of 20 on the 5M set).
// One of at most 65,535 values and no multivalue event may hold them in
// IDs16 (two bytes an event) instead: path, ~23k values a bucket.
//
// A Column is owned by the caller once returned (a source may share it
// between searches only if it never changes it).
type Column struct {
	Dict []string
	// DictSorted, set by a source whose dictionary is in ascending byte
	// order (a warm copy's, checked as it is read), spares the executor
	// checking it: `stats dc(clientip) by host` compared every value
	// of every group once more only to find each run sorted.
	DictSorted bool
	IDs        []uint32
	IDs16      []uint16
	Small      []uint8
	Multi      map[uint32][]uint32
	Ints       []int64
	Floats     []float64
	Has        []uint64
}

// numeric reports a column in integer or float form.
func (c *Column) numeric() bool { return c.Ints != nil || c.Floats != nil }

// Num is event ord's value as a float64 (numeric forms only; 0 when absent).
func (c *Column) Num(ord uint32) float64 {
	if c.Ints != nil {
		return float64(c.Ints[ord])
	}
	return c.Floats[ord]
}

// Len is the number of events the column describes.
func (c *Column) Len() int {
	if c.Ints != nil {
		return len(c.Ints)
	}
	if c.Floats != nil {
		return len(c.Floats)
	}
	if c.Small != nil {
		return len(c.Small)
	}
	if c.IDs16 != nil {
		return len(c.IDs16)
	}
	return len(c.IDs)
}

// ID is event ord's dictionary id (dictionary forms only): 0 when absent,
// else 1 + the index in Dict of its first value.
func (c *Column) ID(ord uint32) uint32 {
	if c.Small != nil {
		return uint32(c.Small[ord])
	}
	if c.IDs16 != nil {
		return uint32(c.IDs16[ord])
	}
	return c.IDs[ord]
}

// Present reports whether event ord holds a value.
func (c *Column) Present(ord uint32) bool {
	if c.numeric() {
		if int(ord) >= c.Len() {
			return false
		}
		return c.Has == nil || c.Has[ord>>6]>>(ord&63)&1 != 0
	}
	return int(ord) < c.Len() && c.ID(ord) != 0
}

// Value is event ord's value as a row holds it: a string, a []string for a
// multivalue event, nil when absent.
func (c *Column) Value(ord uint32) any {
	if !c.Present(ord) {
		return nil
	}
	if c.Ints != nil {
		return strconv.FormatInt(c.Ints[ord], 10)
	}
	if c.Floats != nil {
		return strconv.FormatFloat(c.Floats[ord], 'f', -1, 64)
	}
	first := c.Dict[c.ID(ord)-1]
	more := c.Multi[ord]
	if len(more) == 0 {
		return first
	}
	out := make([]string, 0, 1+len(more))
	out = append(out, first)
	for _, id := range more {
		out = append(out, c.Dict[id-1])
	}
	return out
}

// Validate checks the column's internal references for n events: a
// ColumnSource reading files hands only validated columns to the executor.
func (c *Column) Validate(n uint32) error {
	if c.Ints != nil && c.Floats != nil {
		return fmt.Errorf("column in both integer and float form")
	}
	if c.numeric() {
		if c.Len() != int(n) {
			return fmt.Errorf("numeric column of %d values for %d events", c.Len(), n)
		}
		if c.Has != nil && len(c.Has) != int(n+63)/64 {
			return fmt.Errorf("presence bitset of %d words for %d events", len(c.Has), n)
		}
		if len(c.IDs) != 0 || len(c.IDs16) != 0 || len(c.Small) != 0 || len(c.Multi) != 0 || len(c.Dict) != 0 {
			return fmt.Errorf("numeric column with dictionary ids")
		}
		for _, f := range c.Floats {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("float column holding %v", f)
			}
		}
		return nil
	}
	if c.Small != nil {
		if len(c.IDs) != 0 || len(c.IDs16) != 0 || len(c.Multi) != 0 || len(c.Dict) > 255 {
			return fmt.Errorf("one-byte dictionary column with %d ids, %d multivalue events, %d values", len(c.IDs), len(c.Multi), len(c.Dict))
		}
	}
	if c.IDs16 != nil {
		if len(c.IDs) != 0 || len(c.Multi) != 0 || len(c.Dict) > math.MaxUint16 {
			return fmt.Errorf("two-byte dictionary column with %d ids, %d multivalue events, %d values", len(c.IDs), len(c.Multi), len(c.Dict))
		}
	}
	if c.Len() != int(n) {
		return fmt.Errorf("dictionary column of %d ids for %d events", c.Len(), n)
	}
	d := uint32(len(c.Dict))
	for _, id := range c.Small {
		if uint32(id) > d {
			return fmt.Errorf("dictionary id %d beyond %d values", id, d)
		}
	}
	for _, id := range c.IDs {
		if id > d {
			return fmt.Errorf("dictionary id %d beyond %d values", id, d)
		}
	}
	for _, id := range c.IDs16 {
		if uint32(id) > d {
			return fmt.Errorf("dictionary id %d beyond %d values", id, d)
		}
	}
	for ord, more := range c.Multi {
		if ord >= n || c.IDs[ord] == 0 {
			return fmt.Errorf("multivalue entry for event %d without a first value", ord)
		}
		for _, id := range more {
			if id == 0 || id > d {
				return fmt.Errorf("dictionary id %d beyond %d values", id, d)
			}
		}
	}
	return nil
}

// CanonicalInt returns s as an int64 when s is exactly the decimal form
// strconv.FormatInt gives (no sign plus, no leading zeros, no spaces), so
// an integer column gives every value back byte for byte.
func CanonicalInt(s string) (int64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != s {
		return 0, false
	}
	return v, true
}

// CanonicalFloat returns s as a float64 when s is a finite number written
// exactly as strconv.FormatFloat(v, 'f', -1, 64) writes it (the shortest
// decimal that reads back as v: "0.25", "-3", "1.5"; not "1.50", "1e5",
// "+2", "NaN"), so a float column gives every value back byte for byte.
func CanonicalFloat(s string) (float64, bool) {
	if s == "" || len(s) > 40 {
		return 0, false
	}
	if c := s[0]; !(c >= '0' && c <= '9' || c == '-') {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || strconv.FormatFloat(v, 'f', -1, 64) != s {
		return 0, false
	}
	return v, true
}

// ColumnBuilder builds the columns of a run of events, one per indexed
// field, the way a row sees them: host, source and sourcetype from the
// event's metadata, every other field from its indexed fields (a field
// named like a default field is left out, as rows leave it out; a repeated
// name is a multivalue).
type ColumnBuilder struct {
	// Index adds an "index" column from Event.Index (segments whose
	// events may belong to other indexes than Segment.Index).
	Index bool
	n     uint32
	cols  map[string]*colBuild
}

type colBuild struct {
	ids   []uint32
	multi map[uint32][]uint32
	dict  map[string]uint32
	vals  []string
	last  uint32 // ordinal+1 of the last event that set a value
}

// Add appends the next event.
func (b *ColumnBuilder) Add(ev *Event) {
	if b.cols == nil {
		b.cols = map[string]*colBuild{}
	}
	ord := b.n
	b.add("host", ev.Host, ord)
	b.add("source", ev.Source, ord)
	b.add("sourcetype", ev.Sourcetype, ord)
	if b.Index {
		b.add("index", ev.Index, ord)
	}
	for _, f := range ev.Fields {
		if !isDefaultField(f.Name) {
			b.add(f.Name, f.Value, ord)
		}
	}
	b.n++
}

func (b *ColumnBuilder) add(name, v string, ord uint32) {
	c := b.cols[name]
	if c == nil {
		c = &colBuild{dict: map[string]uint32{}}
		b.cols[name] = c
	}
	id, ok := c.dict[v]
	if !ok {
		c.vals = append(c.vals, v)
		id = uint32(len(c.vals))
		c.dict[v] = id
	}
	if c.last == ord+1 {
		if c.multi == nil {
			c.multi = map[uint32][]uint32{}
		}
		c.multi[ord] = append(c.multi[ord], id)
		return
	}
	for uint32(len(c.ids)) < ord {
		c.ids = append(c.ids, 0)
	}
	c.ids = append(c.ids, id)
	c.last = ord + 1
}

// Columns returns the columns of the events added so far: integer form
// when every value of a single-valued field is a canonical integer.
func (b *ColumnBuilder) Columns() map[string]*Column {
	out := make(map[string]*Column, len(b.cols))
	for name, c := range b.cols {
		ids := append([]uint32(nil), c.ids...)
		for uint32(len(ids)) < b.n {
			ids = append(ids, 0)
		}
		col := &Column{Dict: append([]string(nil), c.vals...), IDs: ids}
		if len(c.multi) > 0 {
			col.Multi = make(map[uint32][]uint32, len(c.multi))
			for o, m := range c.multi {
				col.Multi[o] = append([]uint32(nil), m...)
			}
		}
		out[name] = SmallColumn(NumericColumn(col))
	}
	return out
}

// wideIDs returns a column whose ids are in IDs16 with them in IDs (a
// copy), else c itself: for the conversions below, which read IDs.
func wideIDs(c *Column) *Column {
	if c.IDs16 == nil {
		return c
	}
	out := *c
	out.IDs16 = nil
	out.IDs = make([]uint32, len(c.IDs16))
	for o, id := range c.IDs16 {
		out.IDs[o] = uint32(id)
	}
	return &out
}

// SmallColumn returns a dictionary column of at most 255 values and no
// multivalue event with its ids in Small, else c itself.
func SmallColumn(c *Column) *Column {
	if c.numeric() || c.Small != nil || c.IDs16 != nil || len(c.Multi) > 0 || len(c.Dict) > 255 {
		return c
	}
	out := &Column{Dict: c.Dict, Small: make([]uint8, len(c.IDs))}
	for o, id := range c.IDs {
		out.Small[o] = uint8(id)
	}
	return out
}

// NumericColumn returns c in integer form when it qualifies, else in float
// form when it qualifies (single-valued, every value a CanonicalFloat),
// else c itself.
func NumericColumn(c *Column) *Column {
	if c.IDs16 != nil {
		if out := NumericColumn(wideIDs(c)); out.numeric() {
			return out
		}
		return c
	}
	if out := IntColumn(c); out != c {
		return out
	}
	if c.Ints != nil || c.Floats != nil || c.Small != nil || len(c.Multi) > 0 || len(c.Dict) == 0 {
		return c
	}
	nums := make([]float64, len(c.Dict))
	for i, v := range c.Dict {
		x, ok := CanonicalFloat(v)
		if !ok {
			return c
		}
		nums[i] = x
	}
	out := &Column{Floats: make([]float64, len(c.IDs))}
	for o, id := range c.IDs {
		if id == 0 {
			if out.Has == nil {
				out.Has = make([]uint64, (len(c.IDs)+63)/64)
				for p := 0; p < o; p++ {
					out.Has[p>>6] |= 1 << (p & 63)
				}
			}
			continue
		}
		out.Floats[o] = nums[id-1]
		if out.Has != nil {
			out.Has[o>>6] |= 1 << (o & 63)
		}
	}
	return out
}

// IntColumn returns c in integer form when it qualifies (single-valued,
// every value a canonical integer), else c itself.
func IntColumn(c *Column) *Column {
	if c.IDs16 != nil {
		if out := IntColumn(wideIDs(c)); out.Ints != nil {
			return out
		}
		return c
	}
	if c.Ints != nil || c.Floats != nil || c.Small != nil || len(c.Multi) > 0 || len(c.Dict) == 0 {
		return c
	}
	nums := make([]int64, len(c.Dict))
	for i, v := range c.Dict {
		x, ok := CanonicalInt(v)
		if !ok {
			return c
		}
		nums[i] = x
	}
	out := &Column{Ints: make([]int64, len(c.IDs))}
	all := true
	for _, id := range c.IDs {
		if id == 0 {
			all = false
			break
		}
	}
	if !all {
		out.Has = make([]uint64, (len(c.IDs)+63)/64)
	}
	for o, id := range c.IDs {
		if id == 0 {
			continue
		}
		out.Ints[o] = nums[id-1]
		if out.Has != nil {
			out.Has[o>>6] |= 1 << (o & 63)
		}
	}
	return out
}
