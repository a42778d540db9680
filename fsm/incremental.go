package fsm

import (
	"maps"
	"slices"
	"sort"
)

// Derived state that lets the planner visit only the buckets that may need
// work (issue 9 item 6: a pass over a million buckets took 55 s). None of it
// is in the snapshot or in Marshal; rebuildDerived recomputes it on Restore
// and apply keeps it after every entry. See DESIGN.md, "Incremental
// planning".
//
//   - unsettled: the ids of the buckets for which some per-bucket fixup
//     level might plan something (settled below is the exact negation of
//     every level's trigger, ignoring what only holds work back: open
//     tasks, throttles, held buckets). A settled bucket gives no command at
//     any level, so the planner skips it.
//   - retention: per index, the summed size of its buckets and its warm
//     buckets ordered by (latest, id), so retention finds the buckets due
//     without looking at all of them.
//
// Every handler reaches a bucket it changes through edit (never a bare map
// lookup), which records it in touched; apply refreshes the touched buckets
// once the handler is done, when peer states and the config are final. A
// change that can alter the verdict of buckets it does not edit (a peer's
// state or site, the config) recomputes their primaries, which edits them.

// lookup returns a bucket for reading: in the planner's private state
// (planCopy), its own edited copy, else the committed one.
func (s *State) lookup(id string) (*Bucket, bool) {
	if b, ok := s.d.Buckets[id]; ok {
		return b, true
	}
	if s.base == nil {
		return nil, false
	}
	if _, gone := s.gone[id]; gone {
		return nil, false
	}
	b, ok := s.base[id]
	return b, ok
}

// edit returns a bucket for a handler to change and records it as touched.
// In the planner's private state the committed record is copied first, so
// the simulation never writes to the committed state.
func (s *State) edit(id string) (*Bucket, bool) {
	b, ok := s.editQuiet(id)
	if ok {
		s.touch(id, b)
	}
	return b, ok
}

// editQuiet is edit without recording the bucket as touched: the caller
// refreshes its derived records itself once it is done with it
// (reassignPeer, while the bucket is still in the CPU's caches).
func (s *State) editQuiet(id string) (*Bucket, bool) {
	b, ok := s.d.Buckets[id]
	if !ok && s.base != nil {
		if _, gone := s.gone[id]; !gone {
			if cb, in := s.base[id]; in {
				b, ok = cb.clone(), true
				s.d.Buckets[id] = b
			}
		}
	}
	return b, ok
}

// bucketCount is the number of buckets in the table.
func (s *State) bucketCount() int {
	if s.base == nil {
		return len(s.d.Buckets)
	}
	return s.nBuckets
}

func (b *Bucket) clone() *Bucket {
	cb := *b
	cb.Copies = make(map[string]*Copy, len(b.Copies))
	for p, c := range b.Copies {
		cc := *c
		cb.Copies[p] = &cc
	}
	cb.Primary = maps.Clone(b.Primary)
	cb.LeftAt = maps.Clone(b.LeftAt)
	return &cb
}

func (s *State) touch(id string, b *Bucket) {
	if s.touched == nil {
		s.touched = map[string]*Bucket{}
	}
	s.touched[id] = b
}

// reserveUnsettled makes room in the unsettled set for n more buckets
// before a peer's state change refreshes every bucket it holds: growing
// the set from a settled cluster's few entries to 10,000 rehashed it a
// dozen times, a sixth of the change at a million buckets.
func (s *State) reserveUnsettled(n int) {
	if n <= 64 || len(s.unsettled) >= n {
		return
	}
	m := make(map[string]struct{}, len(s.unsettled)+n)
	for id := range s.unsettled {
		m[id] = struct{}{}
	}
	s.unsettled = m
}

// refreshTouched brings the derived records of the touched buckets up to
// date (apply calls it after every entry). touched holds each bucket's
// current record (the one edit returned or putBucket stored; nil once
// deleteBucket removed it), so no bucket is looked up again in the
// bucket map.
func (s *State) refreshTouched() {
	if len(s.touched) == 0 {
		return
	}
	if s.needs == nil {
		s.needs = map[string]needs{}
	}
	for id, b := range s.touched { // any order: each bucket's records are its own
		s.refresh(id, b, b != nil)
	}
	if len(s.touched) > 4096 {
		s.touched = nil // a large map is not kept: every later entry would walk its empty groups
	} else {
		clear(s.touched)
	}
}

