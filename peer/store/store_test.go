package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/query"
	"pgregory.net/rapid"
)

const testGUID = "0123456789abcdef0123456789abcdef"

func mustOpen(t *testing.T, opts Options) *Store {
	t.Helper()
	if opts.GUID == "" {
		opts.GUID = testGUID
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return s
}

// testEvent builds event i: a unique term ev<i>x, a shared word, fields.
func testEvent(index string, i int) Event {
	raw := fmt.Sprintf("10.0.%d.%d - ev%dx GET /api/item/%d status=%d word%d common", i%7, i%250, i, i%13, 200+i%3, i%5)
	return Event{
		Index: index, Time: int64(1767225600_000_000_000) + int64(i)*1_000_000,
		Raw: []byte(raw), Host: []byte(fmt.Sprintf("web-%02d", i%3)), Source: []byte("/var/log/x"), Sourcetype: []byte("access"),
		Fields: []Field{{Name: []byte("path"), Value: []byte(fmt.Sprintf("/api/item/%d", i%13))}, {Name: []byte("status"), Value: []byte(fmt.Sprint(200 + i%3))}},
	}
}

func appendN(t *testing.T, s *Store, index string, from, n int) *Ack {
	t.Helper()
	evs := make([]Event, 0, n)
	for i := from; i < from+n; i++ {
		evs = append(evs, testEvent(index, i))
	}
	a, err := s.Append(evs)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return a
}

func waitDurable(t *testing.T, a *Ack) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !a.Durable() {
			return errors.New("not durable")
		}
		return nil
	})
}

// allEvents reads every event of every segment, keyed by its unique term.
func allEvents(t *testing.T, s *Store) map[string]query.Event {
	t.Helper()
	out := map[string]query.Event{}
	for _, seg := range s.Segments() {
		err := seg.Events(nil, func(ord uint32, ev *query.Event) bool {
			var i int
			fmt.Sscanf(ev.Raw[bytes.IndexByte([]byte(ev.Raw), 'e'):], "ev%dx", &i)
			e := *ev
			e.Fields = append([]query.Field(nil), ev.Fields...)
			out[fmt.Sprintf("ev%dx", i)] = e
			return true
		})
		if err != nil {
			t.Fatalf("events of %s: %v", seg.BucketID(), err)
		}
	}
	return out
}

func TestBlockPayloadRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 50).Draw(rt, "n")
		bb := newBlockBuilder()
		var want []decodedEvent
		for i := 0; i < n; i++ {
			raw := rapid.SliceOfN(rapid.Byte(), 0, 80).Draw(rt, "raw")
			e := Event{Time: rapid.Int64().Draw(rt, "t"), Raw: raw,
				Host: []byte(rapid.StringN(0, 5, -1).Draw(rt, "h")), Source: []byte("s"), Sourcetype: []byte(rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "st"))}
			nf := rapid.IntRange(0, 3).Draw(rt, "nf")
			for j := 0; j < nf; j++ {
				var v []byte
				if len(raw) > 0 && rapid.Bool().Draw(rt, "ref") {
					a := rapid.IntRange(0, len(raw)-1).Draw(rt, "a")
					b := rapid.IntRange(a, len(raw)).Draw(rt, "b")
					v = raw[a:b]
				} else {
					v = []byte(rapid.String().Draw(rt, "v"))
				}
				e.Fields = append(e.Fields, Field{Name: []byte(fmt.Sprintf("f%d", j)), Value: v})
			}
			bb.add(&e)
			want = append(want, decodedEvent{Time: e.Time, Raw: e.Raw, Host: e.Host, Source: e.Source, Sourcetype: e.Sourcetype, Fields: e.Fields})
		}
		p := bb.payload(nil)
		frame := appendFrame(nil, 7, uint32(n), bb.minT, bb.maxT, p)
		fh, got, err := decodeFrame(frame, nil)
		if err != nil || fh.block != 7 || fh.events != uint32(n) {
			rt.Fatalf("decode frame: %v %+v", err, fh)
		}
		i := 0
		err = decodePayload(got, func(k int, e *decodedEvent) bool {
			w := want[k]
			if e.Time != w.Time || !bytes.Equal(e.Raw, w.Raw) || !bytes.Equal(e.Host, w.Host) || !bytes.Equal(e.Sourcetype, w.Sourcetype) || len(e.Fields) != len(w.Fields) {
				rt.Fatalf("event %d: got %+v want %+v", k, e, w)
			}
			for j := range e.Fields {
				if !bytes.Equal(e.Fields[j].Name, w.Fields[j].Name) || !bytes.Equal(e.Fields[j].Value, w.Fields[j].Value) {
					rt.Fatalf("event %d field %d: got %q=%q want %q=%q", k, j, e.Fields[j].Name, e.Fields[j].Value, w.Fields[j].Name, w.Fields[j].Value)
				}
			}
			i++
			return true
		})
		if err != nil || i != n {
			rt.Fatalf("decode payload: %v (%d of %d)", err, i, n)
		}
	})
}

