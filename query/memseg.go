package query

import (
	"math"
	"sort"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
)

// MemSegment is an in-memory Segment built with the same Tokenizer as the
// on-disk index: the executor's tests, the oracle tests and the bench's
// in-process fallback run over it. It is immutable once built.
type MemSegment struct {
	id, index string
	events    []Event
	times     []int64
	terms     map[string]*roaring.Bitmap
	sorted    []string
	fields    map[string]map[string]*roaring.Bitmap
	fsorted   map[string][]string
	fcounts   map[string][]uint64
	fnames    []string
	lo, hi    int64
	cols      map[string]*Column
}

// NewMemSegment indexes events (ordinal = position) as bucket id of index.
func NewMemSegment(id, index string, events []Event) *MemSegment {
	m := &MemSegment{id: id, index: index, events: events,
		terms: map[string]*roaring.Bitmap{}, fields: map[string]map[string]*roaring.Bitmap{},
		fsorted: map[string][]string{}, fcounts: map[string][]uint64{}, lo: math.MaxInt64, hi: math.MinInt64}
	var tk Tokenizer
	cb := ColumnBuilder{Index: true}
	addField := func(name, val string, ord uint32) {
		vm := m.fields[name]
		if vm == nil {
			vm = map[string]*roaring.Bitmap{}
			m.fields[name] = vm
		}
		b := vm[val]
		if b == nil {
			b = roaring.New()
			vm[val] = b
		}
		b.Add(ord)
	}
	for i := range events {
		ev := &events[i]
		ord := uint32(i)
		m.times = append(m.times, ev.Time)
		m.lo = min(m.lo, ev.Time)
		m.hi = max(m.hi, ev.Time)
		cb.Add(ev)
		tk.Tokenize([]byte(ev.Raw), func(tok []byte) {
			b := m.terms[string(tok)]
			if b == nil {
				b = roaring.New()
				m.terms[string(tok)] = b
			}
			b.Add(ord)
		})
		addField("host", ev.Host, ord)
		addField("source", ev.Source, ord)
		addField("sourcetype", ev.Sourcetype, ord)
		for _, f := range ev.Fields {
			if isDefaultField(f.Name) {
				continue
			}
			addField(f.Name, f.Value, ord)
		}
	}
	if len(events) == 0 {
		m.lo, m.hi = 0, -1
	}
	for t := range m.terms {
		m.sorted = append(m.sorted, t)
	}
	sort.Strings(m.sorted)
	for f, vm := range m.fields {
		m.fnames = append(m.fnames, f)
		var vs []string
		for v := range vm {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		m.fsorted[f] = vs
		cs := make([]uint64, len(vs))
		for i, v := range vs {
			cs[i] = vm[v].GetCardinality()
		}
		m.fcounts[f] = cs
	}
	sort.Strings(m.fnames)
	m.cols = cb.Columns()
	return m
}

// Column implements ColumnSource.
func (m *MemSegment) Column(field string) (*Column, error) { return m.cols[field], nil }

func (m *MemSegment) BucketID() string { return m.id }
func (m *MemSegment) Index() string    { return m.index }
func (m *MemSegment) Len() uint32      { return uint32(len(m.events)) }
func (m *MemSegment) Bounds() (int64, int64) {
	return m.lo, m.hi
}
func (m *MemSegment) Times() ([]int64, error) { return m.times, nil }
func (m *MemSegment) MayContain(term string) bool {
	_, ok := m.terms[term]
	return ok
}
func (m *MemSegment) Term(term string) (*roaring.Bitmap, error) { return m.terms[term], nil }
func (m *MemSegment) TermsWithPrefix(prefix string, fn func(string, *roaring.Bitmap) bool) error {
	i := sort.SearchStrings(m.sorted, prefix)
	for ; i < len(m.sorted) && strings.HasPrefix(m.sorted[i], prefix); i++ {
		if !fn(m.sorted[i], m.terms[m.sorted[i]]) {
			break
		}
	}
	return nil
}
func (m *MemSegment) IndexedFields() []string { return m.fnames }
func (m *MemSegment) FieldValue(field, value string) (*roaring.Bitmap, error) {
	return m.fields[field][value], nil
}
func (m *MemSegment) FieldValues(field string, fn func(string, *roaring.Bitmap) bool) error {
	for _, v := range m.fsorted[field] {
		if !fn(v, m.fields[field][v]) {
			break
		}
	}
	return nil
}

// FieldValueCounts implements FieldCounter.
func (m *MemSegment) FieldValueCounts(field string, fn func(string, uint64) bool) error {
	cs := m.fcounts[field]
	for i, v := range m.fsorted[field] {
		if !fn(v, cs[i]) {
			break
		}
	}
	return nil
}

func (m *MemSegment) Events(ords *roaring.Bitmap, fn func(uint32, *Event) bool) error {
	if ords == nil {
		for i := range m.events {
			if !fn(uint32(i), &m.events[i]) {
				return nil
			}
		}
		return nil
	}
	it := ords.Iterator()
	for it.HasNext() {
		o := it.Next()
		if int(o) >= len(m.events) {
			break
		}
		if !fn(o, &m.events[o]) {
			return nil
		}
	}
	return nil
}
