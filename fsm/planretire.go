package fsm

// The planner's end-of-life work: decommissioning peers, excess copies and
// retention (frozen buckets). Split from plan.go, unchanged.

import (
	"fmt"
	"sort"
)

// decommission removes a Decommissioning peer once every bucket it holds
// meets RF and SF without it, no open task streams from it, and it is the
// origin of no hot bucket.
func (p *planner) decommission() {
	s := p.sim
	for _, id := range sortedKeys(s.d.Peers) {
		if s.d.Peers[id].State != StateDecommissioning {
			continue
		}
		ready := p.decommissionReady(id)
		for _, tid := range sortedTaskIDs(s.d.Tasks) {
			if s.d.Tasks[tid].Source == id {
				ready = false
			}
		}
		if ready {
			p.emit(&SetPeerState{ID: id, State: StateRemoved, At: p.in.Now})
		}
	}
}

// decommissionReady: no hot bucket has its origin on peer and every bucket
// with a copy on it meets RF and SF. Every hot bucket is unsettled, and the
// copy index lists the peer's buckets, so only those are looked at.
func (p *planner) decommissionReady(peer string) bool {
	s := p.sim
	hot, held := s.unsettledIDs, s.bucketsOn
	if p.full {
		hot, held = s.bucketIDs, func(string) []string { return s.bucketIDs() }
	}
	for _, bid := range hot() {
		if b, _ := s.lookup(bid); b.Hot && b.Origin == peer {
			return false
		}
	}
	for _, bid := range held(peer) {
		b, _ := s.lookup(bid)
		if _, ok := b.Copies[peer]; !ok {
			continue
		}
		if n, t := s.needsOf(b), s.tallyOf(b); !n.rfMet(t) || !n.sfMet(t) {
			return false
		}
	}
	return true
}

// excess removes one surplus copy of a complete warm bucket with no open
// task (a peer came back after fixup replaced its copies): the copy whose
// removal keeps RF, SF, the site policy and every primary; non-searchable
// first, then on the most loaded peer, then the highest peer id.
func (p *planner) excess(b *Bucket) {
	s := p.sim
	if !p.copyable(b) || len(p.open(b, TaskReplicate, TaskMakeSearchable, TaskRemoveCopy, TaskTruncate, TaskFetch, TaskSeal, TaskFreeze)) > 0 {
		return
	}
	n, t := s.needsOf(b), s.tallyOf(b)
	if !n.rfMet(t) || !n.sfMet(t) || t.total <= n.rfTotal {
		return
	}
	primary := map[string]bool{}
	for _, pr := range b.Primary {
		primary[pr] = true
	}
	var cands []string
	for _, peer := range sortedKeys(b.Copies) {
		c := b.Copies[peer]
		if !s.healthy(c) || primary[peer] || !s.active(peer) {
			continue
		}
		site := s.siteOf(peer)
		t2 := s.tallyOf(b)
		t2.copies[site]--
		t2.total--
		if c.Searchable {
			t2.searchable[site]--
			t2.totalSrch--
		}
		if n.rfMet(t2) && n.sfMet(t2) {
			cands = append(cands, peer)
		}
	}
	if len(cands) == 0 {
		return
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, c := cands[i], cands[j]
		sa, sc := b.Copies[a].Searchable, b.Copies[c].Searchable
		if sa != sc {
			return !sa
		}
		if la, lc := s.copyCount[a], s.copyCount[c]; la != lc {
			return la > lc
		}
		return a > c
	})
	p.task(TaskRemoveCopy, LevelExcess, b, "", cands[0], false,
		fmt.Sprintf("excess copy: %d copies, %d needed", t.total, n.rfTotal))
}

