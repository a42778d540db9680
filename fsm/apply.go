package fsm

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// The dispatch table: one handler per command type, registered once.
func init() {
	register(CmdSetConfig, (*State).applySetConfig)
	register(CmdRegisterPeer, (*State).applyRegisterPeer)
	register(CmdPeerDown, (*State).applyPeerDown)
	register(CmdSetPeerState, (*State).applySetPeerState)
	register(CmdAddBucket, (*State).applyAddBucket)
	register(CmdAddCopy, (*State).applyAddCopy)
	register(CmdCopySearchable, (*State).applyCopySearchable)
	register(CmdRemoveCopy, (*State).applyRemoveCopy)
	register(CmdRollBucket, (*State).applyRollBucket)
	register(CmdSealBucket, (*State).applySealBucket)
	register(CmdCreateFixup, (*State).applyCreateFixup)
	register(CmdFixupDone, (*State).applyFixupDone)
	register(CmdSetMaintenance, (*State).applySetMaintenance)
	register(CmdRebalancePrimaries, (*State).applyRebalancePrimaries)
	register(CmdPeerOffline, (*State).applyPeerOffline)
	register(CmdMarkCorrupt, (*State).applyMarkCorrupt)
	register(CmdCopyLength, (*State).applyCopyLength)
	register(CmdCopyShort, (*State).applyCopyShort)
	register(CmdExtendSeal, (*State).applyExtendSeal)
}

// removeBucket deletes a bucket (frozen) and its open tasks.
func (s *State) removeBucket(ch *change, b *Bucket) {
	for _, t := range sortedKeys(b.Primary) {
		s.incPrimary(t, b.Primary[t], -1)
		// Kept so PrimariesAt can undo the removal; not a primary move.
		ch.deltas = append(ch.deltas, Delta{Version: ch.idx, Site: t, Bucket: b.ID, Old: b.Primary[t]})
	}
	for _, p := range sortedKeys(b.Copies) {
		s.dropCopy(b, p)
	}
	s.deleteBucket(b.ID)
	for _, id := range sortedTaskIDs(s.d.Tasks) {
		if s.d.Tasks[id].Bucket == b.ID {
			delete(s.d.Tasks, id)
		}
	}
	ch.deltas = append(ch.deltas, Delta{Version: ch.idx, Bucket: b.ID, Removed: true})
}

func (s *State) peer(id string) (*Peer, error) {
	p, ok := s.d.Peers[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPeer, id)
	}
	return p, nil
}

func (s *State) bucket(id string) (*Bucket, error) {
	b, ok := s.edit(id)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownBucket, id)
	}
	return b, nil
}

func (s *State) copyOf(bucket, peer string) (*Bucket, *Copy, error) {
	b, err := s.bucket(bucket)
	if err != nil {
		return nil, nil, err
	}
	c, ok := b.Copies[peer]
	if !ok {
		return nil, nil, fmt.Errorf("%w: bucket %q on peer %q", ErrUnknownCopy, bucket, peer)
	}
	return b, c, nil
}

func (s *State) indexKnown(name string) bool {
	_, ok := slices.BinarySearch(s.d.Indexes, name)
	return ok
}

func (s *State) addIndex(name string) {
	if i, ok := slices.BinarySearch(s.d.Indexes, name); !ok {
		s.d.Indexes = slices.Insert(s.d.Indexes, i, name)
	}
}

// ---- handlers ----

func (s *State) applySetConfig(idx uint64, c *SetConfig) (any, error) {
	cfg := c.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Multisite() {
		for _, id := range sortedKeys(s.d.Peers) {
			p := s.d.Peers[id]
			if p.State != StateRemoved && !slices.Contains(cfg.Sites, p.Site) {
				return nil, badConfig("sites %v: peer %s is on site %q, which is not among them", cfg.Sites, id, p.Site)
			}
		}
	}
	ch := s.begin(idx)
	s.d.Config = cfg
	clear(s.needs) // needsOf depends on the config
	s.d.Config.Sites = slices.Clone(cfg.Sites)
	sort.Strings(s.d.Config.Sites)
	for _, ic := range cfg.Indexes {
		s.addIndex(ic.Name)
	}
	for _, id := range s.bucketIDs() {
		b, _ := s.edit(id)
		if o, ok := s.d.Peers[b.Origin]; ok {
			b.OriginSite = s.peerSite(o)
		} else if !cfg.Multisite() {
			b.OriginSite = DefaultSite
		}
	}
	// The tables may have changed (sites added or gone): recount and reassign.
	s.reassignAll(ch)
	s.commit(ch)
	return nil, nil
}

