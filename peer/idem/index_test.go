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
			Arrival: now.UnixNano(), Total: 100, First: 0, Count: 100})
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
