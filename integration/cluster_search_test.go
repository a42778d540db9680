package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer"
)

// The search-head acceptance tests (issue 8): a real cluster (3 managers,
// 2 sites × 3 peers, NATS per site with a gateway), search heads on it,
// searches through their HTTP API.

var evRE = regexp.MustCompile(`ev(\d+)x`)

// searchIngest ingests n events with acks through site1-p1 and site2-p1
// (half each, tag-prefixed), rolls every hot bucket and waits until the
// cluster is valid and complete on every site, so every bucket has its
// primaries and searchable copies. It returns the raws.
func searchIngest(t *testing.T, c *Cluster, tag string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var all []string
	for i, origin := range []string{"site1-p1", "site2-p1"} {
		bs := Batches(fmt.Sprintf("%s%d", tag, i), n/2, 250)
		acked, unacked, err := c.IngestAcked(ctx, origin, bs, 30*time.Second)
		if err != nil || len(unacked) > 0 {
			t.Fatalf("ingest through %s: %v (%d batches not acked)", origin, err, len(unacked))
		}
		for _, a := range acked {
			all = append(all, a.Raws...)
		}
	}
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			p.Store().RollAll()
		}
	}
	waitComplete(t, c)
	return all
}

// waitComplete waits until the managers call the cluster valid and
// complete on every site and site0, with no hot bucket left.
func waitComplete(t *testing.T, c *Cluster) {
	t.Helper()
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			p.Store().RollAll()
		}
	}
	c.WaitFor(90*time.Second, func() error {
		var err error
		c.State(func(s *fsm.State) {
			st := s.Status()
			for site, ss := range st.Sites {
				if !ss.Valid || !ss.Complete {
					err = fmt.Errorf("site %s valid=%v complete=%v (%v %v)", site, ss.Valid, ss.Complete, ss.InvalidBuckets, ss.IncompleteBuckets)
					return
				}
			}
			for _, b := range s.BucketList("", "") {
				if b.Hot {
					err = fmt.Errorf("bucket %s still hot", b.ID)
					return
				}
			}
		})
		return err
	})
}

// resultIDs returns the event numbers of a result set (from "ev<n>x" in
// _raw, prefixed by the tag word) and a checksum over them, sorted; it
// fails on a duplicate.
func resultIDs(t *testing.T, rows []map[string]any) (map[string]bool, string) {
	t.Helper()
	ids := map[string]bool{}
	var list []string
	for _, r := range rows {
		raw, _ := r["_raw"].(string)
		tag, _, _ := strings.Cut(raw, " ")
		m := evRE.FindStringSubmatch(raw)
		if m == nil {
			t.Fatalf("result without an event id: %q", raw)
		}
		id := tag + "/" + m[1]
		if ids[id] {
			t.Fatalf("event %s returned twice", id)
		}
		ids[id] = true
		list = append(list, id)
	}
	sort.Strings(list)
	sum := sha256.Sum256([]byte(strings.Join(list, "\n")))
	return ids, hex.EncodeToString(sum[:8])
}

func rawsChecksum(raws []string) string {
	var list []string
	for _, raw := range raws {
		tag, _, _ := strings.Cut(raw, " ")
		list = append(list, tag+"/"+evRE.FindStringSubmatch(raw)[1])
	}
	sort.Strings(list)
	sum := sha256.Sum256([]byte(strings.Join(list, "\n")))
	return hex.EncodeToString(sum[:8])
}

// scannedNow sums every running peer's scanned-events counter, per peer.
func scannedNow(c *Cluster) map[string]int64 {
	out := map[string]int64{}
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			out[id] = p.SearchStats().Scanned.Load()
		}
	}
	return out
}

func scannedSince(c *Cluster, before map[string]int64) (map[string]int64, int64) {
	now := scannedNow(c)
	diff := map[string]int64{}
	var total int64
	for id, v := range now {
		if d := v - before[id]; d > 0 {
			diff[id] = d
			total += d
		}
	}
	return diff, total
}

func search(t *testing.T, url string, req map[string]any) SearchAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := SearchHTTP(ctx, url, "", req)
	if err != nil {
		t.Fatalf("search %v: %v", req, err)
	}
	return a
}

// completeSearch is search's rows for query, which must answer 200 with
// every bucket searched and not partial.
func completeSearch(t *testing.T, url, query string) []map[string]any {
	t.Helper()
	a := search(t, url, map[string]any{"query": query})
	if a.Status != 200 {
		t.Fatalf("%s %s: HTTP %d %s", url, query, a.Status, a.Error)
	}
	if s := a.Resp.Summary; s.Partial || s.Buckets.Total != s.Buckets.Successful {
		t.Fatalf("%s %s: summary %+v", url, query, s)
	}
	return a.Resp.Results
}

