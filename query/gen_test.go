package query

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// segSerial keeps test bucket ids unique: the executor caches per bucket id.
var segSerial atomic.Int64

var genBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const genSpan = 4 * time.Hour

// genEvents makes n varied events with unique times inside [genBase,
// genBase+genSpan), nearly but not exactly in ascending order: access-log
// lines with and without indexed fields, key=value lines, JSON events,
// mixed case and punctuation, multivalue indexed fields.
func genEvents(r *rand.Rand, n int) []Event {
	step := int64(genSpan) / int64(n)
	times := make([]int64, n)
	for i := range times {
		times[i] = genBase.UnixNano() + int64(i)*step + r.Int64N(step)
	}
	for i := 0; i+1 < n; i++ { // local disorder
		if r.IntN(5) == 0 {
			times[i], times[i+1] = times[i+1], times[i]
		}
	}
	hosts := []string{"web-01", "web-02", "web-03", "web-04", "WEB-05", "db-01"}
	paths := []string{"/", "/api/v1/cart", "/api/v1/users/42", "/login", "/static/app.js", "/Admin/Reports"}
	users := []string{"alice", "bob", "Bob", "carol", "dave"}
	levels := []string{"info", "warn", "error", "ERROR", "debug"}
	statuses := []string{"200", "200", "200", "201", "301", "404", "500", "503"}
	words := []string{"Error", "error:", "timeout", "ERR-42", "192.168.1.10", "foo.bar_baz", "zqxjk", "disk", "full", "retry", "ok", "a;b", "x/y/z"}
	out := make([]Event, n)
	for i := range out {
		ev := Event{Time: times[i], Host: hosts[r.IntN(len(hosts))], Index: "main"}
		if r.IntN(4) == 0 {
			ev.Index = "web"
		}
		st := statuses[r.IntN(len(statuses))]
		path := paths[r.IntN(len(paths))]
		bytes := fmt.Sprint(r.IntN(5000))
		switch k := r.IntN(10); {
		case k < 5:
			ev.Source, ev.Sourcetype = "/var/log/app/access.log", "access"
			raw := fmt.Sprintf(`192.168.%d.%d - - "GET %s HTTP/1.1" %s %s rt=%dms`, r.IntN(3), 10+r.IntN(3), path, st, bytes, r.IntN(900))
			if st >= "500" {
				raw += ` msg="upstream error: timed out"`
			}
			if r.IntN(30) == 0 {
				raw += " trace=zqxjk"
			}
			ev.Raw = raw
			if r.IntN(10) < 7 {
				ev.Fields = []Field{{"status", st}, {"path", path}, {"method", "GET"}, {"bytes", bytes}}
				if r.IntN(20) == 0 {
					ev.Fields = append(ev.Fields, Field{"status", "299"})
				}
			} else {
				ev.Raw += " status=" + st + " bytes=" + bytes
			}
		case k < 8:
			ev.Source, ev.Sourcetype = "/var/log/app/app.log", "kv"
			ev.Raw = fmt.Sprintf("level=%s user=%s action=%s latency=%d.%02d %s", levels[r.IntN(len(levels))], users[r.IntN(len(users))],
				[]string{"login", "logout", "buy"}[r.IntN(3)], r.IntN(2), r.IntN(100), words[r.IntN(len(words))])
			if r.IntN(3) == 0 {
				ev.Raw += " status=" + st
			}
			if r.IntN(4) == 0 {
				ev.Fields = []Field{{"user", users[r.IntN(len(users))]}}
			}
		default:
			ev.Source, ev.Sourcetype = "/var/log/app/json.log", "json"
			ev.Raw = fmt.Sprintf(`{"level":%q,"user":%q,"status":%s,"bytes":%s,"tags":["t%d","t%d"],"msg":"%s %s","score":%s}`,
				levels[r.IntN(len(levels))], users[r.IntN(len(users))], st, bytes, r.IntN(3), r.IntN(3), words[r.IntN(len(words))], words[r.IntN(len(words))],
				[]string{"5e2", "1.50", "-3", "0.5"}[r.IntN(4)])
		}
		out[i] = ev
	}
	return out
}

var genTerms = []string{"error", "Error", "timeout", "err*", "*rror", `"upstream error"`, `"timed out"`, "192.168",
	"168.1", "192.168.1.10", "/api/v1/cart", "cart", "api/v1*", "zqxjk", "alice", "ERR-42", `"disk full"`,
	"foo.bar_baz", "bar", "nonexistentword", "192.168.*", "a;b", "x/y", "*", "t1", "GET", "get", "retry"}

var genFieldTerms = []string{"status=5*", "status=200", "status!=200", "status>=400", "status<300", "host=web-0*",
	"host=WEB-01", "host!=web-02", "user=alice", "user=bob", "level=error", "latency>0.5", "method=GET",
	"path=/api/*", "index=web", "index=main", "sourcetype=json", "source=*app*", `msg="upstream error: timed out"`,
	"bytes>4000", "path=/admin/reports", "status=299", "rt<100ms", "tags=t1", "user.name=x"}

func genExpr(r *rand.Rand, depth int) string {
	if depth > 2 || r.IntN(3) > 0 {
		if r.IntN(2) == 0 {
			return genTerms[r.IntN(len(genTerms))]
		}
		return genFieldTerms[r.IntN(len(genFieldTerms))]
	}
	a, b := genExpr(r, depth+1), genExpr(r, depth+1)
	switch r.IntN(4) {
	case 0:
		return a + " " + b
	case 1:
		return "(" + a + " OR " + b + ")"
	case 2:
		return "NOT " + a + " " + b
	}
	return a + " AND " + b
}

