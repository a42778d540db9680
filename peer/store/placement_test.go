package store

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/quarry-dev/quarry/query"
)

// boundsCover checks that a segment's Bounds are exactly the earliest and
// latest of its events' times (what search pruning relies on).
func boundsCover(seg query.Segment) error {
	times, err := seg.Times()
	if err != nil {
		return fmt.Errorf("times of %s: %w", seg.BucketID(), err)
	}
	lo, hi := seg.Bounds()
	if len(times) == 0 {
		if lo != 0 || hi != -1 {
			return fmt.Errorf("empty segment %s bounds %d..%d", seg.BucketID(), lo, hi)
		}
		return nil
	}
	mn, mx := times[0], times[0]
	for _, t := range times {
		mn, mx = min(mn, t), max(mx, t)
	}
	if lo != mn || hi != mx {
		return fmt.Errorf("segment %s bounds %d..%d, its events span %d..%d", seg.BucketID(), lo, hi, mn, mx)
	}
	return nil
}

// hotCapHeld checks that no index has more than MaxHotBuckets hot buckets
// besides at most one quarantine bucket, and that the inventory's
// earliest/latest cover every durable block.
func hotCapHeld(s *Store) error {
	hot, quar := map[string]int{}, map[string]int{}
	for _, c := range s.Inventory() {
		if c.State != string(StateHot) {
			continue
		}
		if c.Quarantine {
			quar[c.Index]++
		} else {
			hot[c.Index]++
		}
	}
	for idx, n := range hot {
		if n > s.Options().MaxHotBuckets {
			return fmt.Errorf("index %s has %d hot buckets, cap %d", idx, n, s.Options().MaxHotBuckets)
		}
	}
	for idx, n := range quar {
		if n > 1 {
			return fmt.Errorf("index %s has %d hot quarantine buckets", idx, n)
		}
	}
	return nil
}

func searchCount(t *testing.T, segs []query.Segment, q, earliest, latest string) int {
	t.Helper()
	no := false
	resp, err := query.Search(context.Background(), query.Request{Query: q, Earliest: earliest, Latest: latest, AllowPartial: &no}, segs)
	if err != nil {
		t.Fatalf("search %q: %v", q, err)
	}
	if len(resp.Results) != 1 {
		t.Fatalf("search %q: %d rows", q, len(resp.Results))
	}
	n, err := strconv.Atoi(fmt.Sprint(resp.Results[0]["count"]))
	if err != nil {
		t.Fatalf("search %q: count %v", q, resp.Results[0]["count"])
	}
	return n
}

// spreadEvents builds n events per index over 500 distinct days from 1,500
// days ago to 200 days ahead of now (so past-quarantined, normal and
// future-quarantined), shuffled.
func spreadEvents(now time.Time, indexes []string, from int) []Event {
	rng := rand.New(rand.NewSource(12))
	days := rng.Perm(1700)[:500]
	var evs []Event
	i := from
	for _, d := range days {
		for _, idx := range indexes {
			e := testEvent(idx, i)
			e.Time = now.Add(time.Duration(d-1500)*24*time.Hour + time.Hour + time.Duration(i%50)*time.Minute).UnixNano()
			evs = append(evs, e)
			i++
		}
	}
	rng.Shuffle(len(evs), func(a, b int) { evs[a], evs[b] = evs[b], evs[a] })
	return evs
}