func (s *State) applyRegisterPeer(idx uint64, c *RegisterPeer) (any, error) {
	inv, err := s.checkRegistration(c)
	if err != nil {
		return nil, err
	}

	ch := s.begin(idx)
	p, returning := s.d.Peers[c.ID]
	if !returning {
		p = &Peer{ID: c.ID}
		s.d.Peers[c.ID] = p
	}
	p.GUID, p.Site, p.Host = c.GUID, c.Site, c.Host
	p.Attrs = maps.Clone(c.Attrs)
	if len(p.Attrs) == 0 {
		p.Attrs = nil
	}
	p.State = StateUp
	if p.Detention != "" {
		p.State = StateDetention // detention outlives a restart (detention.go)
	}
	p.Since = c.At.UnixNano()
	p.Registered = idx
	// A new GUID under a known id means a new disk: the inventory is all it
	// holds, like any other registration.

	// Copies the peer no longer reports are gone.
	for _, id := range s.bucketsOn(c.ID) {
		b, _ := s.edit(id)
		if _, ok := b.Copies[c.ID]; ok {
			if _, still := inv[id]; !still {
				// Also the origin's copy of a hot bucket: it can no longer
				// be the pinned primary, and streaming fixup seals the
				// bucket from the surviving copies.
				s.mutateBucket(ch, b, func() { s.dropCopy(b, c.ID) })
			}
		}
	}
	// Copies of frozen buckets never rejoin the table (frozen.go).
	s.frozenAtRegister(c.ID, inv)
	// Copies it reports count again; unknown buckets join the table warm,
	// but for a hot bucket reported by its own origin: the origin is
	// indexing it now (a restart rolls every hot bucket), so it joins hot,
	// its primaries pinned to the origin, and a targets request for it is
	// answered (manager: existingHotBucket) — it registered before its
	// targets request was answered, as a leader change can make it.
	// A claimed copy the managers cannot vouch for is ignored (inventory.go).
	tasks := s.taskBucketsFor(c.ID)
	for _, bid := range sortedKeys(inv) {
		ci := inv[bid]
		known, ok := s.lookup(bid)
		if !ok {
			s.joinReported(ch, c, p, bid, ci)
			continue
		}
		if !s.vouches(known, c.ID, c.GUID, tasks) {
			continue
		}
		b, _ := s.edit(bid)
		s.mutateBucket(ch, b, func() { s.adoptReportedCopy(ch, b, c, p, ci) })
	}
	// The peer is Up again: its buckets' primaries are recomputed (fill-ins
	// move back, hot primaries return to their origin), then rebalanced once.
	s.reassignPeer(ch, c.ID)
	if returning {
		s.rebalance(ch)
	}
	ch.table = true
	s.commit(ch)
	return nil, nil
}

// checkRegistration refuses a registration the state cannot take (no id or
// guid, a bad site, a guid of another peer, an inventory naming a bucket
// twice or an unknown bucket with a bad id) and returns its inventory by
// bucket.
func (s *State) checkRegistration(c *RegisterPeer) (map[string]CopyInfo, error) {
	if c.ID == "" || c.GUID == "" {
		return nil, fmt.Errorf("register peer %q guid %q: id and guid are required", c.ID, c.GUID)
	}
	if c.Site == Site0 {
		return nil, fmt.Errorf("%w: register peer %s: site0 is the all-sites search affinity, not a peer's site", ErrBadSite, c.ID)
	}
	if s.d.Config.Multisite() && !slices.Contains(s.d.Config.Sites, c.Site) {
		return nil, fmt.Errorf("%w: register peer %s: site %q is not among the configured sites %v", ErrBadSite, c.ID, c.Site, s.d.Config.Sites)
	}
	for _, id := range sortedKeys(s.d.Peers) {
		if p := s.d.Peers[id]; id != c.ID && p.GUID == c.GUID {
			return nil, fmt.Errorf("%w: register peer %s: guid %s belongs to peer %s", ErrGUIDInUse, c.ID, c.GUID, id)
		}
	}
	inv := map[string]CopyInfo{}
	for _, ci := range c.Inventory {
		if _, dup := inv[ci.Bucket]; dup {
			return nil, fmt.Errorf("register peer %s: bucket %q twice in inventory", c.ID, ci.Bucket)
		}
		if _, ok := s.lookup(ci.Bucket); !ok {
			index, _, _, err := ParseBucketID(ci.Bucket)
			if err != nil {
				return nil, fmt.Errorf("register peer %s: inventory: %w", c.ID, err)
			}
			if ci.Index != "" && ci.Index != index {
				return nil, fmt.Errorf("%w: register peer %s: inventory bucket %q says index %q", ErrBadBucketID, c.ID, ci.Bucket, ci.Index)
			}
		}
		inv[ci.Bucket] = ci
	}
	return inv, nil
}

