package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestSolePartial: a sole partial (a head that asked: one peer serves the
// search), its dc counts and perc values final, merges to the answer its
// sets and values give; two such partials with a group in common, or one
// and a partial of sets, cannot be merged and Merge says ErrSoleUndecided;
// a head that did not ask refuses final forms; a timechart or a top never
// sends them; malformed ones are refused.
func TestSolePartial(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 2))
	segs := segmentsByIndex(genEvents(r, 1500), 2)
	now := genBase.Add(5 * time.Hour)
	compile := func(q string, distinct bool) *Plan {
		p, err := Compile(Request{Query: q, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		p.SetBinarySets(true)
		p.SetSolePartial(distinct)
		return p
	}
	// wire runs q on seg with the forms a head that asked gets, and
	// decodes what the head receives.
	wire := func(q string, distinct bool, seg Segment) (*Partial, []byte) {
		p := compile(q, distinct)
		pt, err := p.RunSegment(context.Background(), seg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.EncodePartial(pt)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePartial(b)
		if err != nil {
			t.Fatal(err)
		}
		return got, b
	}
	for _, q := range []string{
		"* | stats dc(user) dc(status) values(user) count by host",
		"* | stats dc(path) as paths avg(bytes)",
		"error | stats dc(level) by index, host",
		"* | stats perc90(bytes) min(bytes) perc5(latency) median(bytes) by status",
		"* | stats perc50(status) dc(host) by index",
	} {
		for _, seg := range segs {
			counted, b := wire(q, true, seg)
			sets, _ := wire(q, false, seg)
			if !bytes.Contains(b, []byte(`"dn":`)) && !bytes.Contains(b, []byte(`"pv":`)) {
				t.Fatalf("%s: no final count or value sent: %.300s", q, b)
			}
			if bytes.Contains(b, []byte(`"nb"`)) || bytes.Contains(b, []byte(`"nbx"`)) {
				t.Fatalf("%s: perc values sent beside final ones: %.300s", q, b)
			}
			want, wcols, err := compile(q, false).Merge([]*Partial{sets})
			if err != nil {
				t.Fatal(err)
			}
			got, gcols, err := compile(q, true).Merge([]*Partial{counted})
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if !reflect.DeepEqual(Results(got), Results(want)) || !reflect.DeepEqual(gcols, wcols) {
				t.Fatalf("%s: counts give\n%v\nsets give\n%v", q, Results(got), Results(want))
			}
			if _, _, err := compile(q, false).Merge([]*Partial{counted}); err == nil {
				t.Fatalf("%s: a head that did not ask took final forms", q)
			}
		}
		// two buckets' counts for the same groups: never added
		a, _ := wire(q, true, segs[0])
		b, _ := wire(q, true, segs[1])
		if _, _, err := compile(q, true).Merge([]*Partial{a, b}); !errors.Is(err, ErrSoleUndecided) {
			t.Fatalf("%s: two partials of counts merged: %v", q, err)
		}
		// a count and a set of the same group: neither
		s, _ := wire(q, false, segs[1])
		if _, _, err := compile(q, true).Merge([]*Partial{a, s}); !errors.Is(err, ErrSoleUndecided) {
			t.Fatalf("%s: a count merged with a set: %v", q, err)
		}
	}
	for _, q := range []string{"* | timechart span=1h dc(user) by host", "* | timechart span=1h perc90(bytes) by host", "* | top user", "* | stats values(user) count by host"} {
		if _, b := wire(q, true, segs[0]); bytes.Contains(b, []byte(`"dn":`)) || bytes.Contains(b, []byte(`"pv":`)) {
			t.Fatalf("%s: final forms sent: %.300s", q, b)
		}
	}
	// a malformed count is refused, never merged
	p := compile("* | stats dc(user) count perc90(bytes) by host", true)
	for i, js := range []string{
		`{"v":%d,"bucket":"b","kind":"agg","groups":[{"k":["web-1"],"s":[{"dn":-2},{"n":1},{}]}]}`,
		`{"v":%d,"bucket":"b","kind":"agg","groups":[{"k":["web-1"],"s":[{"n":1},{"dn":3},{}]}]}`,
		`{"v":%d,"bucket":"b","kind":"agg","groups":[{"k":["web-1"],"s":[{"dn":3,"set":["a"]},{"n":1},{}]}]}`,
		`{"v":%d,"bucket":"b","kind":"agg","groups":[{"k":["web-1"],"s":[{"pv":2},{"n":1},{}]}]}`,
		`{"v":%d,"bucket":"b","kind":"agg","groups":[{"k":["web-1"],"s":[{},{"n":1},{"pv":2,"nums":[1]}]}]}`,
	} {
		pt, err := DecodePartial([]byte(fmt.Sprintf(js, WireVersion)))
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if err := p.CheckPartial(pt); err == nil {
			t.Fatalf("%d: malformed final form accepted", i)
		}
	}
}