func TestFrameCorruptChecksumDetected(t *testing.T) {
	bb := newBlockBuilder()
	e := testEvent("main", 1)
	bb.add(&e)
	frame := appendFrame(nil, 0, 1, bb.minT, bb.maxT, bb.payload(nil))
	for _, at := range []int{9, 30, frameHeaderLen + 3, len(frame) - 1} {
		bad := append([]byte(nil), frame...)
		bad[at] ^= 0x40
		_, err := checkFrame(bad)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("flip at %d: got %v, want ErrCorrupt", at, err)
		}
	}
	// In a journal file: the scan stops at the damaged block and says why.
	var j []byte
	for i := 0; i < 3; i++ {
		j = appendFrame(j, uint32(i), 1, bb.minT, bb.maxT, bb.payload(nil))
	}
	j[len(frame)+frameHeaderLen+2] ^= 1
	res := scanJournal(bytes.NewReader(j), int64(len(j)))
	if len(res.blocks) != 1 || res.problem == nil || !errors.Is(res.problem, ErrCorrupt) {
		t.Fatalf("scan: %d blocks, problem %v; want 1 block and a checksum problem", len(res.blocks), res.problem)
	}
	if want := "block 1 checksum mismatch"; !bytes.Contains([]byte(res.problem.Error()), []byte(want)) {
		t.Errorf("problem %q does not say %q", res.problem, want)
	}
}

func TestAppendRollSearchRestart(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true, MaxHotBytes: 20 << 10, BlockBytes: 4 << 10, BlockInterval: 10 * time.Millisecond})
	const n = 1000
	var last *Ack
	for i := 0; i < n; i += 100 {
		last = appendN(t, s, "main", i, 100)
	}
	waitDurable(t, last)
	if err := s.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		got := allEvents(t, s)
		if len(got) != n {
			t.Fatalf("read %d events, want %d", len(got), n)
		}
		for i := 0; i < n; i++ {
			w := testEvent("main", i)
			g, ok := got[fmt.Sprintf("ev%dx", i)]
			if !ok || g.Raw != string(w.Raw) || g.Time != w.Time || g.Host != string(w.Host) || len(g.Fields) != 2 || g.Fields[0].Value != string(w.Fields[0].Value) {
				t.Fatalf("event %d: got %+v", i, g)
			}
		}
		// Term postings: each unique term finds exactly its event.
		total := 0
		for _, seg := range s.Segments() {
			bm, err := seg.Term("common")
			if err != nil {
				t.Fatal(err)
			}
			if bm != nil {
				total += int(bm.GetCardinality())
			}
		}
		if total != n {
			t.Fatalf("term common: %d events, want %d", total, n)
		}
		found := 0
		st200 := 0
		for _, seg := range s.Segments() {
			for i := 0; i < n; i++ {
				bm, _ := seg.Term(fmt.Sprintf("ev%dx", i))
				if bm != nil {
					found += int(bm.GetCardinality())
				}
			}
			bm, _ := seg.FieldValue("status", "200")
			if bm != nil {
				st200 += int(bm.GetCardinality())
			}
		}
		if found != n {
			t.Fatalf("unique terms found %d events, want %d", found, n)
		}
		if want := (n + 2) / 3; st200 != want {
			t.Fatalf("status=200: %d events, want %d", st200, want)
		}
		var evs uint32
		for _, c := range s.Inventory() {
			evs += c.Events
		}
		if evs != n {
			t.Fatalf("inventory holds %d events, want %d", evs, n)
		}
	}
	check(s)
	inv := s.Inventory()
	if len(inv) < 3 {
		t.Fatalf("want several buckets (rolls at 20 KiB), got %d", len(inv))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Options{Dir: dir, Searchable: true})
	defer s.Close()
	check(s)
	for _, c := range s.Inventory() {
		if c.State != string(StateWarm) {
			t.Errorf("after restart %s is %s, want warm", c.ID, c.State)
		}
	}
}