// joinReported adds a bucket the state does not know from a registering
// peer's inventory: warm, or hot when its origin reports it.
func (s *State) joinReported(ch *change, c *RegisterPeer, p *Peer, bid string, ci CopyInfo) {
	index, _, guid, _ := ParseBucketID(bid)
	if s.ClusterVersion() < InventoryVersion || s.d.Config.AutoCreateIndexes { // inventory.go
		s.addIndex(index)
	}
	origin := ""
	for _, id := range sortedKeys(s.d.Peers) {
		if s.d.Peers[id].GUID == guid {
			origin = id
		}
	}
	b := &Bucket{ID: bid, Index: index, Origin: origin, Hot: ci.Hot && origin == c.ID, Earliest: ci.Earliest, Latest: ci.Latest,
		Size: ci.Size, Events: ci.Events, Created: ch.idx, Version: ch.idx,
		Copies: map[string]*Copy{}, Primary: map[string]string{}}
	if o, ok := s.d.Peers[origin]; ok {
		b.OriginSite = s.peerSite(o)
	} else {
		b.OriginSite = s.peerSite(p)
	}
	s.putBucket(b)
	s.addCopy(b, &Copy{Peer: c.ID, Searchable: ci.Searchable, Blocks: ci.Blocks, Corrupt: ci.Corrupt})
	s.bucketChanged(ch, b)
	s.reassign(ch, b)
}

// adoptReportedCopy takes a known bucket's copy from a registering peer's
// inventory (run inside mutateBucket).
func (s *State) adoptReportedCopy(ch *change, b *Bucket, c *RegisterPeer, p *Peer, ci CopyInfo) {
	cp, ok := b.Copies[c.ID]
	if !ok {
		cp = &Copy{Peer: c.ID}
		s.addCopy(b, cp)
	}
	s.adoptReported(ch, b, c, p, ci) // rebuild.go: a bucket rebuilt from inventories
	if b.Hot && b.Origin == c.ID && !ci.Hot && ci.Blocks > 0 {
		// The origin holds it warm: it rolled, and its report of the
		// roll was lost (a leader change, a cut bus node). Its copy
		// is the rolled length; the roll is applied here, so a
		// replica that missed the last blocks is no longer counted
		// whole as a hot copy (with its reported length it is a
		// shorter copy that fixup fetches into).
		b.Hot, b.Sealed, b.Blocks, b.LastChecksum = false, true, ci.Blocks, ""
		if ci.Events > 0 || ci.Latest > 0 {
			b.Earliest, b.Latest, b.Size, b.Events = ci.Earliest, ci.Latest, ci.Size, ci.Events
		}
		s.bucketChanged(ch, b)
	}
	cp.Searchable = ci.Searchable || (b.Hot && b.Origin == c.ID)
	if b.Sealed && b.confirmSeal(cp, ci.Blocks) {
		s.bucketChanged(ch, b)
	}
	if cp.Blocks != ci.Blocks {
		// The inventory carries no checksum, and 0 is "unknown".
		cp.Blocks, cp.LastChecksum, cp.LengthKnown = ci.Blocks, "", false
	}
	cp.Corrupt = ci.Corrupt
}

// setState changes a peer's state and recomputes its buckets' primaries.
func (s *State) setState(ch *change, p *Peer, st PeerState, at int64) {
	if p.State == st {
		return
	}
	p.State = st
	p.Since = at
	ch.table = true
	if st == StateRemoved {
		s.forgetFrozenHolder(p.ID)
		for _, id := range s.bucketsOn(p.ID) {
			b, _ := s.edit(id)
			s.mutateBucket(ch, b, func() {
				s.dropCopy(b, p.ID)
				if b.releaseSeal() {
					s.bucketChanged(ch, b)
				}
			})
		}
		return
	}
	s.reassignPeer(ch, p.ID)
}

func (s *State) applyPeerDown(idx uint64, c *PeerDown) (any, error) {
	p, err := s.peer(c.ID)
	if err != nil {
		return nil, err
	}
	if p.State == StateRemoved {
		return nil, fmt.Errorf("%w: peer down %s: the peer was removed", ErrBadState, c.ID)
	}
	if c.Registered != 0 && c.Registered != p.Registered {
		// It registered again after the planner judged it (PeerDown.Registered).
		return nil, fmt.Errorf("%w: peer down %s: it registered again (index %d) after the registration judged (%d)", ErrBadState, c.ID, p.Registered, c.Registered)
	}
	ch := s.begin(idx)
	s.setState(ch, p, StateDown, c.At.UnixNano())
	s.commit(ch)
	return nil, nil
}

