package fsm

// What a registration's inventory may add (review M5 and L10; DESIGN.md
// "Inventories are claims"). An inventory is the registering peer's own
// word. From cluster version InventoryVersion the managers take it only as
// far as they can vouch for it:
//
//   - a copy of a bucket the table knows is adopted when the peer already
//     has that copy on record, is the bucket's origin (its GUID is in the
//     bucket id), held a copy of the hot bucket before (LeftAt), or is the
//     target of an open fixup task for the bucket — or when the bucket is
//     being rebuilt from inventories (no origin known yet, or warm without
//     a sealed length: rebuild.go). Any other claimed copy is ignored: it
//     is not counted toward the replication or search factor and can never
//     be a primary, so a peer cannot make itself primary for another
//     origin's bucket, keep RF "met" with copies it does not hold, or get
//     the excess planner to remove real copies. The claimant keeps its
//     files; the planner makes the copies the policy wants as ever.
//   - a bucket the table does not know is adopted as before (that is how a
//     rebuild from inventories works), but its index is declared only when
//     the config creates indexes automatically (auto_create_indexes): an
//     inventory no longer opens an undeclared index to ingestion. A bucket
//     of an undeclared index is searchable like any other; declaring the
//     index (config) makes it writable again.
//
// Before InventoryVersion every claimed copy is adopted and every reported
// index declared, as a manager of an older build does, so a mixed group
// applies the same state.

// InventoryVersion is the cluster version from which inventories are
// trusted only as far as the managers can vouch for them.
const InventoryVersion = 7

// vouches reports whether the managers can vouch for a copy of b that
// peer (with guid) claims — a registering peer's inventory, a copy_added
// event (tasks: the buckets of open tasks that target the peer).
func (s *State) vouches(b *Bucket, peer, guid string, tasks map[string]bool) bool {
	if s.ClusterVersion() < InventoryVersion {
		return true
	}
	if _, ok := b.Copies[peer]; ok {
		return true
	}
	if _, _, g, err := ParseBucketID(b.ID); err == nil && g == guid {
		return true // its origin
	}
	if b.Origin == "" || (!b.Hot && !b.Sealed) {
		return true // being rebuilt from inventories (rebuild.go)
	}
	if _, ok := b.LeftAt[peer]; ok {
		return true
	}
	return tasks[b.ID]
}

// VouchesForCopy reports whether the managers can vouch for a copy of
// bucket that peer claims outside a registration (a copy_added bucket
// event): the same rule as an inventory's claim. An unknown bucket or
// peer is not vouched for.
func (s *State) VouchesForCopy(bucket, peer string) bool {
	b, ok := s.lookup(bucket)
	p, known := s.d.Peers[peer]
	if !ok || !known {
		return false
	}
	return s.vouches(b, peer, p.GUID, s.taskBucketsFor(peer))
}

// taskBucketsFor is the buckets of the open tasks that target peer.
func (s *State) taskBucketsFor(peer string) map[string]bool {
	out := map[string]bool{}
	for _, t := range s.d.Tasks {
		if t.Target == peer {
			out[t.Bucket] = true
		}
	}
	return out
}