// TestTimeSpreadEventsHoldHotCap: one request of events spread over 500
// distinct days (far past, far future and normal) makes at most
// MaxHotBuckets+1 buckets per index (the +1 being quarantine); every event
// is searchable and counted exactly once, before and after the roll and a
// restart; each bucket's earliest/latest covers its events, so time-range
// searches count exactly what a model counts.
func TestTimeSpreadEventsHoldHotCap(t *testing.T) {
	now := time.Now().UTC().Truncate(24 * time.Hour)
	dir := t.TempDir()
	opts := Options{Dir: dir, Searchable: true, Now: func() time.Time { return now }}
	s := mustOpen(t, opts)
	defer func() { s.Close() }()
	indexes := []string{"main", "web"}
	evs := spreadEvents(now, indexes, 0)
	times := map[string]int64{}
	quarantined := map[string]int{}
	for _, e := range evs {
		times[string(e.Raw)] = e.Time
		if e.Time < now.Add(-900*24*time.Hour).UnixNano() || e.Time > now.Add(30*24*time.Hour).UnixNano() {
			quarantined[e.Index]++
		}
	}
	a, err := s.Append(evs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	check := func(stage string, wantState State) {
		t.Helper()
		if err := hotCapHeld(s); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		perIndex := map[string]int{}
		quarEvents := map[string]uint32{}
		for _, c := range s.Inventory() {
			if c.State != string(wantState) {
				t.Fatalf("%s: bucket %s is %s, want %s", stage, c.ID, c.State, wantState)
			}
			perIndex[c.Index]++
			if c.Quarantine {
				quarEvents[c.Index] += c.Events
			}
		}
		for _, idx := range indexes {
			if perIndex[idx] > s.Options().MaxHotBuckets+1 {
				t.Fatalf("%s: index %s has %d buckets, want at most %d", stage, idx, perIndex[idx], s.Options().MaxHotBuckets+1)
			}
			if int(quarEvents[idx]) != quarantined[idx] {
				t.Fatalf("%s: index %s quarantine holds %d events, want %d", stage, idx, quarEvents[idx], quarantined[idx])
			}
		}
		segs := s.Segments()
		seen := map[string]int{}
		for _, seg := range segs {
			if err := boundsCover(seg); err != nil {
				t.Fatalf("%s: %v", stage, err)
			}
			seg.TermsWithPrefix("ev", func(term string, bm *roaring.Bitmap) bool {
				seen[term] += int(bm.GetCardinality())
				return true
			})
		}
		if len(seen) != len(evs) {
			t.Fatalf("%s: %d distinct events found, want %d", stage, len(seen), len(evs))
		}
		for term, n := range seen {
			if n != 1 {
				t.Fatalf("%s: %s found %d times", stage, term, n)
			}
		}
		if n := searchCount(t, segs, "common | stats count", "", ""); n != len(evs) {
			t.Fatalf("%s: search counts %d events, want %d", stage, n, len(evs))
		}
		if n := searchCount(t, segs, "index=web common | stats count", "", ""); n != len(evs)/2 {
			t.Fatalf("%s: index=web counts %d, want %d", stage, n, len(evs)/2)
		}
		// Time-range searches, whose pruning trusts each bucket's range.
		for _, w := range [][2]int{{-1500, -1400}, {-901, -899}, {-1000, -10}, {-100, 0}, {0, 31}, {29, 200}, {-3, 3}} {
			lo, hi := now.Add(time.Duration(w[0])*24*time.Hour), now.Add(time.Duration(w[1])*24*time.Hour)
			want := 0
			for _, tm := range times {
				if tm >= lo.UnixNano() && tm < hi.UnixNano() {
					want++
				}
			}
			got := searchCount(t, segs, "common | stats count", lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
			if got != want {
				t.Fatalf("%s: days %v: search counts %d, want %d", stage, w, got, want)
			}
		}
	}
	check("hot", StateHot)
	s.RollAll()
	if err := s.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	check("rolled", StateWarm)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, opts)
	check("reopened", StateWarm)
	if !s.LastRecovery().Clean() {
		t.Fatalf("recovery %+v: want nothing to repair", s.LastRecovery())
	}
}

// TestQuarantineWindow: the window follows the options (a negative
// duration turns a side off) and the peer's clock at ingest.
func TestQuarantineWindow(t *testing.T) {
	now := time.Now().UTC()
	day := 24 * time.Hour
	for _, tc := range []struct {
		name         string
		past, future time.Duration
		offset       time.Duration
		quarantine   bool
	}{
		{"default past inside", 0, 0, -899 * day, false},
		{"default past outside", 0, 0, -901 * day, true},
		{"default future inside", 0, 0, 29 * day, false},
		{"default future outside", 0, 0, 31 * day, true},
		{"past 1h", time.Hour, 0, -2 * time.Hour, true},
		{"past off", -1, 0, -5000 * day, false},
		{"future off", 0, -1, 5000 * day, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, QuarantinePast: tc.past, QuarantineFuture: tc.future,
				Now: func() time.Time { return now }})
			defer s.Close()
			e := testEvent("main", 1)
			e.Time = now.Add(tc.offset).UnixNano()
			if _, err := s.Append([]Event{e}); err != nil {
				t.Fatal(err)
			}
			inv := s.Inventory()
			if len(inv) != 1 || inv[0].Quarantine != tc.quarantine {
				t.Fatalf("inventory %+v: want one bucket, quarantine %v", inv, tc.quarantine)
			}
		})
	}
}