func (s *State) applySetPeerState(idx uint64, c *SetPeerState) (any, error) {
	p, err := s.peer(c.ID)
	if err != nil {
		return nil, err
	}
	if !c.State.Valid() {
		return nil, fmt.Errorf("%w: set peer %s state %q", ErrBadState, c.ID, c.State)
	}
	if p.State == StateRemoved && c.State != StateRemoved {
		return nil, fmt.Errorf("%w: set peer %s state %s: a removed peer comes back only by registering", ErrBadState, c.ID, c.State)
	}
	ch := s.begin(idx)
	s.setDetentionFlag(ch, p, c.State)
	s.setState(ch, p, c.State, c.At.UnixNano())
	s.commit(ch)
	return nil, nil
}

func (s *State) applyAddBucket(idx uint64, c *AddBucket) (any, error) {
	index, _, guid, err := ParseBucketID(c.ID)
	if err != nil {
		return nil, fmt.Errorf("add bucket: %w", err)
	}
	if _, ok := s.lookup(c.ID); ok {
		return nil, fmt.Errorf("%w: %q", ErrBucketExists, c.ID)
	}
	if c.Index != index {
		return nil, fmt.Errorf("%w: bucket %q is not of index %q", ErrBadBucketID, c.ID, c.Index)
	}
	o, err := s.peer(c.Origin)
	if err != nil {
		return nil, fmt.Errorf("add bucket %q: origin: %w", c.ID, err)
	}
	if o.GUID != guid {
		return nil, fmt.Errorf("%w: bucket %q does not carry origin %s's guid %s", ErrBadBucketID, c.ID, o.ID, o.GUID)
	}
	if o.State != StateUp {
		return nil, fmt.Errorf("%w: add bucket %q: origin %s is %s", ErrPeerNotUp, c.ID, o.ID, o.State)
	}
	if !s.indexKnown(index) && !s.d.Config.AutoCreateIndexes {
		return nil, fmt.Errorf("%w: add bucket %q: index %q", ErrUnknownIndex, c.ID, index)
	}
	seen := map[string]bool{c.Origin: true}
	for _, t := range c.Targets {
		tp, err := s.peer(t.Peer)
		if err != nil {
			return nil, fmt.Errorf("add bucket %q: target: %w", c.ID, err)
		}
		if seen[t.Peer] {
			return nil, fmt.Errorf("%w: add bucket %q: two copies on peer %s", ErrCopyExists, c.ID, t.Peer)
		}
		seen[t.Peer] = true
		if tp.State != StateUp {
			return nil, fmt.Errorf("%w: add bucket %q: target %s is %s", ErrPeerNotUp, c.ID, t.Peer, tp.State)
		}
	}
	ch := s.begin(idx)
	s.addIndex(index)
	b := &Bucket{ID: c.ID, Index: index, Origin: c.Origin, OriginSite: s.peerSite(o), Hot: true,
		Earliest: c.Earliest, Latest: c.Earliest, Degraded: c.Degraded, Created: idx,
		Copies: map[string]*Copy{}, Primary: map[string]string{}}
	s.putBucket(b)
	s.addCopy(b, &Copy{Peer: c.Origin, Searchable: true})
	for _, t := range c.Targets {
		s.addCopy(b, &Copy{Peer: t.Peer, Searchable: t.Searchable})
	}
	s.bucketChanged(ch, b)
	s.reassign(ch, b)
	s.commit(ch)
	return nil, nil
}

func (s *State) applyAddCopy(idx uint64, c *AddCopy) (any, error) {
	if fz, ok := s.d.Frozen[c.Bucket]; ok {
		return s.frozenCopyAdded(fz, c.Peer) // frozen.go
	}
	b, err := s.bucket(c.Bucket)
	if err != nil {
		return nil, err
	}
	p, err := s.peer(c.Peer)
	if err != nil {
		return nil, err
	}
	if p.State == StateRemoved {
		return nil, fmt.Errorf("%w: add copy of %q on %s: the peer was removed", ErrPeerNotUp, c.Bucket, c.Peer)
	}
	if _, ok := b.Copies[c.Peer]; ok {
		return nil, fmt.Errorf("%w: bucket %q on peer %s", ErrCopyExists, c.Bucket, c.Peer)
	}
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() {
		s.addCopy(b, &Copy{Peer: c.Peer, Searchable: c.Searchable, Blocks: c.Blocks})
	})
	ch.table = true
	s.commit(ch)
	return nil, nil
}

func (s *State) applyCopySearchable(idx uint64, c *CopySearchable) (any, error) {
	b, cp, err := s.copyOf(c.Bucket, c.Peer)
	if err != nil {
		return nil, err
	}
	if !c.Searchable && b.Hot && b.Origin == c.Peer {
		return nil, fmt.Errorf("%w: make %q on %s non-searchable", ErrHotOrigin, c.Bucket, c.Peer)
	}
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() { cp.Searchable = c.Searchable })
	s.commit(ch)
	return nil, nil
}