// refresh recomputes one bucket's derived records.
func (s *State) refresh(id string, b *Bucket, live bool) {
	if live && !s.settled(b) {
		if _, in := s.unsettled[id]; !in {
			s.unsettled[id] = struct{}{}
			s.unsettledVer++
		}
	} else if _, in := s.unsettled[id]; in {
		delete(s.unsettled, id)
		s.unsettledVer++
	}
	s.retentionIndex(id, b, live)
}

// settled reports that no per-bucket level of the planner (corruption,
// streaming, data safety, generation, replication, search, excess) can
// plan anything for b, whatever the open tasks and throttles are: it is
// warm, has no corrupt copy, no copy of a known length other than the
// sealed one nor a short one of unknown length, a primary in site0 and a
// local one in every site, exactly the replication total of counted copies
// and the site policy met for RF and SF. Open tasks only hold work back
// (pending copies count as made), so they do not enter. The property test
// pins that a plan over the unsettled buckets equals a plan over all.
func (s *State) settled(b *Bucket) bool {
	if b.Hot {
		return false
	}
	sealed := b.Sealed && b.Blocks > 0
	for _, c := range b.Copies {
		if c.Corrupt {
			return false
		}
		if sealed && ((c.known() && c.Blocks != b.Blocks) || (!c.known() && c.Short)) {
			return false
		}
	}
	if b.Primary[Site0] == "" {
		return false
	}
	if s.d.Config.Multisite() {
		for _, site := range s.d.Config.Sites {
			if !s.validFor(b, site) {
				return false
			}
		}
	}
	return s.policyExact(b, s.cachedNeeds(b))
}

// policyExact reports that b's counted copies are exactly RF's total and
// meet the site policy for RF and SF: n.rfMet and n.sfMet of its tally,
// counted without maps (it runs on every bucket an entry edits and on
// every bucket at restore, where tallyOf's two maps a bucket were most of
// the cost). More than len(siteCount.site) sites: tallyOf.
func (s *State) policyExact(b *Bucket, n needs) bool {
	var sc siteCount
	total, totalSrch := 0, 0
	for p, c := range b.Copies { // any order: only counts come out
		if !s.healthy(c) {
			continue
		}
		if !sc.add(s.siteOf(p), c.Searchable) {
			t := s.tallyOf(b)
			return t.total <= n.rfTotal && n.rfMet(t) && n.sfMet(t)
		}
		total++
		if c.Searchable {
			totalSrch++
		}
	}
	if total != n.rfTotal || totalSrch < n.sfTotal {
		return false
	}
	for site, k := range n.rfSite {
		if c, _ := sc.get(site); c < k {
			return false
		}
	}
	for site, k := range n.sfSite {
		if _, sr := sc.get(site); sr < k {
			return false
		}
	}
	if c, _ := sc.outside(n.rfSite); c < n.rfOther {
		return false
	}
	_, sr := sc.outside(n.sfSite)
	return sr >= n.sfOther
}

// siteCount tallies copies and searchable copies per site in arrays.
type siteCount struct {
	n      int
	site   [8]string
	copies [8]int
	srch   [8]int
}

// add counts a copy on site; false when the arrays are full.
func (c *siteCount) add(site string, searchable bool) bool {
	i := 0
	for i < c.n && c.site[i] != site {
		i++
	}
	if i == c.n {
		if c.n == len(c.site) {
			return false
		}
		c.site[i] = site
		c.n++
	}
	c.copies[i]++
	if searchable {
		c.srch[i]++
	}
	return true
}

func (c *siteCount) get(site string) (copies, searchable int) {
	for i := 0; i < c.n; i++ {
		if c.site[i] == site {
			return c.copies[i], c.srch[i]
		}
	}
	return 0, 0
}

// outside sums the counts of the sites not named.
func (c *siteCount) outside(named map[string]int) (copies, searchable int) {
	for i := 0; i < c.n; i++ {
		if _, ok := named[c.site[i]]; !ok {
			copies += c.copies[i]
			searchable += c.srch[i]
		}
	}
	return copies, searchable
}

// cachedNeeds is needsOf, remembered per origin site until the config
// changes (needsOf depends on nothing else).
func (s *State) cachedNeeds(b *Bucket) needs {
	if s.needs == nil {
		return s.needsOf(b)
	}
	n, ok := s.needs[b.OriginSite]
	if !ok {
		n = s.needsOf(b)
		s.needs[b.OriginSite] = n
	}
	return n
}

