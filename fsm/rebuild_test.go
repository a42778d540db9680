package fsm

import (
	"strings"
	"testing"
	"time"
)

// TestRebuildFromInventories: fresh state, RF 3 / SF 2 single-site; the
// peers re-register after every manager's data was lost. A bucket first
// reported by a replica joins warm without an origin; its origin's
// registration names it; the widest range and the longest copy's size and
// events win; copies of different lengths hold it (no copy made or
// removed) until RebuildSeals seals it at the longest with every holder's
// length, after which the planner fetches into the shorter copies from the
// longest. A hot bucket its live origin reports joins hot, pinned there.
// A second RebuildSeals finds nothing.
func TestRebuildFromInventories(t *testing.T) {
	h := newHarness(t)
	h.config(singleSite(3, 2))
	b := BucketID("main", "7", guid("p1"))
	hot := BucketID("main", "8", guid("p1"))
	reg := func(id string, inv ...CopyInfo) {
		h.t.Helper()
		h.must(&RegisterPeer{ID: id, GUID: guid(id), Site: "site1", Inventory: inv, At: h.now})
	}
	reg("p2", CopyInfo{Bucket: b, Searchable: true, Index: "main", Blocks: 3, Earliest: 20, Latest: 30, Size: 300, Events: 30})
	if x := h.b(b); x.Origin != "" || x.Hot || x.Sealed {
		t.Fatalf("bucket reported by a replica before its origin: %+v", x)
	}
	reg("p3", CopyInfo{Bucket: b, Searchable: true, Index: "main", Blocks: 5, Earliest: 10, Latest: 50, Size: 500, Events: 50})
	reg("p4")
	if !awaitsRebuild(h.b(b)) {
		t.Fatal("copies of 3 and 5 blocks without a sealed length: not held")
	}
	if st := h.s.Status(); len(st.Fixups) != 1 || st.Fixups[0].Bucket != b || !strings.Contains(st.Fixups[0].Reason, "quarry manager rebuild") {
		t.Fatalf("status fixups %+v: want %s waiting for the rebuild", st.Fixups, b)
	}
	for _, line := range h.plan(PlanInput{Now: h.now, LastHeartbeat: beats(h, "p2", "p3", "p4")}) {
		if strings.Contains(line, " 7 ") { // describe names a bucket by its local id
			t.Fatalf("planned %q for a bucket awaiting its rebuild seal", line)
		}
	}
	reg("p1", CopyInfo{Bucket: b, Searchable: true, Index: "main", Blocks: 4, Earliest: 15, Latest: 40, Size: 400, Events: 40},
		CopyInfo{Bucket: hot, Searchable: true, Hot: true, Index: "main", Blocks: 2})
	x := h.b(b)
	if x.Origin != "p1" || x.OriginSite != DefaultSite || x.Hot {
		t.Fatalf("after the origin registered: origin %q site %q hot %v", x.Origin, x.OriginSite, x.Hot)
	}
	if x.Earliest != 10 || x.Latest != 50 || x.Size != 500 || x.Events != 50 {
		t.Fatalf("rebuilt range/size %d..%d %d bytes %d events, want the widest range and the longest copy's", x.Earliest, x.Latest, x.Size, x.Events)
	}
	if hb := h.b(hot); !hb.Hot || hb.Origin != "p1" || hb.Primary[Site0] != "p1" {
		t.Fatalf("a live origin's hot bucket rebuilt as %+v, want hot, pinned to p1", hb)
	}

	seals := h.s.RebuildSeals()
	if len(seals) != 1 || seals[0].Bucket != b || seals[0].Blocks != 5 || len(seals[0].Lengths) != 3 {
		t.Fatalf("rebuild seals %+v, want %s at 5 blocks with 3 holders", seals, b)
	}
	h.must(seals[0])
	if x := h.b(b); !x.Sealed || x.Blocks != 5 || awaitsRebuild(x) {
		t.Fatalf("after the rebuild seal: %+v", x)
	}
	got := h.plan(PlanInput{Now: h.now, LastHeartbeat: beats(h, "p1", "p2", "p3", "p4")})
	fetches := 0
	for _, line := range got {
		if strings.Contains(line, "fetch") && strings.Contains(line, "p3->") {
			fetches++
		}
	}
	if fetches != 2 {
		t.Fatalf("plan after the rebuild seal %q: want a fetch from p3 into each shorter copy", got)
	}
	if again := h.s.RebuildSeals(); len(again) != 0 {
		t.Fatalf("second rebuild: %+v", again)
	}
}

func beats(h *harness, peers ...string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, p := range peers {
		out[p] = h.now
	}
	return out
}
