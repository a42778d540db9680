package query

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// genNumericEvents makes events for numeric comparisons: bytes rises with
// the ordinal (so blocks have distinct ranges and skipping happens) from
// negative values; lat is a float (ints mixed in) in every segment but
// one, where it also holds "1.50" and "fast" (a dictionary column there);
// status mixes 200 with OK in some segments only; every field is missing
// from some events, some of which carry it as key=value in _raw instead.
func genNumericEvents(r *rand.Rand, seg, n int) []Event {
	out := make([]Event, n)
	step := int64(2*time.Hour) / int64(n*4)
	for i := range out {
		ev := Event{Time: genBase.UnixNano() + int64(seg*n+i)*step + r.Int64N(step), Host: []string{"web-01", "web-02", "db-01"}[r.IntN(3)],
			Source: "s", Sourcetype: []string{"access", "kv"}[r.IntN(2)], Index: "main"}
		ev.Raw = fmt.Sprintf("event %d word%d", i, r.IntN(4))
		if seg == 1 || r.IntN(8) > 0 { // segment 1: every event has bytes
			b := (i-100)*100 + 100*r.IntN(3) - 2000*seg // the first ~100 negative; bounds hit exactly
			ev.Fields = append(ev.Fields, Field{"bytes", strconv.Itoa(b)})
		} else if r.IntN(2) == 0 {
			ev.Raw += fmt.Sprintf(" bytes=%d", r.IntN(60000)-1000)
		}
		if seg != 1 || r.IntN(3) > 0 {
			switch k := r.IntN(10); {
			case k < 6:
				ev.Fields = append(ev.Fields, Field{"lat", strconv.FormatFloat(float64(r.IntN(40000)-5000)/1000, 'f', -1, 64)})
			case k < 8:
				ev.Fields = append(ev.Fields, Field{"lat", strconv.Itoa(r.IntN(60) - 10)})
			case k == 8 && seg == 2:
				ev.Fields = append(ev.Fields, Field{"lat", []string{"1.50", "fast", "-0", "0"}[r.IntN(4)]})
			default:
				if r.IntN(2) == 0 {
					ev.Raw += " lat=" + []string{"0.5", "12", "-1.25", "x"}[r.IntN(4)]
				}
			}
		}
		if r.IntN(5) > 0 {
			st := []string{"200", "200", "404", "500", "503", "-1"}[r.IntN(6)]
			if seg == 3 && r.IntN(6) == 0 {
				st = []string{"OK", "5xx", "", "007"}[r.IntN(4)]
			}
			ev.Fields = append(ev.Fields, Field{"status", st})
		}
		out[i] = ev
	}
	return out
}

var numTerms = []string{
	// block bounds of segment 1 (block k starts at (64k-100)*100-2000)
	"bytes>800", "bytes>=7200", "bytes<7200", "bytes<=13600", "bytes<=4700", "bytes<4700",
	"bytes>10000", "bytes>=20000", "bytes<5000", "bytes<=0", "bytes>-100", "bytes<-500", "bytes>100000", "bytes>=1e4",
	"lat>2.5", "lat>=0", "lat<0", "lat<=-1.5", "lat>30", "lat>=-5", "lat<1e1",
	"status>=500", "status<300", "status>400", "status<=0", "status>=ok", "status<5", "status=200", "status=OK",
}

var numCommands = []string{
	"| stats count", "| stats count by host", "| stats avg(lat) sum(lat) min(lat) max(lat) perc90(lat) perc0(lat) dc(lat) count(lat)",
	"| stats avg(bytes) min(bytes) max(bytes) by status", "| stats sum(lat) avg(lat) by sourcetype", "| stats values(lat) by host",
	"| where bytes > 10000 | stats count by host", "| where lat < 0 AND bytes >= 2000 | stats count avg(lat)",
	"| where 5000 < bytes | stats count", "| where status >= 500 | stats count by status", "| where lat >= 2.5 | table lat bytes | sort - lat | head 5",
	"| eval bytes=0 | where bytes > 1 | stats count", "| timechart span=10m avg(lat) max(bytes)", "| top limit=3 lat",
	"| table lat status | dedup lat | sort lat | head 4", "| stats count by lat | sort - count | head 3",
}

func genNumQuery(r *rand.Rand) string {
	term := func() string { return numTerms[r.IntN(len(numTerms))] }
	var q string
	switch r.IntN(5) {
	case 0:
		q = term()
	case 1:
		q = term() + " " + term()
	case 2:
		q = "(" + term() + " OR " + term() + ")"
	case 3:
		q = "NOT " + term()
	}
	if r.IntN(3) == 0 {
		lo := genBase.Add(time.Duration(r.Int64N(int64(2 * time.Hour))))
		q += fmt.Sprintf(" earliest=%s latest=%s", lo.Format(time.RFC3339Nano), lo.Add(30*time.Minute).Format(time.RFC3339Nano))
	}
	if r.IntN(5) > 0 {
		q += " " + numCommands[r.IntN(len(numCommands))]
	}
	return q
}

