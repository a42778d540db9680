package searchhead

import (
	"fmt"
	"slices"
)

// A failover to a hot replica (a bucket's origin or first copy failed
// mid-search) reads a copy the search did not plan to read from at its
// start. The replica is whole by the word of the table the search planned
// with; the search's barrier (confirmHotReplicas) only vouches for leaves
// committed after it. A replica that left the bucket's searchable set
// between the plan's table and a barrier taken at the search's end would
// fail the bucket there — partial although the origin, or another copy,
// could have served it (strict chaos, 30 faults: one search). So the same
// rule settleBarrier applies to a first plan applies to a failover: the
// replica is read only on a table at least as new as the search's barrier,
// where it is still in the bucket's searchable set; else the bucket moves
// on to its next candidate. A search with no barrier yet takes one without
// holding up its other buckets (the loop waits on barrierWait), and holds
// the bucket until it comes.

// gateHotReplicas returns the buckets of ids that may be sent to peer p
// now; a hot bucket read from a replica on a table older than the search's
// barrier waits for the barrier (awaitBarrier) or moves to the newer
// table's word (replanOnBarrier).
func (r *run) gateHotReplicas(p string, ids []string) []string {
	keep := ids[:0:0]
	for _, id := range ids {
		br := r.buckets[id]
		if br == nil || br.state != bPending || br.unknown || !br.info.Hot || p == br.info.Origin {
			keep = append(keep, id)
			continue
		}
		switch {
		case r.barrier == nil:
			r.awaitBarrier(p, id)
		case r.barrier.err != nil || br.tver >= r.barrier.version:
			// The managers could not be reached: the end fails the bucket
			// (confirmHotReplicas) unless the replica is not needed.
			keep = append(keep, id)
		case r.replanOnBarrier(br, p):
			keep = append(keep, id)
		}
	}
	return keep
}

// awaitBarrier holds bucket id for peer p until the search's barrier
// arrives, starting it if none is under way. The barrier's goroutine ends
// with the search's context (barrierAfterBegin) and never blocks: its
// channel holds the one answer.
func (r *run) awaitBarrier(p, id string) {
	if r.awaiting == nil {
		r.awaiting = map[string][]string{}
	}
	r.awaiting[p] = append(r.awaiting[p], id)
	if r.barrierWait != nil {
		return
	}
	ch := make(chan barrierResult, 1)
	r.barrierWait = ch
	go func() {
		v, err := r.barrierAfterBegin()
		ch <- barrierResult{v, err}
	}()
}

// takeBarrier records the barrier a failover asked for and queues the
// buckets held for it (flushRetries gates them again, now on its word).
func (r *run) takeBarrier(b barrierResult) {
	r.barrier, r.barrierWait = &b, nil
	for p, ids := range r.awaiting {
		r.retries[p] = append(r.retries[p], ids...)
	}
	r.awaiting = nil
}

// replanOnBarrier moves a hot bucket to the head's current table (at least
// as new as the search's barrier): its entry and version become the
// bucket's, and replica p is read only if that table still counts it in
// the bucket's searchable set; otherwise the bucket fails over to its next
// candidate and false is returned.
func (r *run) replanOnBarrier(br *bucketRun, p string) bool {
	t := r.h.tables
	t.mu.RLock()
	info, known := t.own().Bucket(br.id)
	v := t.version(t.sites[0])
	t.mu.RUnlock()
	if !known || v < br.tver {
		return true // gone from the table (nothing to miss), or no newer word
	}
	br.info, br.tver = info, v
	if !info.Hot || p == info.Origin || slices.Contains(info.SearchableOn, p) {
		return true
	}
	r.failover(br, p, fmt.Sprintf("replica %s is no longer in hot bucket %s's searchable set (table version %d, at or after the search's barrier %d)",
		p, br.id, v, r.barrier.version))
	return false
}
