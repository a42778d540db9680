package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// hotByIndex is index → its hot buckets' ids, from the inventory.
func hotByIndex(s *Store) map[string][]string {
	out := map[string][]string{}
	for _, c := range s.Inventory() {
		if c.State == string(StateHot) {
			out[c.Index] = append(out[c.Index], c.ID)
		}
	}
	return out
}

// TestHotCapRollsLeastRecentlyWritten: with room for 3 hot buckets over
// all indexes, a bucket for a fourth index rolls the least recently
// written one — b, since a was written again after c — through the
// ordinary roll (warm, every event kept); a request that writes to b
// again opens it a new bucket and rolls the next least recent (c).
func TestHotCapRollsLeastRecentlyWritten(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, MaxHotBucketsTotal: 3})
	defer s.Close()
	n := 0
	write := func(index string) {
		t.Helper()
		waitDurable(t, appendN(t, s, index, n, 5))
		n += 5
	}
	for _, ix := range []string{"a", "b", "c", "a"} {
		write(ix)
	}
	write("d")
	if err := s.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	hot := hotByIndex(s)
	if len(hot) != 3 || hot["b"] != nil || s.Stats.HotCapRolls.Load() != 1 {
		t.Fatalf("hot buckets %v after %d rolls for room, want a, c and d hot (b rolled)", hot, s.Stats.HotCapRolls.Load())
	}
	if c := s.Inventory(); c[1].Index != "b" || c[1].State != string(StateWarm) || c[1].Events != 5 {
		t.Fatalf("b's bucket %+v, want warm with its 5 events", c[1])
	}
	write("b")
	if err := s.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if hot = hotByIndex(s); len(hot) != 3 || hot["c"] != nil || s.Limits().HotBuckets() != 3 {
		t.Fatalf("hot buckets %v, want a, b and d (c rolled)", hot)
	}
	if got := allEvents(t, s); len(got) != n {
		t.Fatalf("%d events found, want %d", len(got), n)
	}
}

// TestHotCapWidensWithinARequest: with room for 2 hot buckets, one request
// of events spread over years in one index (which alone would open
// max_hot_buckets = 3 and a quarantine bucket) keeps to 2, widening; a
// request that writes to both hot buckets of a and names b finds no
// bucket to roll and is refused whole (ErrHotBucketsFull at b's event).
func TestHotCapWidensWithinARequest(t *testing.T) {
	now := time.Now()
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, MaxHotBucketsTotal: 2, MaxHotSpan: 24 * time.Hour, Now: func() time.Time { return now }})
	defer s.Close()
	var evs []Event
	for i := 0; i < 40; i++ {
		e := testEvent("a", i)
		e.Time = now.Add(-time.Duration(i*50) * 24 * time.Hour).UnixNano() // 0 to 1,950 days back
		evs = append(evs, e)
	}
	a, err := s.Append(evs)
	if err != nil {
		t.Fatal(err)
	}
	waitDurable(t, a)
	if hot := hotByIndex(s); len(hot["a"]) != 2 || s.Limits().HotBuckets() != 2 {
		t.Fatalf("hot buckets %v, want 2 for a", hot)
	}
	before := len(s.Inventory())
	_, err = s.Append([]Event{evs[0], evs[39], testEvent("b", 100)})
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrHotBucketsFull) || le.Event != 2 || le.Index != "b" || le.Limit != 2 {
		t.Fatalf("append over the cap: %v, want ErrHotBucketsFull at event 2 of index b", err)
	}
	if len(s.Inventory()) != before || s.Stats.HotCapRefused.Load() != 1 {
		t.Fatalf("a refused append changed the buckets or was not counted")
	}
	if got := allEvents(t, s); len(got) != 40 {
		t.Fatalf("%d events, want 40", len(got))
	}
}

