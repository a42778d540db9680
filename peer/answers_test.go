package peer_test

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/quarry-dev/quarry/peer/hec"
)

// TestBenchAnswersFromIndex ingests the shared 1M HEC set (when
// QUARRY_BENCH_HEC names it) and answers the bench README's five queries
// straight from the index through the query.Segment API — exact answers,
// and how long each takes from postings. Skipped otherwise (it is long).
func TestBenchAnswersFromIndex(t *testing.T) {
	file := os.Getenv("QUARRY_BENCH_HEC")
	if file == "" || testing.Short() {
		t.Skip("set QUARRY_BENCH_HEC to benchdata/events-1m.hec")
	}
	p := mustStartPeer(t, t.TempDir())
	defer p.Close()
	if _, err := hec.Ingest(context.Background(), hec.ClientConfig{URL: "http://" + p.Addr(), Token: "T", Streams: 2}, []string{file}); err != nil {
		t.Fatal(err)
	}
	st := p.Store()
	st.RollAll()
	if err := st.WaitIdle(time.Minute); err != nil {
		t.Fatal(err)
	}
	segs := st.Segments()
	timed := func(name string, fn func()) {
		start := time.Now()
		fn()
		t.Logf("%s: %v over %d segments", name, time.Since(start).Round(time.Microsecond), len(segs))
	}
	// a: events in [05:00, 06:00)
	t0 := time.Date(2026, 1, 1, 5, 0, 0, 0, time.UTC).UnixNano()
	t1 := t0 + int64(time.Hour)
	a := 0
	timed("a (time window count)", func() {
		for _, s := range segs {
			lo, hi := s.Bounds()
			switch {
			case hi < t0 || lo >= t1:
			case lo >= t0 && hi < t1:
				a += int(s.Len())
			default:
				ts, _ := s.Times()
				for _, x := range ts {
					if x >= t0 && x < t1 {
						a++
					}
				}
			}
		}
	})
	count := func(term string) (n int) {
		for _, s := range segs {
			if !s.MayContain(term) {
				continue
			}
			if bm, _ := s.Term(term); bm != nil {
				n += int(bm.GetCardinality())
			}
		}
		return
	}
	var b, e int
	timed("b (error count)", func() { b = count("error") })
	timed("e (rare term count)", func() { e = count("zqxjkcanary") })
	byHost := map[string]int{}
	timed("c (status=5* by host)", func() {
		for _, s := range segs {
			five := roaring.New()
			s.FieldValues("status", func(v string, bm *roaring.Bitmap) bool {
				if strings.HasPrefix(v, "5") {
					five.Or(bm)
				}
				return true
			})
			s.FieldValues("host", func(v string, bm *roaring.Bitmap) bool {
				if n := int(bm.AndCardinality(five)); n > 0 {
					byHost[v] += n
				}
				return true
			})
		}
	})
	paths := map[string]int{}
	timed("d (top 10 path)", func() {
		for _, s := range segs {
			s.FieldValues("path", func(v string, bm *roaring.Bitmap) bool {
				paths[v] += int(bm.GetCardinality())
				return true
			})
		}
	})
	cSum := 0
	for _, n := range byHost {
		cSum += n
	}
	type kv struct {
		k string
		n int
	}
	var top []kv
	for k, n := range paths {
		top = append(top, kv{k, n})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].n > top[j].n || top[i].n == top[j].n && top[i].k < top[j].k })
	if a != 41663 || b != 24803 || e != 10 || len(byHost) != 50 || cSum != 19971 ||
		top[0] != (kv{"/", 292129}) || top[9] != (kv{"/static/img/logo.png", 20594}) {
		t.Fatalf("answers a=%d b=%d c=%d rows sum %d d=%v … %v e=%d; want 41663 24803 50/19971 / 292129 … logo 20594, 10",
			a, b, len(byHost), cSum, top[0], top[9], e)
	}
}
