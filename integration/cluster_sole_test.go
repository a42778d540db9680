package integration

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/quarry-dev/quarry/fsm"
)

// TestSearchSolePartial: a stats search with a dc or perc whose buckets all go
// to one peer takes each dc's count and perc's value from that peer instead of its set or values
// (query/sole.go, counted in quarry_searchhead_sole_partial_searches_total):
// always when the time range leaves one bucket, and on site1 over three,
// whose only searchable copies are the origin's; the peer then sends one
// batch for every bucket, so no search runs again. Every answer is the
// exact one, on every site's head and site0's.
func TestSearchSolePartial(t *testing.T) {
	c := Start(t, Options{})
	const t1, t2, t3 = 1767250000, 1767260000, 1767270000 // hours apart: three buckets
	ips := map[int64]map[string]map[string]bool{t1: {}, t2: {}, t3: {}}
	nums := map[int64]map[string][]int{t1: {}, t2: {}, t3: {}}
	url := "http://" + c.Peer("site1-p1").Addr() + "/services/collector/event"
	for _, ts := range []int64{t1, t2, t3} {
		var body strings.Builder
		for i := 0; i < 600; i++ {
			h, ip := fmt.Sprintf("h%d", i%4), fmt.Sprintf("10.%d.%d.%d", ts%7, i%3, i%97)
			if ips[ts][h] == nil {
				ips[ts][h] = map[string]bool{}
			}
			ips[ts][h][ip] = true
			n := int((int64(i)*37 + ts) % 1000)
			nums[ts][h] = append(nums[ts][h], n)
			b, _ := json.Marshal(map[string]any{"event": fmt.Sprintf("dcone %d h=%s ip=%s n=%d", i, h, ip, n), "time": ts + int64(i%50), "index": "main"})
			body.Write(b)
		}
		if s, code, _ := hecPostTo(t, url, NoAckHECToken, body.String()); s != 200 || code != 0 {
			t.Fatalf("HEC: %d code %d", s, code)
		}
		c.Peer("site1-p1").Store().RollAll()
	}
	waitComplete(t, c)
	want := func(tss ...int64) string {
		per := map[string]map[string]bool{}
		all := map[string][]int{}
		for _, ts := range tss {
			for h, ns := range nums[ts] {
				all[h] = append(all[h], ns...)
			}
			for h, set := range ips[ts] {
				if per[h] == nil {
					per[h] = map[string]bool{}
				}
				for ip := range set {
					per[h][ip] = true
				}
			}
		}
		var out []string
		for h, set := range per {
			ns := all[h]
			sort.Ints(ns)
			k := int(math.Ceil(0.9*float64(len(ns)))) - 1 // nearest rank
			out = append(out, fmt.Sprintf("%s=%d/%d", h, len(set), ns[k]))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	const taken, reruns = "quarry_searchhead_sole_partial_searches_total", "quarry_searchhead_sole_partial_reruns_total"
	for _, site := range []string{"site1", "site2", fsm.Site0} {
		sh := c.StartSearchHead("sh-"+site, site)
		for _, q := range []struct {
			query string
			want  string
			one   bool // counts taken for certain
		}{
			{fmt.Sprintf("dcone earliest=%d latest=%d | stats dc(ip) as d perc90(n) as p by h", t2, t2+100), want(t2), true},
			{fmt.Sprintf("dcone earliest=%d latest=%d | stats dc(ip) as d perc90(n) as p by h", t1, t2+100), want(t1, t2), site == "site1"},
			{"dcone | stats dc(ip) as d perc90(n) as p by h", want(t1, t2, t3), site == "site1"},
		} {
			before, rerunsBefore := scrapeValue(t, sh.URL(), taken), scrapeValue(t, sh.URL(), reruns)
			rows := completeSearch(t, sh.URL(), q.query)
			var got []string
			for _, r := range rows {
				got = append(got, fmt.Sprintf("%v=%v/%v", r["h"], r["d"], r["p"]))
			}
			sort.Strings(got)
			if g := strings.Join(got, " "); g != q.want {
				t.Fatalf("%s %s:\n got %s\nwant %s", site, q.query, g, q.want)
			}
			n := scrapeValue(t, sh.URL(), taken) - before
			if q.one && n != 1 {
				t.Fatalf("%s %s: %v searches took final counts and values, want one", site, q.query, n)
			}
			if r := scrapeValue(t, sh.URL(), reruns) - rerunsBefore; r != 0 {
				t.Fatalf("%s %s: searched again %v times: a peer sent final forms in more than one batch", site, q.query, r)
			}
			t.Logf("%s %s: final counts and values taken %v", site, q.query, n == 1)
		}
	}
}
