package idem

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/peer/store"
)

func keyRec(key string, arrival time.Time) store.KeyRecord {
	return store.KeyRecord{Token: tokA, BodyHash: bodyX, Key: key, Arrival: arrival.UnixNano(), Total: 3, First: 0, Count: 3}
}

// TestBlocksInFlight: a replica append's keys are pending while it
// writes, and an append carrying a key just answered unknown to another
// peer is refused until DefaultDenialHold has passed (arrive.go).
func TestBlocksInFlight(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	x := New(Config{Now: c.now})
	rec := []store.KeyRecord{keyRec("k1", c.t)}

	// The retry's lookup from peer B reached us first.
	if _, ok := x.LookupFrom(tokA, "k1", "B"); ok {
		t.Fatal("k1 known before anything stored it")
	}
	if _, err := x.Arrive("A", rec); !errors.Is(err, ErrRecentlyDenied) {
		t.Fatalf("append of k1 from A right after B was told unknown: %v, want ErrRecentlyDenied", err)
	}
	if _, ok := x.Lookup(tokA, "k1"); ok {
		t.Fatal("a refused append left k1 known")
	}
	// The origin asking about its own key does not hold its own blocks out.
	if _, ok := x.LookupFrom(tokA, "k2", "A"); ok {
		t.Fatal("k2 known")
	}
	rel, err := x.Arrive("A", []store.KeyRecord{keyRec("k2", c.t)})
	if err != nil {
		t.Fatalf("append of k2 from A after A itself asked: %v", err)
	}
	rel()

	// A request this peer stores itself holds the key's appends out too.
	storeKey(t, x, c, tokA, "k4", bodyX, 3)
	if _, err := x.Arrive("A", []store.KeyRecord{keyRec("k4", c.t)}); !errors.Is(err, ErrRecentlyDenied) {
		t.Fatalf("append of k4 from A right after this peer stored it: %v, want ErrRecentlyDenied", err)
	}

	// Past the hold the append is taken, and pending while it writes.
	c.t = c.t.Add(DefaultDenialHold)
	rel, err = x.Arrive("A", rec)
	if err != nil {
		t.Fatalf("append of k1 %v after the denial: %v", DefaultDenialHold, err)
	}
	e, ok := x.Lookup(tokA, "k1")
	if !ok || !e.Pending {
		t.Fatalf("k1 while its append writes: known %v pending %v, want pending", ok, e.Pending)
	}
	f, cl := x.Begin(tokA, "k1", bodyX, 3, c.now())
	if f.Kind != Busy || cl != nil || f.Wait == nil {
		t.Fatalf("a request with k1 while its append writes: %v, want Busy with a wait", f.Kind)
	}
	x.Learn(rec)
	rel()
	select {
	case <-f.Wait:
	default:
		t.Fatal("the waiting request was not let in when the append ended")
	}
	if e, ok := x.Lookup(tokA, "k1"); !ok || e.Pending || covered(e.Spans) != 3 {
		t.Fatalf("k1 after its append: known %v, entry %+v; want known, durable, 3 events", ok, e)
	}
	if k := kindOf(x, c, tokA, "k1", bodyX); k != Known {
		t.Fatalf("a retry of k1 finds %v, want Known", k)
	}

	// A write that failed leaves nothing known.
	rel, err = x.Arrive("A", []store.KeyRecord{keyRec("k3", c.t)})
	if err != nil {
		t.Fatal(err)
	}
	rel()
	if _, ok := x.Lookup(tokA, "k3"); ok {
		t.Fatal("k3 known after an append that wrote nothing")
	}
	if x.Len() != 2 {
		t.Fatalf("index holds %d keys, want 2 (k1 and k4; k2 and k3 were never learned)", x.Len())
	}
}

// TestDenialsBounded: the denial memory forgets past DefaultDenialHold and keeps
// at most maxDenials.
func TestDenialsBounded(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	x := New(Config{Now: c.now})
	for i := 0; i < maxDenials+10; i++ {
		x.LookupFrom(tokA, fmt.Sprintf("key-%d", i), "B")
	}
	if n := len(x.denied.m); n > maxDenials {
		t.Fatalf("%d denials kept, cap %d", n, maxDenials)
	}
	c.t = c.t.Add(DefaultDenialHold)
	x.LookupFrom(tokA, "last", "B")
	if n := len(x.denied.m); n != 1 {
		t.Fatalf("%d denials kept after the hold passed, want 1", n)
	}
}
