package fsm

// The bucket table's derived id index: the sorted id list views read
// (bucketIDs) and the ordered id set that keeps it, changed only through
// putBucket and deleteBucket.

import (
	"slices"
	"sync/atomic"
)

// bucketIDs returns every bucket id, sorted. The slice is cached (derived
// state) until a bucket is added or removed, and callers must not change
// it: sorting a million ids at every peer state change, planner level and
// view cost ~0.5 s each (fsm/scale_test.go). Buckets enter and leave the
// table only through putBucket and deleteBucket; the length check also
// catches a path that forgets to. Views call this under the FSM's read
// lock, concurrently, so the cache is an atomic pointer (two readers may
// both sort and store the same list), and it names the State it was
// computed for, so a copy of a State that shares the cache never reads the
// other's list.
func (s *State) bucketIDs() []string {
	if s.ids == nil {
		return s.sortedBucketIDs()
	}
	if l := s.ids.p.Load(); l != nil && l.owner == s && len(l.ids) == s.bucketCount() {
		return l.ids
	}
	var ids []string
	if s.idset != nil && s.idset.len() == s.bucketCount() {
		ids = make([]string, 0, s.bucketCount())
		s.idset.each(func(k idKey) bool { ids = append(ids, string(k)); return true })
	} else {
		ids = s.sortedBucketIDs()
	}
	s.ids.p.Store(&idList{owner: s, ids: ids})
	return ids
}

// idKey orders the bucket ids in idSet.
type idKey string

func (a idKey) less(b idKey) bool { return a < b }

// idSet is the bucket ids in order (derived: built by rebuildDerived, kept
// by putBucket and deleteBucket), so bucketIDs lists them after a change
// by a copy instead of a sort (a million ids sorted in a second, and the
// binary snapshot lists them in order under the read lock). A state that
// shares another's set (the planner's private state) drops it on its
// first change and sorts.
type idSet struct {
	owner *State
	chunked[idKey]
}

func (s *State) ownIDSet() *idSet {
	if s.idset != nil && s.idset.owner != s {
		s.idset = nil
	}
	return s.idset
}

// sortedBucketIDs sorts the bucket ids (those of base and d.Buckets in the
// planner's private state).
func (s *State) sortedBucketIDs() []string {
	if s.base == nil {
		return sortedKeys(s.d.Buckets)
	}
	ids := make([]string, 0, s.nBuckets)
	for id := range s.base {
		if _, gone := s.gone[id]; !gone {
			ids = append(ids, id)
		}
	}
	for id := range s.d.Buckets {
		if _, in := s.base[id]; !in {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// idCache holds the cached sorted bucket ids of bucketIDs.
type idCache struct{ p atomic.Pointer[idList] }

type idList struct {
	owner *State
	ids   []string
}

func (s *State) dropIDs() {
	if s.ids != nil {
		s.ids.p.Store(nil)
	}
}

// putBucket adds a bucket to the table.
func (s *State) putBucket(b *Bucket) {
	if _, ok := s.lookup(b.ID); !ok {
		s.dropIDs()
		s.nBuckets++
		if set := s.ownIDSet(); set != nil {
			set.insert(idKey(b.ID))
		}
	}
	s.d.Buckets[b.ID] = b
	delete(s.gone, b.ID)
	s.touch(b.ID, b)
}

// deleteBucket removes a bucket from the table (and from the retention
// index, which refresh cannot do once the record is gone).
func (s *State) deleteBucket(id string) {
	b, ok := s.lookup(id)
	if !ok {
		return
	}
	s.dropIDs()
	s.nBuckets--
	if set := s.ownIDSet(); set != nil {
		set.remove(idKey(id))
	}
	if b.held.in {
		s.retentionMove(id, b.held, retKey{})
	}
	delete(s.d.Buckets, id)
	if _, in := s.base[id]; in {
		s.gone[id] = struct{}{}
	}
	s.touch(id, nil)
}
