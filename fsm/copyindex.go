package fsm

// The copy index: which buckets each peer holds a copy of (derived state
// kept by addCopy and dropCopy, the only places a bucket's copies change).

import "maps"

func (s *State) addCopy(b *Bucket, c *Copy) {
	if _, ok := b.Copies[c.Peer]; !ok {
		if ci := s.ownCopyIndex(); ci != nil {
			ci.add(c.Peer, b.ID)
		}
	}
	b.Copies[c.Peer] = c
	s.copyCount[c.Peer]++
}

func (s *State) dropCopy(b *Bucket, peer string) {
	if _, ok := b.Copies[peer]; !ok {
		return
	}
	if ci := s.ownCopyIndex(); ci != nil {
		ci.remove(peer, b.ID)
	}
	delete(b.Copies, peer)
	s.copyCount[peer]--
	if s.copyCount[peer] == 0 {
		delete(s.copyCount, peer)
	}
}

// copyIndex maps a peer to the ids of the buckets it holds a copy of
// (derived state), so a peer's state change recomputes the primaries of
// its buckets without looking at every bucket (at a million buckets that
// scan was most of a generation change: fsm/scale_test.go). rebuildDerived
// builds it (a Clone builds its own on first use) and addCopy and dropCopy,
// the only places a bucket's copies change, keep it. It names the State
// that owns it: a copy of a State that shares the pointer drops it instead
// of changing the other's index, and rebuilds its own. The planner's
// private state (planCopy) shares the committed index's sets and copies a
// peer's set before changing it (shared).
type copyIndex struct {
	owner  *State
	m      map[string]map[string]struct{}
	shared map[string]bool
}

// set returns peer's set, ready to change.
func (ci *copyIndex) set(peer string) map[string]struct{} {
	set := ci.m[peer]
	if ci.shared[peer] {
		set = maps.Clone(set)
		ci.m[peer] = set
		delete(ci.shared, peer)
	}
	if set == nil {
		set = map[string]struct{}{}
		ci.m[peer] = set
	}
	return set
}

func (ci *copyIndex) add(peer, bucket string) { ci.set(peer)[bucket] = struct{}{} }

func (ci *copyIndex) remove(peer, bucket string) { delete(ci.set(peer), bucket) }

// copyIndexFor returns an index for the planner's private copy of s
// (planCopy): s's sets, shared until changed. s's index is built (by
// rebuildDerived) unless s is itself a Clone that never needed one.
func (s *State) copyIndexFor() *copyIndex {
	if ci := s.byPeer; ci != nil && ci.owner == s {
		c := &copyIndex{m: maps.Clone(ci.m), shared: make(map[string]bool, len(ci.m))}
		for p := range ci.m {
			c.shared[p] = true
		}
		return c
	}
	return nil
}

// ownCopyIndex returns s's copy index, or nil (dropping a shared one) when
// it is not built for s.
func (s *State) ownCopyIndex() *copyIndex {
	if s.byPeer != nil && s.byPeer.owner != s {
		s.byPeer = nil
	}
	return s.byPeer
}

// bucketsOn returns the ids of the buckets with a copy on peer, sorted.
// Only write paths call it (apply, or the planner's private state): it may
// build the index of a Clone.
func (s *State) bucketsOn(peer string) []string {
	ci := s.ownCopyIndex()
	if ci == nil {
		if s.base != nil {
			panic("fsm: the planner's private state has no copy index")
		}
		ci = &copyIndex{owner: s, m: map[string]map[string]struct{}{}}
		for id, b := range s.d.Buckets {
			for p := range b.Copies {
				ci.add(p, id)
			}
		}
		s.byPeer = ci
	}
	return sortedKeys(ci.m[peer])
}