func TestHotSnapshotIsConsistent(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 2 << 10, BlockInterval: time.Hour})
	defer s.Close()
	appendN(t, s, "main", 0, 50)
	if err := s.WaitIdle(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	segs := s.Segments()
	if len(segs) != 1 || segs[0].Len() != 50 {
		t.Fatalf("want one hot segment of 50 events, got %d segments", len(segs))
	}
	snap := segs[0]
	appendN(t, s, "main", 50, 50)
	if err := s.WaitIdle(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	bm, _ := snap.Term("common")
	if bm.GetCardinality() != 50 {
		t.Fatalf("snapshot sees %d events of term common, want 50", bm.GetCardinality())
	}
	count := 0
	snap.Events(nil, func(uint32, *query.Event) bool { count++; return true })
	if count != 50 {
		t.Fatalf("snapshot decodes %d events, want 50 (open block included)", count)
	}
	if s.Segments()[0].Len() != 100 {
		t.Fatalf("new snapshot has %d events, want 100", s.Segments()[0].Len())
	}
	// Events by ordinal, across sealed and open blocks.
	var got []uint32
	s.Segments()[0].Events(roaring.BitmapOf(0, 49, 99), func(o uint32, ev *query.Event) bool {
		got = append(got, o)
		if ev.Raw != string(testEvent("main", int(o)).Raw) {
			t.Errorf("ordinal %d decodes to %q", o, ev.Raw)
		}
		return true
	})
	if !reflect.DeepEqual(got, []uint32{0, 49, 99}) {
		t.Fatalf("ordinals %v", got)
	}
}

// TestTornTailRepaired cuts and garbles the end of a hot journal, as a crash
// mid-write does, and checks the store reopens with every whole block.
func TestTornTailRepaired(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true, BlockBytes: 1 << 10, BlockInterval: time.Hour})
	var acks []*Ack
	for i := 0; i < 100; i += 10 {
		acks = append(acks, appendN(t, s, "main", i, 10))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	id := s.Inventory()[0].ID
	blocks := s.Inventory()[0].Blocks
	// Simulate a crash: stop without rolling, then damage the tail.
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.closeFiles()
	jp := filepath.Join(dir, "buckets", id, journalFile)
	st, _ := os.Stat(jp)
	f, _ := os.OpenFile(jp, os.O_WRONLY|os.O_APPEND, 0)
	f.Write(bytes.Repeat([]byte{0xAB}, 100)) // a torn next block
	f.Close()
	s = mustOpen(t, Options{Dir: dir, Searchable: true})
	rep := s.LastRecovery()
	if rep.TornTails != 1 || rep.DroppedBytes != 100 || rep.Rolled != 1 {
		t.Fatalf("recovery %+v, want one torn tail of 100 bytes and one roll", rep)
	}
	inv := s.Inventory()
	if inv[0].Events != 100 || inv[0].Blocks != blocks || inv[0].JournalBytes != st.Size() {
		t.Fatalf("after repair %+v, want 100 events in %d blocks, %d bytes", inv[0], blocks, st.Size())
	}
	if err := s.Repairs().Verify(id); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Opening again finds nothing to repair.
	s = mustOpen(t, Options{Dir: dir, Searchable: true})
	defer s.Close()
	if rep := s.LastRecovery(); !rep.Clean() {
		t.Fatalf("second open repaired again: %+v", rep)
	}
}

func TestTruncateToLength(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true, BlockBytes: 1 << 10, BlockInterval: time.Hour})
	appendN(t, s, "main", 0, 100)
	s.RollAll()
	if err := s.WaitIdle(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	c := s.Inventory()[0]
	if c.Blocks < 4 {
		t.Fatalf("want several blocks, got %d", c.Blocks)
	}
	var keep uint32
	b := s.bucket(c.ID)
	for _, bl := range b.blocks[:2] {
		keep += bl.events
	}
	if err := s.Repairs().Truncate(c.ID, 2); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		c2 := s.Inventory()[0]
		if c2.Blocks != 2 || c2.Events != keep {
			t.Fatalf("after truncate %+v, want 2 blocks and %d events", c2, keep)
		}
		if got := len(allEvents(t, s)); got != int(keep) {
			t.Fatalf("read %d events, want %d", got, keep)
		}
		bm, _ := s.Segments()[0].Term("common")
		if bm.GetCardinality() != uint64(keep) {
			t.Fatalf("index says %d events, want %d", bm.GetCardinality(), keep)
		}
	}
	check(s)
	if err := s.Repairs().Truncate(c.ID, 5); err == nil {
		t.Fatal("truncating past the end succeeded")
	}
	s.Close()
	s = mustOpen(t, Options{Dir: dir, Searchable: true})
	defer s.Close()
	check(s)
}

func TestInterruptedTruncateFinishesAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true, BlockBytes: 1 << 10, BlockInterval: time.Hour})
	appendN(t, s, "main", 0, 100)
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	c := s.Inventory()[0]
	b := s.bucket(c.ID)
	m := b.meta
	keep := b.blocks[0].events
	s.Close()
	m.PendingTruncate = 1
	if err := writeJSONAtomic(filepath.Join(dir, "buckets", c.ID), metaFile, m, "meta"); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Options{Dir: dir})
	defer s.Close()
	if c2 := s.Inventory()[0]; c2.Blocks != 1 || c2.Events != keep {
		t.Fatalf("after open %+v, want 1 block of %d events", c2, keep)
	}
}

func TestIndexCorruptionDetectedAndMissingIndexRebuilt(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true})
	appendN(t, s, "main", 0, 200)
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	id := s.Inventory()[0].ID
	ip := filepath.Join(dir, "buckets", id, indexFile)
	good, _ := os.ReadFile(ip)
	if err := s.Repairs().Verify(id); err != nil {
		t.Fatal(err)
	}
	s.Close()
	bad := append([]byte(nil), good...)
	// flip a byte inside the term dictionary section (offsets in the footer)
	foot := bad[len(bad)-footerLen:]
	off := binary.LittleEndian.Uint64(foot[secTermDict*16:])
	ln := binary.LittleEndian.Uint64(foot[secTermDict*16+8:])
	bad[off+ln/2] ^= 0x10
	os.WriteFile(ip, bad, 0o644)
	s = mustOpen(t, Options{Dir: dir})
	if err := s.Repairs().Verify(id); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify of a flipped index byte: %v, want ErrCorrupt", err)
	}
	// reading through the Segment API reports it too
	err := s.Segments()[0].TermsWithPrefix("", func(string, *roaring.Bitmap) bool { return true })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("reading a damaged dictionary block: %v, want a checksum error", err)
	}
	s.Close()
	// A missing (or cut) index is rebuilt from the journal, identical.
	os.WriteFile(ip, good[:len(good)/2], 0o644)
	s = mustOpen(t, Options{Dir: dir})
	if rep := s.LastRecovery(); rep.Rebuilt != 1 {
		t.Fatalf("recovery %+v, want one rebuilt index", rep)
	}
	s.Close()
	again, _ := os.ReadFile(ip)
	if !bytes.Equal(again, good) {
		t.Fatal("rebuilt index differs from the original")
	}
}

// TestJournalOnlyCopyMadeSearchable: a copy holding only the journal, made
// searchable, has an index byte-identical to the one built while ingesting.
func TestJournalOnlyCopyMadeSearchable(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	a := mustOpen(t, Options{Dir: dirA, Searchable: true, BlockBytes: 2 << 10})
	b := mustOpen(t, Options{Dir: dirB, Searchable: false, BlockBytes: 2 << 10})
	// The same blocks on both: append the same batches and flush each.
	for i := 0; i < 500; i += 50 {
		appendN(t, a, "main", i, 50)
		appendN(t, b, "main", i, 50)
		a.Flush()
		b.Flush()
	}
	a.RollAll()
	b.RollAll()
	a.WaitIdle(5 * time.Second)
	b.WaitIdle(5 * time.Second)
	ia, ib := a.Inventory()[0], b.Inventory()[0]
	if ib.Searchable || len(b.Segments()) != 0 {
		t.Fatal("journal-only copy is searchable")
	}
	if ia.ContentHash != ib.ContentHash || ia.Events != 500 {
		t.Fatalf("copies differ: %+v vs %+v", ia, ib)
	}
	if _, err := os.Stat(filepath.Join(dirB, "buckets", ib.ID, indexFile)); !os.IsNotExist(err) {
		t.Fatalf("journal-only copy has an index file: %v", err)
	}
	if err := b.Repairs().MakeSearchable(ib.ID); err != nil {
		t.Fatal(err)
	}
	xa, _ := os.ReadFile(filepath.Join(dirA, "buckets", ia.ID, indexFile))
	xb, _ := os.ReadFile(filepath.Join(dirB, "buckets", ib.ID, indexFile))
	if len(xa) == 0 || !bytes.Equal(xa, xb) {
		t.Fatalf("index built from the journal (%d bytes) differs from the one built while ingesting (%d bytes)", len(xb), len(xa))
	}
	if !b.Inventory()[0].Searchable || len(b.Segments()) != 1 {
		t.Fatal("copy not searchable after MakeSearchable")
	}
	a.Close()
	b.Close()
	b = mustOpen(t, Options{Dir: dirB})
	defer b.Close()
	if !b.Inventory()[0].Searchable {
		t.Fatal("searchable state lost at restart")
	}
}

