package fsm

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync/atomic"
)

// The dispatch table: one handler per command type, registered once.
func init() {
	register(CmdSetConfig, "set_config", (*State).applySetConfig)
	register(CmdRegisterPeer, "register_peer", (*State).applyRegisterPeer)
	register(CmdPeerDown, "peer_down", (*State).applyPeerDown)
	register(CmdSetPeerState, "set_peer_state", (*State).applySetPeerState)
	register(CmdAddBucket, "add_bucket", (*State).applyAddBucket)
	register(CmdAddCopy, "add_copy", (*State).applyAddCopy)
	register(CmdCopySearchable, "copy_searchable", (*State).applyCopySearchable)
	register(CmdRemoveCopy, "remove_copy", (*State).applyRemoveCopy)
	register(CmdRollBucket, "roll_bucket", (*State).applyRollBucket)
	register(CmdSealBucket, "seal_bucket", (*State).applySealBucket)
	register(CmdCreateFixup, "create_fixup", (*State).applyCreateFixup)
	register(CmdFixupDone, "fixup_done", (*State).applyFixupDone)
	register(CmdSetMaintenance, "set_maintenance", (*State).applySetMaintenance)
	register(CmdRebalancePrimaries, "rebalance_primaries", (*State).applyRebalancePrimaries)
	register(CmdPeerOffline, "peer_offline", (*State).applyPeerOffline)
	register(CmdMarkCorrupt, "mark_corrupt", (*State).applyMarkCorrupt)
	register(CmdCopyLength, "copy_length", (*State).applyCopyLength)
	register(CmdCopyShort, "copy_short", (*State).applyCopyShort)
	register(CmdExtendSeal, "extend_seal", (*State).applyExtendSeal)
}

// change tracks what one entry changed, so the generation rule is applied
// once at its end: a new generation begins exactly when an existing bucket's
// primary changed (any table) or the set of serving peers changed.
type change struct {
	idx    uint64
	moved  bool    // an existing bucket's primary changed
	deltas []Delta // Generation filled at commit
	table  bool    // something visible in the generation table changed
}

// begin starts tracking an entry's changes.
func (s *State) begin(idx uint64) *change { return &change{idx: idx} }

// commit applies the generation rule and records the deltas.
func (s *State) commit(ch *change) {
	if ch.moved || s.servingChanged() {
		s.d.Generation = ch.idx
		s.d.UpSet = s.servingSet()
		ch.table = true
	}
	if len(ch.deltas) > 0 {
		ch.table = true
	}
	if ch.table {
		s.d.TableVersion = ch.idx
	}
	for i := range ch.deltas {
		ch.deltas[i].Generation = s.d.Generation
	}
	s.d.History = append(s.d.History, ch.deltas...)
	s.trimHistory()
}

// trimHistory keeps the deltas of the last HistoryGenerations generations,
// and at most maxHistoryDeltas deltas; HistoryFloor remembers the newest
// version dropped, below which a since-query gets the full table.
//
// It runs at every commit, so it costs O(HistoryGenerations · log n), not
// O(n): the history is in nondecreasing generation order (a delta takes
// the generation current at its commit, and generations only grow), so the
// start of each of the last generations is found by binary search, and the
// cut reslices instead of copying (append reallocates once the capacity is
// spent, copying only the kept deltas, so the dropped prefix is freed then
// and the cost is amortised). Scanning and copying the whole history here
// made every command of a long generation cost O(history): building 20,000
// buckets took 5.3 s, growing quadratically (fsm/scale_test.go).
func (s *State) trimHistory() {
	h := s.d.History
	cut := 0
	end := len(h) // the deltas before end are of older generations
	for gens := 0; end > 0; gens++ {
		if gens == HistoryGenerations {
			cut = end
			break
		}
		g := h[end-1].Generation
		end = sort.Search(end, func(i int) bool { return h[i].Generation >= g })
	}
	if len(h)-cut > maxHistoryDeltas {
		cut = len(h) - maxHistoryDeltas
	}
	if cut > 0 {
		s.d.HistoryFloor = max(s.d.HistoryFloor, h[cut-1].Version)
		s.d.History = h[cut:]
	}
}

// maxHistoryDeltas bounds the delta history however long a generation lives.
const maxHistoryDeltas = 200000