// TestIndexCapCountsHeldIndexes: MaxIndexes counts every index the store
// holds a copy of; a replica (its origin decided) is taken past it and
// counts; a declared index and one already held are taken past it; an
// index whose last copy is removed no longer counts; reopened, the count
// comes from the copies on disk.
func TestIndexCapCountsHeldIndexes(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true, MaxIndexes: 2})
	waitDurable(t, appendN(t, s, "x", 0, 3))
	waitDurable(t, appendN(t, s, "y", 3, 3))
	s.RollAll()
	if err := s.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	_, err := s.Append([]Event{testEvent("x", 10), testEvent("z", 11)})
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrTooManyIndexes) || le.Event != 1 || le.Index != "z" || le.Limit != 2 {
		t.Fatalf("a third index: %v, want ErrTooManyIndexes at event 1 of z", err)
	}
	if s.Limits().IndexCount() != 2 || s.Stats.IndexCapRefused.Load() != 1 {
		t.Fatalf("%d indexes held, %d refusals; want 2 and 1", s.Limits().IndexCount(), s.Stats.IndexCapRefused.Load())
	}
	// A replica of index r from another origin.
	origin := mustOpen(t, Options{Dir: t.TempDir(), GUID: "B0000000-0000-4000-8000-000000000000", Searchable: true})
	defer origin.Close()
	waitDurable(t, appendN(t, origin, "r", 0, 3))
	rid := origin.Inventory()[0].ID
	frames, err := origin.Replicas().ReadFrames(rid, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Replicas().ReplicaAppend(rid, "r", true, 0, frames); err != nil {
		t.Fatalf("a replica past the index cap: %v", err)
	}
	s.Limits().SetDeclaredIndexes([]string{"z"})
	waitDurable(t, appendN(t, s, "z", 20, 1))
	if _, err := s.Append([]Event{testEvent("w", 30)}); !errors.Is(err, ErrTooManyIndexes) {
		t.Fatalf("an undeclared index: %v, want ErrTooManyIndexes", err)
	}
	if s.Limits().IndexCount() != 4 {
		t.Fatalf("%d indexes held, want 4 (x, y, r, z)", s.Limits().IndexCount())
	}
	if err := s.Replicas().RemoveCopy(BucketID("x", 0, testGUID)); err != nil {
		t.Fatal(err)
	}
	if s.Limits().IndexCount() != 3 {
		t.Fatalf("%d indexes held after x's only copy went, want 3", s.Limits().IndexCount())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Options{Dir: dir, Searchable: true, MaxIndexes: 4})
	defer s.Close()
	if s.Limits().IndexCount() != 3 {
		t.Fatalf("%d indexes after reopening, want 3 (y, r, z)", s.Limits().IndexCount())
	}
	waitDurable(t, appendN(t, s, "w", 40, 1))
	if _, err := s.Append([]Event{testEvent("v", 50)}); !errors.Is(err, ErrTooManyIndexes) {
		t.Fatalf("a fifth index after reopening: %v, want ErrTooManyIndexes", err)
	}
}

// TestIdleRollLoop: with MaxHotIdle 1s a bucket written once rolls by
// itself while one written every few tens of milliseconds stays hot;
// Close stops the loop.
func TestIdleRollLoop(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, MaxHotIdle: time.Second, BlockInterval: 5 * time.Millisecond})
	waitDurable(t, appendN(t, s, "quiet", 0, 3))
	i := 3
	testutil.WaitFor(t, 10*time.Second, func() error {
		waitDurable(t, appendN(t, s, "busy", i, 1))
		i++
		hot := hotByIndex(s)
		if hot["busy"] == nil {
			return fmt.Errorf("the busy bucket rolled while written (%d idle rolls)", s.Stats.IdleRolls.Load())
		}
		if hot["quiet"] != nil {
			return errors.New("the quiet bucket is still hot")
		}
		return nil
	})
	if hot := hotByIndex(s); len(hot["busy"]) != 1 || s.Stats.IdleRolls.Load() != 1 {
		t.Fatalf("hot %v after %d idle rolls, want busy's first bucket hot and one idle roll", hot, s.Stats.IdleRolls.Load())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