// TestSegmentMatchesModel compares the warm and hot segments with a naive
// model of the same events.
func TestSegmentMatchesModel(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true})
	defer s.Close()
	const n = 3000
	appendN(t, s, "main", 0, n)
	s.WaitIdle(5 * time.Second)
	hot := s.Segments()[0]
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	warm := s.Segments()[0]
	if _, ok := warm.(*warmSegment); !ok {
		t.Fatalf("segment is %T after roll", warm)
	}
	model := map[string][]uint32{}
	fields := map[string]map[string][]uint32{}
	var tok query.Tokenizer
	for i := 0; i < n; i++ {
		e := testEvent("main", i)
		seen := map[string]bool{}
		tok.Tokenize(e.Raw, func(b []byte) {
			if !seen[string(b)] {
				seen[string(b)] = true
				model[string(b)] = append(model[string(b)], uint32(i))
			}
		})
		add := func(f, v string) {
			if fields[f] == nil {
				fields[f] = map[string][]uint32{}
			}
			fields[f][v] = append(fields[f][v], uint32(i))
		}
		add("host", string(e.Host))
		add("source", string(e.Source))
		add("sourcetype", string(e.Sourcetype))
		for _, f := range e.Fields {
			add(string(f.Name), string(f.Value))
		}
	}
	for name, seg := range map[string]query.Segment{"hot": hot, "warm": warm} {
		if seg.Len() != n {
			t.Fatalf("%s: len %d", name, seg.Len())
		}
		for term, ords := range model {
			bm, err := seg.Term(term)
			if err != nil || bm == nil || !reflect.DeepEqual(bm.ToArray(), ords) {
				t.Fatalf("%s: term %q: %v %v, want %v", name, term, bm, err, ords)
			}
			if !seg.MayContain(term) {
				t.Fatalf("%s: bloom says no to %q", name, term)
			}
		}
		if bm, _ := seg.Term("nosuchterm"); bm != nil {
			t.Fatalf("%s: absent term found", name)
		}
		var pref []string
		seg.TermsWithPrefix("ev12", func(term string, bm *roaring.Bitmap) bool {
			pref = append(pref, term)
			return true
		})
		var want []string
		for term := range model {
			if len(term) >= 4 && term[:4] == "ev12" {
				want = append(want, term)
			}
		}
		sort.Strings(want)
		if !reflect.DeepEqual(pref, want) {
			t.Fatalf("%s: prefix ev12: %d terms, want %d", name, len(pref), len(want))
		}
		var names []string
		for f := range fields {
			names = append(names, f)
		}
		sort.Strings(names)
		if got := seg.IndexedFields(); !reflect.DeepEqual(got, names) {
			t.Fatalf("%s: fields %v want %v", name, got, names)
		}
		for f, vals := range fields {
			var got []string
			seg.FieldValues(f, func(v string, bm *roaring.Bitmap) bool {
				if !reflect.DeepEqual(bm.ToArray(), vals[v]) {
					t.Fatalf("%s: %s=%s postings differ", name, f, v)
				}
				got = append(got, v)
				return true
			})
			if len(got) != len(vals) || !sort.StringsAreSorted(got) {
				t.Fatalf("%s: field %s: %d values, want %d sorted", name, f, len(got), len(vals))
			}
			for v, ords := range vals {
				bm, _ := seg.FieldValue(f, v)
				if bm == nil || !reflect.DeepEqual(bm.ToArray(), ords) {
					t.Fatalf("%s: %s=%s", name, f, v)
				}
			}
		}
		times, _ := seg.Times()
		lo, hi := seg.Bounds()
		if len(times) != n || lo != testEvent("main", 0).Time || hi != testEvent("main", n-1).Time {
			t.Fatalf("%s: times %d bounds %d %d", name, len(times), lo, hi)
		}
	}
}

