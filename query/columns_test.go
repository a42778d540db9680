package query

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// genColumnEvents makes events whose indexed fields are hard on columns:
// missing fields, mixed types in one field (status=200 and status=OK),
// multivalue fields, empty strings, huge values, non-canonical integers
// (007, +5), floats, and key=value pairs in _raw for events lacking the
// indexed field (search-time extraction must still supply them).
func genColumnEvents(r *rand.Rand, n int) []Event {
	hosts := []string{"web-01", "web-02", "db-01", ""}
	statuses := []string{"200", "200", "404", "500", "OK", "", "007", "+5", "-3", "9223372036854775807", "1.5"}
	paths := []string{"/", "/a", "/b/c", strings.Repeat("x", 5000), "", "/a b"}
	out := make([]Event, n)
	step := int64(2*time.Hour) / int64(n)
	for i := range out {
		ev := Event{Time: genBase.UnixNano() + int64(i)*step + r.Int64N(step), Host: hosts[r.IntN(len(hosts))],
			Source: "s" + fmt.Sprint(r.IntN(3)), Sourcetype: []string{"access", "kv"}[r.IntN(2)], Index: "main"}
		ev.Raw = fmt.Sprintf("event %d word%d", i, r.IntN(5))
		if r.IntN(5) > 0 {
			ev.Fields = append(ev.Fields, Field{"status", statuses[r.IntN(len(statuses))]})
			if r.IntN(15) == 0 {
				ev.Fields = append(ev.Fields, Field{"status", statuses[r.IntN(len(statuses))]})
			}
		} else if r.IntN(2) == 0 {
			ev.Raw += " status=" + statuses[r.IntN(4)]
		}
		if r.IntN(6) > 0 {
			ev.Fields = append(ev.Fields, Field{"bytes", fmt.Sprint(r.IntN(100000))})
		} else if r.IntN(2) == 0 {
			ev.Raw += " bytes=" + fmt.Sprint(r.IntN(100))
		}
		if r.IntN(4) > 0 {
			ev.Fields = append(ev.Fields, Field{"path", paths[r.IntN(len(paths))]})
		}
		if r.IntN(10) == 0 {
			ev.Fields = append(ev.Fields, Field{"host", "fake"}, Field{"_raw", "fake"})
		}
		if r.IntN(3) == 0 {
			ev.Fields = append(ev.Fields, Field{"tag", "t" + fmt.Sprint(r.IntN(3))}, Field{"tag", "t" + fmt.Sprint(r.IntN(3))})
		}
		// in every event: sums and counts by a key run over the columns
		// alone (fastAgg.addAll)
		ev.Fields = append(ev.Fields, Field{"n", fmt.Sprint(r.IntN(1000) - 100)}, Field{"dur", fmt.Sprint(float64(r.IntN(4000)) / 8)})
		out[i] = ev
	}
	return out
}