// servingChanged reports whether the set of serving peers differs from
// UpSet, without sorting or allocating (commit asks at every entry; sorting
// 300 peer ids each time was a third of an entry's cost).
func (s *State) servingChanged() bool {
	n := 0
	for id, p := range s.d.Peers {
		if !p.State.Serving() {
			continue
		}
		n++
		if _, found := slices.BinarySearch(s.d.UpSet, id); !found {
			return true
		}
	}
	return n != len(s.d.UpSet)
}

func (s *State) servingSet() []string {
	var out []string
	for _, id := range sortedKeys(s.d.Peers) {
		if s.d.Peers[id].State.Serving() {
			out = append(out, id)
		}
	}
	return out
}

// tables lists the primary tables: every site (DefaultSite when single-site)
// and Site0.
func (s *State) tables() []string {
	return append(s.d.Config.SiteNames(), Site0)
}

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

// setPrimary changes one table entry and records the delta.
func (s *State) setPrimary(ch *change, b *Bucket, table, peer string) {
	old := b.Primary[table]
	if old == peer {
		return
	}
	if old != "" {
		s.incPrimary(table, old, -1)
	}
	if peer == "" {
		delete(b.Primary, table)
	} else {
		b.Primary[table] = peer
		s.incPrimary(table, peer, 1)
	}
	if b.Created != ch.idx {
		ch.moved = true
	}
	ch.deltas = append(ch.deltas, Delta{Version: ch.idx, Site: table, Bucket: b.ID, Peer: peer, Old: old})
}

// bucketChanged records a change of a bucket's generation-table entry.
func (s *State) bucketChanged(ch *change, b *Bucket) {
	b.Version = ch.idx
	ch.deltas = append(ch.deltas, Delta{Version: ch.idx, Bucket: b.ID})
}

// healthy reports whether a copy counts: not corrupt, on a serving peer.
func (s *State) healthy(c *Copy) bool { return !c.Corrupt && s.serving(c.Peer) }

// candidates are the copies that may be primary: searchable, not corrupt,
// on a serving peer; sorted by peer id.
func (s *State) candidates(b *Bucket) []string { return s.appendCandidates(nil, b) }

// appendCandidates appends b's candidates to dst, sorted by peer id (the
// generation change of a peer holding 10,000 buckets calls it once per
// bucket, into a buffer on the stack).
func (s *State) appendCandidates(dst []string, b *Bucket) []string {
	n := len(dst)
	for p, c := range b.Copies { // any order: sorted below
		if usable(b, c) && s.serving(c.Peer) {
			dst = append(dst, p)
		}
	}
	slices.Sort(dst[n:])
	return dst
}

func (s *State) siteOf(peer string) string {
	p, ok := s.d.Peers[peer]
	if !ok {
		return ""
	}
	return s.peerSite(p)
}

// pinned reports whether a hot bucket's primary in table is pinned to its
// origin: the origin site's table and site0, while hot.
func (s *State) pinned(b *Bucket, table string) bool {
	return b.Hot && (table == Site0 || table == b.OriginSite)
}

// appendSites appends the site of each peer to dst.
func (s *State) appendSites(dst []string, peers []string) []string {
	for _, p := range peers {
		dst = append(dst, s.siteOf(p))
	}
	return dst
}

// choosePrimaryAmong is rule 2, given b's candidates and their sites (the
// same for every table, so reassignIn computes them once). Pinned hot
// buckets: the origin copy when it is a candidate. Otherwise the current
// primary stays while it is a local candidate (primaries move only when
// they must). A lost primary, or a remote fill-in once the table's site
// has a candidate again, is replaced by the local candidate with the
// fewest primaries in this table, ties by peer id; with no local
// candidate, a remote fill-in chosen the same way among all candidates
// (kept while it stays a candidate).
func (s *State) choosePrimaryAmong(b *Bucket, table string, cands, sites []string) string {
	if len(cands) == 0 {
		return ""
	}
	if s.pinned(b, table) && slices.Contains(cands, b.Origin) {
		return b.Origin
	}
	pool := cands
	if table != Site0 {
		var buf [8]string
		local := buf[:0]
		for i, p := range cands {
			if sites[i] == table {
				local = append(local, p)
			}
		}
		if len(local) > 0 {
			pool = local
		}
	}
	if cur := b.Primary[table]; cur != "" && slices.Contains(pool, cur) {
		return cur
	}
	return s.fewestPrimaries(table, pool)
}

