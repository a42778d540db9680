package fsm

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// TargetChoice is the manager's answer to a peer starting a hot bucket
// (rule 4): the replication targets and which must be searchable.
type TargetChoice struct {
	Origin     string     `json:"origin"`
	OriginSite string     `json:"origin_site"`
	Targets    []CopySpec `json:"targets"`
	// Degraded is set when the policy cannot be met (a site is down or too
	// small): the targets come from what is up, and AddBucket records the
	// bucket for fixup.
	Degraded bool   `json:"degraded,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// placement chooses peers for copies a bucket lacks. load is each peer's
// copy count plus the copies already promised to it, so successive choices
// spread out.
type placement struct {
	s     *State
	taken map[string]bool // peers that hold or will hold a copy
	load  map[string]int
	// base, when set, is each peer's load before this placement (the
	// planner's: copies held plus open replications and fetches), and
	// load only what this placement reserved; building the whole map for
	// every bucket cost the pass after a peer failure half its time at a
	// million buckets.
	base func(peer string) int
	per  map[string]int // chosen copies per site
	ok   func(peer string) bool
	// peers is the sorted peer ids when the caller has them (the planner
	// sorts once a pass), else nil.
	peers []string
}

// pick chooses on site (any site when site is "") the acceptable peer with
// the least load, ties by peer id, and reserves it.
func (pl *placement) pick(site string) string {
	best, bestN := "", 0
	ids := pl.peers
	if ids == nil {
		ids = sortedKeys(pl.s.d.Peers)
	}
	for _, id := range ids {
		p := pl.s.d.Peers[id]
		if pl.taken[id] || p.State != StateUp || (site != "" && pl.s.peerSite(p) != site) || (pl.ok != nil && !pl.ok(id)) {
			continue
		}
		n := pl.load[id]
		if pl.base != nil {
			n += pl.base(id)
		}
		if best == "" || n < bestN {
			best, bestN = id, n
		}
	}
	if best != "" {
		pl.taken[best] = true
		pl.load[best]++
		pl.per[pl.s.peerSite(pl.s.d.Peers[best])]++
	}
	return best
}

// spread places one of the "rest" copies: on the other sites (neither the
// origin nor explicitly named) with the fewest copies of the bucket so far,
// ties by site name; failing that, when fallback is set, on any site with
// room, fewest first. degraded reports the fallback was used.
func (pl *placement) spread(explicit map[string]int, fallback bool) (peer string, degraded bool) {
	sites := pl.s.d.Config.SiteNames()
	try := func(filter func(string) bool) string {
		order := slices.Clone(sites)
		sort.SliceStable(order, func(i, j int) bool { return pl.per[order[i]] < pl.per[order[j]] })
		for _, site := range order {
			if !filter(site) {
				continue
			}
			if p := pl.pick(site); p != "" {
				return p
			}
		}
		return ""
	}
	if p := try(func(site string) bool { _, named := explicit[site]; return !named }); p != "" {
		return p, false
	}
	if !fallback {
		return "", false
	}
	p := try(func(string) bool { return true })
	return p, p != ""
}

// ChooseTargets picks the replication targets of a new hot bucket of index
// on origin (rule 4): Up peers (Detention and Decommissioning peers take no
// new data), the origin site's count first, then the explicitly named sites
// in name order, then the rest of total spread over the other sites; within
// a site the peer with the fewest copies wins, ties by peer id; never two
// copies on one peer. Searchable: the first copies chosen on each site up
// to that site's search count (the origin's own copy is searchable and
// counts), then more until the search total. When a site cannot take its
// share, its copies go to the sites that are up and the choice is Degraded.
func (s *State) ChooseTargets(origin string, index string) (TargetChoice, error) {
	o, err := s.peer(origin)
	if err != nil {
		return TargetChoice{}, err
	}
	if o.State != StateUp {
		return TargetChoice{}, fmt.Errorf("%w: choose targets for %s: it is %s", ErrPeerNotUp, origin, o.State)
	}
	if !s.indexKnown(index) && !s.d.Config.AutoCreateIndexes {
		return TargetChoice{}, fmt.Errorf("%w: choose targets for %s: index %q", ErrUnknownIndex, origin, index)
	}
	originSite := s.peerSite(o)
	n := s.needsOf(&Bucket{OriginSite: originSite})
	pl := &placement{s: s, taken: map[string]bool{origin: true}, load: map[string]int{}, per: map[string]int{originSite: 1}}
	for id, c := range s.copyCount {
		pl.load[id] = c
	}
	var chosen []string
	var short []string
	deficit := 0
	// Origin site first, then the explicit sites by name.
	sites := []string{originSite}
	for _, site := range sortedKeys(n.rfSite) {
		if site != originSite {
			sites = append(sites, site)
		}
	}
	for _, site := range sites {
		want := n.rfSite[site]
		if site == originSite {
			want-- // the origin's own copy
		}
		for range want {
			p := pl.pick(site)
			if p == "" {
				deficit++
				short = append(short, site)
				continue
			}
			chosen = append(chosen, p)
		}
	}
	sum := 0
	for _, k := range n.rfSite {
		sum += k
	}
	rest := max(0, n.rfTotal-sum) + deficit
	fell := false
	for range rest {
		p, fb := pl.spread(n.rfSite, true)
		if p == "" {
			break
		}
		fell = fell || (fb && n.rfOther > 0)
		chosen = append(chosen, p)
	}
	tc := TargetChoice{Origin: origin, OriginSite: originSite, Targets: []CopySpec{}}
	if deficit > 0 || fell || len(chosen)+1 < n.rfTotal {
		tc.Degraded = true
		reason := fmt.Sprintf("%d of %d copies placed", len(chosen)+1, n.rfTotal)
		if len(short) > 0 {
			reason += "; short of peers on " + strings.Join(slices.Compact(short), ",")
		}
		if fell {
			reason += "; no other site could take the rest"
		}
		tc.Reason = reason
	}
	// Searchable copies: per site up to its search count, then up to total.
	srch := map[string]int{originSite: 1}
	total := 1
	marks := make([]bool, len(chosen))
	for i, p := range chosen {
		site := s.siteOf(p)
		if srch[site] < n.sfSite[site] {
			marks[i] = true
			srch[site]++
			total++
		}
	}
	// The rest of the search total goes to the sites with the fewest
	// searchable copies, so more sites get a local primary.
	for total < n.sfTotal {
		best := -1
		for i, p := range chosen {
			if !marks[i] && (best < 0 || srch[s.siteOf(p)] < srch[s.siteOf(chosen[best])]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		marks[best] = true
		srch[s.siteOf(chosen[best])]++
		total++
	}
	for i, p := range chosen {
		tc.Targets = append(tc.Targets, CopySpec{Peer: p, Searchable: marks[i]})
	}
	return tc, nil
}

// ChooseReplacement picks the peer that replaces a failed replication
// target of hot bucket id (SPEC §4: the managers choose it under the site
// policy and record it, so the state always knows who holds a copy that
// counted toward an ack). exclude are the peers the origin tried (the
// failed target first); none of them, no peer holding a copy, and no peer
// that is not Up is chosen. The failed target's site is preferred, so the
// site policy's counts stay met; failing that the sites with the fewest
// copies of the bucket; within a site the least loaded peer, ties by id.
// The replacement is searchable when the failed target's copy was.
func (s *State) ChooseReplacement(id string, exclude []string) (CopySpec, error) {
	b, ok := s.lookup(id)
	if !ok {
		return CopySpec{}, fmt.Errorf("%w: %q", ErrUnknownBucket, id)
	}
	if !b.Hot {
		return CopySpec{}, fmt.Errorf("%w: replace a target of %q: the bucket is not hot", ErrBucketNotHot, id)
	}
	pl := &placement{s: s, taken: map[string]bool{b.Origin: true}, load: map[string]int{}, per: map[string]int{}}
	for pid, c := range s.copyCount {
		pl.load[pid] = c
	}
	for pid := range b.Copies {
		pl.taken[pid] = true
		if !slices.Contains(exclude, pid) {
			pl.per[s.siteOf(pid)]++
		}
	}
	for _, pid := range exclude {
		pl.taken[pid] = true
	}
	var spec CopySpec
	if len(exclude) > 0 {
		if c, ok := b.Copies[exclude[0]]; ok {
			spec.Searchable = c.Searchable
		}
		if site := s.siteOf(exclude[0]); site != "" {
			spec.Peer = pl.pick(site)
		}
	}
	if spec.Peer == "" {
		spec.Peer, _ = pl.spread(nil, true)
	}
	if spec.Peer == "" {
		return CopySpec{}, fmt.Errorf("%w: no Up peer can replace a target of %q", ErrPeerNotUp, id)
	}
	return spec, nil
}
