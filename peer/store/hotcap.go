package store

import (
	"errors"
	"fmt"
	"time"
)

// Peer-wide limits on what ingest can open (SPEC §11: hot buckets capped
// per peer over all indexes and rolled when idle; review M3).
//
//   - MaxHotBucketsTotal caps the hot buckets this peer originates over
//     all its indexes, quarantine buckets included. Each holds a journal
//     descriptor outside the file cache and its hot index in memory, so
//     the cap bounds both whatever the number of index names. A new bucket
//     past the cap first rolls the least recently written hot bucket that
//     the request does not itself write to (placement.go makeRoom); the
//     roll is an ordinary one (rollLocked), so in a cluster the replicas
//     and the managers learn of it as of any other (the origin's rolled
//     event). A request that by itself writes to every hot bucket and
//     needs one more puts the event into the index's hot bucket it
//     widens least; only when that index has no hot bucket at all is the
//     request refused whole (ErrHotBucketsFull: one request naming more
//     indexes than the cap).
//   - MaxHotIdle rolls a hot bucket that received no event for that long
//     (Splunk's maxHotIdleSecs), by a loop the store owns and stops on
//     Close.
//   - MaxIndexes caps the indexes this peer holds copies of (any state,
//     origin or replica): an Append that names an index the peer holds no
//     copy of, when it already holds MaxIndexes, is refused whole
//     (ErrTooManyIndexes) — unless the index is declared
//     (SetDeclaredIndexes: indexes the tokens or the cluster config name),
//     which are always accepted. Replicas are never refused: their
//     origin decided.
//
// Hot replicas (copies other origins write here) are not counted: this
// peer cannot roll them, and each origin's own cap bounds them.

// Limits are the store's limits and their enforcement: the roll limits
// and per-index roll sizes (datasize.go), the hot-bucket cap over all
// indexes, the cap on indexes held and the idle roll (here).
type Limits struct{ s *Store }

// Limits returns the store's limits.
func (s *Store) Limits() Limits { return Limits{s} }

// Errors of the peer-wide limits, wrapped in a *LimitError.
var (
	// ErrTooManyIndexes: the request names an index the peer holds no
	// copy of, and it already holds its most (Options.MaxIndexes).
	ErrTooManyIndexes = errors.New("the peer holds its most indexes (--max-indexes)")
	// ErrHotBucketsFull: the request by itself writes to as many hot
	// buckets as the peer may hold (Options.MaxHotBucketsTotal) and
	// needs one more for an index with none.
	ErrHotBucketsFull = errors.New("the request needs more hot buckets than the peer may hold (--max-hot-buckets-total)")
)

// LimitError is an Append refused whole by a peer-wide limit; nothing of
// the request was added.
type LimitError struct {
	Err   error  // ErrTooManyIndexes or ErrHotBucketsFull
	Index string // the index of the event at fault
	Event int    // 0-based number of that event in the Append
	Limit int    // the limit in force
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("event %d, index %q: %v (limit %d)", e.Event, e.Index, e.Err, e.Limit)
}

func (e *LimitError) Unwrap() error { return e.Err }

// Defaults of the peer-wide limits.
const (
	// DefaultMaxHotBucketsTotal: under the usual `ulimit -n 1024` the
	// file cache keeps half the descriptors (512), hot journals take at
	// most a quarter, and a quarter stays for sockets, the bus and a
	// roll's temporary files; 256 × max_hot_bytes (32 MiB) also bounds
	// the event bytes hot indexes hold in memory.
	DefaultMaxHotBucketsTotal = 256
	// DefaultMaxHotIdle: a bucket an hour without events rolls, so a
	// quiet index gives back its descriptor and memory and its bucket
	// becomes warm (pruned by time, sealed in the managers' view) —
	// at most 24 small buckets a day for an index written hourly.
	DefaultMaxHotIdle = time.Hour
	// DefaultMaxIndexes bounds the index names one token may create on
	// a peer (each costs buckets and, in a cluster, Raft entries); far
	// more than a deployment declares.
	DefaultMaxIndexes = 1000
)

// hotCountLocked is the number of hot buckets this peer originates. s.mu
// held.
func (l Limits) hotCountLocked() int {
	s := l.s
	n := 0
	for _, is := range s.indexes {
		n += len(is.hot)
	}
	return n
}

// HotBuckets is the number of hot buckets this peer originates (all
// indexes, quarantine buckets included; hot replicas not).
func (l Limits) HotBuckets() int {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return l.hotCountLocked()
}

// IndexCount is the number of indexes this peer holds a copy of.
func (l Limits) IndexCount() int {
	s := l.s
	s.bmu.RLock()
	defer s.bmu.RUnlock()
	return len(s.indexCopies)
}

