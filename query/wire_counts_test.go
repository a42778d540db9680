package query

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFrontCodedCounts: a count-only aggregate's keys front-coded
// (countsWire.B, for a head that asked) decode to exactly the lists the
// JSON form carries, and merge to the same answer; a head that did not ask
// gets the lists; a malformed B is refused, never guessed at.
func TestFrontCodedCounts(t *testing.T) {
	keys := []string{"", "/a", "/a/b", "/a/b", "/a/bc", "/b", "é/ü", strings.Repeat("x", 300)}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var evs []Event
	for i := 0; i < 200; i++ {
		evs = append(evs, Event{Time: base + int64(i), Host: "h", Sourcetype: "s", Index: "main",
			Raw: fmt.Sprintf("path=%s%d n=%d", keys[i%len(keys)], i%7, i)})
	}
	seg := NewMemSegment("main~1~G", "main", evs)
	for _, q := range []string{"* | top limit=3 path", "* | stats count by path", "* | stats count by path, n", "* | rare path"} {
		plan, err := Compile(Request{Query: q, Now: time.Unix(0, base)})
		if err != nil {
			t.Fatal(err)
		}
		var answers [][]Row
		for _, binaryCounts := range []bool{false, true} {
			p, err := plan.RunSegment(context.Background(), seg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := p.EncodeCounts(binaryCounts)
			if err != nil {
				t.Fatal(err)
			}
			var probe struct {
				Counts map[string]json.RawMessage `json:"counts"`
			}
			if err := json.Unmarshal(b, &probe); err != nil || probe.Counts == nil {
				t.Fatalf("%s: no counts in %.200s (%v)", q, b, err)
			}
			if _, hasB := probe.Counts["b"]; hasB != binaryCounts {
				t.Fatalf("%s: binary %v, wire %.200s", q, binaryCounts, b)
			}
			if _, hasK := probe.Counts["k"]; hasK == binaryCounts {
				t.Fatalf("%s: binary %v, wire %.200s", q, binaryCounts, b)
			}
			d, err := DecodePartial(b)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if d.Counts.B != nil || len(d.Counts.K) == 0 || !slices.IsSorted(d.Counts.K) {
				t.Fatalf("%s: decoded %d keys (B %d bytes)", q, len(d.Counts.K), len(d.Counts.B))
			}
			rows, _, err := plan.Merge([]*Partial{d, d})
			if err != nil {
				t.Fatal(err)
			}
			answers = append(answers, rows)
		}
		if fmt.Sprint(answers[0]) != fmt.Sprint(answers[1]) {
			t.Fatalf("%s: lists %v, front-coded %v", q, answers[0], answers[1])
		}
	}
	for _, bad := range []string{
		`{"v":2,"kind":"agg","counts":{"b":"gA=="}}`,                       // a varint cut short
		`{"v":2,"kind":"agg","counts":{"b":"BQFh"}}`,                       // shares 5 bytes with no key
		`{"v":2,"kind":"agg","counts":{"b":"AAk="}}`,                       // 9 bytes of key, none left
		`{"v":2,"kind":"agg","counts":{"k":["a"],"n":[1],"b":"AAFhAQ=="}}`, // both forms
	} {
		if _, err := DecodePartial([]byte(bad)); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}

// sameBothWays runs q over seg and writes its partial in each of two
// forms; check sees each wire form and its decoded partial; both decoded
// partials, merged twice each, must give the same answer.
func sameBothWays(t *testing.T, seg Segment, now time.Time, q string, forms [2]wireForms, check func(b []byte, d *Partial, second bool)) {
	t.Helper()
	plan, err := Compile(Request{Query: q, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var answers []string
	for i, f := range forms {
		p, err := plan.RunSegment(context.Background(), seg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.encode(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecodePartial(b)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		check(b, d, i == 1)
		rows, _, err := plan.Merge([]*Partial{d, d})
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, fmt.Sprint(Results(rows)))
	}
	if answers[0] != answers[1] {
		t.Fatalf("%s: %+v gives %s, %+v gives %s", q, forms[0], answers[0], forms[1], answers[1])
	}
}

// TestFrontCodedSets: dc/values sets front-coded (aggState.SB, for a head
// that asked) decode to exactly the sets the JSON form carries and merge
// to the same answer; a head that did not ask gets the lists; a malformed
// SB, or a state with both forms, is refused.
func TestFrontCodedSets(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var evs []Event
	for i := 0; i < 300; i++ {
		evs = append(evs, Event{Time: base + int64(i), Host: fmt.Sprintf("h%d", i%3), Sourcetype: "s", Index: "main",
			Raw: fmt.Sprintf("path=/a/b%d/%s n=%d", i%17, strings.Repeat("é", i%4), i%5)})
	}
	seg := NewMemSegment("main~1~S", "main", evs)
	for _, q := range []string{"* | stats dc(path)", "* | stats dc(path) values(n) count by host", "* | stats values(path) by n"} {
		sameBothWays(t, seg, time.Unix(0, base), q, [2]wireForms{{}, {sets: true}}, func(b []byte, d *Partial, binary bool) {
			if hasSB := strings.Contains(string(b), `"sb":`); hasSB != binary {
				t.Fatalf("%s: binary %v, wire %.300s", q, binary, b)
			}
			if hasSet := strings.Contains(string(b), `"set":`); hasSet == binary {
				t.Fatalf("%s: binary %v, wire %.300s", q, binary, b)
			}
			for _, g := range d.Groups {
				for _, st := range g.States {
					if st.SB != nil || (len(st.Set) > 0 && !slices.IsSorted(st.Set)) {
						t.Fatalf("%s: decoded state %+v", q, st)
					}
				}
			}
		})
	}
	for _, bad := range []string{
		`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"sb":"gA=="}]}]}`,             // a varint cut short
		`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"sb":"BQFh"}]}]}`,             // shares 5 bytes with no value
		`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"sb":"AAk="}]}]}`,             // 9 bytes of value, none left
		`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"set":["a"],"sb":"AAFh"}]}]}`, // both forms
	} {
		if _, err := DecodePartial([]byte(bad)); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}

// TestPackedNums: perc/median values read back exactly and in order from
// either packed form (integers, floats with NaN, infinities and -0); a
// malformed form is refused; a head that asked gets NB and merges the
// same answer as from the lists.
func TestPackedNums(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for i := 0; i < 200; i++ {
		n := r.Intn(50)
		nums := make([]float64, n)
		for j := range nums {
			nums[j] = float64(r.Int63n(1<<53) - 1<<52)
			if i%2 == 1 && r.Intn(5) == 0 {
				nums[j] = []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0.5, -1e300, 1 << 53}[r.Intn(7)]
			}
		}
		b := packNums(nums)
		got, err := unpackNums(b)
		if err != nil {
			t.Fatalf("%v: %v", nums, err)
		}
		if len(got) != len(nums) {
			t.Fatalf("%d values read back as %d", len(nums), len(got))
		}
		for j := range nums {
			if math.Float64bits(got[j]) != math.Float64bits(nums[j]) {
				t.Fatalf("value %d: %v read back as %v (form %d)", j, nums[j], got[j], b[0])
			}
		}
	}
	if b := packNums([]float64{100, 7, 1e6}); b[0] != numsInts || len(b) > 8 {
		t.Fatalf("integers packed as %v", b)
	}
	for _, bad := range [][]byte{nil, {9, 1}, {numsFloats, 1, 2, 3}, {numsInts, 0x80}, {numsInts, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f}} {
		if got, err := unpackNums(bad); err == nil {
			t.Errorf("%v: read as %v", bad, got)
		}
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var evs []Event
	for i := 0; i < 300; i++ {
		evs = append(evs, Event{Time: base + int64(i), Host: fmt.Sprintf("h%d", i%3), Sourcetype: "s", Index: "main",
			Raw: fmt.Sprintf("bytes=%d ms=%d.%d", (i*7919)%1000, i%13, i%10)})
	}
	seg := NewMemSegment("main~1~S", "main", evs)
	for _, q := range []string{"* | stats perc90(bytes) perc10(ms) by host", "* | stats perc50(ms) perc99(bytes) count"} {
		sameBothWays(t, seg, time.Unix(0, base), q, [2]wireForms{{}, {nums: true}}, func(b []byte, _ *Partial, packed bool) {
			if hasNB := strings.Contains(string(b), `"nb":`); hasNB != packed || strings.Contains(string(b), `"nums":`) == packed {
				t.Fatalf("%s: packed %v, wire %.300s", q, packed, b)
			}
		})
	}
	if _, err := DecodePartial([]byte(`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"nums":[1],"nb":"AQI="}]}]}`)); err == nil {
		t.Fatal("a state with both forms decoded")
	}
}

// TestPartialBlobs: with blobs (a head that reads framed messages) a
// partial's counts, sets and packed values travel after its JSON and merge
// to the same answer as inside it; a blob named outside the blobs, a field
// both in the JSON and the blobs, or a cut header is refused.
func TestPartialBlobs(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var evs []Event
	for i := 0; i < 300; i++ {
		evs = append(evs, Event{Time: base + int64(i), Host: fmt.Sprintf("h%d", i%3), Sourcetype: "s", Index: "main",
			Raw: fmt.Sprintf("path=/a/b%d bytes=%d", i%17, (i*7919)%1000)})
	}
	seg := NewMemSegment("main~1~S", "main", evs)
	for _, q := range []string{"* | stats dc(path) perc90(bytes) values(path) by host", "* | top limit=3 path", "* | stats count by path"} {
		all := wireForms{counts: true, sets: true, nums: true}
		withBlobs := all
		withBlobs.blobs = true
		sameBothWays(t, seg, time.Unix(0, base), q, [2]wireForms{all, withBlobs}, func(b []byte, _ *Partial, blobs bool) {
			if (b[0] == partialBlobs) != blobs {
				t.Fatalf("%s: blobs %v, wire %.100q", q, blobs, b)
			}
			if blobs && (bytes.Contains(b, []byte(`"sb":`)) || bytes.Contains(b, []byte(`"nb":`)) || bytes.Contains(b, []byte(`"b":`))) {
				t.Fatalf("%s: byte fields left in the JSON: %.300q", q, b)
			}
		})
	}
	frame := func(js string, blobs string) []byte {
		b := append([]byte{partialBlobs}, binary.AppendUvarint(nil, uint64(len(js)))...)
		return append(append(b, js...), blobs...)
	}
	for name, b := range map[string][]byte{
		"past the blobs":         frame(`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"sbx":[1,4]}]}]}`, "\x00\x01a"),
		"negative place":         frame(`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"nbx":[-1,1]}]}]}`, "\x01\x02"),
		"both in JSON and blobs": frame(`{"v":2,"kind":"agg","counts":{"b":"AAFhAQ==","bx":[0,4]}}`, "\x00\x01a\x01"),
		"header past the end":    append([]byte{partialBlobs, 0x7f}, `{"v":2}`...),
		"cut header":             {partialBlobs, 0x80},
	} {
		if p, err := DecodePartial(b); err == nil {
			t.Errorf("%s: decoded %+v", name, p)
		}
	}
	if p, err := DecodePartial(frame(`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"sbx":[0,3]}]}]}`, "\x00\x01a")); err != nil || len(p.Groups) != 1 || fmt.Sprint(p.Groups[0].States[0].Set) != "[a]" {
		t.Fatalf("a set in the blobs: %+v, %v", p, err)
	}
}