func TestHotSpanAndMaxHotBuckets(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, MaxHotSpan: time.Hour, MaxHotBuckets: 2})
	defer s.Close()
	base := time.Now().Add(-24 * time.Hour).UnixNano()
	mk := func(h int) Event {
		e := testEvent("main", h)
		e.Time = base + int64(h)*int64(2*time.Hour)
		return e
	}
	// Each 2 h apart with a 1 h span: two buckets, then the cap holds and
	// the third event widens the bucket nearest in time (placement.go)
	// rather than rolling one and opening another.
	for _, h := range []int{0, 1, 2} {
		if _, err := s.Append([]Event{mk(h)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WaitIdle(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	hot, warm := 0, 0
	for _, c := range s.Inventory() {
		switch c.State {
		case "hot":
			hot++
		case "warm":
			warm++
		}
	}
	if hot != 2 || warm != 0 {
		t.Fatalf("hot %d warm %d, want 2 hot (max_hot_buckets) and none rolled", hot, warm)
	}
	var spans []string
	for _, seg := range s.Segments() {
		lo, hi := seg.Bounds()
		spans = append(spans, fmt.Sprint(seg.Len(), (hi-lo)/int64(time.Hour)))
	}
	if fmt.Sprint(spans) != "[1 0 2 2]" {
		t.Fatalf("segments (events, span in hours) %v, want [1 0 2 2]: the third event widened the second bucket", spans)
	}
}

func TestBadIndexNameChangesNothing(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true})
	defer s.Close()
	good := testEvent("main", 1)
	bad := testEvent("Bad~Name", 2)
	if _, err := s.Append([]Event{good, bad}); !errors.Is(err, ErrBadIndex) {
		t.Fatalf("got %v, want ErrBadIndex", err)
	}
	if len(s.Inventory()) != 0 {
		t.Fatal("a refused append created a bucket")
	}
}

func TestMetadataFilesDamaged(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true})
	appendN(t, s, "main", 0, 100)
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	appendN(t, s, "main", 100, 50)
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	inv := s.Inventory()
	s.Close()
	if len(inv) != 2 {
		t.Fatalf("want 2 buckets, got %d", len(inv))
	}
	b0 := filepath.Join(dir, "buckets", inv[0].ID)
	b1 := filepath.Join(dir, "buckets", inv[1].ID)
	// A garbled meta.json: the copy is rebuilt from its journal.
	os.WriteFile(filepath.Join(b0, metaFile), []byte("{garbage"), 0o644)
	// A folder without copy.json never held a block: removed.
	orphan := filepath.Join(dir, "buckets", BucketID("main", 9, testGUID))
	os.MkdirAll(orphan, 0o755)
	s = mustOpen(t, Options{Dir: dir})
	rep := s.LastRecovery()
	if rep.Rolled != 1 || rep.Removed != 1 || len(rep.Corrupt) != 0 {
		t.Fatalf("recovery %+v: want the garbled copy rebuilt and the orphan removed", rep)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatal("orphan folder still there")
	}
	if got := len(allEvents(t, s)); got != 150 {
		t.Fatalf("%d events after repair, want 150", got)
	}
	s.Close()
	// A warm journal cut below its metadata is damage: reported, not served.
	jp := filepath.Join(b1, journalFile)
	st, _ := os.Stat(jp)
	os.Truncate(jp, st.Size()-10)
	s = mustOpen(t, Options{Dir: dir})
	defer s.Close()
	rep = s.LastRecovery()
	if len(rep.Corrupt) != 1 {
		t.Fatalf("recovery %+v: want one corrupt copy", rep)
	}
	var states []string
	for _, c := range s.Inventory() {
		states = append(states, c.State)
		if c.State == string(StateCorrupt) && c.Problem == "" {
			t.Fatal("corrupt copy without a problem")
		}
	}
	if fmt.Sprint(states) != "[warm corrupt]" || len(s.Segments()) != 1 {
		t.Fatalf("states %v, %d segments; want the corrupt copy kept but not served", states, len(s.Segments()))
	}
	if err := s.Repairs().Verify(inv[1].ID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify: %v", err)
	}
}

