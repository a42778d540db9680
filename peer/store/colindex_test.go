package store

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"pgregory.net/rapid"
)

// fieldAnswers is what a segment says about its indexed fields: per field,
// each value's events, its count, and the events holding the field.
type fieldAnswers struct {
	fields []string
	values map[string]map[string][]uint32
	counts map[string]map[string]uint64
	has    map[string][]uint32
}

func readFieldAnswers(t interface{ Fatalf(string, ...any) }, seg interface {
	IndexedFields() []string
	FieldValues(string, func(string, *roaring.Bitmap) bool) error
}) fieldAnswers {
	a := fieldAnswers{fields: seg.IndexedFields(), values: map[string]map[string][]uint32{}, counts: map[string]map[string]uint64{}, has: map[string][]uint32{}}
	for _, f := range a.fields {
		a.values[f] = map[string][]uint32{}
		a.counts[f] = map[string]uint64{}
		var bs []*roaring.Bitmap
		prev := ""
		first := true
		if err := seg.FieldValues(f, func(v string, b *roaring.Bitmap) bool {
			if !first && v <= prev {
				t.Fatalf("field %s: value %q after %q", f, v, prev)
			}
			first, prev = false, v
			a.values[f][v] = b.ToArray()
			a.counts[f][v] = b.GetCardinality()
			bs = append(bs, b)
			return true
		}); err != nil {
			t.Fatalf("field values %s: %v", f, err)
		}
		a.has[f] = roaring.FastOr(bs...).ToArray()
	}
	return a
}

// TestWarmFieldsFromColumnsMatchPostings: a warm copy (index version 2)
// answers field=value, a field's values, their counts and the events
// holding a field from its columns exactly as the hot copy's postings do;
// its index and columns rebuilt from the journal are byte-identical, and
// its field dictionary holds only fields without a column.
func TestWarmFieldsFromColumnsMatchPostings(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "store-colidx")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := Open(Options{Dir: dir, GUID: testGUID, Searchable: true, BlockBytes: 2000})
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		// both ways to build a value's events: kept bitmaps, counting sort
		defer func(k int) { keptValues = k }(keptValues)
		keptValues = rapid.SampledFrom([]int{1024, 2}).Draw(rt, "kept")
		n := rapid.IntRange(1, 600).Draw(rt, "n")
		var evs []Event
		for i := 0; i < n; i++ {
			evs = append(evs, genColEvent(rt, i))
		}
		if unit := rapid.SampledFrom([]int64{0, 1000, 1_000_000}).Draw(rt, "unit"); unit > 0 {
			// whole units (times sent in ms): the times section stores
			// deltas in units of their gcd
			for i := range evs {
				evs[i].Time = evs[i].Time/unit*unit - int64(rapid.IntRange(0, 2).Draw(rt, "back"))*unit
			}
		}
		if _, err := s.Append(evs); err != nil {
			rt.Fatal(err)
		}
		if err := s.WaitIdle(10 * time.Second); err != nil {
			rt.Fatal(err)
		}
		hot := s.Segments()[0].(*hotSegment)
		want := readFieldAnswers(rt, hot)
		wantTimes, _ := hot.Times()
		s.RollAll()
		if err := s.WaitIdle(10 * time.Second); err != nil {
			rt.Fatal(err)
		}
		w, ok := s.Segments()[0].(*warmSegment)
		if !ok {
			rt.Fatalf("segment is %T after roll", s.Segments()[0])
		}
		if w.r.version != indexVersion {
			rt.Fatalf("index version %d", w.r.version)
		}
		if ts, err := w.Times(); err != nil || !reflect.DeepEqual(ts, wantTimes) {
			rt.Fatalf("warm times %v, %v; want %v", ts, err, wantTimes)
		}
		got := readFieldAnswers(rt, w)
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("warm fields differ from hot postings:\nwarm %v\nhot  %v", got, want)
		}
		for _, f := range want.fields {
			for v, ords := range want.values[f] {
				b, err := w.FieldValue(f, v)
				if err != nil || b == nil || !reflect.DeepEqual(b.ToArray(), ords) {
					rt.Fatalf("FieldValue(%s, %q) = %v, %v; want %v", f, v, b, err, ords)
				}
			}
			for _, v := range []string{"", "0500", "nosuch", "200", "1.5", "-12", "1.50"} {
				if _, ok := want.values[f][v]; ok {
					continue
				}
				if b, err := w.FieldValue(f, v); err != nil || (b != nil && !b.IsEmpty()) {
					rt.Fatalf("FieldValue(%s, %q) = %v, %v; want none", f, v, b, err)
				}
			}
			counts := map[string]uint64{}
			if err := w.FieldValueCounts(f, func(v string, c uint64) bool { counts[v] = c; return true }); err != nil {
				rt.Fatal(err)
			}
			if !reflect.DeepEqual(counts, want.counts[f]) {
				rt.Fatalf("FieldValueCounts(%s) = %v, want %v", f, counts, want.counts[f])
			}
			// counts within a set of events (FieldCounterIn)
			set := roaring.New()
			step := uint32(rapid.IntRange(1, 5).Draw(rt, "step"))
			for o := uint32(0); o < w.Len(); o += step {
				set.Add(o)
			}
			wantIn := map[string]uint64{}
			for v, ords := range want.values[f] {
				for _, o := range ords {
					if set.Contains(o) {
						wantIn[v]++
					}
				}
			}
			gotIn := map[string]uint64{}
			prevIn := ""
			ok, err := w.FieldValueCountsIn(f, set, func(v string, c uint64) bool {
				if len(gotIn) > 0 && v <= prevIn {
					rt.Fatalf("FieldValueCountsIn(%s): %q after %q", f, v, prevIn)
				}
				prevIn = v
				gotIn[v] = c
				return true
			})
			if err != nil || (ok && !reflect.DeepEqual(gotIn, wantIn)) {
				rt.Fatalf("FieldValueCountsIn(%s) = %v, %v, %v; want %v", f, gotIn, ok, err, wantIn)
			}
			if ok != (w.r.cols.meta(f) != nil) {
				rt.Fatalf("FieldValueCountsIn(%s) answered %v", f, ok)
			}
			has, err := w.FieldEvents(f)
			if err != nil {
				rt.Fatal(err)
			}
			if got := has.ToArray(); !reflect.DeepEqual(got, want.has[f]) && !(len(got) == 0 && len(want.has[f]) == 0) {
				rt.Fatalf("FieldEvents(%s) = %v, want %v", f, got, want.has[f])
			}
		}
		// Only fields without a column keep postings.
		if err := w.r.scanDict(secFieldSparse, w.r.fieldSparse, "", func(e *dictEntry) bool {
			name := string(e.key[:bytes.IndexByte(e.key, 0)])
			if w.r.cols.meta(name) != nil {
				rt.Fatalf("field %s has a column and postings", name)
			}
			return true
		}); err != nil {
			rt.Fatal(err)
		}
		b := s.bucket(w.BucketID())
		h, err := indexJournal(b.rd, b.blocks)
		if err != nil {
			rt.Fatal(err)
		}
		// A version 1 index (every field in its dictionary, bare roaring
		// lists) of the same events still reads the same.
		p1 := filepath.Join(dir, "v1.qi")
		if err := os.WriteFile(p1, buildIndexVersion(h, b.blocks, 1), 0o644); err != nil {
			rt.Fatal(err)
		}
		r1, err := openIndex(p1)
		if err != nil {
			rt.Fatal(err)
		}
		r1.cols = w.r.cols
		defer func() { r1.cols = nil; r1.close() }()
		if r1.version != 1 {
			rt.Fatalf("v1 index reads as version %d", r1.version)
		}
		if ts, err := r1.times(); err != nil || !reflect.DeepEqual(ts, wantTimes) {
			rt.Fatalf("v1 times %v, %v; want %v", ts, err, wantTimes)
		}
		if old := readFieldAnswers(rt, &warmSegment{b: b, r: r1}); !reflect.DeepEqual(old, want) {
			rt.Fatalf("version 1 fields differ:\nv1  %v\nhot %v", old, want)
		}
		for _, term := range []string{"event", "word1", "u1x", "status", "404", "nosuch"} {
			t2, err2 := w.r.term(term)
			t1, err1 := r1.term(term)
			if err1 != nil || err2 != nil || (t1 == nil) != (t2 == nil) || (t1 != nil && !t1.Equals(t2)) {
				rt.Fatalf("term %q: v1 %v %v, v2 %v %v", term, t1, err1, t2, err2)
			}
		}
		for file, again := range map[string][]byte{indexFile: buildIndex(h, b.blocks), columnsFile: buildColumns(h)} {
			written, err := os.ReadFile(filepath.Join(b.dir, file))
			if err != nil {
				rt.Fatal(err)
			}
			if !bytes.Equal(again, written) {
				rt.Fatalf("%s rebuilt from the journal differs from the file (%d vs %d bytes)", file, len(again), len(written))
			}
		}
	})
}