func siteOf(peerID string) string { return peerID[:strings.IndexByte(peerID, '-')] }

// TestSearchHeadAffinityExact: with both sites valid, a site1 head's search
// is answered only by site1 peers and a site0 head's by the site0
// primaries; both return exactly the ingested events, and the events
// scanned across all peers equal the events in range (no peer scans a
// bucket it is not primary for).
func TestSearchHeadAffinityExact(t *testing.T) {
	c := Start(t, Options{})
	raws := searchIngest(t, c, "aff", 4000)
	want := rawsChecksum(raws)
	sh1 := c.StartSearchHead("sh1", "site1")
	sh2 := c.StartSearchHead("sh2", "site2")
	sh0 := c.StartSearchHead("sh0", "site0")
	for _, h := range []struct {
		url, site string
	}{{sh1.URL(), "site1"}, {sh2.URL(), "site2"}, {sh0.URL(), "site0"}} {
		before := scannedNow(c)
		a := search(t, h.url, map[string]any{"query": "*"})
		if a.Status != 200 {
			t.Fatalf("%s: HTTP %d %s", h.site, a.Status, a.Error)
		}
		_, sum := resultIDs(t, a.Resp.Results)
		if len(a.Resp.Results) != len(raws) || sum != want {
			t.Fatalf("%s: %d results (checksum %s), want %d (%s)", h.site, len(a.Resp.Results), sum, len(raws), want)
		}
		s := a.Resp.Summary
		if s.Partial || s.Buckets.Failed != 0 || s.Buckets.Missing != 0 || s.Buckets.Total != s.Buckets.Successful {
			t.Fatalf("%s: summary %+v", h.site, s)
		}
		per, total := scannedSince(c, before)
		if total != int64(len(raws)) {
			t.Fatalf("%s: peers scanned %d events (%v), want exactly %d", h.site, total, per, len(raws))
		}
		var primaries map[string]string
		c.State(func(st *fsm.State) {
			v, _ := st.Generation(h.site, 0)
			primaries = v.Primaries
		})
		expect := map[string]bool{}
		for _, p := range primaries {
			expect[p] = true
		}
		for p := range per {
			if h.site != "site0" && siteOf(p) != h.site {
				t.Fatalf("%s head: peer %s of another site scanned (%v)", h.site, p, per)
			}
			if !expect[p] {
				t.Fatalf("%s head: peer %s scanned without being a primary (%v)", h.site, p, per)
			}
		}
		for _, p := range s.Peers {
			if !expect[p] {
				t.Fatalf("%s head: peer %s answered without being a primary", h.site, p)
			}
		}
		t.Logf("%s: %d events, peers %v, scanned %v, %d buckets, %.1f ms", h.site, len(a.Resp.Results), s.Peers, per, s.Buckets.Total, s.TookMS)
	}
	// Searches that ended normally are not counted as cancelled anywhere.
	c.WaitFor(10*time.Second, func() error {
		for _, id := range c.PeerIDs() {
			if n := c.Peer(id).SearchStats().Running.Load(); n != 0 {
				return fmt.Errorf("%s still runs %d searches", id, n)
			}
		}
		return nil
	})
	for _, id := range c.PeerIDs() {
		if n := c.Peer(id).SearchStats().Cancelled.Load(); n != 0 {
			t.Fatalf("%s counted %d searches as cancelled; none was", id, n)
		}
	}
	// Time-range pruning before fan-out: a range before every event asks
	// no peer and counts every bucket as skipped.
	before := scannedNow(c)
	pr := search(t, sh1.URL(), map[string]any{"query": "*", "latest": "2025-01-01T00:00:00Z"})
	if pr.Status != 200 || len(pr.Resp.Results) != 0 || pr.Resp.Summary.Buckets.Skipped != pr.Resp.Summary.Buckets.Total ||
		pr.Resp.Summary.Buckets.Total == 0 || len(pr.Resp.Summary.Peers) != 0 {
		t.Fatalf("pruned search: %d, %d results, summary %+v", pr.Status, len(pr.Resp.Results), pr.Resp.Summary)
	}
	if _, n := scannedSince(c, before); n != 0 {
		t.Fatalf("a pruned search scanned %d events", n)
	}
	// A stats search too.
	a := search(t, sh1.URL(), map[string]any{"query": "* | stats count"})
	if a.Status != 200 || len(a.Resp.Results) != 1 || fmt.Sprint(a.Resp.Results[0]["count"]) != fmt.Sprint(len(raws)) {
		t.Fatalf("stats count: %d %+v", a.Status, a.Resp.Results)
	}
}

var _ = peer.Config{}