// TestNumericComparisonsOracle: numeric comparisons (search terms and
// where) and float aggregates over integer, float and dictionary columns
// equal the naive oracle, with and without the column store; blocks are
// skipped, taken whole and decoded along the way.
func TestNumericComparisonsOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 5))
	var segs, plain []Segment
	for i := 0; i < 4; i++ {
		s := NewMemSegment(uniq(fmt.Sprintf("main~%d~p", i)), "main", genNumericEvents(r, i, 700))
		segs = append(segs, s)
		plain = append(plain, noColumns{s})
	}
	kinds := map[string]bool{}
	for _, s := range segs {
		c := s.(*MemSegment).cols["lat"]
		kinds[fmt.Sprintf("ints=%v floats=%v", c.Ints != nil, c.Floats != nil)] = true
	}
	if len(kinds) < 2 {
		t.Fatalf("lat columns all of one kind: %v", kinds)
	}
	skipped, whole, postings := numBlockStats.skipped.Load(), numBlockStats.whole.Load(), numBlockStats.postings.Load()
	now := genBase.Add(3 * time.Hour)
	n := 400
	if raceEnabled {
		n = 200
	}
	for i := 0; i < n; i++ {
		q := genNumQuery(r)
		if i < len(numTerms) {
			q = numTerms[i] + " | stats count avg(lat) by host"
		}
		req := Request{Query: q, Now: now, Server: "p1"}
		want := canon(t, oracleSearch(t, req, segs))
		for _, set := range [][]Segment{segs, plain} {
			resp, err := Search(context.Background(), req, set)
			if err != nil {
				t.Fatalf("Search(%q): %v", q, err)
			}
			if ok, diff := sameResults(canon(t, resp.Results), want); !ok {
				t.Fatalf("query %q (columns %v): differs from the oracle: %s", q, set[0] == segs[0], diff)
			}
		}
	}
	if numBlockStats.skipped.Load() == skipped || numBlockStats.whole.Load() == whole {
		t.Fatalf("no block skipped or taken whole by its range")
	}
	if numBlockStats.postings.Load() == postings {
		t.Fatalf("no comparison on a field of few values (status) answered from postings")
	}
}

// TestNumericBlocksSkipDecoding: a comparison whose bound lies above a
// segment's values decodes no block and no event; float aggregates read
// float columns without decoding events.
func TestNumericBlocksSkipDecoding(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	events := make([]Event, 1000)
	for i := range events {
		events[i] = Event{Time: genBase.UnixNano() + int64(i)*int64(time.Second), Host: "h" + strconv.Itoa(i%3), Source: "s", Sourcetype: "st", Index: "main",
			Raw: "e " + strconv.Itoa(i),
			Fields: []Field{{"bytes", strconv.Itoa(i * 10)}, {"lat", strconv.FormatFloat(float64(r.IntN(1000))/8, 'f', -1, 64)},
				{"status", strconv.Itoa(200 + 100*r.IntN(4))}}}
	}
	seg := NewMemSegment(uniq("main~0~p"), "main", events)
	if c := seg.cols["lat"]; c.Floats == nil {
		t.Fatalf("lat is not a float column")
	}
	for _, tc := range []struct {
		q              string
		decoded, whole int64 // blocks
	}{
		{"bytes>100000 | stats count", 0, 0},
		{"bytes>=9000 | stats count avg(lat)", 1, 1}, // 9000 is event 900: in the 15th block of 64
		{"bytes<640 | stats sum(lat)", 0, 1},
		{"| where bytes > 100000 | stats count", 0, 0},
		{"| stats avg(lat) sum(lat) min(lat) max(lat) perc90(lat) dc(lat) by host", 0, 0},
		{"lat>=0 | timechart span=5m avg(lat)", 0, 16},
		{"status>=600 | stats count", 0, 0},         // every block skipped by its range
		{"status>=300 | stats count by host", 0, 0}, // four values: their postings answer
	} {
		p, err := Compile(Request{Query: tc.q, Now: genBase.Add(3 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		d0, w0 := numBlockStats.decoded.Load(), numBlockStats.whole.Load()
		part, err := p.RunSegment(context.Background(), seg)
		if err != nil {
			t.Fatal(err)
		}
		if d, w := numBlockStats.decoded.Load()-d0, numBlockStats.whole.Load()-w0; d != tc.decoded || w != tc.whole {
			t.Errorf("%q: %d blocks decoded, %d taken whole; want %d, %d", tc.q, d, w, tc.decoded, tc.whole)
		}
		if part.Scanned != 0 {
			t.Errorf("%q decoded %d events, want 0", tc.q, part.Scanned)
		}
		req := Request{Query: tc.q, Now: genBase.Add(3 * time.Hour), Server: "p1"}
		resp, err := Search(context.Background(), req, []Segment{seg})
		if err != nil {
			t.Fatal(err)
		}
		if ok, diff := sameResults(canon(t, resp.Results), canon(t, oracleSearch(t, req, []Segment{seg}))); !ok {
			t.Fatalf("%q: differs from the oracle: %s", tc.q, diff)
		}
	}
}

func TestCanonicalFloat(t *testing.T) {
	for s, ok := range map[string]bool{"0.25": true, "-3": true, "1.5": true, "0": true, "-0": true, "123456.789": true,
		"1.50": false, "1e5": false, "+2": false, "NaN": false, "Inf": false, ".5": false, "": false, " 1": false, "0x10": false,
		strings.Repeat("9", 30): false} {
		if _, got := CanonicalFloat(s); got != ok {
			t.Errorf("CanonicalFloat(%q) = %v, want %v", s, got, ok)
		}
	}
}
