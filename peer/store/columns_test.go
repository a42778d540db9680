package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/query/querytest"
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
	// method and seq are in every event (a dictionary and an integer
	// column without a missing event: FieldEvents answers without postings)
	e.Fields = append(e.Fields, Field{Name: []byte("method"), Value: []byte(rapid.SampledFrom([]string{"GET", "POST", "DELETE"}).Draw(rt, "method"))},
		Field{Name: []byte("seq"), Value: []byte(strconv.Itoa(i % 97))})
	nf := rapid.IntRange(0, 5).Draw(rt, "nf")
	for j := 0; j < nf; j++ {
		name := rapid.SampledFrom([]string{"status", "bytes", "path", "status", "host", "_raw", "index"}).Draw(rt, "name")
		v := rapid.SampledFrom(vals).Draw(rt, "val")
		if name == "bytes" {
			v = fmt.Sprint(rapid.IntRange(-5, 1<<40).Draw(rt, "bytes"))
		}
		e.Fields = append(e.Fields, Field{Name: []byte(name), Value: []byte(v)})
	}
	// lat: a float column (ints and negatives mixed in), now and then a
	// dictionary one ("1.50" does not read back from a float)
	switch k := rapid.IntRange(0, 40).Draw(rt, "lat"); {
	case k < 20:
		e.Fields = append(e.Fields, Field{Name: []byte("lat"), Value: []byte(strconv.FormatFloat(float64(rapid.IntRange(-20000, 90000).Draw(rt, "latv"))/1000, 'f', -1, 64))})
	case k < 30:
		e.Fields = append(e.Fields, Field{Name: []byte("lat"), Value: []byte(strconv.Itoa(rapid.IntRange(-50, 50).Draw(rt, "lati")))})
	case k == 40:
		e.Fields = append(e.Fields, Field{Name: []byte("lat"), Value: []byte("1.50")})
	}
	if rapid.IntRange(0, 3).Draw(rt, "kv") == 0 {
		e.Raw = append(e.Raw, " status=404 bytes=7 lat=0.5"...)
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
	names := append([]string{"host", "source", "sourcetype"}, "status", "bytes", "path", "lat")
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
			case "lat":
				// a float column gives the value back byte for byte
				if c := cols["lat"]; c != nil && c.Floats != nil && c.Value(ord) != f.Value {
					t.Fatalf("%s event %d float column lat = %v, the event holds %q", seg.BucketID(), ord, c.Value(ord), f.Value)
				}
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
	floats := 0
	for _, sg := range segs {
		if w, ok := sg.(*warmSegment); ok {
			if m := w.r.cols.cols["lat"]; m != nil && colFloats(m.kind) {
				floats++
			}
		}
	}
	if floats == 0 {
		t.Fatal("no warm copy has a float column")
	}
	for _, q := range []string{
		"| stats count, count(status), sum(bytes), avg(bytes), min(bytes), max(bytes), dc(bytes), perc90(bytes) by sourcetype",
		"| stats min(status) max(status) dc(status) values(status) avg(status) by host",
		"| stats dc(path) values(path)", "| stats count by status", "| top limit=3 status", "| rare path",
		"word1 | timechart span=1s avg(bytes)", "| table host status | dedup status", "| where bytes > 1000 | stats count by host",
		`| eval k=if(status>=400,"bad","ok") | stats count by k`,
		"bytes>100000 | stats count by sourcetype", "bytes<=1000 OR lat>50 | stats count", "NOT bytes>=500000 | stats count",
		"status>=500 | stats count by status", "status<300 | stats count", "bytes>100000 | stats avg(lat) by sourcetype", "lat<0 | stats avg(lat) min(lat) max(lat)",
		"| stats avg(lat) sum(lat) min(lat) max(lat) perc90(lat) dc(lat) count(lat) by sourcetype", "| where lat > 10 AND bytes < 1000000 | stats count",
		"| where bytes > 100000 | stats count", "lat>=-5 lat<=5 | table lat | sort lat | head 3",
		"| top limit=2 method", "| stats count by method", "| stats count by seq | stats count", "method=GET | top limit=3 seq",
		"| stats dc(method) dc(seq) values(method) dc(path) dc(status) values(status) by sourcetype", "| rare limit=4 status",
		"| stats count by host", "| top limit=2 path", "| stats dc(lat) values(seq) by host", "| stats count by method, status",
		// counts verified on _raw alone (RawSource), hot and warm
		`"x word1" | stats count`, `"u1" | stats count`, `"status=404 bytes" | stats count`, `"event u2" OR "word3 status" | stats count`,
		`NOT "x word2" | stats count`, `"u10x word0" | stats count`, `word1 "404 bytes=7" | stats count`, `"lat=0.5" | stats count`,
		"| stats perc50(bytes) min(bytes) max(bytes) count by seq", "| stats count min(seq) max(seq) perc90(seq) by bytes | sort - count | head 5",
		"method=POST | stats perc90(seq) min(lat) max(lat) by seq, method",
		// field=value from the columns (warm, index version 2) and postings (hot)
		"status=500 | stats count", "status=OK | stats count by host", "status=5* | stats count by host", `path="" | stats count`,
		"host=web-01 | stats count by method", "status!=200 | stats count", "NOT status=500 | stats count by sourcetype",
		"seq=5 | stats count", "seq=5* | stats count", "lat=0.5 | stats count", "lat=-3 | stats count", "lat=1.50 | stats count",
		"status=007 | stats count", "status=-12 | top limit=2 host", "path=v* | stats count", "method=DELETE seq>50 | stats count by status",
		"host=* | stats count", "NOT host=* | stats count", "sourcetype=kv | rare limit=2 method", `_raw=x | stats count`, "index=main | stats count",
		`"event u10x" | stats count`, `"word1 status=404" | stats count`, `"word1 event" | stats count`, `"u5x word1" OR "u7x word2" | stats count`,
		// dedup decodes only its survivors; fields, rex and a field-only search over columns
		"| dedup host", "| dedup 2 status keepempty=true", "| dedup method status | table _raw method status", "| dedup seq | stats count",
		"| dedup lat | head 3", "word1 | dedup 3 path | table path _raw", "| sort 5 - bytes", "| sort - lat | head 4",
		"| sort 3 method, - seq", "| sort str(status) - _time | head 6", "| sort num(status) | head 2", "| sort - _time | head 3", "| sort 4 _time", "| fields method status | stats count by status",
		`| rex field=path "^(?<p1>..)" | stats count by p1`, "| search status>=500 | stats count by host", "| search lat<0 OR method=GET | stats count",
	} {
		req := query.Request{Query: q, Server: "p1"}
		got := matchesOracle(t, segs, req)
		// Float sums depend on the order of addition: the column path
		// equals the decoding path exactly when a bucket's events are all
		// served from columns; a bucket whose events lacking the field are
		// decoded adds two partial sums (within 1e-9, as the oracle).
		var plain []query.Segment
		for _, sg := range segs {
			plain = append(plain, hideColumns{sg})
		}
		dresp, err := query.Search(t.Context(), req, plain)
		if err != nil {
			t.Fatal(err)
		}
		if dec, _ := jsonNorm(dresp.Results); dec != got && !sameJSONWithin(got, dec) {
			t.Fatalf("query %q: columns give\n%s\ndecoding gives\n%s", q, got, dec)
		}
	}
}