func (s *State) applyRemoveCopy(idx uint64, c *RemoveCopy) (any, error) {
	b, _, err := s.copyOf(c.Bucket, c.Peer)
	if err != nil {
		return nil, err
	}
	if b.Hot && b.Origin == c.Peer {
		return nil, fmt.Errorf("%w: remove %q from %s", ErrHotOrigin, c.Bucket, c.Peer)
	}
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() { s.dropCopy(b, c.Peer) })
	ch.table = true
	s.commit(ch)
	return nil, nil
}

func (s *State) applyRollBucket(idx uint64, c *RollBucket) (any, error) {
	b, err := s.bucket(c.Bucket)
	if err != nil {
		return nil, err
	}
	if c.Origin != "" && c.Origin != b.Origin {
		return nil, fmt.Errorf("%w: %s may not roll %q (origin %s)", ErrNotOrigin, c.Origin, c.Bucket, b.Origin)
	}
	if !b.Hot {
		return nil, fmt.Errorf("%w: roll %q", ErrBucketNotHot, c.Bucket)
	}
	if c.Latest < c.Earliest {
		return nil, fmt.Errorf("roll %q: latest %d before earliest %d", c.Bucket, c.Latest, c.Earliest)
	}
	ch := s.begin(idx)
	b.Hot = false
	b.Earliest, b.Latest, b.Size, b.Events = c.Earliest, c.Latest, c.Size, c.Events
	if c.Blocks > 0 {
		b.Sealed, b.Blocks, b.LastChecksum = true, c.Blocks, c.LastChecksum
		if oc, ok := b.Copies[b.Origin]; ok {
			oc.setLength(c.Blocks, c.LastChecksum)
		}
	}
	s.bucketChanged(ch, b)
	// Unpinned now; primaries stay where they are unless they must move.
	s.reassign(ch, b)
	s.commit(ch)
	return nil, nil
}

func (s *State) applySealBucket(idx uint64, c *SealBucket) (any, error) {
	b, err := s.bucket(c.Bucket)
	if err != nil {
		return nil, err
	}
	if c.Blocks < 0 {
		return nil, fmt.Errorf("seal %q: %d blocks", c.Bucket, c.Blocks)
	}
	if b.Sealed && (b.Blocks != c.Blocks || b.LastChecksum != c.LastChecksum) {
		return nil, fmt.Errorf("%w: seal %q at %d blocks: already sealed at %d", ErrBucketNotHot, c.Bucket, c.Blocks, b.Blocks)
	}
	if err := checkLengths(c); err != nil {
		return nil, err
	}
	ch := s.begin(idx)
	if !b.Sealed {
		// A repeated seal at the same length leaves the copies alone: their
		// lengths may have moved on (fetched, truncated) since.
		for _, l := range c.Lengths {
			if cp, ok := b.Copies[l.Peer]; ok {
				cp.setLength(l.Blocks, l.LastChecksum)
			}
		}
	}
	if !b.Sealed {
		// Judged on the state this entry applies to, not on c.Final (the
		// manager's view when it proposed): a short report applied in
		// between must make the seal provisional. A seal without lengths
		// (an older body) names no holder and is not provisional.
		holders := make([]string, 0, len(c.Lengths))
		for _, l := range c.Lengths {
			holders = append(holders, l.Peer)
		}
		b.Provisional = s.ClusterVersion() >= SealFinalVersion && len(holders) > 0 && !s.SealAnsweredWhole(b.ID, holders)
	}
	b.Hot = false
	b.Sealed, b.Blocks, b.LastChecksum = true, c.Blocks, c.LastChecksum
	b.takeExtent(c.Earliest, c.Latest, c.Size, c.Events)
	s.bucketChanged(ch, b)
	s.reassign(ch, b)
	s.commit(ch)
	return nil, nil
}

// checkLengths refuses per-holder lengths that are not what the seal was
// computed from: a bad entry, a holder twice, a longest length other than
// the sealed one, or no holder at the sealed length with its checksum.
func checkLengths(c *SealBucket) error {
	if len(c.Lengths) == 0 {
		return nil
	}
	seen := map[string]bool{}
	var longest int64
	match := false
	for _, l := range c.Lengths {
		if l.Peer == "" || l.Blocks < 0 {
			return fmt.Errorf("seal %q: length %+v: a peer and blocks >= 0 are required", c.Bucket, l)
		}
		if seen[l.Peer] {
			return fmt.Errorf("seal %q: peer %s listed twice", c.Bucket, l.Peer)
		}
		seen[l.Peer] = true
		longest = max(longest, l.Blocks)
		match = match || (l.Blocks == c.Blocks && l.LastChecksum == c.LastChecksum)
	}
	if longest != c.Blocks || !match {
		return fmt.Errorf("seal %q at %d blocks (checksum %q): not the longest of the lengths %+v", c.Bucket, c.Blocks, c.LastChecksum, c.Lengths)
	}
	return nil
}