var genCommands = []string{
	"| stats count", "| stats count by host", "| stats count by status", "| stats count by host, status",
	"| stats count by index", "| stats count by path",
	"| stats sum(bytes) avg(bytes) min(bytes) max(bytes) dc(user) values(level) earliest(status) latest(status) perc50(bytes) perc95(latency) count(user) by host",
	"| stats min(level) max(user) dc(status) by index", "| stats values(tags) dc(tags)",
	"| top limit=3 path", "| top status by host", "| rare user", "| top limit=0 host", "| top method showperc=false",
	"| timechart span=10m count", "| timechart span=15m count by host", "| timechart span=30m avg(bytes) max(latency)",
	"| timechart span=1h dc(user)", "| timechart span=15m count by host limit=2", "| timechart span=30m limit=1 avg(bytes) by status",
	"| timechart span=20m perc50(bytes) by user limit=2 useother=f otherstr=rest",
	"| sort bytes", "| sort 5 -status, host", "| sort num(latency)", "| head 7", "| tail 4", "| dedup host",
	"| dedup 2 status keepempty=true", "| table _time host status", "| fields host, status, _raw", "| fields - _raw",
	`| eval kb=round(bytes/1024,1), s=if(status>=500,"bad","ok")`, "| where status >= 400 OR isnull(status)",
	`| rex "rt=(?<rtms>\d+)ms"`, "| search host=web-0*", "| search error OR user=bob",
}

// genQuery builds a random query; when aggFirst is set the first command is
// an aggregate.
func genQuery(r *rand.Rand) string {
	var b strings.Builder
	if r.IntN(6) > 0 {
		b.WriteString(genExpr(r, 0))
	}
	if r.IntN(3) == 0 {
		lo := genBase.Add(time.Duration(r.Int64N(int64(genSpan))))
		hi := lo.Add(time.Duration(r.Int64N(int64(2 * time.Hour))))
		fmt.Fprintf(&b, " earliest=%s latest=%s", lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
	}
	nc := r.IntN(4)
	for i := 0; i < nc; i++ {
		b.WriteString(" ")
		b.WriteString(genCommands[r.IntN(len(genCommands))])
	}
	return b.String()
}

// canon prepares results for comparison: integers as float64, optional
// fields dropped.
func canon(t *testing.T, results []map[string]any, drop ...string) []map[string]any {
	t.Helper()
	out := make([]map[string]any, len(results))
	for i, m := range results {
		c := make(map[string]any, len(m))
		for k, v := range m {
			switch x := v.(type) {
			case int64:
				v = float64(x)
			case int:
				v = float64(x)
			}
			c[k] = v
		}
		for _, d := range drop {
			delete(c, d)
		}
		out[i] = c
	}
	return out
}

func sameResults(a, b []map[string]any) (bool, string) {
	if len(a) != len(b) {
		return false, fmt.Sprintf("%d results vs %d", len(a), len(b))
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false, fmt.Sprintf("result %d: %v vs %v", i, a[i], b[i])
		}
		for k, va := range a[i] {
			vb, ok := b[i][k]
			if !ok || !sameValue(va, vb) {
				return false, fmt.Sprintf("result %d field %s: %v vs %v\n%v\n%v", i, k, va, vb, a[i], b[i])
			}
		}
	}
	return true, ""
}

func sameValue(a, b any) bool {
	fa, oka := a.(float64)
	fb, okb := b.(float64)
	if oka && okb {
		return fa == fb || math.Abs(fa-fb) <= 1e-9*math.Max(math.Abs(fa), math.Abs(fb))
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// partition splits events into k segments at random, keeping each
// segment's events in their original relative order.
func partition(r *rand.Rand, events []Event, k int) []Segment {
	type key struct {
		idx string
		i   int
	}
	parts := map[key][]Event{}
	for _, e := range events {
		kk := key{e.Index, r.IntN(k)}
		parts[kk] = append(parts[kk], e)
	}
	var keys []key
	for kk := range parts {
		keys = append(keys, kk)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].idx < keys[j].idx || keys[i].idx == keys[j].idx && keys[i].i < keys[j].i
	})
	segs := make([]Segment, 0, len(keys))
	for _, kk := range keys {
		segs = append(segs, NewMemSegment(fmt.Sprintf("%s~%d~peer%d-%d", kk.idx, kk.i, kk.i%3, segSerial.Add(1)), kk.idx, parts[kk]))
	}
	return segs
}

// segmentsByIndex builds one or more segments per index, as a peer holds.
func segmentsByIndex(events []Event, perIndex int) []Segment {
	by := map[string][]Event{}
	for _, e := range events {
		by[e.Index] = append(by[e.Index], e)
	}
	var names []string
	for k := range by {
		names = append(names, k)
	}
	sort.Strings(names)
	var segs []Segment
	for _, idx := range names {
		evs := by[idx]
		size := (len(evs) + perIndex - 1) / perIndex
		for i := 0; i*size < len(evs); i++ {
			end := min((i+1)*size, len(evs))
			segs = append(segs, NewMemSegment(fmt.Sprintf("%s~%d~p1-%d", idx, i, segSerial.Add(1)), idx, evs[i*size:end]))
		}
	}
	return segs
}

// uniq makes a test bucket id unique.
func uniq(id string) string { return fmt.Sprintf("%s-%d", id, segSerial.Add(1)) }
