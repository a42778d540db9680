package query

import (
	"context"
	"encoding/json"
	"fmt"
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
		plan, err := Compile(Request{Query: q, Now: time.Unix(0, base)})
		if err != nil {
			t.Fatal(err)
		}
		var answers []string
		for _, binarySets := range []bool{false, true} {
			p, err := plan.RunSegment(context.Background(), seg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := p.encode(false, binarySets)
			if err != nil {
				t.Fatal(err)
			}
			if hasSB := strings.Contains(string(b), `"sb":`); hasSB != binarySets {
				t.Fatalf("%s: binary %v, wire %.300s", q, binarySets, b)
			}
			if hasSet := strings.Contains(string(b), `"set":`); hasSet == binarySets {
				t.Fatalf("%s: binary %v, wire %.300s", q, binarySets, b)
			}
			d, err := DecodePartial(b)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			for _, g := range d.Groups {
				for _, st := range g.States {
					if st.SB != nil || (len(st.Set) > 0 && !slices.IsSorted(st.Set)) {
						t.Fatalf("%s: decoded state %+v", q, st)
					}
				}
			}
			rows, _, err := plan.Merge([]*Partial{d, d})
			if err != nil {
				t.Fatal(err)
			}
			answers = append(answers, fmt.Sprint(Results(rows)))
		}
		if answers[0] != answers[1] {
			t.Fatalf("%s: lists %s, front-coded %s", q, answers[0], answers[1])
		}
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
