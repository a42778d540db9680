package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/query"
	"pgregory.net/rapid"
)

// genColEvent draws an event whose indexed fields are hard on columns:
// missing, mixed types in one field, multivalue, empty, huge, named like a
// default field.
func genColEvent(rt *rapid.T, i int) Event {
	vals := []string{"200", "500", "OK", "", "007", "-12", "9223372036854775807", "1.5", strings.Repeat("v", 3000)}
	e := Event{Index: "main", Time: int64(1767225600_000_000_000) + int64(i)*1_000_000 + int64(rapid.IntRange(0, 5).Draw(rt, "jitter")),
		Raw:        []byte(fmt.Sprintf("event u%dx word%d", i, rapid.IntRange(0, 3).Draw(rt, "w"))),
		Host:       []byte(rapid.SampledFrom([]string{"web-01", "web-02", ""}).Draw(rt, "host")),
		Source:     []byte("/var/log/x"),
		Sourcetype: []byte(rapid.SampledFrom([]string{"access", "kv"}).Draw(rt, "st")),
	}
	nf := rapid.IntRange(0, 5).Draw(rt, "nf")
	for j := 0; j < nf; j++ {
		name := rapid.SampledFrom([]string{"status", "bytes", "path", "status", "host", "_raw", "index"}).Draw(rt, "name")
		v := rapid.SampledFrom(vals).Draw(rt, "val")
		if name == "bytes" {
			v = fmt.Sprint(rapid.IntRange(-5, 1<<40).Draw(rt, "bytes"))
		}
		e.Fields = append(e.Fields, Field{Name: []byte(name), Value: []byte(v)})
	}
	if rapid.IntRange(0, 3).Draw(rt, "kv") == 0 {
		e.Raw = append(e.Raw, " status=404 bytes=7"...)
	}
	return e
}

