package fsm

// Primaries: choosing, reassigning and rebalancing the primary copy of
// each bucket per generation table, and which copies may serve.

import (
	"maps"
	"slices"
	"sort"
)

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
	before, hot := searchableSet(b), b.Hot
	fn()
	if after := searchableSet(b); !slices.Equal(before, after) {
		if hot && b.Hot && s.ClusterVersion() >= LeftAtVersion {
			b.recordLeft(before, after, ch.idx)
		}
		s.bucketChanged(ch, b)
	}
	s.reassign(ch, b)
}

// recordLeft sets LeftAt for each peer of before that is not in after (both
// sorted). The map is replaced, never written in place: a bucket's clone
// may share it.
func (b *Bucket) recordLeft(before, after []string, idx uint64) {
	var left map[string]uint64
	for _, p := range before {
		if _, in := slices.BinarySearch(after, p); in {
			continue
		}
		if left == nil {
			left = make(map[string]uint64, len(b.LeftAt)+1)
			maps.Copy(left, b.LeftAt)
		}
		left[p] = idx
	}
	if left != nil {
		b.LeftAt = left
	}
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
