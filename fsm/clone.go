package fsm

import (
	"maps"
	"slices"
)

// Clone returns a deep copy of the state, field by field: every map and
// slice is copied, nothing is shared with s, so the copy may be read (and
// the planner's copy mutated) without the FSM's lock while Apply goes on
// changing s. It encodes nothing: at 10⁵ buckets it costs a fraction of a
// JSON round trip (BenchmarkPlannerCopy). TestCloneIsDeep pins that the copy
// encodes like the original and shares no pointer with it; a field added to
// stateData must be added here (that test fails otherwise).
func (s *State) Clone() *State {
	if s.base != nil {
		panic("fsm: Clone of the planner's private state")
	}
	d := s.d
	s.copySmall(&d)
	// Buckets and copies are copied into two slabs (one allocation each
	// instead of one per record): the copy is short-lived, and a record
	// dropped from it keeps its slab only as long as the copy lives.
	d.Buckets = make(map[string]*Bucket, len(s.d.Buckets))
	nc := 0
	for _, b := range s.d.Buckets {
		nc += len(b.Copies)
	}
	bs, cs := make([]Bucket, 0, len(s.d.Buckets)), make([]Copy, 0, nc)
	for k, b := range s.d.Buckets {
		bs = append(bs, *b)
		cb := &bs[len(bs)-1]
		cb.Copies = nil
		if b.Copies != nil {
			cb.Copies = make(map[string]*Copy, len(b.Copies))
		}
		for p, c := range b.Copies {
			cs = append(cs, *c)
			cb.Copies[p] = &cs[len(cs)-1]
		}
		cb.Primary = maps.Clone(b.Primary)
		cb.LeftAt = maps.Clone(b.LeftAt)
		d.Buckets[k] = cb
	}
	d.History = slices.Clone(s.d.History)
	d.Requests = slices.Clone(s.d.Requests)
	c := &State{d: d, supports: s.supports}
	c.primaryCount = make(map[string]map[string]int, len(s.primaryCount))
	for site, m := range s.primaryCount {
		c.primaryCount[site] = maps.Clone(m)
	}
	c.copyCount = maps.Clone(s.copyCount)
	c.requests = maps.Clone(s.requests)
	c.unsettled = maps.Clone(s.unsettled)
	if s.ret != nil {
		c.ret = &retention{idx: make(map[string]*indexRetention, len(s.ret.idx))}
		for k, ir := range s.ret.idx {
			c.ret.idx[k] = &indexRetention{size: ir.size, warm: ir.warm.clone()}
		}
	}
	// The sorted bucket ids: the same set, so the same (never changed in
	// place) slice, cached for the clone; the copy index is rebuilt by the
	// clone when it needs one.
	c.ids = &idCache{}
	if s.ids != nil {
		if l := s.ids.p.Load(); l != nil && l.owner == s && len(l.ids) == len(s.d.Buckets) {
			c.ids.p.Store(&idList{owner: c, ids: l.ids})
		}
	}
	return c
}

// clone deep-copies a config (its slices and the policies' site maps).
func (c Config) clone() Config {
	out := c
	out.Sites = slices.Clone(c.Sites)
	out.SiteReplicationFactor.Sites = maps.Clone(c.SiteReplicationFactor.Sites)
	out.SiteSearchFactor.Sites = maps.Clone(c.SiteSearchFactor.Sites)
	out.Indexes = slices.Clone(c.Indexes)
	out.HECTokens = slices.Clone(c.HECTokens)
	for i := range out.HECTokens {
		out.HECTokens[i].Indexes = slices.Clone(c.HECTokens[i].Indexes)
	}
	out.SearchTokens = slices.Clone(c.SearchTokens)
	for i := range out.SearchTokens {
		out.SearchTokens[i].Indexes = slices.Clone(c.SearchTokens[i].Indexes)
		out.SearchTokens[i].Publish = slices.Clone(c.SearchTokens[i].Publish)
	}
	return out
}

// copySmall gives d (a shallow copy of s.d) its own config, indexes,
// peers, tasks, tombstones, marks and Up set: the small records both Clone
// and the planner's planCopy copy whole.
func (s *State) copySmall(d *stateData) {
	d.Config = s.d.Config.clone()
	d.Indexes = slices.Clone(s.d.Indexes)
	d.Saved = s.d.Saved.clone()
	d.Peers = make(map[string]*Peer, len(s.d.Peers))
	for k, p := range s.d.Peers {
		cp := *p
		cp.Attrs = maps.Clone(p.Attrs)
		d.Peers[k] = &cp
	}
	d.Tasks = make(map[uint64]*Task, len(s.d.Tasks))
	for k, t := range s.d.Tasks {
		ct := *t
		d.Tasks[k] = &ct
	}
	if s.d.Frozen != nil {
		d.Frozen = make(map[string]*Frozen, len(s.d.Frozen))
		for k, f := range s.d.Frozen {
			cf := *f
			cf.Holders = slices.Clone(f.Holders)
			d.Frozen[k] = &cf
		}
	}
	if s.d.Marks != nil {
		d.Marks = make(map[uint64]*TaskMarks, len(s.d.Marks))
		for k, m := range s.d.Marks {
			d.Marks[k] = &TaskMarks{Delivered: slices.Clone(m.Delivered), Reported: slices.Clone(m.Reported)}
		}
	}
	d.UpSet = slices.Clone(s.d.UpSet)
	if s.d.Bundle != nil {
		b := *s.d.Bundle
		b.Files = maps.Clone(b.Files)
		d.Bundle = &b
	}
	d.TokenKey = slices.Clone(s.d.TokenKey)
}