// SetDeclaredIndexes replaces the indexes accepted whatever MaxIndexes
// says (those the tokens or the cluster config name; main always).
func (l Limits) SetDeclaredIndexes(names []string) {
	s := l.s
	d := map[string]bool{"main": true}
	for _, n := range names {
		d[n] = true
	}
	s.mu.Lock()
	s.declared = d
	s.mu.Unlock()
}

// putBucket adds a copy to the store's table and counts its index.
func (s *Store) putBucket(b *Bucket) {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if _, ok := s.buckets[b.id]; !ok && b.index != "" {
		s.indexCopies[b.index]++
	}
	s.buckets[b.id] = b
}

// dropBucket removes a copy from the store's table; an index whose last
// copy it was is no longer held.
func (s *Store) dropBucket(id string) {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	b, ok := s.buckets[id]
	if !ok {
		return
	}
	delete(s.buckets, id)
	if b.index == "" {
		return
	}
	if s.indexCopies[b.index]--; s.indexCopies[b.index] <= 0 {
		delete(s.indexCopies, b.index)
	}
}

// admitIndex checks MaxIndexes for the first event of index in a plan.
// s.mu held.
func (l Limits) admitIndex(pl *appendPlan, index string, ev int) error {
	s := l.s
	if s.opts.MaxIndexes < 0 || s.declared[index] || pl.newIndexes[index] {
		return nil
	}
	s.bmu.RLock()
	held, known := len(s.indexCopies), s.indexCopies[index] > 0
	s.bmu.RUnlock()
	if known {
		return nil
	}
	if held+len(pl.newIndexes) >= s.opts.MaxIndexes {
		s.Stats.IndexCapRefused.Add(1)
		return &LimitError{Err: ErrTooManyIndexes, Index: index, Event: ev, Limit: s.opts.MaxIndexes}
	}
	pl.newIndexes[index] = true
	return nil
}

// makeRoom makes room in the plan for one more hot bucket: free under
// MaxHotBucketsTotal, or by rolling the least recently written hot bucket
// the request does not write to. False when neither is possible.
func (l Limits) makeRoom(pl *appendPlan) bool {
	s := l.s
	if pl.live < s.opts.MaxHotBucketsTotal {
		pl.live++
		return true
	}
	var victim *Bucket
	for _, is := range s.indexes {
		for _, b := range is.hot {
			if pl.touched[b] || pl.evicted[b] {
				continue
			}
			if victim == nil || b.lastUse < victim.lastUse {
				victim = b
			}
		}
	}
	if victim == nil {
		return false
	}
	pl.evicted[victim] = true
	pl.rollBefore = append(pl.rollBefore, victim)
	if slots, ok := pl.slots[victim.index]; ok {
		for i, sl := range slots {
			if sl.b == victim {
				pl.slots[victim.index] = append(slots[:i:i], slots[i+1:]...)
				break
			}
		}
	}
	return true
}

// rollForRoom rolls the buckets a plan evicted, once the buckets it
// creates exist. s.mu held.
func (l Limits) rollForRoom(pl *appendPlan) {
	s := l.s
	for _, b := range pl.rollBefore {
		s.rollLocked(b)
		s.Stats.HotCapRolls.Add(1)
	}
	if len(pl.rollBefore) > 0 {
		s.log.Debug("rolled least recently written hot buckets to stay within --max-hot-buckets-total",
			"rolled", len(pl.rollBefore), "limit", s.opts.MaxHotBucketsTotal)
	}
}

// idleCheckEvery is how often the idle loop looks: a quarter of the idle
// time, at most 30 s, so a bucket rolls at most that late.
func idleCheckEvery(idle time.Duration) time.Duration {
	return min(max(idle/4, time.Millisecond), 30*time.Second)
}

// idleRoller rolls hot buckets that received no event for MaxHotIdle
// (started by Open when it is positive; stopped by Close).
func (l Limits) idleRoller(idle time.Duration) {
	s := l.s
	defer s.wg.Done()
	t := time.NewTicker(idleCheckEvery(idle))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			l.rollIdle(now, idle)
		}
	}
}

// rollIdle rolls every hot bucket whose last event is idle or more before
// now, through the ordinary roll path.
func (l Limits) rollIdle(now time.Time, idle time.Duration) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	var quiet []*Bucket
	for _, is := range s.indexes {
		for _, b := range is.hot {
			if now.Sub(b.lastWrite) >= idle {
				quiet = append(quiet, b)
			}
		}
	}
	for _, b := range quiet {
		s.rollLocked(b)
		s.Stats.IdleRolls.Add(1)
	}
	if len(quiet) > 0 {
		s.log.Debug("rolled idle hot buckets", "rolled", len(quiet), "max_hot_idle", idle)
	}
}