// hideColumns hides a segment's optional extras: the executor decodes.
type hideColumns struct{ query.Segment }

// sameJSONWithin compares two JSON documents, numbers within a relative
// 1e-9 (the oracle adds floats in another order than per-bucket partials).
func sameJSONWithin(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	var same func(x, y any) bool
	same = func(x, y any) bool {
		switch x := x.(type) {
		case float64:
			y, ok := y.(float64)
			return ok && (x == y || math.Abs(x-y) <= 1e-9*math.Max(math.Abs(x), math.Abs(y)))
		case []any:
			y, ok := y.([]any)
			if !ok || len(x) != len(y) {
				return false
			}
			for i := range x {
				if !same(x[i], y[i]) {
					return false
				}
			}
			return true
		case map[string]any:
			y, ok := y.(map[string]any)
			if !ok || len(x) != len(y) {
				return false
			}
			for k := range x {
				if !same(x[k], y[k]) {
					return false
				}
			}
			return true
		}
		return reflect.DeepEqual(x, y)
	}
	return same(va, vb)
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
	if err := s.Repairs().Verify(id); err != nil {
		t.Fatal(err)
	}
	// flip a byte inside the first blob (after the 8-byte header) under
	// the open store (the same file, rewritten in place)
	bad := append([]byte(nil), good...)
	bad[9] ^= 0x20
	os.WriteFile(cp, bad, 0o644)
	if err := s.Repairs().Verify(id); !errors.Is(err, ErrCorrupt) {
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
		// code: in every event, of few values (kind 7)
		e.Fields = append(e.Fields, Field{Name: []byte("code"), Value: []byte(strconv.Itoa(i % 4 * 100))})
		if i%3 > 0 { // a float column, missing in a third of the events
			e.Fields = append(e.Fields, Field{Name: []byte("lat"), Value: []byte(strconv.FormatFloat(float64(i*37%200-50)/8, 'f', -1, 64))})
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
	f.Add(asVersion(good, 1)) // a version 1 file naming a float kind
	r, err := readColumns(bytes.NewReader(good), int64(len(good)))
	if err != nil || r.cols["lat"] == nil || r.cols["lat"].kind != colFloatSparse {
		f.Fatalf("seed: lat is not a sparse float column (%v)", err)
	}
	if r.cols["code"] == nil || r.cols["code"].kind != colIntFew {
		f.Fatalf("seed: code is not a kind 7 column")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := readColumns(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, name := range r.columnNames() {
			if m := r.cols[name]; m.kind <= colDictMulti {
				r.readDict(bytes.NewReader(data), m, true) // values and their counts
			}
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
			// each numeric block decoded alone is that part of the column,
			// inside its directory range
			br := r.numericBlocks(name)
			if br == nil {
				continue
			}
			for i, b := range br.Blocks {
				lo := uint32(i) * r.per
				n := min(lo+r.per, r.events) - lo
				bc := &query.Column{}
				newNumeric(bc, r.cols[name].kind, n)
				if _, err := r.decodeBlock(bytes.NewReader(data), r.cols[name], i, bc, lo, nil); err != nil {
					t.Fatalf("block %d of %s: %v (the whole column decoded)", i, name, err)
				}
				if err := bc.Validate(n); err != nil {
					t.Fatalf("block %d of %s is inconsistent: %v", i, name, err)
				}
				// (a whole column of few integers is a dictionary of their
				// texts: compared as row values)
				for o := uint32(0); o < n; o++ {
					if bc.Present(o) != c.Present(lo+o) || bc.Present(o) && bc.Value(o) != c.Value(lo+o) {
						t.Fatalf("block %d of %s event %d differs from the whole column", i, name, o)
					}
					if bc.Present(o) && (bc.Num(o) < b.Min || bc.Num(o) > b.Max) {
						t.Fatalf("block %d of %s value %v outside [%v, %v]", i, name, bc.Num(o), b.Min, b.Max)
					}
				}
			}
		}
	})
}

// TestColumnsVersion1StillRead: a column file of format version 1 (written
// by builds before float columns) opens as it is — no rebuild — and gives
// the same columns; a version 1 file naming a float kind is refused.
func TestColumnsVersion1StillRead(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true})
	appendN(t, s, "main", 0, 300)
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	id := s.Inventory()[0].ID
	b := s.bucket(id)
	h, err := indexJournal(b.rd, b.blocks)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	cp := filepath.Join(dir, "buckets", id, columnsFile)
	v2 := buildColumnsVersion(h, 2) // no kind 7: a version 2 file as it was written
	r2, err := readColumns(bytes.NewReader(v2), int64(len(v2)))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r2.cols {
		if colFloats(m.kind) {
			t.Fatalf("column %s is a float column: this file is no version 1 file", m.name)
		}
	}
	v1 := asVersion(v2, 1)
	if err := os.WriteFile(cp, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	// the metadata names the column file's size, as the older build wrote it
	mp := filepath.Join(dir, "buckets", id, metaFile)
	mb, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal(mb, &meta); err != nil {
		t.Fatal(err)
	}
	meta["column_bytes"] = len(v1)
	if mb, err = json.Marshal(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mp, mb, 0o644); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Options{Dir: dir})
	if rep := s.LastRecovery(); rep.Rebuilt != 0 || rep.Opened != 1 {
		t.Fatalf("recovery %+v, want the version 1 copy opened as it is", rep)
	}
	seg := s.Segments()[0].(*warmSegment)
	if seg.r.cols.version != 1 {
		t.Fatalf("column file version %d after open, want 1", seg.r.cols.version)
	}
	checkColumnsMatchEvents(t, seg)
	resp, err := query.Search(t.Context(), query.Request{Query: "| stats count dc(status) by host"}, s.Segments())
	if err != nil || resp.Summary.Buckets.Failed != 0 || len(resp.Results) == 0 {
		t.Fatalf("search over a version 1 copy: %v %+v", err, resp)
	}
	s.Close()
	got, _ := os.ReadFile(cp)
	if !bytes.Equal(got, v1) {
		t.Fatal("the version 1 file was rewritten")
	}
	// a float kind in a version 1 file is refused
	var fl []byte
	for name, m := range r2.cols {
		if colNumeric(m.kind) {
			fl = append([]byte(nil), v1...)
			dirOff := binary.LittleEndian.Uint64(fl[len(fl)-colFooterLen:])
			i := bytes.Index(fl[dirOff:], append([]byte{byte(len(name))}, name...))
			fl[int(dirOff)+i+1+len(name)] += colFloat - colInt
			fl = asVersion(fl, 1)
			break
		}
	}
	if fl == nil {
		t.Fatal("no numeric column to turn into a float one")
	}
	if _, err := readColumns(bytes.NewReader(fl), int64(len(fl))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("version 1 file with a float column: %v, want ErrCorrupt", err)
	}
	if _, err := readColumns(bytes.NewReader(asVersion(v2, colVersion+1)), int64(len(v2))); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("version %d file: %v, want ErrUnsupported", colVersion+1, err)
	}
	// the version written today has a kind 7 column (status: 3 values),
	// which a version 2 file may not hold
	v3 := buildColumns(h)
	r3, err := readColumns(bytes.NewReader(v3), int64(len(v3)))
	if err != nil || r3.cols["status"] == nil || r3.cols["status"].kind != colIntFew {
		t.Fatalf("version 3 status column: %+v, %v", r3, err)
	}
	if _, err := readColumns(bytes.NewReader(asVersion(v3, 2)), int64(len(v3))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("version 2 file with a kind 7 column: %v, want ErrCorrupt", err)
	}
}