// fewestPrimaries picks from sorted peers the one with the fewest primaries
// in table; ties go to the lowest peer id.
func (s *State) fewestPrimaries(table string, peers []string) string {
	best, bestN := "", 0
	for _, p := range peers {
		n := s.primaryCount[table][p]
		if best == "" || n < bestN {
			best, bestN = p, n
		}
	}
	return best
}

// reassign recomputes a bucket's primaries in every table, dropping tables
// that no longer exist.
func (s *State) reassign(ch *change, b *Bucket) { s.reassignIn(ch, b, s.tables()) }

// reassignIn is reassign with the tables computed by the caller: a peer's
// generation change reassigns every bucket it holds (10,000 at a million
// buckets over 300 peers), so the per-bucket work allocates nothing in the
// common case (fsm/scale_test.go's peer-down).
func (s *State) reassignIn(ch *change, b *Bucket, tabs []string) {
	stale := false
	for t := range b.Primary { // any order: only whether one is stale
		if !slices.Contains(tabs, t) {
			stale = true
			break
		}
	}
	if stale {
		for _, t := range sortedKeys(b.Primary) {
			if !slices.Contains(tabs, t) {
				s.setPrimary(ch, b, t, "")
			}
		}
	}
	var buf, sbuf [8]string
	cands := s.appendCandidates(buf[:0], b)
	sites := s.appendSites(sbuf[:0], cands)
	for _, t := range tabs {
		s.setPrimary(ch, b, t, s.choosePrimaryAmong(b, t, cands, sites))
	}
}

// reassignPeer recomputes the primaries of every bucket with a copy on peer,
// in bucket-id order, after a change of the peer's state. Each bucket's
// derived records are refreshed right after its primaries, not at the end
// of the entry: a bucket's verdict depends on the bucket, the peers' states
// and sites and the config, and every later change of a peer or the
// config in the same entry edits the buckets it concerns again (the rule
// above refreshTouched), so the verdict is final unless the bucket is
// touched again. Refreshing while the bucket is in the CPU's caches, and
// not finding it again, cut a third of a generation change at a million
// buckets (fsm/scale_test.go's peer-down; the property test compares the
// derived records with a rebuild after every command).
func (s *State) reassignPeer(ch *change, peer string) {
	tabs := s.tables()
	ids := s.bucketsOn(peer)
	ch.deltas = slices.Grow(ch.deltas, len(ids))
	if s.needs == nil {
		s.needs = map[string]needs{}
	}
	s.reserveUnsettled(len(ids))
	// The records are found first, in a loop that does nothing else: the
	// CPU overlaps the independent cache misses of a million-entry map
	// (86 → ~40 ms for 10,000 buckets with the fused refresh above,
	// fsm/scale_test.go).
	bs := make([]*Bucket, len(ids))
	for i, id := range ids {
		bs[i], _ = s.editQuiet(id)
	}
	for i, id := range ids {
		s.reassignIn(ch, bs[i], tabs)
		s.refresh(id, bs[i], true)
	}
}

func (s *State) reassignAll(ch *change) {
	tabs := s.tables()
	for _, id := range s.bucketIDs() {
		b, _ := s.edit(id)
		s.reassignIn(ch, b, tabs)
	}
}

// usable reports whether a copy may answer searches for its bucket:
// searchable, not corrupt, not known short (CopyShort) and, once the
// bucket is sealed, not of a known length other than the sealed one (a
// shorter copy would miss acknowledged events, a longer one show events
// the others do not have; the planner's fetch or truncate fixes either,
// and its length report makes the copy usable again).
func usable(b *Bucket, c *Copy) bool {
	if !c.Searchable || c.Corrupt {
		return false
	}
	if b.Sealed {
		if c.known() {
			return c.atSealed(b)
		}
		return !c.Short
	}
	return !c.Short
}

