package idem

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/peer/store"
)

var (
	tokA  = sha256.Sum256([]byte("token-a"))
	tokB  = sha256.Sum256([]byte("token-b"))
	bodyX = sha256.Sum256([]byte("body-x"))
	bodyY = sha256.Sum256([]byte("body-y"))
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// store records a whole request of n events under (tok, key) as the HEC
// handler does: Begin, then Commit.
func storeKey(t *testing.T, x *Index, c *clock, tok [32]byte, key string, body [32]byte, n uint32) {
	t.Helper()
	f, cl := x.Begin(tok, key, body, n, c.now())
	if f.Kind != Unknown || cl == nil {
		t.Fatalf("store %s: found %v, want Unknown with a claim", key, f.Kind)
	}
	cl.Commit(&store.Ack{}, []Span{{0, n}})
}

func kindOf(x *Index, c *clock, tok [32]byte, key string, body [32]byte) Kind {
	f, cl := x.Begin(tok, key, body, 3, c.now())
	if cl != nil {
		cl.Abort()
	}
	return f.Kind
}

// TestIndexRules: the table of what a second request finds, per token,
// across the window and the caps.
func TestIndexRules(t *testing.T) {
	start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		cfg  Config
		do   func(t *testing.T, x *Index, c *clock)
		tok  [32]byte
		key  string
		body [32]byte
		want Kind
	}{
		{name: "same key, same body: known", do: func(t *testing.T, x *Index, c *clock) { storeKey(t, x, c, tokA, "k1", bodyX, 3) },
			tok: tokA, key: "k1", body: bodyX, want: Known},
		{name: "same key, other body: mismatch", do: func(t *testing.T, x *Index, c *clock) { storeKey(t, x, c, tokA, "k1", bodyX, 3) },
			tok: tokA, key: "k1", body: bodyY, want: Mismatch},
		{name: "same key under another token: unknown", do: func(t *testing.T, x *Index, c *clock) { storeKey(t, x, c, tokA, "k1", bodyX, 3) },
			tok: tokB, key: "k1", body: bodyY, want: Unknown},
		{name: "just inside the window: known", do: func(t *testing.T, x *Index, c *clock) {
			storeKey(t, x, c, tokA, "k1", bodyX, 3)
			c.t = c.t.Add(time.Hour - time.Nanosecond)
		}, cfg: Config{Window: time.Hour}, tok: tokA, key: "k1", body: bodyX, want: Known},
		{name: "past the window: stored again", do: func(t *testing.T, x *Index, c *clock) {
			storeKey(t, x, c, tokA, "k1", bodyX, 3)
			c.t = c.t.Add(time.Hour + time.Nanosecond)
		}, cfg: Config{Window: time.Hour}, tok: tokA, key: "k1", body: bodyX, want: Unknown},
		{name: "per-token cap forgets that token's oldest", do: func(t *testing.T, x *Index, c *clock) {
			storeKey(t, x, c, tokA, "k1", bodyX, 3)
			storeKey(t, x, c, tokB, "b1", bodyX, 3)
			storeKey(t, x, c, tokA, "k2", bodyX, 3)
			storeKey(t, x, c, tokA, "k3", bodyX, 3)
		}, cfg: Config{MaxPerToken: 2}, tok: tokA, key: "k1", body: bodyX, want: Unknown},
		{name: "per-token cap keeps other tokens' keys", do: func(t *testing.T, x *Index, c *clock) {
			storeKey(t, x, c, tokB, "b1", bodyX, 3)
			storeKey(t, x, c, tokA, "k1", bodyX, 3)
			storeKey(t, x, c, tokA, "k2", bodyX, 3)
			storeKey(t, x, c, tokA, "k3", bodyX, 3)
		}, cfg: Config{MaxPerToken: 2}, tok: tokB, key: "b1", body: bodyX, want: Known},
		{name: "per-token cap keeps the newest", do: func(t *testing.T, x *Index, c *clock) {
			storeKey(t, x, c, tokA, "k1", bodyX, 3)
			storeKey(t, x, c, tokA, "k2", bodyX, 3)
			storeKey(t, x, c, tokA, "k3", bodyX, 3)
		}, cfg: Config{MaxPerToken: 2}, tok: tokA, key: "k2", body: bodyX, want: Known},
		{name: "total cap forgets the oldest of any token", do: func(t *testing.T, x *Index, c *clock) {
			storeKey(t, x, c, tokB, "b1", bodyX, 3)
			storeKey(t, x, c, tokA, "k1", bodyX, 3)
			storeKey(t, x, c, tokA, "k2", bodyX, 3)
		}, cfg: Config{MaxKeys: 2}, tok: tokB, key: "b1", body: bodyX, want: Unknown},
		{name: "a request being stored: busy", do: func(t *testing.T, x *Index, c *clock) {
			if _, cl := x.Begin(tokA, "k1", bodyX, 3, c.now()); cl == nil {
				t.Fatal("no claim")
			}
		}, tok: tokA, key: "k1", body: bodyX, want: Busy},
		{name: "an aborted request is forgotten", do: func(t *testing.T, x *Index, c *clock) {
			_, cl := x.Begin(tokA, "k1", bodyX, 3, c.now())
			cl.Abort()
		}, tok: tokA, key: "k1", body: bodyX, want: Unknown},
		{name: "learned from blocks, all events: known", do: func(t *testing.T, x *Index, c *clock) {
			x.Learn([]store.KeyRecord{rec(tokA, "k1", bodyX, c, 3, 0, 2), rec(tokA, "k1", bodyX, c, 3, 2, 1)})
		}, tok: tokA, key: "k1", body: bodyX, want: Known},
		{name: "learned from blocks, some events: partial", do: func(t *testing.T, x *Index, c *clock) {
			x.Learn([]store.KeyRecord{rec(tokA, "k1", bodyX, c, 3, 1, 1)})
		}, tok: tokA, key: "k1", body: bodyX, want: Partial},
		{name: "learned past the window: ignored", do: func(t *testing.T, x *Index, c *clock) {
			r := rec(tokA, "k1", bodyX, c, 3, 0, 3)
			r.Arrival = c.t.Add(-2 * time.Hour).UnixNano()
			x.Learn([]store.KeyRecord{r})
		}, cfg: Config{Window: time.Hour}, tok: tokA, key: "k1", body: bodyX, want: Unknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: start}
			tc.cfg.Now = c.now
			x := New(tc.cfg)
			tc.do(t, x, c)
			if got := kindOf(x, c, tc.tok, tc.key, tc.body); got != tc.want {
				t.Fatalf("found %v, want %v", got, tc.want)
			}
		})
	}
}