// taskKey identifies the work of a task, so the same work is never open twice.
func sameWork(t *Task, kind TaskKind, bucket, target string) bool {
	return t.Kind == kind && t.Bucket == bucket && t.Target == target
}

func (s *State) applyCreateFixup(idx uint64, c *CreateFixup) (any, error) {
	if c.Kind == TaskFreeze && c.Target != "" {
		return s.createFrozenFixup(idx, c) // one holder's copy of a frozen bucket (frozen.go)
	}
	b, err := s.bucket(c.Bucket)
	if err != nil {
		return nil, fmt.Errorf("create fixup: %w", err)
	}
	if _, ok := levelNames[c.Level]; !ok {
		return nil, fmt.Errorf("%w: level %d", ErrBadTask, c.Level)
	}
	needTarget, needSource := false, false
	switch c.Kind {
	case TaskSeal, TaskFreeze:
	case TaskReplicate, TaskFetch:
		needTarget, needSource = true, true
	case TaskMakeSearchable, TaskRemoveCopy, TaskTruncate, TaskRoll:
		needTarget = true
	default:
		return nil, fmt.Errorf("%w: kind %q", ErrBadTask, c.Kind)
	}
	if needTarget {
		if _, err := s.peer(c.Target); err != nil {
			return nil, fmt.Errorf("create %s fixup of %q: target: %w", c.Kind, c.Bucket, err)
		}
	}
	if needSource {
		if _, _, err := s.copyOf(c.Bucket, c.Source); err != nil {
			return nil, fmt.Errorf("create %s fixup: source: %w", c.Kind, err)
		}
	}
	switch c.Kind {
	case TaskReplicate:
		if _, ok := b.Copies[c.Target]; ok {
			return nil, fmt.Errorf("%w: replicate %q to %s: it holds a copy", ErrBadTask, c.Bucket, c.Target)
		}
	case TaskMakeSearchable, TaskRemoveCopy, TaskTruncate:
		if _, _, err := s.copyOf(c.Bucket, c.Target); err != nil {
			return nil, fmt.Errorf("create %s fixup: %w", c.Kind, err)
		}
		if c.Kind == TaskRemoveCopy && b.Hot && b.Origin == c.Target {
			return nil, fmt.Errorf("%w: remove %q from %s", ErrHotOrigin, c.Bucket, c.Target)
		}
	case TaskRoll:
		if !b.Hot || b.Origin != c.Target {
			return nil, fmt.Errorf("%w: roll %q on %s: only a hot bucket's origin rolls it", ErrBadTask, c.Bucket, c.Target)
		}
	}
	// The lowest id of a task doing the same work, found without sorting
	// every open task at every creation (the pass after a peer failure at
	// a million buckets creates ~1,500).
	var dup uint64
	for id, t := range s.d.Tasks { // any order: the lowest id is kept
		if (dup == 0 || id < dup) && sameWork(t, c.Kind, c.Bucket, c.Target) {
			dup = id
		}
	}
	if dup != 0 {
		return nil, fmt.Errorf("%w: task %d already does %s of %q on %q", ErrTaskExists, dup, c.Kind, c.Bucket, c.Target)
	}
	s.d.Tasks[idx] = &Task{ID: idx, Kind: c.Kind, Level: c.Level, Bucket: c.Bucket, Source: c.Source,
		Target: c.Target, Searchable: c.Searchable, Destructive: c.Kind.Destructive(), Reason: c.Reason,
		Created: c.At.UnixNano()}
	return Result{Index: idx, Generation: s.d.Generation}, nil
}

func (s *State) applyFixupDone(idx uint64, c *FixupDone) (any, error) {
	t, ok := s.d.Tasks[c.ID]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownTask, c.ID)
	}
	ch := s.begin(idx)
	delete(s.d.Tasks, c.ID)
	if !c.Failed {
		if b, ok := s.edit(t.Bucket); ok {
			s.taskEffect(ch, t, b)
		} else {
			s.frozenTaskDone(t)
		}
	}
	s.commit(ch)
	return nil, nil
}