// checkColumnsMatchEvents: every column value equals what a row built from
// the decoded event holds for that indexed field.
func checkColumnsMatchEvents(t interface {
	Fatalf(string, ...any)
}, seg query.Segment) {
	cs, ok := seg.(query.ColumnSource)
	if !ok {
		t.Fatalf("segment %T has no columns", seg)
	}
	names := append([]string{"host", "source", "sourcetype"}, "status", "bytes", "path")
	cols := map[string]*query.Column{}
	for _, n := range names {
		c, err := cs.Column(n)
		if err != nil {
			t.Fatalf("column %s: %v", n, err)
		}
		cols[n] = c
	}
	err := seg.Events(nil, func(ord uint32, ev *query.Event) bool {
		want := map[string]any{"host": ev.Host, "source": ev.Source, "sourcetype": ev.Sourcetype}
		for _, f := range ev.Fields {
			switch f.Name {
			case "host", "source", "sourcetype", "_raw", "index":
				continue
			}
			switch old := want[f.Name].(type) {
			case nil:
				want[f.Name] = f.Value
			case string:
				want[f.Name] = []string{old, f.Value}
			case []string:
				want[f.Name] = append(old, f.Value)
			}
		}
		for _, n := range names {
			var got any
			if c := cols[n]; c != nil {
				got = c.Value(ord)
			}
			if !reflect.DeepEqual(got, want[n]) {
				t.Fatalf("%s event %d column %s = %#v, the event holds %#v", seg.BucketID(), ord, n, got, want[n])
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
}

// TestColumnsRebuiltByteIdentical (rapid): a bucket's columns match its
// events, hot and warm, and rebuilt from its journal they are
// byte-identical to the file written at roll.
func TestColumnsRebuiltByteIdentical(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "store-cols")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := Open(Options{Dir: dir, GUID: testGUID, Searchable: true, BlockBytes: 2000})
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		n := rapid.IntRange(1, 400).Draw(rt, "n")
		var evs []Event
		for i := 0; i < n; i++ {
			evs = append(evs, genColEvent(rt, i))
		}
		if _, err := s.Append(evs); err != nil {
			rt.Fatal(err)
		}
		if err := s.WaitIdle(10 * time.Second); err != nil {
			rt.Fatal(err)
		}
		checkColumnsMatchEvents(rt, s.Segments()[0])
		s.RollAll()
		if err := s.WaitIdle(10 * time.Second); err != nil {
			rt.Fatal(err)
		}
		seg := s.Segments()[0]
		if _, ok := seg.(*warmSegment); !ok {
			rt.Fatalf("segment is %T after roll", seg)
		}
		checkColumnsMatchEvents(rt, seg)
		b := s.bucket(seg.BucketID())
		written, err := os.ReadFile(filepath.Join(b.dir, columnsFile))
		if err != nil {
			rt.Fatal(err)
		}
		h, err := indexJournal(b.rd, b.blocks)
		if err != nil {
			rt.Fatal(err)
		}
		if again := buildColumns(h); !bytes.Equal(again, written) {
			rt.Fatalf("columns rebuilt from the journal differ from the file (%d vs %d bytes)", len(again), len(written))
		}
	})
}

// TestColumnsSearchMatchesOracle: field-value queries over a store's hot and
// warm copies equal the naive oracle.
func TestColumnsSearchMatchesOracle(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, MaxHotBytes: 40000})
	defer s.Close()
	evs := rapid.Custom(func(rt *rapid.T) []Event {
		var evs []Event
		for i := 0; i < 1500; i++ {
			evs = append(evs, genColEvent(rt, i))
		}
		return evs
	}).Example(1)
	if _, err := s.Append(evs); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	segs := s.Segments()
	var hot, warm int
	for _, sg := range segs {
		switch sg.(type) {
		case *hotSegment:
			hot++
		case *warmSegment:
			warm++
		}
	}
	if hot == 0 || warm == 0 {
		t.Fatalf("want hot and warm copies, have %d hot, %d warm", hot, warm)
	}
	for _, q := range []string{
		"| stats count, count(status), sum(bytes), avg(bytes), min(bytes), max(bytes), dc(bytes), perc90(bytes) by sourcetype",
		"| stats min(status) max(status) dc(status) values(status) avg(status) by host",
		"| stats dc(path) values(path)", "| stats count by status", "| top limit=3 status", "| rare path",
		"word1 | timechart span=1s avg(bytes)", "| table host status | dedup status", "| where bytes > 1000 | stats count by host",
		`| eval k=if(status>=400,"bad","ok") | stats count by k`,
	} {
		req := query.Request{Query: q, Server: "p1"}
		resp, err := query.Search(t.Context(), req, segs)
		if err != nil {
			t.Fatal(err)
		}
		want, err := query.ReferenceSearch(req, query.SegmentRows(segs, "p1"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := jsonNorm(resp.Results)
		exp, _ := jsonNorm(want)
		if got != exp {
			t.Fatalf("query %q: columns give\n%s\noracle\n%s", q, got, exp)
		}
	}
}

// TestColumnsCorruptionDetectedAndRebuilt: a flipped byte in the column
// file of an open store is reported (Verify, reading the column, a search);
// at open a damaged, missing or cut file is rebuilt from the journal,
// byte-identical.
func TestColumnsCorruptionDetectedAndRebuilt(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true})
	appendN(t, s, "main", 0, 300)
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	id := s.Inventory()[0].ID
	cp := filepath.Join(dir, "buckets", id, columnsFile)
	good, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(id); err != nil {
		t.Fatal(err)
	}
	// flip a byte inside the first blob (after the 8-byte header) under
	// the open store (the same file, rewritten in place)
	bad := append([]byte(nil), good...)
	bad[9] ^= 0x20
	os.WriteFile(cp, bad, 0o644)
	if err := s.Verify(id); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify of a flipped column byte: %v, want ErrCorrupt", err)
	}
	var cerr error
	for _, f := range []string{"host", "path", "source", "sourcetype", "status"} {
		if _, err := s.Segments()[0].(query.ColumnSource).Column(f); err != nil {
			cerr = err
		}
	}
	if !errors.Is(cerr, ErrCorrupt) || !strings.Contains(cerr.Error(), "checksum") {
		t.Fatalf("reading a damaged column: %v, want a checksum error", cerr)
	}
	// a search over it fails loudly, never answers wrong
	resp, err := query.Search(t.Context(), query.Request{Query: "| stats dc(path) dc(host) dc(status) dc(source) dc(sourcetype)"}, s.Segments())
	if err == nil && resp.Summary.Buckets.Failed != 1 {
		t.Fatalf("a search over a damaged column neither failed nor reported the bucket: %+v", resp.Summary)
	}
	s.Close()
	for _, cut := range [][]byte{bad, nil, good[:len(good)/2]} {
		if cut == nil {
			os.Remove(cp)
		} else {
			os.WriteFile(cp, cut, 0o644)
		}
		s = mustOpen(t, Options{Dir: dir})
		if rep := s.LastRecovery(); rep.Rebuilt != 1 {
			t.Fatalf("recovery %+v, want one rebuilt copy", rep)
		}
		s.Close()
		again, _ := os.ReadFile(cp)
		if !bytes.Equal(again, good) {
			t.Fatal("rebuilt columns differ from the original")
		}
	}
	// the footer's directory offset pointing outside is refused, not read
	bad = append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(bad[len(bad)-colFooterLen:], uint64(len(bad)))
	if _, err := readColumns(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("directory out of the file: %v, want ErrCorrupt", err)
	}
}

// FuzzReadColumns: a damaged column file is refused or read, never a
// panic; a column that decodes is internally consistent.
func FuzzReadColumns(f *testing.F) {
	dir := f.TempDir()
	s, err := Open(Options{Dir: dir, GUID: testGUID, Searchable: true})
	if err != nil {
		f.Fatal(err)
	}
	var evs []Event
	for i := 0; i < 50; i++ {
		e := testEvent("main", i)
		if i%7 == 0 {
			e.Fields = append(e.Fields, Field{Name: []byte("status"), Value: []byte("OK")})
		}
		if i%5 == 0 {
			e.Fields = e.Fields[:1]
		}
		evs = append(evs, e)
	}
	if _, err := s.Append(evs); err != nil {
		f.Fatal(err)
	}
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	id := s.Inventory()[0].ID
	s.Close()
	good, _ := os.ReadFile(filepath.Join(dir, "buckets", id, columnsFile))
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte("QCOL\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := readColumns(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, name := range r.columnNames() {
			c, err := r.decode(bytes.NewReader(data), r.cols[name])
			if err != nil {
				continue
			}
			if err := c.Validate(r.events); err != nil {
				t.Fatalf("decoded column %s is inconsistent: %v", name, err)
			}
			for o := uint32(0); o < r.events; o++ {
				c.Value(o)
			}
		}
	})
}

func jsonNorm(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
