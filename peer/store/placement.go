package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Placement: which hot bucket an event goes to (SPEC §11: events far
// outside the current time go to a quarantine bucket rather than opening
// hot buckets; the per-index cap on hot buckets holds whatever the times).
//
// For each event, in order, against the index's hot buckets:
//
//  1. An event more than QuarantinePast before, or QuarantineFuture after,
//     the peer's clock at ingest goes to the index's quarantine bucket
//     (created on first need). It is a normal bucket — id
//     <index>~<localid>~<guid>, replicated, rolled and searched like any
//     other — flagged "quarantine" in copy.json and meta.json, and it does
//     not count against MaxHotBuckets.
//  2. Otherwise it goes to the most recently used hot bucket it fits: one
//     that is empty, already covers its time, or would span no more than
//     MaxHotSpan with it.
//  3. Otherwise, while the index has fewer than MaxHotBuckets hot buckets
//     (quarantine aside), to a new one.
//  4. Otherwise to the hot bucket whose time range it widens least (ties:
//     the most recently used); that bucket then spans more than
//     MaxHotSpan until it rolls (at MaxHotBytes, on demand or at restart).
//
// Over all indexes together the peer holds at most MaxHotBucketsTotal
// hot buckets (hotcap.go): a new bucket past that cap first rolls the
// least recently written hot bucket the request does not write to; when
// the request itself writes to every hot bucket, the event goes to the
// index's bucket it widens least (rule 4, quarantine bucket included), and
// an index with no hot bucket at all refuses the whole request
// (ErrHotBucketsFull). An index the peer holds no copy of counts against
// MaxIndexes unless it is declared (ErrTooManyIndexes).
//
// Widening rather than rolling the oldest: rolling makes a bucket per
// out-of-span event (the 502 buckets and 1,014 open files a 21 KB request
// of spread times made), widening keeps the index at MaxHotBuckets + 1 hot
// buckets. Searches stay correct because a bucket's earliest/latest are
// always computed from its events — per block (min/max _time of the
// block, in the journal frame and the index), so the time range a search
// head or the query prunes by covers every event; a widened bucket is
// only pruned less often.
//
// The whole request is placed before anything is added (plan, then
// create the buckets it needs, then append): a bucket that cannot be
// created — out of file descriptors, say — fails the request with nothing
// added, so a retry does not duplicate events.

// slot is a hot bucket as the plan of one Append sees it: an existing
// bucket or one to create.
type slot struct {
	b          *Bucket // nil until created
	index      string
	quarantine bool
	appended   uint32
	rawBytes   int64
	minT, maxT int64
	lastUse    int64
}

func (sl *slot) covers(t int64) bool { return sl.appended > 0 && t >= sl.minT && t <= sl.maxT }

// widening is how much t would stretch the slot's time range.
func (sl *slot) widening(t int64) int64 {
	if sl.appended == 0 {
		return 0
	}
	return max(sl.minT-t, 0) + max(t-sl.maxT, 0)
}

type appendPlan struct {
	slots     map[string][]*slot // per index: its hot buckets, in the plan's state
	target    []*slot            // per event
	rollAfter []bool             // per event: roll its bucket once it is added (MaxHotBytes, max_data_size)
	created   []*slot            // buckets to create, in order
	// The peer-wide cap (hotcap.go): live is how many hot buckets the
	// peer holds once the plan is carried out; rollBefore are existing
	// hot buckets rolled to make room (least recently written first);
	// touched are the existing buckets the request writes to, which are
	// never rolled for room; evicted are those in rollBefore.
	live       int
	rollBefore []*Bucket
	touched    map[*Bucket]bool
	evicted    map[*Bucket]bool
	newIndexes map[string]bool // indexes the request creates (MaxIndexes)
}

// quarantined reports whether an event at t lies outside the window the
// peer's clock at ingest (now) allows.
func (s *Store) quarantined(now, t int64) bool {
	if p := s.opts.QuarantinePast; p > 0 && t < now-int64(p) {
		return true
	}
	if f := s.opts.QuarantineFuture; f > 0 && t > now+int64(f) {
		return true
	}
	return false
}

// planAppend places every event, or refuses the whole request with a
// *LimitError. s.mu is held; nothing is changed.
func (s *Store) planAppend(evs []Event) (*appendPlan, error) {
	pl := &appendPlan{slots: map[string][]*slot{}, target: make([]*slot, len(evs)), rollAfter: make([]bool, len(evs)),
		live: s.Limits().hotCountLocked(), touched: map[*Bucket]bool{}, evicted: map[*Bucket]bool{}, newIndexes: map[string]bool{}}
	now := s.opts.Now().UnixNano()
	for i := range evs {
		e := &evs[i]
		if _, ok := pl.slots[e.Index]; !ok {
			if err := s.Limits().admitIndex(pl, e.Index, i); err != nil {
				return nil, err
			}
			pl.slots[e.Index] = pl.existingSlots(s.indexes[e.Index])
		}
		sl, err := s.placeEvent(pl, e.Index, e.Time, s.quarantined(now, e.Time), i)
		if err != nil {
			return nil, err
		}
		if sl.b != nil {
			pl.touched[sl.b] = true
		}
		if sl.appended == 0 || e.Time < sl.minT {
			sl.minT = e.Time
		}
		if sl.appended == 0 || e.Time > sl.maxT {
			sl.maxT = e.Time
		}
		sl.appended++
		sl.rawBytes += int64(e.size())
		sl.lastUse = s.tick()
		pl.target[i] = sl
		if sl.rawBytes >= s.Limits().rollBytes(e.Index) {
			pl.rollAfter[i] = true
			pl.slots[e.Index] = removeSlot(pl.slots[e.Index], sl)
			pl.live--
		}
	}
	return pl, nil
}

// existingSlots are an index's hot buckets as the plan starts from them
// (those already rolled for room left out).
func (pl *appendPlan) existingSlots(is *indexState) []*slot {
	if is == nil {
		return nil
	}
	var slots []*slot
	for _, b := range is.hot {
		if !pl.evicted[b] {
			slots = append(slots, &slot{b: b, index: is.name, quarantine: b.quarantine, appended: b.appended,
				rawBytes: b.rawBytes, minT: b.minT, maxT: b.maxT, lastUse: b.lastUse})
		}
	}
	return slots
}

// placeEvent places an event of index at t: the slot rules 1–4 choose,
// and for a new bucket room under the peer's cap (makeRoom), else the
// index's slot it widens least; with none, the request is refused.
func (s *Store) placeEvent(pl *appendPlan, index string, t int64, quarantine bool, ev int) (*slot, error) {
	slots := pl.slots[index]
	sl := s.place(slots, t, quarantine)
	if sl.b != nil || containsSlot(slots, sl) {
		return sl, nil
	}
	if !s.Limits().makeRoom(pl) {
		if least := widenLeast(slots, t); least != nil {
			return least, nil
		}
		s.Stats.HotCapRefused.Add(1)
		return nil, &LimitError{Err: ErrHotBucketsFull, Index: index, Event: ev, Limit: s.opts.MaxHotBucketsTotal}
	}
	sl.index = index
	pl.slots[index] = append(pl.slots[index], sl) // makeRoom may have changed pl.slots[index]
	pl.created = append(pl.created, sl)
	return sl, nil
}

// widenLeast is the slot (quarantine included) whose time range t widens
// least, ties to the most recently used; nil for none.
func widenLeast(slots []*slot, t int64) *slot {
	var least *slot
	for _, sl := range slots {
		if least == nil || sl.widening(t) < least.widening(t) ||
			(sl.widening(t) == least.widening(t) && sl.lastUse > least.lastUse) {
			least = sl
		}
	}
	return least
}

// place picks the slot for an event at t (rules 1–4 above); a slot not in
// slots is a bucket to create.
func (s *Store) place(slots []*slot, t int64, quarantine bool) *slot {
	if quarantine {
		for _, sl := range slots {
			if sl.quarantine {
				return sl
			}
		}
		return &slot{quarantine: true}
	}
	span := int64(s.opts.MaxHotSpan)
	var fit, least *slot
	n := 0
	for _, sl := range slots {
		if sl.quarantine {
			continue
		}
		n++
		if sl.appended == 0 || sl.covers(t) || max(sl.maxT, t)-min(sl.minT, t) <= span {
			if fit == nil || sl.lastUse > fit.lastUse {
				fit = sl
			}
		}
		if least == nil || sl.widening(t) < least.widening(t) ||
			(sl.widening(t) == least.widening(t) && sl.lastUse > least.lastUse) {
			least = sl
		}
	}
	switch {
	case fit != nil:
		return fit
	case n < s.opts.MaxHotBuckets:
		return &slot{}
	default:
		return least
	}
}

func containsSlot(slots []*slot, sl *slot) bool {
	for _, x := range slots {
		if x == sl {
			return true
		}
	}
	return false
}

func removeSlot(slots []*slot, sl *slot) []*slot {
	for i, x := range slots {
		if x == sl {
			return append(slots[:i:i], slots[i+1:]...)
		}
	}
	return slots
}

// createPlanned creates the plan's new buckets and makes them hot. If one
// cannot be created, those already made are removed again and the error
// returned: the store is as it was. s.mu is held.
func (s *Store) createPlanned(pl *appendPlan) error {
	var made []*Bucket
	for _, sl := range pl.created {
		is := s.indexes[sl.index]
		if is == nil {
			is = &indexState{name: sl.index, nextID: s.nextLocalID(sl.index)}
			s.indexes[sl.index] = is
		}
		var b *Bucket
		err := s.retryFDs(func() error {
			var err error
			b, err = s.createBucket(is, sl.quarantine)
			return err
		})
		if err != nil {
			for _, m := range made {
				s.discardBucket(m)
			}
			return fmt.Errorf("create a hot bucket of index %s: %w", sl.index, err)
		}
		sl.b = b
		made = append(made, b)
	}
	for _, b := range made {
		is := s.indexes[b.index]
		is.hot = append(is.hot, b)
	}
	return nil
}

// discardBucket removes a bucket createPlanned made and never used.
func (s *Store) discardBucket(b *Bucket) {
	s.dropBucket(b.id)
	if b.jf != nil {
		b.jf.Close()
		b.jf = nil
	}
	b.rd.Close()
	// copy.json first: a folder without it is removed at open.
	os.Remove(filepath.Join(b.dir, copyFile))
	os.RemoveAll(b.dir)
}

// retryFDs runs fn and, when it failed for want of file descriptors,
// closes the file cache's idle descriptors and runs it once more.
func (s *Store) retryFDs(fn func() error) error {
	err := fn()
	if err != nil && isFDError(err) {
		s.files.shed()
		err = fn()
		if err != nil && isFDError(err) {
			s.Stats.Files.Exhausted.Add(1)
			if !errors.Is(err, ErrNoFileDescriptors) {
				err = fmt.Errorf("%w: %w", ErrNoFileDescriptors, err)
			}
		}
	}
	return err
}
