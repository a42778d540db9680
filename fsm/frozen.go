package fsm

import (
	"fmt"
	"slices"
	"sort"
)

// Frozen buckets (retention, SPEC §3 "Retention").
//
// A freeze task closes (FixupDone) once every running holder deleted its
// copy; the bucket then leaves the table. A holder that was not running —
// Down, Restarting, GracefulShutdown, Pending — still has its copy on disk,
// and without a record its next registration would bring the bucket back
// ("unknown buckets join the table warm"). So the freeze leaves a
// tombstone: the bucket id, its index, the Raft index of the freeze, and
// the peers that may still hold a copy (Holders).
//
//   - RegisterPeer: an inventory entry of a tombstoned bucket is not added
//     to the table; the peer becomes (or stays) a holder. A holder whose
//     inventory lacks the bucket is no holder any more.
//   - AddCopy of a tombstoned bucket (a replication that finished after the
//     freeze): the peer becomes a holder; nothing joins the table.
//   - The planner gives every running holder a freeze task of its own copy
//     (TaskFreeze with Target set; destructive, confirmed like any other);
//     its FixupDone removes the holder.
//   - A peer Removed is no holder.
//
// Bound: a tombstone with holders is kept until each holder has registered
// without the copy, deleted it, or been removed — at most one per copy the
// table held before the freeze, and smaller than the bucket record it
// replaces. Resolved tombstones (no holders) are kept too, the newest
// MaxResolvedFrozen of them, so a late replica or a peer restored from an
// old disk image within that many freezes is still recognised; older ones
// are dropped, oldest freeze first. Refused alternatives: a time-based
// expiry (a peer can stay Down longer than any expiry, and Apply has no
// clock but what commands carry), and keeping frozen buckets in the table
// with a flag (every level, view and search would have to skip them).

// MaxResolvedFrozen bounds the tombstones kept without holders.
const MaxResolvedFrozen = 1024

// Frozen is the tombstone of a frozen bucket.
type Frozen struct {
	Index string `json:"index"`
	// At is the Raft index of the entry that froze the bucket.
	At uint64 `json:"at"`
	// Holders are the peers that may still hold a copy, sorted.
	Holders []string `json:"holders,omitempty"`
}

// FrozenView is one tombstone, for views and tests.
type FrozenView struct {
	Bucket string `json:"bucket"`
	Frozen
}

// FrozenBuckets lists the tombstones, by bucket id.
func (s *State) FrozenBuckets() []FrozenView {
	out := make([]FrozenView, 0, len(s.d.Frozen))
	for _, id := range sortedKeys(s.d.Frozen) {
		fz := *s.d.Frozen[id]
		fz.Holders = slices.Clone(fz.Holders)
		out = append(out, FrozenView{Bucket: id, Frozen: fz})
	}
	return out
}

// IsFrozen reports whether a bucket id has a tombstone.
func (s *State) IsFrozen(bucket string) bool {
	_, ok := s.d.Frozen[bucket]
	return ok
}

// freezeBucket removes a bucket whose freeze task is done and leaves its
// tombstone, with the holders that are not running as its Holders.
func (s *State) freezeBucket(ch *change, b *Bucket) {
	fz := &Frozen{Index: b.Index, At: ch.idx}
	for _, peer := range sortedKeys(b.Copies) {
		if !s.active(peer) && s.stateOf(peer) != StateRemoved {
			fz.Holders = append(fz.Holders, peer)
		}
	}
	s.removeBucket(ch, b)
	if s.d.Frozen == nil {
		s.d.Frozen = map[string]*Frozen{}
	}
	s.d.Frozen[b.ID] = fz
	s.trimFrozen()
}

// frozenAtRegister reconciles a registering peer's inventory with the
// tombstones: entries of frozen buckets leave inv (they never rejoin the
// table) and make the peer a holder; a holder not reporting the bucket is
// no holder any more.
func (s *State) frozenAtRegister(peer string, inv map[string]CopyInfo) {
	changed := false
	for _, id := range sortedKeys(s.d.Frozen) {
		fz := s.d.Frozen[id]
		if _, holds := inv[id]; holds {
			delete(inv, id)
			changed = fz.addHolder(peer) || changed
		} else {
			changed = fz.dropHolder(peer) || changed
		}
	}
	if changed {
		s.trimFrozen()
	}
}

// frozenCopyAdded records a copy of a frozen bucket reported after the
// freeze: its peer becomes a holder, to be told to delete it.
func (s *State) frozenCopyAdded(fz *Frozen, peer string) (any, error) {
	if _, err := s.peer(peer); err != nil {
		return nil, err
	}
	if s.stateOf(peer) == StateRemoved {
		return nil, fmt.Errorf("%w: add copy on %s: the peer was removed", ErrPeerNotUp, peer)
	}
	fz.addHolder(peer)
	return nil, nil
}

