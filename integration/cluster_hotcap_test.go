package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/store"
)

// TestClusterHotCapRollsReachManagers (review M3): an origin capped at 3
// hot buckets over all indexes (--max-hot-buckets-total) is written 6
// declared indexes, one request per index, twice round. Its hot buckets
// never exceed 3; each new bucket past the cap rolls the least recently
// written one through the ordinary roll, so the managers see every
// bucket the origin rolled warm and sealed at the origin's length and
// event count; a site0 search head counts every event exactly once, per
// index.
func TestClusterHotCapRollsReachManagers(t *testing.T) {
	const capHot, indexes, per = 3, 6, 20
	origin := "site1-p1"
	c := Start(t, Options{PeersPerSite: 2, PeerTweak: func(id string, cfg *peer.Config) {
		if id == origin {
			cfg.MaxHotBucketsTotal = capHot
		}
	}})
	cl := adminClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var names []string
	for i := 0; i < indexes; i++ {
		names = append(names, fmt.Sprintf("cap%d", i))
		if _, err := cl.AddIndex(ctx, manager.IndexRequest{Name: names[i]}); err != nil {
			t.Fatal(err)
		}
	}
	p := c.Peer(origin)
	url := c.Opts.TLS.Scheme() + "://" + p.Addr()
	want := map[string]int{}
	for round := 0; round < 2; round++ {
		for _, name := range names {
			var body strings.Builder
			for k := 0; k < per; k++ {
				fmt.Fprintf(&body, `{"event":"hotcapcl r%d %s k%d","index":%q}`, round, name, k, name)
			}
			// 400 code 7 until the peer has read the config that declares
			// the index; 503 code 9 while rolls are in progress. Neither
			// stored anything.
			c.WaitFor(30*time.Second, func() error {
				status, code, _ := hecPostBody(t, url, NoAckHECToken, body.String())
				switch {
				case status == 200 && code == 0:
					return nil
				case code == 7 || code == 9:
					return fmt.Errorf("index %s: HEC %d code %d", name, status, code)
				}
				t.Fatalf("index %s: HEC %d code %d", name, status, code)
				return nil
			})
			want[name] += per
			if n := p.Store().Limits().HotBuckets(); n > capHot {
				t.Fatalf("after writing %s in round %d: %d hot buckets on %s, cap %d", name, round, n, origin, capHot)
			}
		}
	}
	if n := p.Store().Stats.HotCapRolls.Load(); n < 2*indexes-capHot {
		t.Fatalf("%d rolls for room, want at least %d", n, 2*indexes-capHot)
	}
	if err := p.Store().WaitIdle(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	rolled := map[string]store.CopyInfo{}
	for _, ci := range p.Store().Inventory() {
		if strings.HasSuffix(ci.ID, "~"+p.GUID()) && ci.State == string(store.StateWarm) {
			rolled[ci.ID] = ci
		}
	}
	if len(rolled) < 2*indexes-capHot {
		t.Fatalf("%d warm buckets on the origin, want at least %d", len(rolled), 2*indexes-capHot)
	}
	c.WaitFor(60*time.Second, func() error {
		var err error
		c.State(func(s *fsm.State) {
			for id, ci := range rolled {
				bv := s.BucketViews([]string{id})
				n, _, ok := s.SealedLength(id)
				if len(bv) != 1 || bv[0].Hot || !ok || int(n) != ci.Blocks || bv[0].Events != int64(ci.Events) {
					err = fmt.Errorf("bucket %s in the managers' view: %+v sealed at %d (%v); the origin rolled it at %d blocks, %d events",
						id, bv, n, ok, ci.Blocks, ci.Events)
					return
				}
			}
		})
		return err
	})
	sh := c.StartSearchHead("sh0", "site0")
	a := search(t, sh.URL(), map[string]any{"query": "hotcapcl | stats count by index", "allow_partial": false})
	if a.Status != 200 {
		t.Fatalf("search: HTTP %d %s", a.Status, a.Error)
	}
	got := map[string]string{}
	for _, row := range a.Resp.Results {
		got[fmt.Sprint(row["index"])] = fmt.Sprint(row["count"])
	}
	for name, n := range want {
		if got[name] != fmt.Sprint(n) {
			t.Errorf("index %s: count %s, want %d", name, got[name], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("indexes found %v, want %v", got, want)
	}
	a = search(t, sh.URL(), map[string]any{"query": "hotcapcl | stats count, dc(_raw) as distinct", "allow_partial": false})
	total := fmt.Sprint(2 * indexes * per)
	if a.Status != 200 || len(a.Resp.Results) != 1 || fmt.Sprint(a.Resp.Results[0]["count"]) != total || fmt.Sprint(a.Resp.Results[0]["distinct"]) != total {
		t.Fatalf("search: %d %v, want %s events, each once", a.Status, a.Resp.Results, total)
	}
	t.Logf("%d indexes through a cap of %d: %d rolls for room, %d buckets rolled and sealed in the managers' view",
		indexes, capHot, p.Store().Stats.HotCapRolls.Load(), len(rolled))
}
