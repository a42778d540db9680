//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterManagersDownAcksContinue: every manager stopped for 30 s
// during ingest at RF=2 (SPEC §4, issue 9 item 5). Acks continue
// throughout — a hot bucket that rolls meanwhile is followed by one that
// replicates to the origin's last targets — and once the managers return
// the FSM accounts for every bucket made meanwhile, with every copy its
// peers hold, and every acknowledged event is searchable exactly once.
// QUARRY_MANAGERS_DOWN (a Go duration) changes the 30 s.
func TestClusterManagersDownAcksContinue(t *testing.T) {
	down := 30 * time.Second
	if v := os.Getenv("QUARRY_MANAGERS_DOWN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("QUARRY_MANAGERS_DOWN=%q: %v", v, err)
		}
		down = d
	}
	c := Start(t, Options{RF: "origin:1,total:2", SF: "origin:1,total:1", MaxHotBytes: 64 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	origin := "site1-p1"
	var raws []string
	ingest := func(tag string, n int) {
		t.Helper()
		acked, un, err := c.IngestAcked(ctx, origin, Batches(tag, n, 100), 10*time.Second)
		if err != nil || len(un) > 0 {
			t.Fatalf("ingest %s: %v, %d batches not acknowledged within 10 s", tag, err, len(un))
		}
		for _, a := range acked {
			raws = append(raws, a.Raws...)
		}
	}
	ingest("before", 1000)
	c.WaitFor(30*time.Second, func() error {
		if len(hotTargets(c, origin)) == 0 {
			return fmt.Errorf("no replica yet")
		}
		return nil
	})
	var before int
	c.State(func(s *fsm.State) { before = len(s.BucketList("", "")) })

	c.Mu.Lock()
	ids := slices.Sorted(maps.Keys(c.Managers))
	c.Mu.Unlock()
	for _, id := range ids {
		c.KillManager(id)
	}
	start := time.Now()
	rounds := 0
	for time.Since(start) < down {
		ingest(fmt.Sprintf("down%d", rounds), 500)
		rounds++
	}
	// Buckets the origin made while no manager ran: in its inventory, with
	// its own GUID, unknown to the state it had before.
	made := map[string]bool{}
	guid := c.Peer(origin).GUID()
	for b := range c.Inventory(origin) {
		if len(b) > len(guid) && b[len(b)-len(guid):] == guid {
			made[b] = true
		}
	}
	t.Logf("managers down %v: %d events acknowledged in %d rounds; origin holds %d buckets (%d in the state before)", time.Since(start).Round(time.Millisecond), len(raws), rounds, len(made), before)
	for _, id := range ids {
		c.RestartManager(id)
	}
	ingest("after", 500)
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			p.Store().RollAll()
		}
	}
	// Every copy every peer holds is in the state, and the cluster is
	// complete (RF and SF met for every bucket).
	c.WaitFor(120*time.Second, func() error {
		var st fsm.Status
		known := map[string]map[string]bool{}
		c.State(func(s *fsm.State) {
			st = s.Status()
			for _, v := range s.BucketList("", "") {
				known[v.ID] = map[string]bool{}
				for _, cp := range v.Copies {
					known[v.ID][cp.Peer] = true
				}
			}
		})
		var missing []string
		for _, id := range c.PeerIDs() {
			for b := range c.Inventory(id) {
				if !known[b][id] {
					missing = append(missing, id+":"+b)
				}
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			return fmt.Errorf("%d copies the state does not know, e.g. %v", len(missing), missing[:min(3, len(missing))])
		}
		if !st.Complete {
			return fmt.Errorf("not complete: %v", st.Fixups)
		}
		return nil
	})
	for b := range made {
		var ok bool
		c.State(func(s *fsm.State) { _, ok = findBucketView(s, b) })
		if !ok {
			t.Errorf("bucket %s made while the managers were down is not in the state", b)
		}
	}
	seen := primaryUnion(t, c)
	lost, dup := 0, 0
	for _, r := range raws {
		switch seen[r] {
		case 0:
			lost++
		case 1:
		default:
			dup++
		}
	}
	if lost > 0 || dup > 0 {
		t.Fatalf("%d acknowledged events: %d lost, %d more than once on the site0 primaries", len(raws), lost, dup)
	}
}

// findBucketView is bucket id's view in the state.
func findBucketView(s *fsm.State, id string) (fsm.BucketView, bool) {
	for _, v := range s.BucketList("", "") {
		if v.ID == id {
			return v, true
		}
	}
	return fsm.BucketView{}, false
}