// taskEffect applies a finished task's effect, idempotently.
func (s *State) taskEffect(ch *change, t *Task, b *Bucket) {
	switch t.Kind {
	case TaskReplicate:
		p, ok := s.d.Peers[t.Target]
		if !ok || p.State == StateRemoved {
			return
		}
		s.mutateBucket(ch, b, func() {
			cp, ok := b.Copies[t.Target]
			if !ok {
				cp = &Copy{Peer: t.Target}
				if b.Sealed {
					cp.setLength(b.Blocks, b.LastChecksum)
				}
				s.addCopy(b, cp)
			}
			cp.Searchable = cp.Searchable || t.Searchable
		})
		ch.table = true
	case TaskMakeSearchable:
		if cp, ok := b.Copies[t.Target]; ok {
			s.mutateBucket(ch, b, func() { cp.Searchable = true })
		}
	case TaskRemoveCopy:
		if _, ok := b.Copies[t.Target]; ok && !(b.Hot && b.Origin == t.Target) {
			s.mutateBucket(ch, b, func() { s.dropCopy(b, t.Target) })
			ch.table = true
		}
	case TaskTruncate, TaskFetch:
		if cp, ok := b.Copies[t.Target]; ok && b.Sealed {
			s.mutateBucket(ch, b, func() {
				cp.setLength(b.Blocks, b.LastChecksum)
				cp.Short = false
			})
		}
	case TaskFreeze:
		s.freezeBucket(ch, b) // leaves a tombstone (frozen.go)
	case TaskSeal:
		// SealBucket commits the length; nothing more.
	}
}

func (s *State) applySetMaintenance(idx uint64, c *SetMaintenance) (any, error) {
	s.d.Maintenance = c.Enabled
	return nil, nil
}

func (s *State) applyRebalancePrimaries(idx uint64, c *RebalancePrimaries) (any, error) {
	ch := s.begin(idx)
	s.rebalance(ch)
	s.commit(ch)
	return nil, nil
}

func (s *State) applyPeerOffline(idx uint64, c *PeerOffline) (any, error) {
	p, err := s.peer(c.ID)
	if err != nil {
		return nil, err
	}
	if !p.State.Serving() && !(c.EnforceCounts && p.State == StateRestarting) {
		return nil, fmt.Errorf("%w: offline %s: the peer is %s", ErrBadState, c.ID, p.State)
	}
	st := StateRestarting
	if c.EnforceCounts {
		st = StateDecommissioning
	}
	ch := s.begin(idx)
	s.setState(ch, p, st, c.At.UnixNano())
	s.commit(ch)
	return nil, nil
}

func (s *State) applyMarkCorrupt(idx uint64, c *MarkCorrupt) (any, error) {
	b, cp, err := s.copyOf(c.Bucket, c.Peer)
	if err != nil {
		return nil, err
	}
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() { cp.Corrupt = true })
	ch.table = true
	s.commit(ch)
	return nil, nil
}

func (s *State) applyCopyShort(idx uint64, c *CopyShort) (any, error) {
	b, cp, err := s.copyOf(c.Bucket, c.Peer)
	if err != nil {
		return nil, err
	}
	if c.Peer == b.Origin {
		return nil, fmt.Errorf("copy short %q on %s: the origin's copy is never short of its own blocks", c.Bucket, c.Peer)
	}
	if b.Sealed && c.Short && s.ClusterVersion() >= SealFinalVersion && !b.Provisional {
		// The seal was answered by copies not known short, this one among
		// them or its peers: it holds every block acknowledged so far. An
		// origin told "short" now would acknowledge past it, on copies the
		// seal leaves out, and the truncate would lose those events: it is
		// refused, and the origin acknowledges nothing more without the
		// target (peer reportShort).
		return nil, fmt.Errorf("%w: copy short %q on %s: the bucket is sealed at %d blocks, final", ErrBucketNotHot, c.Bucket, c.Peer, b.Blocks)
	}
	if b.Sealed && (!c.Short || (cp.known() && cp.atSealed(b))) {
		return nil, nil // the copy's length report decides (see CopyShort)
	}
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() { cp.Short = c.Short })
	s.commit(ch)
	return nil, nil
}

func (s *State) applyCopyLength(idx uint64, c *CopyLength) (any, error) {
	b, cp, err := s.copyOf(c.Bucket, c.Peer)
	if err != nil {
		return nil, err
	}
	if !b.Sealed {
		return nil, fmt.Errorf("%w: length of %q on %s", ErrNotSealed, c.Bucket, c.Peer)
	}
	if c.Blocks < 0 {
		return nil, fmt.Errorf("length of %q on %s: %d blocks", c.Bucket, c.Peer, c.Blocks)
	}
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() {
		if b.confirmSeal(cp, c.Blocks) {
			s.bucketChanged(ch, b)
		}
		cp.setLength(c.Blocks, c.LastChecksum)
		if cp.atSealed(b) {
			cp.Short = false
		}
	})
	s.commit(ch)
	if cp.atSealed(b) {
		// The work of the copy's fetch or truncate is done: close it here,
		// so no state has the length right and the task open.
		for _, id := range sortedTaskIDs(s.d.Tasks) {
			t := s.d.Tasks[id]
			if t.Bucket == b.ID && t.Target == c.Peer && (t.Kind == TaskFetch || t.Kind == TaskTruncate) {
				delete(s.d.Tasks, id)
			}
		}
	}
	return nil, nil
}

