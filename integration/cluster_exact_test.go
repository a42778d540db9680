package integration

import (
	"fmt"
	"testing"

	"github.com/quarry-dev/quarry/fsm"
)

// TestSearchRefusesACopyThatIsNotWhole reproduces issue 24's silent short
// answer: a copy that the managers list as searchable and whole, but that
// no longer holds its bucket — a replica removed and re-created from the
// first blocks of a resend (a restarted origin's resend racing a
// remove-copy task) — answered "searched" with part of the bucket's
// events, and the search came back short and marked complete. Now every
// marker names the length of the copy it searched and the head checks it
// against the table's sealed length: the bucket goes to a whole copy and
// the answer is exact, or — when no whole copy may answer — partial,
// never short.
func TestSearchRefusesACopyThatIsNotWhole(t *testing.T) {
	c := Start(t, Options{})
	raws := searchIngest(t, c, "whole", 4000)
	waitComplete(t, c)
	sh := c.StartSearchHead("sh1", "site1")
	// A warm bucket of several blocks and one of its searchable replicas.
	var bucket, victim, index string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			v, _ := s.Generation("site1", 0)
			if b.Hot || v.Buckets[b.ID].Blocks < 2 {
				continue
			}
			for _, cp := range b.Copies {
				if cp.Peer != b.Origin && cp.Searchable {
					bucket, victim, index = b.ID, cp.Peer, b.Index
					return
				}
			}
		}
	})
	if bucket == "" {
		t.Fatal("no warm bucket of 2 blocks or more with a searchable replica")
	}
	frames, err := c.Peer(victim).Store().ReadFrames(bucket, 0, 1<<30)
	if err != nil || len(frames) < 2 {
		t.Fatalf("frames of %s on %s: %d, %v", bucket, victim, len(frames), err)
	}
	// Behind the managers' back, as the race did: the copy goes, and a
	// resend re-creates it searchable from its first block only.
	st := c.Peer(victim).Store()
	if err := st.RemoveCopy(bucket); err != nil {
		t.Fatal(err)
	}
	if n, err := st.ReplicaAppend(bucket, index, true, 0, frames[:1]); err != nil || n != 1 {
		t.Fatalf("re-create %s on %s: %d blocks, %v", bucket, victim, n, err)
	}
	// Asked first, by preference, the re-created copy must not count.
	for _, q := range []string{"*", "* | stats count"} {
		a := search(t, sh.URL(), map[string]any{"query": q, "preference": "_prefer_nodes:" + victim})
		if q == "*" {
			mustExact(t, "preferring the re-created copy", a, raws)
			continue
		}
		if a.Status != 200 || a.Resp.Summary.Partial || len(a.Resp.Results) != 1 || fmt.Sprint(a.Resp.Results[0]["count"]) != fmt.Sprint(len(raws)) {
			t.Fatalf("%s preferring the re-created copy: HTTP %d, results %v, summary %+v", q, a.Status, a.Resp.Results, a.Resp.Summary)
		}
	}
	// Only the re-created copy allowed: partial, naming the bucket — never a
	// short answer marked complete.
	a := search(t, sh.URL(), map[string]any{"query": "* | stats count", "preference": "_buckets:" + bucket + "|_only_nodes:" + victim})
	if a.Status != 200 || !a.Resp.Summary.Partial || a.Resp.Summary.Buckets.Failed != 1 {
		t.Fatalf("only the re-created copy: HTTP %d %s, summary %+v", a.Status, a.Error, a.Resp.Summary)
	}
}
