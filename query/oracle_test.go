package query

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// ReferenceSearchForTest is the naive oracle, querytest.ReferenceSearch.
// This package's own tests cannot import querytest (it imports query), so
// oraclehook_test.go, an external test file of the same test binary, sets
// it before any test runs.
var ReferenceSearchForTest func(req Request, scan func(fn func(Row) bool) error) ([]map[string]any, error)

var oracleRowCache struct {
	sync.Mutex
	segs []Segment
	rows []Row
}

// oracleSearch runs the oracle over segments, scanning each segment set
// into rows once.
func oracleSearch(t *testing.T, req Request, segs []Segment) []map[string]any {
	t.Helper()
	c := &oracleRowCache
	c.Lock()
	if !(len(c.segs) == len(segs) && len(segs) > 0 && c.segs[0] == segs[0]) {
		c.segs, c.rows = segs, nil
		for _, s := range segs {
			_ = s.Events(nil, func(ord uint32, ev *Event) bool {
				c.rows = append(c.rows, eventRow(ev, s.BucketID(), ord, req.Server))
				return true
			})
		}
	}
	rows := c.rows
	c.Unlock()
	out, err := ReferenceSearchForTest(req, func(fn func(Row) bool) error {
		for _, r := range rows {
			if r.F["splunk_server"] != req.Server {
				r.F = cloneWithServer(r.F, req.Server)
			}
			if !fn(r) {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("oracle %q: %v", req.Query, err)
	}
	return out
}

func cloneWithServer(f map[string]any, server string) map[string]any {
	g := make(map[string]any, len(f))
	for k, v := range f {
		g[k] = v
	}
	g["splunk_server"] = server
	return g
}

// TestOracle: several hundred generated queries over generated events; the
// indexed search must return exactly what the naive oracle returns.
func TestOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	events := genEvents(r, 3000)
	segs := segmentsByIndex(events, 3)
	n := 450
	if testing.Short() || raceEnabled {
		n = 150
	}
	now := genBase.Add(5 * time.Hour)
	fixed := []string{
		"", "error", "error | stats count", "status=5* | stats count by host", "| top limit=10 path",
		"zqxjk | stats count", "earliest=2026-01-01T01:00:00Z latest=2026-01-01T02:00:00Z | stats count",
		"status=200 | stats count by host, status", "| stats count by index", "host=WEB-05 | stats count",
		"user=bob | stats count by user", "NOT status=200 | top status", "err* | timechart span=30m count",
		"earliest=-4h latest=-3h | stats count", "| stats dc(clientip) dc(user) dc(status)",
		"192.168 | stats count", "\"upstream error\" | stats count by status",
		"splunk_server=p1 | stats count", "_bkt=web* | stats count by index", "NOT _cd>100 | stats count",
		"bytes=1.50 OR score=5e2 | stats count", "| stats count by host, index, sourcetype",
	}
	matchOracle(t, r, segs, fixed, n, now)
}

// matchOracle runs the fixed queries, then n generated ones, over segs and
// fails at the first whose answer is not the oracle's.
func matchOracle(t *testing.T, r *rand.Rand, segs []Segment, fixed []string, n int, now time.Time) {
	t.Helper()
	for i := 0; i < n+len(fixed); i++ {
		var q string
		if i < len(fixed) {
			q = fixed[i]
		} else {
			q = genQuery(r)
		}
		req := Request{Query: q, Now: now, Server: "p1"}
		resp, err := Search(context.Background(), req, segs)
		if err != nil {
			t.Fatalf("Search(%q): %v", q, err)
		}
		want := oracleSearch(t, req, segs)
		if ok, diff := sameResults(canon(t, resp.Results), canon(t, want)); !ok {
			t.Fatalf("query %q: indexed search differs from the oracle: %s", q, diff)
		}
	}
}