var columnQueries = []string{
	"| stats count, count(status), sum(bytes), avg(bytes), min(bytes), max(bytes), dc(bytes), perc90(bytes), perc0(bytes) by sourcetype",
	"| stats min(status) max(status) dc(status) values(status) sum(status) avg(status) perc50(status) count(status)",
	"| stats dc(path) values(path) min(path) max(path) by host",
	"| stats count by status", "| stats count by host, sourcetype", "| stats avg(bytes) by status, host",
	"| stats dc(tag) values(tag) by tag", "| stats count by tag", "| stats values(host) dc(source) by index",
	"word1 | stats avg(bytes) dc(path) by host", "status=500 | stats dc(path) avg(bytes)",
	"status>=400 | stats sum(bytes) as s by host | sort - s | head 2", "NOT status=200 | stats earliest(status) latest(bytes)",
	"| timechart span=10m avg(bytes)", "| timechart span=15m count by status", "| timechart span=20m dc(path) by host", "| timechart span=20m max(bytes) avg(status)",
	"earliest=2026-01-01T00:30:00Z latest=2026-01-01T01:10:00Z | timechart span=5m perc90(bytes)",
	"| top limit=3 status", "| rare limit=2 path by host", "| top tag",
	"| dedup host | table host status", "| table host status bytes | dedup 2 status", "| table _time host tag | head 5",
	"| table status path | tail 3", "| where bytes > 50000 | stats count by host",
	`| eval kb=round(bytes/1024,1), s=if(status>=400,"bad","ok") | stats count avg(kb) by s`,
	"| where isnull(status) | stats count", "| where status=\"OK\" OR len(path) > 100 | stats count by sourcetype",
	"| eval x=bytes*2 | where x > 100 | table x host | sort - x | head 3", "| stats count by _cd | stats count",
	"| where like(path, \"/a%\") | table path splunk_server index _bkt", "| stats max(_cd) min(_time) by host",
	"| stats count, sum(n), avg(dur), count(n), sum(dur) by source", "| stats avg(n) by sourcetype", "word2 | stats sum(dur) by source",
	// dedup picks its survivors from columns and decodes only them
	"| dedup host", "| dedup 2 status keepempty=true", "| dedup status host | table _time _raw status host", "| dedup tag",
	"word1 | dedup 3 path", "| dedup bytes | stats count", "| dedup n sourcetype | stats count by sourcetype", "| dedup dur | head 5",
	"| dedup _time | stats count", "| dedup index source | table index source _cd", "status>=400 | dedup 2 host keepempty=true | tail 4",
	// sort N and sort | head N decode only the rows that can make the cut
	"| sort 5 - bytes", "| sort - bytes | head 3", "| sort 7 status, - _time", "| sort num(status) | head 4",
	"| sort str(bytes) - host | head 6", "| sort 3 tag", "word1 | sort 4 - dur", "| sort 0 path | head 2",
	"| sort - _cd | head 3", "| sort 6 n sourcetype | table n sourcetype _raw", "| sort 2 - dur | head 5", "| sort - n | head 0",
	// fields, rex on an indexed field and a field-only search over columns
	"| fields host status | stats count by status", "| fields - status | stats count by status host",
	"| fields h* | table host status", `| rex field=path "^/(?<seg>[a-z]+)" | stats count by seg`,
	`| rex field=path "^/(?<status>[a-z])" | stats count by status`, `| rex "rt=(?<rt>\d+)" | stats count by rt`,
	"| search status>=400 | stats count by host", "| search status=5* OR NOT path=* | stats count by status",
	"| search host=web-0* status!=200 | stats avg(bytes)", "| search word1 | stats count by host",
}

// noColumns hides a segment's ColumnSource: the executor decodes events.
type noColumns struct{ Segment }

// TestColumnsOracle: every command over columns equals the naive oracle,
// over data with missing, mixed, multivalue, empty and huge values; the
// same with the column store hidden; and the bench shapes decode nothing.
func TestColumnsOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 13))
	events := genColumnEvents(r, 2000)
	var segs, plain []Segment
	for i := 0; i < 4; i++ {
		s := NewMemSegment(uniq(fmt.Sprintf("main~%d~p", i)), "main", events[i*500:(i+1)*500])
		segs = append(segs, s)
		plain = append(plain, noColumns{s})
	}
	now := genBase.Add(3 * time.Hour)
	for _, q := range columnQueries {
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
}