func rec(tok [32]byte, key string, body [32]byte, c *clock, total, first, count uint32) store.KeyRecord {
	return store.KeyRecord{Token: tok, Key: key, BodyHash: body, Arrival: c.t.UnixNano(), Total: total, First: first, Count: count}
}

// TestClaimJoinsAndPartials: a second request waits for the first and then
// finds it known; a partial claim merges what other peers hold; the
// missing ordinals are exactly the complement.
func TestClaimJoinsAndPartials(t *testing.T) {
	c := &clock{t: time.Now()}
	x := New(Config{Now: c.now})
	_, cl := x.Begin(tokA, "k", bodyX, 10, c.now())
	f, _ := x.Begin(tokA, "k", bodyX, 10, c.now())
	if f.Kind != Busy {
		t.Fatalf("second request found %v, want Busy", f.Kind)
	}
	if e, ok := x.Lookup(tokA, "k"); !ok || !e.Pending {
		t.Fatalf("lookup of a key being stored: %+v %v, want pending", e, ok)
	}
	if got := cl.Merge([]Span{{2, 3}, {8, 2}}); got.Kind != Partial || Missing(got.Spans, 10) == nil {
		t.Fatalf("merge: %+v", got)
	}
	if got := Missing([]Span{{2, 3}, {8, 2}}, 10); !slices.Equal(got, []uint32{0, 1, 5, 6, 7}) {
		t.Fatalf("missing %v", got)
	}
	if got := SpansOf([]uint32{0, 1, 5, 6, 7}); !slices.Equal(got, []Span{{0, 2}, {5, 3}}) {
		t.Fatalf("spans of %v", got)
	}
	ack := &store.Ack{}
	cl.Commit(ack, SpansOf([]uint32{0, 1, 5, 6, 7}))
	select {
	case <-f.Wait:
	default:
		t.Fatal("the waiting request was not let in at commit")
	}
	if f, _ := x.Begin(tokA, "k", bodyX, 10, c.now()); f.Kind != Known || f.Ack != ack {
		t.Fatalf("after commit: %+v", f)
	}
	if e, ok := x.Lookup(tokA, "k"); !ok || e.Pending || len(e.Spans) != 1 || e.Spans[0] != (Span{0, 10}) {
		t.Fatalf("lookup after commit: %+v %v", e, ok)
	}
}