// TestStoreProperty applies random appends (two indexes, times spread
// enough to trip max_hot_span), rolls, flushes and restarts, and checks
// after every step that every appended event is readable exactly once
// through the segments and that the inventory counts agree.
func TestStoreProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "store-prop")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		opts := Options{Dir: dir, GUID: testGUID, Searchable: true, MaxHotBytes: 3000, MaxHotSpan: time.Hour, MaxHotBuckets: 2,
			BlockBytes: 700, BlockInterval: time.Hour}
		s, err := Open(opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { s.Close() }()
		next := 0
		base := time.Now().Truncate(time.Hour).UnixNano()
		model := map[string]int{} // unique term -> index
		steps := rapid.IntRange(1, 15).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1, 2:
				k := rapid.IntRange(1, 30).Draw(rt, "k")
				var evs []Event
				for i := 0; i < k; i++ {
					idx := rapid.SampledFrom([]string{"main", "web"}).Draw(rt, "index")
					e := testEvent(idx, next)
					e.Time = base + int64(rapid.IntRange(0, 3).Draw(rt, "hour"))*int64(50*time.Minute)
					if rapid.IntRange(0, 9).Draw(rt, "far") == 0 { // now and then far outside: quarantine
						e.Time = base + int64(rapid.SampledFrom([]time.Duration{-1000 * 24 * time.Hour, 40 * 24 * time.Hour}).Draw(rt, "off"))
					}
					model[fmt.Sprintf("ev%dx", next)] = 1
					next++
					evs = append(evs, e)
				}
				if _, err := s.Append(evs); err != nil {
					rt.Fatal(err)
				}
			case 3:
				s.RollAll()
			case 4:
				if err := s.Flush(); err != nil {
					rt.Fatal(err)
				}
			case 5:
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				if s, err = Open(opts); err != nil {
					rt.Fatal(err)
				}
			}
			if err := s.WaitIdle(10 * time.Second); err != nil {
				rt.Fatal(err)
			}
			seen := map[string]int{}
			total := uint32(0)
			for _, seg := range s.Segments() {
				total += seg.Len()
				seg.TermsWithPrefix("ev", func(term string, bm *roaring.Bitmap) bool {
					seen[term] += int(bm.GetCardinality())
					return true
				})
				n := 0
				seg.Events(nil, func(uint32, *query.Event) bool { n++; return true })
				if uint32(n) != seg.Len() {
					rt.Fatalf("segment %s decodes %d events, Len %d", seg.BucketID(), n, seg.Len())
				}
				if err := boundsCover(seg); err != nil {
					rt.Fatal(err)
				}
			}
			if err := hotCapHeld(s); err != nil {
				rt.Fatalf("step %d: %v", step, err)
			}
			if int(total) != len(model) || !reflect.DeepEqual(seen, model) {
				rt.Fatalf("step %d: segments hold %d events (%d terms), model %d", step, total, len(seen), len(model))
			}
			if err := s.Flush(); err != nil {
				rt.Fatal(err)
			}
			var inv uint32
			for _, c := range s.Inventory() {
				inv += c.Events
			}
			if int(inv) != len(model) {
				rt.Fatalf("step %d: inventory %d events, model %d", step, inv, len(model))
			}
		}
	})
}

func TestNewerFormatVersionKeptNotServed(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true})
	appendN(t, s, "main", 0, 10)
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	c := s.Inventory()[0]
	m := s.bucket(c.ID).meta
	s.Close()
	m.Version = 2
	writeJSONAtomic(filepath.Join(dir, "buckets", c.ID), metaFile, m, "meta")
	s = mustOpen(t, Options{Dir: dir})
	defer s.Close()
	inv := s.Inventory()
	if len(inv) != 1 || inv[0].State != string(StateCorrupt) || !strings.Contains(inv[0].Problem, "format version 2") || len(s.Segments()) != 0 {
		t.Fatalf("inventory %+v: want the copy listed with its problem and not served", inv)
	}
	// nothing was rewritten: the newer file is intact for a newer peer
	var again metaInfo
	readJSON(filepath.Join(dir, "buckets", c.ID, metaFile), &again)
	if again.Version != 2 {
		t.Fatal("newer metadata was overwritten")
	}
}

func TestSortedTermsOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tt := newTermTable(16, &postingPool{})
		keyGen := rapid.Custom(func(rt *rapid.T) string {
			return string(rapid.SliceOfN(rapid.SampledFrom([]byte("\x00ab.1/Zz\xff")), 0, 12).Draw(rt, "key"))
		})
		keys := rapid.SliceOfDistinct(keyGen, func(s string) string { return s }).Draw(rt, "keys")
		for i, k := range keys {
			tt.add([]byte(k), uint32(i))
		}
		var got []string
		for _, e := range tt.sorted() {
			got = append(got, string(tt.key(e.id)))
		}
		want := append([]string(nil), keys...)
		sort.Strings(want)
		if len(want) == 0 {
			want = nil
		}
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("sorted %q, want %q", got, want)
		}
	})
}

// failingReaderAt fails every read that reaches past at, as a disk that
// cannot return a sector does (EIO).
type failingReaderAt struct {
	r  *bytes.Reader
	at int64
}

func (f failingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.at {
		return 0, fmt.Errorf("read sector: %w", syscall.EIO)
	}
	return f.r.ReadAt(p, off)
}