// searchableSet is the bucket's searchable_on list (non-corrupt searchable
// copies, any peer state); a change of it is a table change.
func searchableSet(b *Bucket) []string {
	var out []string
	for _, p := range sortedKeys(b.Copies) {
		if usable(b, b.Copies[p]) {
			out = append(out, p)
		}
	}
	return out
}

// mutateBucket runs fn on a bucket and then records a table change if its
// searchable set changed, and recomputes its primaries.
func (s *State) mutateBucket(ch *change, b *Bucket, fn func()) {
	before := searchableSet(b)
	fn()
	if !slices.Equal(before, searchableSet(b)) {
		s.bucketChanged(ch, b)
	}
	s.reassign(ch, b)
}

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
	for _, bid := range sortedKeys(inv) {
		ci := inv[bid]
		b, ok := s.edit(bid)
		if !ok {
			index, _, guid, _ := ParseBucketID(bid)
			s.addIndex(index)
			origin := ""
			for _, id := range sortedKeys(s.d.Peers) {
				if s.d.Peers[id].GUID == guid {
					origin = id
				}
			}
			b = &Bucket{ID: bid, Index: index, Origin: origin, Hot: ci.Hot && origin == c.ID, Earliest: ci.Earliest, Latest: ci.Latest,
				Size: ci.Size, Events: ci.Events, Created: idx, Version: idx,
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
			continue
		}
		s.mutateBucket(ch, b, func() {
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
			if cp.Blocks != ci.Blocks {
				// The inventory carries no checksum, and 0 is "unknown".
				cp.Blocks, cp.LastChecksum, cp.LengthKnown = ci.Blocks, "", false
			}
			cp.Corrupt = ci.Corrupt
		})
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
			s.mutateBucket(ch, b, func() { s.dropCopy(b, p.ID) })
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
	if b.Blocks != c.From || b.LastChecksum != c.FromChecksum {
		return nil, fmt.Errorf("%w: extend %q from %d blocks (checksum %q): sealed at %d (checksum %q)",
			ErrSealMoved, c.Bucket, c.From, c.FromChecksum, b.Blocks, b.LastChecksum)
	}
	ch := s.begin(idx)
	s.mutateBucket(ch, b, func() {
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

// rebalance evens out primaries per peer within each site's table (site0:
// across all serving peers) without changing coverage: a local primary moves
// only to another local searchable copy, a remote fill-in is not touched,
// and a pinned hot primary stays. It repeatedly moves one primary from the
// most loaded peer to the least loaded holder of a candidate copy whose
// count is at least two lower, so every move lowers the spread; buckets and
// peers are visited in sorted order, ties broken by peer id.
func (s *State) rebalance(ch *change) {
	for _, table := range s.tables() {
		s.rebalanceTable(ch, table)
	}
}

func (s *State) rebalanceTable(ch *change, table string) {
	eligible := func(p string) bool {
		return s.serving(p) && (table == Site0 || s.siteOf(p) == table)
	}
	count := map[string]int{}
	held := map[string][]string{} // peer -> movable buckets, sorted
	for _, id := range sortedKeys(s.d.Peers) {
		if eligible(id) {
			count[id] = s.primaryCount[table][id]
		}
	}
	for _, id := range s.bucketIDs() {
		b, _ := s.lookup(id)
		p := b.Primary[table]
		if p == "" || !eligible(p) || s.pinned(b, table) && p == b.Origin {
			continue
		}
		held[p] = append(held[p], id)
	}
	for {
		peers := sortedKeys(count)
		sort.SliceStable(peers, func(i, j int) bool { return count[peers[i]] > count[peers[j]] })
		moved := false
		for _, from := range peers {
			for i, bid := range held[from] {
				b, _ := s.edit(bid)
				to, toN := "", 0
				for _, q := range s.candidates(b) {
					if q == from || !eligible(q) {
						continue
					}
					if n := count[q]; n <= count[from]-2 && (to == "" || n < toN) {
						to, toN = q, n
					}
				}
				if to == "" {
					continue
				}
				s.setPrimary(ch, b, table, to)
				count[from]--
				count[to]++
				held[from] = slices.Delete(held[from], i, i+1)
				j, _ := slices.BinarySearch(held[to], bid)
				held[to] = slices.Insert(held[to], j, bid)
				moved = true
				break
			}
			if moved {
				break
			}
		}
		if !moved {
			return
		}
	}
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