// unsettledIDs returns the unsettled bucket ids, sorted (cached until the
// set changes).
func (s *State) unsettledIDs() []string {
	if s.unsettledList == nil || s.unsettledListVer != s.unsettledVer {
		s.unsettledList = sortedKeys(s.unsettled)
		s.unsettledListVer = s.unsettledVer
	}
	return s.unsettledList
}

// ---- retention ----

// retention is the per-index retention index (derived). The planner's
// private state shares the committed one and copies it before a change
// (shared), which a plan never makes in practice: no planned command
// changes a bucket's index, size, heat or latest event.
type retention struct {
	shared bool
	idx    map[string]*indexRetention
}

type indexRetention struct {
	size int64       // sum of the sizes of the index's buckets
	warm orderedWarm // its warm buckets by (latest, id)
}

// retKey is what the retention index holds for a bucket (Bucket.held).
type retKey struct {
	in     bool
	index  string
	size   int64
	latest int64
	warm   bool
}

func (s *State) retentionIndex(id string, b *Bucket, live bool) {
	if !live {
		return // deleteBucket took it out
	}
	now := retKey{in: true, index: b.Index, size: b.Size, latest: b.Latest, warm: !b.Hot}
	if b.held == now {
		return
	}
	s.retentionMove(id, b.held, now)
	b.held = now
}

// retentionMove replaces what the retention index holds for bucket id.
func (s *State) retentionMove(id string, old, now retKey) {
	r := s.ownRetention()
	if old.in {
		if ir := r.idx[old.index]; ir != nil {
			ir.size -= old.size
			if old.warm {
				ir.warm.remove(warmKey{old.latest, id})
			}
		}
	}
	if now.in {
		ir := r.idx[now.index]
		if ir == nil {
			ir = &indexRetention{}
			r.idx[now.index] = ir
		}
		ir.size += now.size
		if now.warm {
			ir.warm.insert(warmKey{now.latest, id})
		}
	}
}

// ownRetention returns a retention index s may change.
func (s *State) ownRetention() *retention {
	if s.ret == nil {
		s.ret = &retention{idx: map[string]*indexRetention{}}
	}
	if s.ret.shared {
		c := &retention{idx: make(map[string]*indexRetention, len(s.ret.idx))}
		for k, ir := range s.ret.idx {
			c.idx[k] = &indexRetention{size: ir.size, warm: ir.warm.clone()}
		}
		s.ret = c
	}
	return s.ret
}

type warmKey struct {
	latest int64
	id     string
}

func (a warmKey) less(b warmKey) bool {
	return a.latest < b.latest || (a.latest == b.latest && a.id < b.id)
}

// chunked is a sorted set kept as a list of sorted chunks (at most
// 2·setChunk keys each): an insert or removal moves at most a chunk, and
// iteration in order is a walk. The retention index orders warm buckets
// with it, the state its bucket ids.
type chunked[K lesser[K]] struct{ chunks [][]K }

type lesser[K any] interface {
	comparable
	less(K) bool
}

type orderedWarm = chunked[warmKey]

const setChunk = 256

func (o *chunked[K]) chunkFor(k K) int {
	return sort.Search(len(o.chunks), func(i int) bool {
		c := o.chunks[i]
		return !c[len(c)-1].less(k)
	})
}

func (o *chunked[K]) insert(k K) {
	if len(o.chunks) == 0 {
		o.chunks = [][]K{{k}}
		return
	}
	i := o.chunkFor(k)
	if i == len(o.chunks) {
		i--
	}
	c := o.chunks[i]
	j := sort.Search(len(c), func(j int) bool { return !c[j].less(k) })
	if j < len(c) && c[j] == k {
		return
	}
	c = slices.Insert(c, j, k)
	if len(c) > 2*setChunk {
		lo, hi := slices.Clone(c[:setChunk]), slices.Clone(c[setChunk:])
		o.chunks = slices.Insert(o.chunks, i+1, hi)
		c = lo
	}
	o.chunks[i] = c
}

func (o *chunked[K]) remove(k K) {
	i := o.chunkFor(k)
	if i == len(o.chunks) {
		return
	}
	c := o.chunks[i]
	j := sort.Search(len(c), func(j int) bool { return !c[j].less(k) })
	if j == len(c) || c[j] != k {
		return
	}
	c = slices.Delete(c, j, j+1)
	if len(c) == 0 {
		o.chunks = slices.Delete(o.chunks, i, i+1)
		return
	}
	o.chunks[i] = c
}