// TestReadErrorIsNotATornTail (issue 9 item 9): a journal whose middle
// block cannot be read is not cut back there as a torn tail would be (the
// blocks after it may be whole and acknowledged): the scan says why it
// stopped, and unreadable turns that into an ErrCorrupt error, so the copy
// is kept, reported corrupt and repaired from another copy. A block that
// is cut short or fails its checksum is still a torn tail.
func TestReadErrorIsNotATornTail(t *testing.T) {
	bb := newBlockBuilder()
	e := testEvent("main", 1)
	bb.add(&e)
	var j []byte
	var ends []int64
	for i := 0; i < 4; i++ {
		j = appendFrame(j, uint32(i), 1, bb.minT, bb.maxT, bb.payload(nil))
		ends = append(ends, int64(len(j)))
	}
	res := scanJournal(failingReaderAt{bytes.NewReader(j), ends[1] + 5}, int64(len(j)))
	if len(res.blocks) != 2 || res.problem == nil || errors.Is(res.problem, ErrCorrupt) || !errors.Is(res.problem, syscall.EIO) {
		t.Fatalf("scan: %d blocks, problem %v; want 2 blocks and the read error", len(res.blocks), res.problem)
	}
	err := unreadable(res)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "nothing cut") {
		t.Fatalf("unreadable: %v, want ErrCorrupt saying nothing is cut", err)
	}
	// A torn tail (the last block cut short) and a checksum failure stay
	// cuttable: unreadable says nil.
	torn := scanJournal(bytes.NewReader(j[:ends[3]-3]), ends[3]-3)
	bad := bytes.Clone(j)
	bad[ends[2]+frameHeaderLen+2] ^= 1
	sum := scanJournal(bytes.NewReader(bad), int64(len(bad)))
	for name, r := range map[string]scanResult{"torn tail": torn, "checksum": sum} {
		if r.problem == nil || unreadable(r) != nil {
			t.Errorf("%s: problem %v, unreadable %v; want a problem that is cut", name, r.problem, unreadable(r))
		}
	}
}

// TestMiddleDamageKeptInACluster (issue 9 item 9): a hot journal whose
// block 1 fails its checksum with whole blocks after it. With KeepDamaged
// (a cluster peer) the copy is kept byte for byte and reported corrupt,
// not cut; without it (standalone) it is cut back to block 0 as before. A
// torn tail is cut either way.
func TestMiddleDamageKeptInACluster(t *testing.T) {
	build := func() (dir, id string, size int64, blocks int) {
		dir = t.TempDir()
		s := mustOpen(t, Options{Dir: dir, Searchable: true, BlockBytes: 1 << 10, BlockInterval: time.Hour})
		for i := 0; i < 100; i += 10 {
			appendN(t, s, "main", i, 10)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		id, blocks = s.Inventory()[0].ID, s.Inventory()[0].Blocks
		// A crash: stop without rolling.
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.stop)
		s.wg.Wait()
		s.closeFiles()
		jp := filepath.Join(dir, "buckets", id, journalFile)
		j, err := os.ReadFile(jp)
		if err != nil {
			t.Fatal(err)
		}
		res := scanJournal(bytes.NewReader(j), int64(len(j)))
		if len(res.blocks) < 4 {
			t.Fatalf("want several blocks, got %d", len(res.blocks))
		}
		j[res.blocks[1].off+frameHeaderLen+3] ^= 0x10 // block 1's payload
		if err := os.WriteFile(jp, j, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir, id, int64(len(j)), blocks
	}

	dir, id, size, _ := build()
	s := mustOpen(t, Options{Dir: dir, Searchable: true, KeepDamaged: true})
	rep := s.LastRecovery()
	if len(rep.Corrupt) != 1 || rep.TornTails != 0 || !strings.Contains(rep.Corrupt[0], "nothing cut") {
		t.Fatalf("recovery %+v, want the copy corrupt and nothing cut", rep)
	}
	if st, _ := os.Stat(filepath.Join(dir, "buckets", id, journalFile)); st.Size() != size {
		t.Fatalf("journal %d bytes after open, want %d: it was cut", st.Size(), size)
	}
	if inv := s.Inventory(); len(inv) != 1 || inv[0].State != string(StateCorrupt) {
		t.Fatalf("inventory %+v, want the copy reported corrupt", inv)
	}
	s.Close()

	dir, _, _, _ = build()
	s = mustOpen(t, Options{Dir: dir, Searchable: true})
	if rep := s.LastRecovery(); rep.TornTails != 1 || len(rep.Corrupt) != 0 {
		t.Fatalf("standalone recovery %+v, want the damage cut as a torn tail", rep)
	}
	if inv := s.Inventory(); len(inv) != 1 || inv[0].Blocks != 1 {
		t.Fatalf("standalone inventory %+v, want 1 block left", inv)
	}
	s.Close()
}