func (s *State) applyExtendSeal(idx uint64, c *ExtendSeal) (any, error) {
	b, cp, err := s.copyOf(c.Bucket, c.Peer)
	if err != nil {
		return nil, err
	}
	if !b.Sealed {
		return nil, fmt.Errorf("%w: extend %q from %s", ErrNotSealed, c.Bucket, c.Peer)
	}
	if c.From <= 0 || c.FromChecksum == "" || c.Blocks <= c.From || c.LastChecksum == "" {
		return nil, fmt.Errorf("extend %q from %s: %d blocks (checksum %q) from %d (checksum %q): a longer length and both checksums are required",
			c.Bucket, c.Peer, c.Blocks, c.LastChecksum, c.From, c.FromChecksum)
	}
	if b.Blocks == c.Blocks && b.LastChecksum == c.LastChecksum {
		// Another copy extended the seal to exactly this copy's length
		// first: this copy is at the seal. Recorded as its length report
		// (CopyLength), which may confirm a provisional seal at once
		// rather than after one more fixup round.
		return s.atExtendedSeal(idx, b, cp, c)
	}
	if b.Blocks != c.From || b.LastChecksum != c.FromChecksum {
		return nil, fmt.Errorf("%w: extend %q from %d blocks (checksum %q): sealed at %d (checksum %q)",
			ErrSealMoved, c.Bucket, c.From, c.FromChecksum, b.Blocks, b.LastChecksum)
	}
	if s.ClusterVersion() >= SealFinalVersion && !b.Provisional {
		return nil, fmt.Errorf("%w: extend %q from %d to %d blocks: a copy holding every acknowledged block answered the seal, so the blocks past it were never acknowledged; the longer copy is truncated",
			ErrSealFinal, c.Bucket, c.From, c.Blocks)
	}
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() {
		if !cp.Short {
			b.Provisional = false // the copy held every acknowledged block
		}
		b.Blocks, b.LastChecksum = c.Blocks, c.LastChecksum
		b.takeExtent(c.Earliest, c.Latest, c.Size, c.Events)
		cp.setLength(c.Blocks, c.LastChecksum)
		cp.Short = false
	})
	s.bucketChanged(ch, b)
	// The bucket's fetch and truncate tasks were computed for the old
	// length (a fetch's FixupDone would record the new one): closed here;
	// the planner opens what the new length needs.
	for _, id := range sortedTaskIDs(s.d.Tasks) {
		if t := s.d.Tasks[id]; t.Bucket == b.ID && (t.Kind == TaskFetch || t.Kind == TaskTruncate) {
			delete(s.d.Tasks, id)
		}
	}
	// Searches may have used the bucket at the old length: a new
	// generation, even where no primary had to move (rule 1, amended).
	ch.moved = true
	s.commit(ch)
	return nil, nil
}

// atExtendedSeal records that copy cp, asking to extend the seal, is
// already at it: its length, the seal confirmed when cp is not known short,
// and its open fetch and truncate closed.
func (s *State) atExtendedSeal(idx uint64, b *Bucket, cp *Copy, c *ExtendSeal) (any, error) {
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() {
		if b.confirmSeal(cp, c.Blocks) {
			s.bucketChanged(ch, b)
		}
		cp.setLength(c.Blocks, c.LastChecksum)
		cp.Short = false
	})
	for _, id := range sortedTaskIDs(s.d.Tasks) {
		if t := s.d.Tasks[id]; t.Bucket == b.ID && t.Target == c.Peer && (t.Kind == TaskFetch || t.Kind == TaskTruncate) {
			delete(s.d.Tasks, id)
		}
	}
	s.commit(ch)
	return nil, nil
}

// takeExtent sets a bucket's time range, size and event count from a seal
// or a seal extension, each only when the command carries it (zero: not
// said, an older or shorter report).
func (b *Bucket) takeExtent(earliest, latest, size, events int64) {
	if latest != 0 || earliest != 0 {
		b.Earliest, b.Latest = earliest, latest
	}
	if size != 0 {
		b.Size = size
	}
	if events != 0 {
		b.Events = events
	}
}
