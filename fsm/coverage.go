package fsm

import "fmt"

// needs is what the policy asks of one bucket: explicit copies per site,
// the copies the rest of total puts on the other sites (those the policy
// does not name for this bucket), and the total, for rawdata (RF) and
// searchable (SF) copies.
type needs struct {
	rfSite  map[string]int
	rfOther int
	rfTotal int
	sfSite  map[string]int
	sfOther int
	sfTotal int
}

// needsOf computes a bucket's requirement from its origin site. In a
// single-site cluster it is RF (SF) copies on DefaultSite. The rest of a
// total goes to the other sites when the cluster has any ("the rest is
// spread over the other sites"); the search rest only as far as the
// replication rest puts copies there.
func (s *State) needsOf(b *Bucket) needs {
	cfg := s.d.Config
	rf, sf := cfg.rfPolicy(), cfg.sfPolicy()
	origin := b.OriginSite
	if !cfg.Multisite() {
		origin = DefaultSite
	}
	rs, rrest := rf.Need(origin)
	ss, srest := sf.Need(origin)
	n := needs{rfSite: rs, rfTotal: rf.Total, sfSite: ss, sfTotal: sf.Total}
	others := false
	for _, site := range cfg.SiteNames() {
		if _, named := rs[site]; !named {
			others = true
		}
	}
	if others {
		n.rfOther = rrest
		outside := rf.Total
		for site := range ss {
			outside -= rs[site]
		}
		n.sfOther = min(srest, max(0, outside))
	}
	return n
}

// tally counts a bucket's copies that count (healthy: not corrupt, on a
// serving peer) per site and in total, and the searchable ones.
type tally struct {
	copies     map[string]int
	searchable map[string]int
	total      int
	totalSrch  int
}

func (s *State) tallyOf(b *Bucket) tally {
	t := tally{copies: map[string]int{}, searchable: map[string]int{}}
	for p, c := range b.Copies { // any order: only counts come out
		if !s.healthy(c) {
			continue
		}
		site := s.siteOf(p)
		t.copies[site]++
		t.total++
		if c.Searchable {
			t.searchable[site]++
			t.totalSrch++
		}
	}
	return t
}

// outside sums counts over the sites not named in named.
func outside(counts map[string]int, named map[string]int) int {
	n := 0
	for site, k := range counts {
		if _, ok := named[site]; !ok {
			n += k
		}
	}
	return n
}

func (n needs) rfMet(t tally) bool {
	for site, k := range n.rfSite {
		if t.copies[site] < k {
			return false
		}
	}
	return t.total >= n.rfTotal && outside(t.copies, n.rfSite) >= n.rfOther
}

func (n needs) sfMet(t tally) bool {
	for site, k := range n.sfSite {
		if t.searchable[site] < k {
			return false
		}
	}
	return t.totalSrch >= n.sfTotal && outside(t.searchable, n.sfSite) >= n.sfOther
}

// siteMet reports whether the explicit requirement of one site is met.
func (n needs) siteMet(t tally, site string) bool {
	return t.copies[site] >= n.rfSite[site] && t.searchable[site] >= n.sfSite[site]
}

// validFor reports whether a bucket has a primary for table that serves it:
// a remote fill-in is not valid for a site's own searches.
func (s *State) validFor(b *Bucket, table string) bool {
	p := b.Primary[table]
	if p == "" {
		return false
	}
	return table == Site0 || s.siteOf(p) == table
}

// bucketProblem says what a bucket waits for, at the highest-priority level
// that applies, or ok=false when the bucket is valid and complete.
func (s *State) bucketProblem(b *Bucket) (Level, string, bool) {
	t := s.tallyOf(b)
	n := s.needsOf(b)
	for _, p := range sortedKeys(b.Copies) {
		if b.Copies[p].Corrupt {
			return LevelCorruption, fmt.Sprintf("copy on %s is corrupt", p), true
		}
	}
	if b.Hot && !s.originAlive(b) {
		return LevelStreaming, fmt.Sprintf("hot bucket of %s origin %s, to seal", s.stateOf(b.Origin), b.Origin), true
	}
	if awaitsRebuild(b) {
		return LevelStreaming, "rebuilt from inventories, copies of different lengths: run quarry manager rebuild once every peer is back", true
	}
	if minCopies := min(2, n.rfTotal); t.total < minCopies {
		return LevelDataSafety, fmt.Sprintf("%d rawdata copies, fewer than %d", t.total, minCopies), true
	}
	for _, table := range s.tables() {
		if !s.validFor(b, table) {
			if b.Primary[table] == "" {
				return LevelGeneration, fmt.Sprintf("no primary for %s", table), true
			}
			return LevelGeneration, fmt.Sprintf("remote fill-in primary %s for %s", b.Primary[table], table), true
		}
	}
	if !n.rfMet(t) {
		return LevelReplication, fmt.Sprintf("%d of %d copies (%s)", t.total, n.rfTotal, siteCounts(n.rfSite, t.copies)), true
	}
	if !n.sfMet(t) {
		return LevelSearch, fmt.Sprintf("%d of %d searchable copies (%s)", t.totalSrch, n.sfTotal, siteCounts(n.sfSite, t.searchable)), true
	}
	return 0, "", false
}

func siteCounts(need, have map[string]int) string {
	out := ""
	for _, s := range sortedKeys(need) {
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("%s %d/%d", s, have[s], need[s])
	}
	return out
}

func (s *State) stateOf(peer string) PeerState {
	if p, ok := s.d.Peers[peer]; ok {
		return p.State
	}
	return ""
}

// originAlive reports whether a hot bucket's origin can still roll it
// itself: serving, decommissioning (still running), or restarting within
// its restart timeout (it rolls its hot buckets when it comes back).
func (s *State) originAlive(b *Bucket) bool {
	switch s.stateOf(b.Origin) {
	case StateUp, StateDetention, StateDecommissioning, StateRestarting, StatePending:
		// An origin whose own copy is corrupt (its journal unreadable at
		// restart) cannot seal the bucket: it is sealed from the copies
		// that survive, as after a death, and the corrupt copy is then
		// replaced (planner, corruption first).
		c, has := b.Copies[b.Origin]
		return has && !c.Corrupt
	}
	return false
}