// TestMemoryPerKey measures the heap one key of 36 bytes (a UUID) costs,
// the figure peer/DESIGN.md gives.
func TestMemoryPerKey(t *testing.T) {
	const n = 50_000
	x := New(Config{})
	now := time.Now()
	recs := make([]store.KeyRecord, 0, 1000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		recs = append(recs, store.KeyRecord{Token: tokA, Key: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i), BodyHash: bodyX,
			Arrival: now.UnixNano(), Total: 100, First: 0, Count: 100, Origin: "0F1E2D3C-4B5A-4968-8776-A5B4C3D2E1F0"})
		if len(recs) == cap(recs) {
			x.Learn(recs)
			recs = recs[:0]
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per key of 36 bytes (%d keys)", per, x.Len())
	if x.Len() != n {
		t.Fatalf("kept %d keys, want %d", x.Len(), n)
	}
	if per > 400 {
		t.Fatalf("%.0f bytes per key: more than the 400 peer/DESIGN.md allows", per)
	}
	runtime.KeepAlive(x)
}

// TestOriginsAndHold: a key's origins are the bucket origins of the
// records learned (the GUID in each) and this peer's own for a request it
// stored, sorted, at most MaxOrigins; a held key answers pending and makes
// Begin wait until Release, which forgets the ordinals of dropped records
// (a key left with none is forgotten) and keeps the others.
func TestOriginsAndHold(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	x := New(Config{Now: c.now, Self: "SELF"})
	rec := func(key, origin string, first, count uint32) store.KeyRecord {
		return store.KeyRecord{Token: tokA, Key: key, BodyHash: bodyX, Arrival: c.t.UnixNano(), Total: 10, First: first, Count: count, Origin: origin}
	}
	x.Learn([]store.KeyRecord{rec("k1", "G2", 0, 4), rec("k1", "G1", 4, 2), rec("k1", "G2", 6, 1)})
	storeKey(t, x, c, tokA, "own", bodyX, 3)
	if e, _ := x.Lookup(tokA, "k1"); !slices.Equal(e.Origins, []string{"G1", "G2"}) || e.Pending {
		t.Fatalf("k1: %+v, want origins G1, G2 and not pending", e)
	}
	if e, _ := x.Lookup(tokA, "own"); !slices.Equal(e.Origins, []string{"SELF"}) {
		t.Fatalf("own: origins %v, want this peer's", e.Origins)
	}
	for _, o := range []string{"G3", "G4", "G5"} {
		x.Learn([]store.KeyRecord{rec("k1", o, 7, 1)})
	}
	if e, _ := x.Lookup(tokA, "k1"); len(e.Origins) != MaxOrigins {
		t.Fatalf("k1: origins %v, want %d at most", e.Origins, MaxOrigins)
	}
	// An interned one-origin list is never changed under another key.
	x.Learn([]store.KeyRecord{rec("k2", "G2", 0, 1), rec("k3", "G2", 0, 1), rec("k3", "G9", 1, 1)})
	if e, _ := x.Lookup(tokA, "k2"); !slices.Equal(e.Origins, []string{"G2"}) {
		t.Fatalf("k2: origins %v after k3 learned another, want G2 only", e.Origins)
	}

	held := []store.KeyRecord{rec("k2", "SELF", 1, 3), rec("k3", "SELF", 2, 1)}
	x.Learn(held)
	x.Hold(held)
	if e, ok := x.Lookup(tokA, "k2"); !ok || !e.Pending {
		t.Fatalf("held k2: %+v %v, want pending", e, ok)
	}
	f, cl := x.Begin(tokA, "k3", bodyX, 10, c.now())
	if f.Kind != Busy || cl != nil {
		t.Fatalf("Begin on a held key: %v, want Busy", f.Kind)
	}
	if e, _ := x.Lookup(tokA, "k1"); e.Pending {
		t.Fatal("a key not held answers pending")
	}
	// k2 loses everything it held here but the ordinal of another origin;
	// a key whose only record is dropped is forgotten.
	x.Learn([]store.KeyRecord{rec("k4", "SELF", 0, 5)})
	x.Hold([]store.KeyRecord{rec("k4", "SELF", 0, 5)})
	x.Release([]store.KeyRecord{held[0], rec("k4", "SELF", 0, 5)})
	select {
	case <-f.Wait:
	default:
		t.Fatal("Release did not wake a waiting Begin")
	}
	if e, ok := x.Lookup(tokA, "k2"); !ok || e.Pending || !slices.Equal(e.Spans, []Span{{0, 1}}) {
		t.Fatalf("k2 after release: %+v %v, want ordinal 0 only, not pending", e, ok)
	}
	if e, ok := x.Lookup(tokA, "k3"); !ok || e.Pending || !slices.Equal(e.Spans, []Span{{0, 3}}) {
		t.Fatalf("k3 after release: %+v %v, want kept whole", e, ok)
	}
	if _, ok := x.Lookup(tokA, "k4"); ok {
		t.Fatal("k4, whose every record was dropped, is still known")
	}
	if k := kindOf(x, c, tokA, "k4", bodyX); k != Unknown {
		t.Fatalf("k4 after release: %v, want Unknown", k)
	}
}

// TestSpanEdits: removeSpan and Overlaps on sorted, disjoint spans.
func TestSpanEdits(t *testing.T) {
	spans := []Span{{0, 5}, {8, 4}}
	for _, tc := range []struct {
		cut  Span
		want []Span
	}{
		{Span{0, 5}, []Span{{8, 4}}},
		{Span{2, 1}, []Span{{0, 2}, {3, 2}, {8, 4}}},
		{Span{4, 6}, []Span{{0, 4}, {10, 2}}},
		{Span{5, 3}, []Span{{0, 5}, {8, 4}}},
		{Span{0, 20}, nil},
		{Span{3, 0}, []Span{{0, 5}, {8, 4}}},
	} {
		if got := removeSpan(slices.Clone(spans), tc.cut); !slices.Equal(got, tc.want) {
			t.Errorf("remove %v from %v: %v, want %v", tc.cut, spans, got, tc.want)
		}
	}
	for _, tc := range []struct {
		s    Span
		want bool
	}{{Span{4, 1}, true}, {Span{5, 3}, false}, {Span{7, 2}, true}, {Span{12, 9}, false}, {Span{0, 0}, false}} {
		if got := Overlaps(spans, tc.s); got != tc.want {
			t.Errorf("Overlaps(%v, %v) = %v, want %v", spans, tc.s, got, tc.want)
		}
	}
}