// TestColumnsDecodeNothing: field-value aggregations over events that hold
// every field read columns only.
func TestColumnsDecodeNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	events := genColumnEvents(r, 1000)
	for i := range events {
		events[i].Fields = []Field{{"status", fmt.Sprint(200 + r.IntN(3)*100)}, {"bytes", fmt.Sprint(r.IntN(1000))}, {"path", "/p" + fmt.Sprint(r.IntN(50))}}
	}
	seg := NewMemSegment(uniq("main~0~p"), "main", events)
	for _, q := range []string{
		"status=500 | stats dc(path) avg(bytes)", "| stats perc90(bytes) min(bytes) by status", "| stats dc(path)",
		"| stats avg(bytes) by sourcetype", "status>=400 | timechart span=30m avg(bytes)",
		"| stats sum(bytes) as s by host | sort - s | head 3", "| table path | dedup path", "| where bytes > 10 | stats count by host",
		"| stats count dc(bytes) values(status) sum(bytes) by status, host", "| timechart span=1h max(bytes) by status",
		"| stats perc50(status) min(status) max(status) by bytes", "| stats min(bytes) max(bytes) perc10(bytes) by status",
		"| search status>=400 | stats count by host", "| fields status bytes | stats avg(bytes) by status",
		"| fields - path | search path!=/p1 | stats dc(path) by status", `| rex field=path "(?<status>\d)$" | stats count by status`,
	} {
		p, err := Compile(Request{Query: q, Now: genBase.Add(3 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		part, err := p.RunSegment(context.Background(), seg)
		if err != nil {
			t.Fatal(err)
		}
		if part.Scanned != 0 {
			t.Errorf("%q decoded %d events, want 0", q, part.Scanned)
		}
		req := Request{Query: q, Now: genBase.Add(3 * time.Hour), Server: "p1"}
		resp, err := Search(context.Background(), req, []Segment{seg})
		if err != nil {
			t.Fatal(err)
		}
		if ok, diff := sameResults(canon(t, resp.Results), canon(t, oracleSearch(t, req, []Segment{seg}))); !ok {
			t.Fatalf("%q (integer columns): differs from the oracle: %s", q, diff)
		}
	}
}

// TestDedupDecodesSurvivors: a dedup over indexed fields decodes only each
// key's first N events, and a sort cut to N rows only N events (the
// columns pick them), and the rows, _raw included, are the oracle's.
func TestDedupDecodesSurvivors(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	events := genColumnEvents(r, 1000)
	hosts := map[string]bool{}
	for i := range events {
		events[i].Fields = []Field{{"status", fmt.Sprint(200 + r.IntN(3)*100)}, {"bytes", fmt.Sprint(r.IntN(1000))}}
		hosts[events[i].Host] = true
	}
	seg := NewMemSegment(uniq("main~0~p"), "main", events)
	for _, c := range []struct {
		q    string
		most int
	}{
		{"| dedup status", 3}, {"| dedup 2 status", 6}, {"| dedup status host", 3 * len(hosts)},
		{"| dedup 4 host keepempty=true", 4 * len(hosts)}, {"| dedup status | table _raw status", 3},
		{"| dedup _cd | head 2", 1000}, {"| dedup status bytes | stats count", 1000},
		{"| sort 5 - bytes", 5}, {"| sort - bytes | head 3", 3}, {"| sort 4 status, - _time", 4}, {"| sort num(bytes) host | head 9", 9},
		{"| sort 3 _time", 3}, {"| sort - _time | head 2", 2}, {"| sort num(bytes) | head 4", 4},
	} {
		now := genBase.Add(3 * time.Hour)
		p, err := Compile(Request{Query: c.q, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		part, err := p.RunSegment(context.Background(), seg)
		if err != nil {
			t.Fatal(err)
		}
		if part.Scanned == 0 || part.Scanned > int64(c.most) {
			t.Errorf("%q decoded %d events, want 1..%d", c.q, part.Scanned, c.most)
		}
		req := Request{Query: c.q, Now: now, Server: "p1"}
		resp, err := Search(context.Background(), req, []Segment{seg})
		if err != nil {
			t.Fatal(err)
		}
		if ok, diff := sameResults(canon(t, resp.Results), canon(t, oracleSearch(t, req, []Segment{seg}))); !ok {
			t.Fatalf("%q: differs from the oracle: %s", c.q, diff)
		}
	}
}
