package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer/store"
)

// checkBuckets rolls every hot bucket, waits until every bucket the
// managers know has its copies on the peers (all warm, all agreeing by
// events and content hash), and checks the placement against the policy
// (origin:2,total:3 / origin:1,total:2) and one primary per site and site0.
// It returns, per bucket, the peers holding it.
func checkBuckets(t *testing.T, c *Cluster, origins []string) map[string][]string {
	t.Helper()
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			p.Store().RollAll()
		}
	}
	var holders map[string][]string
	c.WaitFor(60*time.Second, func() error {
		holders = map[string][]string{}
		copies := map[string][]store.CopyInfo{}
		for _, id := range c.PeerIDs() {
			for b, ci := range c.Inventory(id) {
				holders[b] = append(holders[b], id)
				copies[b] = append(copies[b], ci)
			}
		}
		for b, cs := range copies {
			if len(cs) != 3 {
				return fmt.Errorf("bucket %s has %d copies (%v), want 3", b, len(cs), holders[b])
			}
			for _, ci := range cs {
				if ci.State != "warm" {
					return fmt.Errorf("bucket %s: a copy is %s", b, ci.State)
				}
				if ci.Events != cs[0].Events || ci.ContentHash != cs[0].ContentHash || ci.Blocks != cs[0].Blocks {
					return fmt.Errorf("bucket %s: copies disagree: %+v vs %+v", b, ci, cs[0])
				}
			}
		}
		return nil
	})
	// Placement by policy: 2 copies on the origin site, 3 in all, never two
	// on a peer; searchable: at least 1 on the origin site, 2 in all.
	var views []fsm.BucketView
	c.State(func(s *fsm.State) { views = s.BucketList("", "") })
	known := map[string]fsm.BucketView{}
	for _, v := range views {
		known[v.ID] = v
	}
	for b, hs := range holders {
		site := func(p string) string { return p[:strings.IndexByte(p, '-')] }
		originSite := ""
		for _, o := range origins {
			if strings.HasSuffix(b, "~"+c.Peer(o).GUID()) {
				originSite = site(o)
			}
		}
		if originSite == "" {
			t.Fatalf("bucket %s has no known origin", b)
		}
		on, searchable, searchableOrigin := 0, 0, 0
		seen := map[string]bool{}
		for _, h := range hs {
			if seen[h] {
				t.Fatalf("bucket %s has two copies on %s", b, h)
			}
			seen[h] = true
			if site(h) == originSite {
				on++
			}
			if c.Inventory(h)[b].Searchable {
				searchable++
				if site(h) == originSite {
					searchableOrigin++
				}
			}
		}
		if on != 2 {
			t.Errorf("bucket %s: %d copies on its origin site %s (%v), want 2", b, on, originSite, hs)
		}
		if searchable != 2 || searchableOrigin < 1 {
			t.Errorf("bucket %s: %d searchable copies (%d on the origin site), want 2 with at least 1 there", b, searchable, searchableOrigin)
		}
		v, ok := known[b]
		if !ok {
			t.Errorf("bucket %s is on peers but not in the managers' table", b)
			continue
		}
		for _, table := range []string{"site0", "site1", "site2"} {
			p := v.Primary[table]
			if p == "" {
				t.Errorf("bucket %s has no primary for %s (%v)", b, table, v.Primary)
				continue
			}
			if !c.Inventory(p)[b].Searchable {
				t.Errorf("bucket %s: primary for %s is %s, whose copy is not searchable", b, table, p)
			}
		}
	}
	return holders
}

// TestClusterIngestReplicates: events acknowledged through peers of both
// sites are on RF copies that agree (events and content hash, searchable
// or not), placed by the site policy, each bucket with a primary per site
// and for site0, and every acknowledged event is in exactly one bucket.
func TestClusterIngestReplicates(t *testing.T) {
	c := Start(t, Options{})
	n := ingestN
	if testing.Short() {
		n = 4_000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ingestExactlyOnce(ctx, t, c, []string{"site1-p1", "site2-p2"}, "o", n, 1000)
}

// ingestExactlyOnce ingests n events with acks, half through each of two
// origins in parallel (batches of batch events, tagged tag<i>), then checks
// the buckets' copies and placement (checkBuckets) and that every
// acknowledged event is exactly once over the buckets, read on a searchable
// copy (non-searchable copies agree by content hash).
func ingestExactlyOnce(ctx context.Context, t *testing.T, c *Cluster, origins []string, tag string, n, batch int) {
	t.Helper()
	var (
		mu    sync.Mutex
		acked []AckedBatch
		wg    sync.WaitGroup
	)
	for i, o := range origins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, un, err := c.IngestAcked(ctx, o, Batches(fmt.Sprintf("%s%d", tag, i), n/len(origins), batch), 30*time.Second)
			if err != nil {
				t.Errorf("ingest through %s: %v", o, err)
			}
			if len(un) > 0 {
				t.Errorf("ingest through %s: %d batches not acknowledged", o, len(un))
			}
			mu.Lock()
			acked = append(acked, a...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	holders := checkBuckets(t, c, origins)
	seen := c.RawsOnSearchableCopies(holders)
	total := 0
	for _, a := range acked {
		for _, r := range a.Raws {
			total++
			if seen[r] != 1 {
				t.Fatalf("acknowledged event %q found %d times over the buckets", r, seen[r])
			}
		}
	}
	if total != n {
		t.Fatalf("acknowledged %d events, want %d", total, n)
	}
}