// asVersion is a column file with its version byte set to v and its
// whole-file checksum recomputed.
func asVersion(file []byte, v byte) []byte {
	out := append([]byte(nil), file...)
	out[4] = v
	crcAt := len(out) - 12
	binary.LittleEndian.PutUint32(out[crcAt:], crc32.Checksum(out[:crcAt], castagnoli))
	return out
}

func jsonNorm(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// TestFewIntsReadWhole: a column of few integers (kind 7) read whole is a
// dictionary of their texts, one byte an event, whose row values are the
// integers' texts; a block asked for a comparison afterwards comes from
// its ranks and equals the block decoded alone.
func TestFewIntsReadWhole(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, GUID: testGUID, Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var evs []Event
	for i := 0; i < 300; i++ {
		e := testEvent("main", i)
		e.Fields = append(e.Fields, Field{Name: []byte("code"), Value: []byte(strconv.Itoa(i%5*100 - 100))})
		evs = append(evs, e)
	}
	if _, err := s.Append(evs); err != nil {
		t.Fatal(err)
	}
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	w, ok := s.Segments()[0].(*warmSegment)
	if !ok {
		t.Fatalf("segment %T is not warm", s.Segments()[0])
	}
	if m := w.r.cols.cols["code"]; m == nil || m.kind != colIntFew {
		t.Fatalf("code is not a kind 7 column")
	}
	alone, err := w.NumericBlock("code", 0) // before the whole column is cached
	if err != nil {
		t.Fatal(err)
	}
	whole, err := w.Column("code")
	if err != nil {
		t.Fatal(err)
	}
	if whole.Small == nil || whole.Ints != nil {
		t.Fatalf("kind 7 read whole: Small %v, Ints %v", whole.Small != nil, whole.Ints != nil)
	}
	w.r.cols.uncache() // forget the block decoded alone, keep reading
	w.r.cols.closed = false
	w.r.cols.cacheColumn(colKey{w.r.cols, "code", -1}, whole)
	fromRanks, err := w.NumericBlock("code", 0)
	if err != nil {
		t.Fatal(err)
	}
	for o := uint32(0); o < 300; o++ {
		want := strconv.Itoa(int(o)%5*100 - 100)
		if whole.Value(o) != want || alone.Value(o) != want || fromRanks.Value(o) != want || fromRanks.Num(o) != alone.Num(o) {
			t.Fatalf("event %d: whole %v, block alone %v, block from ranks %v, want %s", o, whole.Value(o), alone.Value(o), fromRanks.Value(o), want)
		}
	}
}

// TestColumnsTwoByteIDs: a warm dictionary column of 256–65,535 values is
// read as two bytes an event (query.Column.IDs16); every command over it
// gives the oracle's answer and the decoding path's.
func TestColumnsTwoByteIDs(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, MaxHotBytes: 60000})
	defer s.Close()
	var evs []Event
	for i := 0; i < 4000; i++ {
		ev := Event{Index: "main", Time: int64(1_700_000_000+i) * 1e9, Host: []byte(fmt.Sprintf("web-%d", i%3)),
			Source: []byte("s"), Sourcetype: []byte("st"), Raw: []byte(fmt.Sprintf("event %d word%d", i, i%5))}
		if i%11 != 0 { // some events lack the field
			ev.Fields = append(ev.Fields, Field{Name: []byte("path"), Value: []byte(fmt.Sprintf("/p/%d", (i*7919)%700))})
		}
		ev.Fields = append(ev.Fields, Field{Name: []byte("bytes"), Value: []byte(strconv.Itoa(i * 37 % 1000))})
		evs = append(evs, ev)
	}
	if _, err := s.Append(evs); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitIdle(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	segs := s.Segments()
	wide := 0
	for _, sg := range segs {
		if w, ok := sg.(*warmSegment); ok {
			c, err := w.Column("path")
			if err != nil {
				t.Fatal(err)
			}
			if c != nil && c.IDs16 != nil {
				wide++
			}
		}
	}
	if wide == 0 {
		t.Fatal("no warm copy reads path as two-byte ids")
	}
	for _, q := range []string{
		"| stats dc(path) values(path)", "| stats count by path | sort - count | head 5", "| top limit=3 path", "| rare limit=3 path",
		"| stats avg(bytes) sum(bytes) count by path | sort path | head 7", "word1 | stats dc(path) avg(bytes) by host",
		"path=/p/5 | stats count", "path=/p/5* | stats count by host", "NOT path=* | stats count", "| table path bytes | dedup path | sort path | head 4",
		"| where bytes > 500 | stats dc(path)", `| eval k=path | stats count by k | sort - count | head 3`, "| stats count by path, host | stats count",
	} {
		matchesOracle(t, segs, query.Request{Query: q, Server: "p1"})
	}
}

// matchesOracle runs req over segs and fails unless the answer equals the
// naive scanner's (floats within 1e-9); it returns the normalised answer.
func matchesOracle(t *testing.T, segs []query.Segment, req query.Request) string {
	t.Helper()
	resp, err := query.Search(t.Context(), req, segs)
	if err != nil {
		t.Fatal(err)
	}
	want, err := querytest.ReferenceSearch(req, querytest.SegmentRows(segs, "p1"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := jsonNorm(resp.Results)
	exp, _ := jsonNorm(want)
	if got != exp && !sameJSONWithin(got, exp) {
		t.Fatalf("query %q: columns give\n%s\noracle\n%s", req.Query, got, exp)
	}
	return got
}