// TestPostingsDeltaLists: a sparse long list is written as zstd deltas
// ('D'), a dense one as roaring ('R'); both read back exactly.
func TestPostingsDeltaLists(t *testing.T) {
	const events = 100000
	var postings []byte
	d := &dictWriter{postings: &postings, events: events}
	var sparse, dense []uint32
	for o := uint32(0); o < events; o += 97 {
		sparse = append(sparse, o)
	}
	for o := uint32(0); o < events; o += 2 {
		dense = append(dense, o)
	}
	d.add([]byte("dense"), dense)
	d.add([]byte("sparse"), sparse)
	d.flush()
	if postings[0] != postRoaring {
		t.Fatalf("dense list tagged %q", postings[0])
	}
	p := filepath.Join(t.TempDir(), "x")
	// read back through an index reader over a minimal file
	r := &indexReader{inline: inlineMax, version: indexVersion, events: events}
	os.WriteFile(p, postings, 0o644)
	r.f = (*fileCache)(nil).handle(p)
	defer r.f.Close()
	r.secs[secPostings] = [2]uint64{0, uint64(len(postings))}
	raw, err := decoder().DecodeAll(d.out, nil)
	if err != nil {
		t.Fatal(err)
	}
	pr := &payloadReader{b: raw}
	var key []byte
	for _, want := range [][]uint32{dense, sparse} {
		p := pr.uvarint()
		key = append(key[:p], pr.bytes(pr.uvarint())...)
		e := dictEntry{key: key, count: pr.uvarint()}
		e.off, e.blen = pr.uvarint(), pr.uvarint()
		if string(key) == "sparse" && postings[e.off] != postDeltas {
			t.Fatalf("sparse list tagged %q", postings[e.off])
		}
		bm, err := r.bitmap(&e)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(bm.ToArray(), want) {
			t.Fatalf("list %s read back wrong", key)
		}
	}
}
