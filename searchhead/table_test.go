package searchhead

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestTablesApply pins the head's use of the delta rule: the generation,
// peers and buckets come from its own table site, site0 gives primaries
// only; before the first whole load a view replaces whatever is held,
// after it an older view is ignored; falling back to the default site
// keeps the generation, peers and buckets, with no primaries.
func TestTablesApply(t *testing.T) {
	tb := newTables(nil, "site1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	view := func(gen, ver uint64, prim string) fsm.GenerationView {
		return fsm.GenerationView{Generation: gen, Version: ver, Full: true,
			Peers:     []fsm.GenerationPeer{{ID: prim, State: fsm.StateUp}},
			Primaries: map[string]string{"a": prim}, Buckets: map[string]fsm.BucketInfo{"a": {Index: "main"}}}
	}
	tb.apply("site1", view(2, 5, "p1"))
	tb.apply(fsm.Site0, view(2, 6, "p2"))
	if own := tb.own(); own.Generation() != 2 || own.BucketCount() != 1 || tb.bySite[fsm.Site0].BucketCount() != 0 {
		t.Fatalf("own generation %d with %d buckets, site0 %d buckets", own.Generation(), own.BucketCount(), tb.bySite[fsm.Site0].BucketCount())
	}
	if tb.primary("site1", "a") != "p1" || tb.primary(fsm.Site0, "a") != "p2" || tb.minVersion() != 5 {
		t.Fatalf("primaries %q %q, min version %d", tb.primary("site1", "a"), tb.primary(fsm.Site0, "a"), tb.minVersion())
	}
	tb.apply("site1", view(1, 4, "p3")) // not loaded yet: a whole table replaces
	if tb.version("site1") != 4 || tb.primary("site1", "a") != "p3" {
		t.Fatalf("before the first load: version %d primary %q, want 4 and p3", tb.version("site1"), tb.primary("site1", "a"))
	}
	tb.loaded = true
	tb.apply("site1", view(1, 3, "p4")) // loaded: older, ignored
	if tb.version("site1") != 4 || tb.primary("site1", "a") != "p3" {
		t.Fatalf("after the first load: version %d primary %q, want 4 and p3", tb.version("site1"), tb.primary("site1", "a"))
	}
	tb.fallBack()
	own := tb.own()
	if _, ok := own.Peer("p3"); !ok || own.Generation() != 1 || own.BucketCount() != 1 || own.PrimaryCount() != 0 || tb.version(fsm.DefaultSite) != 0 {
		t.Fatalf("after falling back: generation %d, %d buckets, %d primaries, version %d",
			own.Generation(), own.BucketCount(), own.PrimaryCount(), tb.version(fsm.DefaultSite))
	}
	tb.apply(fsm.DefaultSite, view(3, 2, "p5"))
	if tb.own().Generation() != 3 || tb.primary(fsm.DefaultSite, "a") != "p5" {
		t.Fatalf("the default site's table was not taken: generation %d", tb.own().Generation())
	}
}

// TestBarrierSince: a refresh is a search's barrier only when it began
// after the search did — one that began before and answered after does not
// count (the leader may have answered before the search began) — and a
// refresh that began after is shared, not repeated.
func TestBarrierSince(t *testing.T) {
	tb := newTables(nil, "site1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	tb.sites = []string{"site1"}
	var (
		fetched int
		version uint64 = 4
		inFetch func()
	)
	tb.fetchGen = func(ctx context.Context, site string, since uint64) (fsm.GenerationView, error) {
		fetched++
		if inFetch != nil {
			inFetch()
		}
		version++
		return fsm.GenerationView{Version: version, Full: true}, nil
	}
	// A refresh begins, then the search begins while it is under way.
	var begun time.Time
	inFetch = func() { begun = time.Now() }
	if err := tb.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	inFetch = nil
	v, err := tb.barrierSince(context.Background(), begun)
	if err != nil || fetched != 2 || v != 6 {
		t.Fatalf("barrier after a refresh that began before the search: version %d, %d fetches, %v; want a new refresh (version 6, 2 fetches)", v, fetched, err)
	}
	// Another search that began before that refresh shares it.
	v, err = tb.barrierSince(context.Background(), begun)
	if err != nil || fetched != 2 || v != 6 {
		t.Fatalf("a second barrier: version %d, %d fetches, %v; want the same refresh (version 6, 2 fetches)", v, fetched, err)
	}
	if _, err := tb.barrierSince(context.Background(), time.Now()); err != nil || fetched != 3 {
		t.Fatalf("a barrier for a search begun after every refresh: %d fetches, %v; want 3", fetched, err)
	}
}
