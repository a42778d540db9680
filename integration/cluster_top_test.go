package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestSearchTopBoundedExact (issue 27): a top through a search head is
// merged from bounded partials — each peer's largest counts and a bound
// (query/topcounts.go). On skewed values the bound decides in one search;
// on flat values it cannot, and the head searches again with every key
// (quarry_searchhead_top_reruns_total). Both answers are exactly the
// counts of what was ingested, complete, from every site's head.
func TestSearchTopBoundedExact(t *testing.T) {
	c := Start(t, Options{})
	const n = 6000
	var raws []string
	paths, flats := map[string]int{}, map[string]int{}
	// /hot0 … /hot9 with 600, 540, …, 60 events, spread over the whole
	// ingest (as a busy field's values are), and a tail of keys seen once.
	// A common key that is absent from some peer's bounded partial — keys
	// that come and go with time — cannot be proven; it searches again.
	var pathOf []string
	for k := 0; k < 10; k++ {
		for j := 0; j < (10-k)*60; j++ {
			pathOf = append(pathOf, fmt.Sprintf("/hot%d", k))
		}
	}
	for i := len(pathOf); i < n; i++ {
		pathOf = append(pathOf, fmt.Sprintf("/item/%d", i))
	}
	rand.New(rand.NewPCG(27, 1)).Shuffle(n, func(i, j int) { pathOf[i], pathOf[j] = pathOf[j], pathOf[i] })
	for i := 0; i < n; i++ {
		path := pathOf[i]
		flat := strconv.Itoa(i % 1500) // 4 events each: no bound decides
		paths[path]++
		flats[flat]++
		raws = append(raws, fmt.Sprintf("topb ev%dx path=%s flat=%s", i, path, flat))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, origin := range []string{"site1-p1", "site2-p1"} {
		var bs [][]string
		for j := i * n / 2; j < (i+1)*n/2; j += 250 {
			bs = append(bs, raws[j:j+250])
		}
		if _, unacked, err := c.IngestAcked(ctx, origin, bs, 30*time.Second); err != nil || len(unacked) > 0 {
			t.Fatalf("ingest through %s: %v (%d batches not acked)", origin, err, len(unacked))
		}
	}
	waitComplete(t, c)

	expect := func(counts map[string]int, limit int, numeric bool) string {
		type kv struct {
			k string
			n int
		}
		var all []kv
		for k, v := range counts {
			all = append(all, kv{k, v})
		}
		sort.Slice(all, func(i, j int) bool {
			if all[i].n != all[j].n {
				return all[i].n > all[j].n
			}
			if numeric {
				a, _ := strconv.Atoi(all[i].k)
				b, _ := strconv.Atoi(all[j].k)
				return a < b
			}
			return all[i].k < all[j].k
		})
		s := ""
		for _, e := range all[:limit] {
			s += fmt.Sprintf("%s=%d ", e.k, e.n)
		}
		return s
	}
	got := func(rows []map[string]any, field string) string {
		s := ""
		for _, r := range rows {
			s += fmt.Sprintf("%v=%v ", r[field], r["count"])
		}
		return s
	}
	const reruns = "quarry_searchhead_top_reruns_total"
	for _, site := range []string{"site1", "site2", fsm.Site0} {
		sh := c.StartSearchHead("sh-"+site, site)
		for _, q := range []struct {
			query, field string
			counts       map[string]int
			limit        int
			numeric      bool
			rerun        bool
		}{
			{"topb | top limit=10 path", "path", paths, 10, false, false},
			{"topb | top limit=3 flat", "flat", flats, 3, true, true},
		} {
			before := scrapeValue(t, sh.URL(), reruns)
			rows := completeSearch(t, sh.URL(), q.query)
			if g, w := got(rows, q.field), expect(q.counts, q.limit, q.numeric); g != w {
				t.Fatalf("%s %s:\n got %s\nwant %s", site, q.query, g, w)
			}
			if ran := scrapeValue(t, sh.URL(), reruns) - before; (ran > 0) != q.rerun {
				t.Fatalf("%s %s: searched again %v times, want a second search %v", site, q.query, ran, q.rerun)
			}
		}
	}
}
