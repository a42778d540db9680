package fsm

import (
	"slices"
	"testing"
)

// TestInventoryClaims (review M5, L10): from InventoryVersion a
// registration adopts a claimed copy of a known bucket only when the
// managers can vouch for it, and an unknown bucket's index is declared
// only with auto_create_indexes; before the version (a group of older
// managers) every claim is adopted, as it was.
func TestInventoryClaims(t *testing.T) {
	claim := func(h *harness, peer string, inv ...CopyInfo) {
		h.t.Helper()
		site := h.s.d.Peers[peer].Site
		var all []CopyInfo
		for _, id := range h.s.bucketIDs() { // what it holds on record stays reported
			if c, ok := h.s.d.Buckets[id].Copies[peer]; ok {
				all = append(all, CopyInfo{Bucket: id, Searchable: c.Searchable, Blocks: c.Blocks})
			}
		}
		h.must(&RegisterPeer{ID: peer, GUID: guid(peer), Site: site, Inventory: append(all, inv...), At: h.now})
	}
	holds := func(h *harness, bucket, peer string) bool { _, ok := h.b(bucket).Copies[peer]; return ok }

	for _, v := range []int{LeftAtVersion, InventoryVersion} {
		h := twoSites(t)
		h.must(&SetClusterVersion{Version: v})
		trusted := v < InventoryVersion
		// b3 claims a searchable copy of a1's sealed bucket it never held.
		victim := h.warm("v", "a1", "a2", true, "b1", true)
		claim(h, "b3", CopyInfo{Bucket: victim, Searchable: true, Blocks: 4})
		if got := holds(h, victim, "b3"); got != trusted {
			t.Fatalf("version %d: b3's claim of %s adopted %v, want %v (copies %s)", v, victim, got, trusted, h.copies(victim))
		}
		// An unknown bucket of an undeclared index: adopted either way
		// (a rebuild needs it); its index declared only before the version.
		ghost := BucketID("ghost", "1", guid("a1"))
		claim(h, "b2", CopyInfo{Bucket: ghost, Index: "ghost", Blocks: 2})
		if !holds(h, ghost, "b2") {
			t.Fatalf("version %d: the unknown bucket %s was not adopted", v, ghost)
		}
		if got := slices.Contains(h.s.Indexes(), "ghost"); got != trusted {
			t.Fatalf("version %d: index ghost declared %v by an inventory, want %v", v, got, trusted)
		}
		if trusted {
			continue
		}
		// The claims the managers can vouch for are adopted.
		// Its own copy on record, reported again: kept.
		claim(h, "a2")
		if !holds(h, victim, "a2") {
			t.Fatalf("a2's recorded copy of %s was dropped", victim)
		}
		// The target of an open replicate task for the bucket.
		r := h.must(&CreateFixup{Kind: TaskReplicate, Level: LevelSearch, Bucket: victim, Source: "a1", Target: "a3", At: h.now})
		claim(h, "a3", CopyInfo{Bucket: victim, Blocks: 4})
		if !holds(h, victim, "a3") {
			t.Fatalf("a3, target of task %d, claimed %s and was refused", r.Index, victim)
		}
		// A peer that left a hot bucket (LeftAt) comes back with it.
		hot := h.bucket("h", "a1", "a2", true, "b1", true)
		h.must(&RemoveCopy{Bucket: hot, Peer: "b1"})
		claim(h, "b1", CopyInfo{Bucket: hot, Searchable: true, Hot: false, Blocks: 1})
		if !holds(h, hot, "b1") {
			t.Fatalf("b1, which left hot %s, was refused its copy back", hot)
		}
		// A bucket being rebuilt (warm, no sealed length): every holder.
		claim(h, "a3", CopyInfo{Bucket: ghost, Blocks: 2})
		if !holds(h, ghost, "a3") {
			t.Fatalf("a3's copy of the rebuilt %s was refused", ghost)
		}
		// With auto_create_indexes an inventory declares the index.
		cfg := h.s.d.Config
		cfg.AutoCreateIndexes = true
		h.config(cfg)
		claim(h, "b2", CopyInfo{Bucket: BucketID("auto", "1", guid("a1")), Index: "auto", Blocks: 1})
		if !slices.Contains(h.s.Indexes(), "auto") {
			t.Fatal("index auto not declared with auto_create_indexes")
		}
		// No unvouched copy is ever a primary.
		for _, site := range []string{"site1", "site2", Site0} {
			if p := h.primary(victim, site); p == "b3" {
				t.Fatalf("b3 is %s's primary for %s", victim, site)
			}
		}
	}
}