// forgetFrozenHolder drops a removed peer from every tombstone.
func (s *State) forgetFrozenHolder(peer string) {
	changed := false
	for _, id := range sortedKeys(s.d.Frozen) {
		changed = s.d.Frozen[id].dropHolder(peer) || changed
	}
	if changed {
		s.trimFrozen()
	}
}

// createFrozenFixup records a freeze task of one holder's copy of a frozen
// bucket (Target set). A freeze with a Target of a bucket in the table is
// refused: a live bucket freezes whole.
func (s *State) createFrozenFixup(idx uint64, c *CreateFixup) (any, error) {
	if _, ok := levelNames[c.Level]; !ok {
		return nil, fmt.Errorf("%w: level %d", ErrBadTask, c.Level)
	}
	fz, ok := s.d.Frozen[c.Bucket]
	if !ok {
		if _, live := s.lookup(c.Bucket); live {
			return nil, fmt.Errorf("%w: freeze %q on %s: a bucket in the table freezes whole (no target)", ErrBadTask, c.Bucket, c.Target)
		}
		return nil, fmt.Errorf("create fixup: %w: %q", ErrUnknownBucket, c.Bucket)
	}
	if !slices.Contains(fz.Holders, c.Target) {
		return nil, fmt.Errorf("%w: freeze %q on %s: not a holder of the frozen bucket (holders %v)", ErrBadTask, c.Bucket, c.Target, fz.Holders)
	}
	for _, id := range sortedTaskIDs(s.d.Tasks) {
		if sameWork(s.d.Tasks[id], c.Kind, c.Bucket, c.Target) {
			return nil, fmt.Errorf("%w: task %d already does %s of %q on %q", ErrTaskExists, id, c.Kind, c.Bucket, c.Target)
		}
	}
	s.d.Tasks[idx] = &Task{ID: idx, Kind: c.Kind, Level: c.Level, Bucket: c.Bucket, Target: c.Target,
		Destructive: true, Reason: c.Reason, Created: c.At.UnixNano()}
	return Result{Index: idx, Generation: s.d.Generation}, nil
}

// frozenTaskDone applies a done freeze of one holder's copy: it holds it
// no more.
func (s *State) frozenTaskDone(t *Task) {
	if fz, ok := s.d.Frozen[t.Bucket]; ok && t.Kind == TaskFreeze && t.Target != "" && fz.dropHolder(t.Target) {
		s.trimFrozen()
	}
}

// trimFrozen keeps the newest MaxResolvedFrozen tombstones without
// holders (by freeze index, then id) and every one with holders.
func (s *State) trimFrozen() {
	var resolved []string
	for _, id := range sortedKeys(s.d.Frozen) {
		if len(s.d.Frozen[id].Holders) == 0 {
			resolved = append(resolved, id)
		}
	}
	if len(resolved) <= MaxResolvedFrozen {
		return
	}
	sort.SliceStable(resolved, func(i, j int) bool {
		return s.d.Frozen[resolved[i]].At < s.d.Frozen[resolved[j]].At
	})
	for _, id := range resolved[:len(resolved)-MaxResolvedFrozen] {
		delete(s.d.Frozen, id)
	}
}

func (fz *Frozen) addHolder(peer string) bool {
	i, found := slices.BinarySearch(fz.Holders, peer)
	if found {
		return false
	}
	fz.Holders = slices.Insert(fz.Holders, i, peer)
	return true
}

func (fz *Frozen) dropHolder(peer string) bool {
	i, found := slices.BinarySearch(fz.Holders, peer)
	if !found {
		return false
	}
	fz.Holders = slices.Delete(fz.Holders, i, i+1)
	if len(fz.Holders) == 0 {
		fz.Holders = nil
	}
	return true
}

// frozenCopies gives every running holder of a frozen bucket a freeze task
// of its copy (a peer that was down when the bucket froze, and came back).
func (p *planner) frozenCopies() {
	s := p.sim
	for _, id := range sortedKeys(s.d.Frozen) {
		fz := s.d.Frozen[id]
		for _, peer := range slices.Clone(fz.Holders) {
			if !s.active(peer) || p.openFrozen(id, peer) {
				continue
			}
			p.emit(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: id, Target: peer,
				Reason: fmt.Sprintf("copy of a bucket frozen at %d, on a peer that was away", fz.At), At: p.in.Now})
		}
	}
}

func (p *planner) openFrozen(bucket, peer string) bool {
	for _, id := range p.taskIdx().byBucket[bucket] {
		if sameWork(p.sim.d.Tasks[id], TaskFreeze, bucket, peer) {
			return true
		}
	}
	return false
}

// frozenHygiene closes an open freeze of a frozen bucket's copy: done when
// the peer is no holder any more, failed when it cannot run (fail).
func (p *planner) frozenHygiene(t *Task, fail string) {
	fz, ok := p.sim.d.Frozen[t.Bucket]
	switch {
	case !ok || !slices.Contains(fz.Holders, t.Target):
		p.emit(&FixupDone{ID: t.ID, Reason: "already done"})
	case fail != "":
		p.emit(&FixupDone{ID: t.ID, Failed: true, Reason: fail})
	}
}