// retention freezes warm buckets past their index's frozen_time_period, and
// the oldest warm buckets of an index over max_total_bytes: warm buckets
// by latest event (ties by id), each frozen while it is past the period or
// the index is over its size, skipping those with an open freeze. The
// first bucket that is neither ends the index: the later ones are no older
// and the total does not shrink without a freeze. The retention index
// (incremental.go) gives the order and the index's size, so a pass reads
// the buckets due and one more, not the index.
func (p *planner) retention() {
	if p.full {
		p.retentionFull()
		return
	}
	s := p.sim
	now := p.in.Now.UnixNano()
	for _, ic := range p.cfg().Indexes {
		if ic.FrozenTimePeriod <= 0 && ic.MaxTotalBytes <= 0 {
			continue
		}
		if s.ret == nil || s.ret.idx[ic.Name] == nil {
			continue
		}
		ir := s.ret.idx[ic.Name]
		// The size of the index without the buckets an open freeze
		// already removes.
		total := ir.size
		freezing := map[string]bool{}
		for _, id := range sortedTaskIDs(s.d.Tasks) {
			t := s.d.Tasks[id]
			if t.Kind != TaskFreeze || freezing[t.Bucket] {
				continue
			}
			if b, ok := s.lookup(t.Bucket); ok && b.Index == ic.Name {
				freezing[t.Bucket] = true
				total -= b.Size
			}
		}
		p.freezeDue(ic, func(fn func(*Bucket) bool) {
			ir.warm.each(func(k warmKey) bool {
				b, ok := s.lookup(k.id)
				if !ok || freezing[k.id] {
					return true
				}
				return fn(b)
			})
		}, total, now)
	}
}

// freezeDue applies the retention rule to an index's warm buckets, oldest
// first, with the index's total size. A bucket that is neither past the
// period nor over the size ends the scan of the ordered index: the later
// ones are no older, and the total shrinks only by a freeze. The full pass
// goes on over the rest, which gives the same commands.
func (p *planner) freezeDue(ic IndexConfig, each func(func(*Bucket) bool), total, now int64) {
	each(func(b *Bucket) bool {
		// A bucket with a copy still streaming in is frozen once the
		// stream ended: a freeze removes the bucket and its open tasks,
		// so a replication that finished after it left a copy no
		// tombstone named, on a peer no freeze task reached (found by
		// TestClusterRetentionFreeze once failure detection got fast:
		// a holder went Down, its replacement copy was streaming when
		// frozen_time_period froze the bucket).
		streaming := len(p.open(b, TaskReplicate, TaskFetch)) > 0
		switch {
		case ic.FrozenTimePeriod > 0 && b.Latest < now-int64(ic.FrozenTimePeriod):
			if streaming {
				return true
			}
			p.task(TaskFreeze, LevelRetention, b, "", "", false,
				fmt.Sprintf("latest event older than frozen_time_period %s", ic.FrozenTimePeriod))
		case ic.MaxTotalBytes > 0 && total > ic.MaxTotalBytes:
			if streaming {
				// The oldest goes first: wait for it rather than
				// freeze a newer bucket in its place.
				return false
			}
			p.task(TaskFreeze, LevelRetention, b, "", "", false,
				fmt.Sprintf("index %s holds %d bytes, max_total_bytes %d", ic.Name, total, ic.MaxTotalBytes))
		default:
			return p.full
		}
		total -= b.Size
		return true
	})
}

// retentionFull is retention over every bucket of every index (planFull).
func (p *planner) retentionFull() {
	s := p.sim
	now := p.in.Now.UnixNano()
	for _, ic := range p.cfg().Indexes {
		var warm []*Bucket
		var total int64
		for _, id := range s.bucketIDs() {
			b, _ := s.lookup(id)
			if b.Index != ic.Name {
				continue
			}
			if len(p.open(b, TaskFreeze)) > 0 {
				continue
			}
			total += b.Size
			if !b.Hot {
				warm = append(warm, b)
			}
		}
		sort.SliceStable(warm, func(i, j int) bool { return warm[i].Latest < warm[j].Latest })
		p.freezeDue(ic, func(fn func(*Bucket) bool) {
			for _, b := range warm {
				if !fn(b) {
					return
				}
			}
		}, total, now)
	}
}