func (o *chunked[K]) clone() chunked[K] {
	c := chunked[K]{chunks: make([][]K, len(o.chunks))}
	for i, ch := range o.chunks {
		c.chunks[i] = slices.Clone(ch)
	}
	return c
}

// each calls fn on the keys in order until it returns false.
func (o *chunked[K]) each(fn func(k K) bool) {
	for _, c := range o.chunks {
		for _, k := range c {
			if !fn(k) {
				return
			}
		}
	}
}

func (o *chunked[K]) len() int {
	n := 0
	for _, c := range o.chunks {
		n += len(c)
	}
	return n
}

// fromSorted builds the set from sorted, distinct keys (taking the slice).
func fromSorted[K lesser[K]](keys []K) chunked[K] {
	var o chunked[K]
	for len(keys) > 0 {
		n := min(len(keys), setChunk)
		o.chunks = append(o.chunks, keys[:n:n])
		keys = keys[n:]
	}
	return o
}

// rebuildIncremental recomputes the planner's derived records of every
// bucket (Restore, a new state). The ordered index is built by one sort,
// not a million inserts.
func (s *State) rebuildIncremental() {
	s.unsettled = map[string]struct{}{}
	s.unsettledVer++
	s.needs = map[string]needs{}
	s.touched = nil
	s.ret = &retention{idx: map[string]*indexRetention{}}
	warm := map[string][]warmKey{}
	for id, b := range s.d.Buckets { // any order: each bucket's records are its own
		if !s.settled(b) {
			s.unsettled[id] = struct{}{}
		}
		b.held = retKey{in: true, index: b.Index, size: b.Size, latest: b.Latest, warm: !b.Hot}
		ir := s.ret.idx[b.Index]
		if ir == nil {
			ir = &indexRetention{}
			s.ret.idx[b.Index] = ir
		}
		ir.size += b.Size
		if !b.Hot {
			warm[b.Index] = append(warm[b.Index], warmKey{b.Latest, id})
		}
	}
	for index, keys := range warm {
		slices.SortFunc(keys, func(a, b warmKey) int {
			if a.less(b) {
				return -1
			}
			if b.less(a) {
				return 1
			}
			return 0
		})
		s.ret.idx[index].warm = fromSorted(keys)
	}
}

// planCopy is the planner's private state: a copy of s whose simulation may
// apply commands without touching s, in O(what the plan changes) rather
// than O(state). Peers, tasks, tombstones and marks are copied (small);
// buckets are not: the copy reads s's records (base) and copies one on its
// first edit; the copy index, the unsettled set and the retention index are
// shared or copied the same way. s must not change while the copy is used
// (the planner runs under the FSM's read lock).
func (s *State) planCopy() *State {
	d := s.d
	s.copySmall(&d)
	d.Buckets = map[string]*Bucket{}
	// Appends reallocate: the copy never writes into s's arrays.
	d.History = slices.Clip(s.d.History)
	d.Requests = slices.Clip(s.d.Requests)
	c := &State{d: d, supports: s.supports, base: s.d.Buckets, gone: map[string]struct{}{}, nBuckets: len(s.d.Buckets)}
	c.primaryCount = make(map[string]map[string]int, len(s.primaryCount))
	for site, m := range s.primaryCount {
		c.primaryCount[site] = maps.Clone(m)
	}
	c.copyCount = maps.Clone(s.copyCount)
	c.requests = maps.Clone(s.requests)
	c.ids = &idCache{}
	if s.ids != nil {
		if l := s.ids.p.Load(); l != nil && l.owner == s && len(l.ids) == len(s.d.Buckets) {
			c.ids.p.Store(&idList{owner: c, ids: l.ids})
		}
	}
	c.byPeer = s.copyIndexFor()
	if c.byPeer == nil { // s is a Clone that never needed one
		c.byPeer = &copyIndex{m: map[string]map[string]struct{}{}}
		for id, b := range s.d.Buckets {
			for p := range b.Copies {
				c.byPeer.add(p, id)
			}
		}
	}
	c.byPeer.owner = c
	c.unsettled = maps.Clone(s.unsettled)
	c.unsettledVer = 1
	c.needs = map[string]needs{}
	if s.ret != nil {
		c.ret = &retention{shared: true, idx: s.ret.idx}
	}
	return c
}
