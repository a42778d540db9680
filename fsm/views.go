package fsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Status is GET /v1/status (SPEC §7) without the leader, which the manager
// fills in. Config is an addition for `quarry cluster status`, redacted:
// every token shows its digest, never its secret (SPEC §7: no read shows a
// token's secret; /v1/status needs no token).
type Status struct {
	Leader               string                `json:"leader"`
	Generation           uint64                `json:"generation"`
	Maintenance          bool                  `json:"maintenance"`
	ReplicationFactorMet bool                  `json:"replication_factor_met"`
	SearchFactorMet      bool                  `json:"search_factor_met"`
	Valid                bool                  `json:"valid"`
	Complete             bool                  `json:"complete"`
	Sites                map[string]SiteStatus `json:"sites"`
	Peers                []PeerStatus          `json:"peers"`
	Fixups               []FixupStatus         `json:"fixups"`
	Config               Config                `json:"config"`
}

// SiteStatus is one site's (or site0's) validity and completeness, with the
// buckets that fail them.
type SiteStatus struct {
	Valid             bool     `json:"valid"`
	Complete          bool     `json:"complete"`
	InvalidBuckets    []string `json:"invalid_buckets,omitempty"`
	IncompleteBuckets []string `json:"incomplete_buckets,omitempty"`
}

// PeerStatus is one peer's line in /v1/status. Primaries counts the
// primaries it holds in its own site's table.
type PeerStatus struct {
	ID         string    `json:"id"`
	Site       string    `json:"site"`
	State      PeerState `json:"state"`
	Buckets    int       `json:"buckets"`
	Primaries  int       `json:"primaries"`
	Searchable int       `json:"searchable"`
}

// FixupStatus is a bucket that is not complete (or not valid) and the fixup
// it waits for: an open task, or the level the planner will handle it at.
type FixupStatus struct {
	Bucket string `json:"bucket"`
	Level  Level  `json:"level"`
	Reason string `json:"reason"`
	Task   uint64 `json:"task,omitempty"`
}

// GenerationView is GET /v1/generation?site=&since= (SPEC §7). With since,
// Primaries and Buckets hold only what changed after that table version; a
// primary mapped to "" was lost, Removed lists buckets that went away. Full
// is set when the answer is the whole table (no since, or since older than
// the kept history).
type GenerationView struct {
	Generation uint64                `json:"generation"`
	Version    uint64                `json:"version"`
	Site       string                `json:"site"`
	Peers      []GenerationPeer      `json:"peers"`
	Primaries  map[string]string     `json:"primaries"`
	Buckets    map[string]BucketInfo `json:"buckets"`
	Since      uint64                `json:"since,omitempty"`
	Full       bool                  `json:"full"`
	Removed    []string              `json:"removed,omitempty"`
	// LeftAtFrom is the table version from which buckets carry LeftAt
	// (stateData.LeftAtFrom; 0: not yet). An addition to SPEC §7's shape.
	LeftAtFrom uint64 `json:"left_at_from,omitempty"`
}

// GenerationPeer is a peer in the generation table.
type GenerationPeer struct {
	ID string `json:"id"`
	// GUID is the registered incarnation, the origin part of the ids of
	// its buckets: a replica checks a frame's sender against it.
	GUID  string            `json:"guid,omitempty"`
	Site  string            `json:"site"`
	State PeerState         `json:"state"`
	Attrs map[string]string `json:"attrs"`
}

// BucketInfo is a bucket in the generation table.
type BucketInfo struct {
	Index        string   `json:"index"`
	Earliest     int64    `json:"earliest"`
	Latest       int64    `json:"latest"`
	Hot          bool     `json:"hot"`
	SearchableOn []string `json:"searchable_on"`
	// Origin is the peer that created the bucket (fresh=true reads a hot
	// bucket from it). An addition to SPEC §7's shape.
	Origin string `json:"origin,omitempty"`
	// Sealed, Blocks and Checksum are the bucket's length once it is
	// fixed (rolled or sealed): a search head counts a warm bucket
	// complete only from a copy of exactly this length (SPEC §5
	// "Completeness"). For a hot bucket Blocks is 0 and only the origin
	// copy, or a replica the managers count whole, answers. Additions to
	// SPEC §7's shape.
	Sealed   bool   `json:"sealed,omitempty"`
	Blocks   int64  `json:"blocks,omitempty"`
	Checksum string `json:"checksum,omitempty"`
	// Provisional: the seal was computed from copies all known short
	// (fsm.Bucket.Provisional), so acknowledged blocks may lie past it;
	// a search head cannot prove the bucket complete. An addition to
	// SPEC §7's shape.
	Provisional bool `json:"provisional,omitempty"`
	// LeftAt is, per peer, the table version at which its copy last left
	// the searchable set while the bucket was hot (Bucket.LeftAt): a
	// search head that read a hot replica proves it whole with it
	// (searchhead confirmHotReplicas). An addition to SPEC §7's shape.
	LeftAt map[string]uint64 `json:"left_at,omitempty"`
}

// PeerView is one peer in GET /v1/peers.
type PeerView struct {
	ID         string            `json:"id"`
	GUID       string            `json:"guid"`
	Site       string            `json:"site"`
	Host       string            `json:"host,omitempty"`
	Attrs      map[string]string `json:"attrs,omitempty"`
	State      PeerState         `json:"state"`
	Since      int64             `json:"since"`
	Buckets    int               `json:"buckets"`
	Primaries  int               `json:"primaries"`
	Searchable int               `json:"searchable"`
	// Detention says who detained the peer ("manual", "disk"; detention.go).
	Detention DetentionBy `json:"detention,omitempty"`
}

// BucketView is one bucket in GET /v1/buckets: its copies and its primary
// per site (and site0).
type BucketView struct {
	ID       string            `json:"id"`
	Index    string            `json:"index"`
	Origin   string            `json:"origin"`
	Hot      bool              `json:"hot"`
	Sealed   bool              `json:"sealed"`
	Earliest int64             `json:"earliest"`
	Latest   int64             `json:"latest"`
	Size     int64             `json:"size"`
	Events   int64             `json:"events"`
	Copies   []CopyView        `json:"copies"`
	Primary  map[string]string `json:"primary"`
}

// CopyView is one copy in a BucketView.
type CopyView struct {
	Peer       string `json:"peer"`
	Site       string `json:"site"`
	Searchable bool   `json:"searchable"`
	Corrupt    bool   `json:"corrupt,omitempty"`
	// Short: a searchable copy known to miss acknowledged blocks (reported
	// short by its origin, or of a length other than the sealed one): it
	// answers no search until completed. An addition to SPEC §7's shape.
	Short bool `json:"short,omitempty"`
}

// peerCounts aggregates per-peer bucket, primary (own site's table) and
// searchable-copy counts in one pass.
func (s *State) peerCounts() map[string][3]int {
	out := map[string][3]int{}
	for _, id := range s.bucketIDs() {
		b := s.d.Buckets[id]
		for _, p := range sortedKeys(b.Copies) {
			v := out[p]
			v[0]++
			if b.Copies[p].Searchable {
				v[2]++
			}
			out[p] = v
		}
	}
	for _, id := range sortedKeys(s.d.Peers) {
		v := out[id]
		v[1] = s.primaryCount[s.peerSite(s.d.Peers[id])][id]
		out[id] = v
	}
	return out
}

// maxListed bounds the bucket lists of a site status.
const maxListed = 1000

// Status computes /v1/status (leader left empty); the bucket lists and the
// fixup list hold at most 1000 entries each. It reports generation, maintenance,
// RF/SF met, valid (site0 has a primary for every bucket) and complete
// (every bucket meets RF, SF and the site policy), per site with the failing
// buckets, per peer its counts, and the buckets that wait for fixup with the
// level and the open task they wait for. Its config is Config.WithoutTokens: no
// token secret nor digest of any form (review L1).
func (s *State) Status() Status {
	st := Status{
		Generation:           s.d.Generation,
		Maintenance:          s.d.Maintenance,
		ReplicationFactorMet: true,
		SearchFactorMet:      true,
		Sites:                map[string]SiteStatus{},
		Peers:                []PeerStatus{},
		Fixups:               []FixupStatus{},
		Config:               s.d.Config.WithoutTokens(),
	}
	ss := map[string]*SiteStatus{}
	for _, t := range s.tables() {
		ss[t] = &SiteStatus{Valid: true, Complete: true}
	}
	taskOf := map[string]*Task{}
	for _, id := range sortedTaskIDs(s.d.Tasks) {
		t := s.d.Tasks[id]
		if _, ok := taskOf[t.Bucket]; !ok {
			taskOf[t.Bucket] = t
		}
	}
	for _, id := range s.bucketIDs() {
		b := s.d.Buckets[id]
		n, t := s.needsOf(b), s.tallyOf(b)
		rf, sf := n.rfMet(t), n.sfMet(t)
		st.ReplicationFactorMet = st.ReplicationFactorMet && rf
		st.SearchFactorMet = st.SearchFactorMet && sf
		for _, table := range s.tables() {
			x := ss[table]
			if !s.validFor(b, table) {
				x.Valid = false
				if len(x.InvalidBuckets) < maxListed {
					x.InvalidBuckets = append(x.InvalidBuckets, id)
				}
			}
			complete := rf && sf
			if table != Site0 {
				complete = n.siteMet(t, table)
			}
			if !complete {
				x.Complete = false
				if len(x.IncompleteBuckets) < maxListed {
					x.IncompleteBuckets = append(x.IncompleteBuckets, id)
				}
			}
		}
		if len(st.Fixups) >= maxListed {
			continue
		}
		if task, ok := taskOf[id]; ok {
			st.Fixups = append(st.Fixups, FixupStatus{Bucket: id, Level: task.Level, Task: task.ID,
				Reason: fmt.Sprintf("task %d: %s", task.ID, describeTask(task))})
		} else if lvl, why, bad := s.bucketProblem(b); bad {
			st.Fixups = append(st.Fixups, FixupStatus{Bucket: id, Level: lvl, Reason: why})
		}
	}
	for _, t := range s.tables() {
		st.Sites[t] = *ss[t]
	}
	st.Valid = ss[Site0].Valid
	st.Complete = st.ReplicationFactorMet && st.SearchFactorMet && ss[Site0].Complete
	counts := s.peerCounts()
	for _, id := range sortedKeys(s.d.Peers) {
		p := s.d.Peers[id]
		c := counts[id]
		st.Peers = append(st.Peers, PeerStatus{ID: id, Site: s.peerSite(p), State: p.State,
			Buckets: c[0], Primaries: c[1], Searchable: c[2]})
	}
	return st
}

func describeTask(t *Task) string {
	switch t.Kind {
	case TaskReplicate:
		kind := "rawdata"
		if t.Searchable {
			kind = "searchable"
		}
		return fmt.Sprintf("replicate %s from %s to %s (%s)", kind, t.Source, t.Target, t.Reason)
	case TaskFetch:
		return fmt.Sprintf("fetch missing blocks from %s to %s (%s)", t.Source, t.Target, t.Reason)
	case TaskSeal, TaskFreeze:
		return fmt.Sprintf("%s (%s)", t.Kind, t.Reason)
	}
	return fmt.Sprintf("%s on %s (%s)", t.Kind, t.Target, t.Reason)
}

// ErrGenerationTooOld is returned for a generation older than the history.
var ErrGenerationTooOld = errors.New("generation older than the kept history")

// checkTable accepts a configured site, the default site of a single-site
// cluster, or site0.
func (s *State) checkTable(site string) error {
	if slices.Contains(s.tables(), site) {
		return nil
	}
	return fmt.Errorf("%w: %q is not a site of this cluster (tables: %v)", ErrBadSite, site, s.tables())
}

func (s *State) bucketInfo(b *Bucket) BucketInfo {
	on := searchableSet(b)
	if on == nil {
		on = []string{}
	}
	info := BucketInfo{Index: b.Index, Earliest: b.Earliest, Latest: b.Latest, Hot: b.Hot, SearchableOn: on, Origin: b.Origin,
		LeftAt: maps.Clone(b.LeftAt)}
	if b.Sealed {
		info.Sealed, info.Blocks, info.Checksum, info.Provisional = true, b.Blocks, b.LastChecksum, b.Provisional
	}
	return info
}

func (s *State) generationPeers() []GenerationPeer {
	out := []GenerationPeer{}
	for _, id := range sortedKeys(s.d.Peers) {
		p := s.d.Peers[id]
		if p.State == StateRemoved {
			continue
		}
		attrs := maps.Clone(p.Attrs)
		if attrs == nil {
			attrs = map[string]string{}
		}
		if p.Host != "" {
			if _, ok := attrs["host"]; !ok {
				attrs["host"] = p.Host
			}
		}
		out = append(out, GenerationPeer{ID: id, GUID: p.GUID, Site: s.peerSite(p), State: p.State, Attrs: attrs})
	}
	return out
}

// Generation computes /v1/generation for a site (a configured site, the
// default site, or site0). since = 0 gives the whole table; since > 0 the
// changes after that table version (primaries that changed, "" for lost;
// buckets whose entry changed; Removed buckets), or the whole table with
// Full set when since is older than the kept history. ErrBadSite for an
// unknown site.
func (s *State) Generation(site string, since uint64) (GenerationView, error) {
	if err := s.checkTable(site); err != nil {
		return GenerationView{}, err
	}
	v := GenerationView{Generation: s.d.Generation, Version: s.d.TableVersion, Site: site,
		Peers: s.generationPeers(), Primaries: map[string]string{}, Buckets: map[string]BucketInfo{}, Since: since,
		LeftAtFrom: s.d.LeftAtFrom}
	if since == 0 || since < s.d.HistoryFloor {
		v.Full = true
		for _, id := range s.bucketIDs() {
			b := s.d.Buckets[id]
			if p := b.Primary[site]; p != "" {
				v.Primaries[id] = p
			}
			v.Buckets[id] = s.bucketInfo(b)
		}
		return v, nil
	}
	removed := map[string]bool{}
	for i := len(s.d.History) - 1; i >= 0 && s.d.History[i].Version > since; i-- {
		d := s.d.History[i]
		b, exists := s.d.Buckets[d.Bucket]
		switch {
		case d.Removed:
			if !exists {
				removed[d.Bucket] = true
			}
		case !exists:
		case d.Site == "":
			v.Buckets[d.Bucket] = s.bucketInfo(b)
		case d.Site == site:
			v.Primaries[d.Bucket] = b.Primary[site]
		}
	}
	v.Removed = sortedKeys(removed)
	if len(v.Removed) == 0 {
		v.Removed = nil
	}
	return v, nil
}

// GenerationPeers is the head of a generation view without its primaries
// and buckets: generation, table version, site and the peer list.
func (s *State) GenerationPeers(site string) GenerationView {
	return GenerationView{Generation: s.d.Generation, Version: s.d.TableVersion, Site: site,
		Peers: s.generationPeers(), Primaries: map[string]string{}, Buckets: map[string]BucketInfo{}, LeftAtFrom: s.d.LeftAtFrom}
}

// PrimariesAt reconstructs a site's primary table as it was in an earlier
// generation, by undoing the kept deltas. ErrGenerationTooOld when the
// history no longer reaches it.
func (s *State) PrimariesAt(site string, generation uint64) (map[string]string, error) {
	if err := s.checkTable(site); err != nil {
		return nil, err
	}
	if generation < s.d.HistoryFloor {
		return nil, fmt.Errorf("%w: generation %d, history reaches back to %d", ErrGenerationTooOld, generation, s.d.HistoryFloor)
	}
	t := map[string]string{}
	for _, id := range s.bucketIDs() {
		if p := s.d.Buckets[id].Primary[site]; p != "" {
			t[id] = p
		}
	}
	for i := len(s.d.History) - 1; i >= 0 && s.d.History[i].Generation > generation; i-- {
		d := s.d.History[i]
		if d.Site != site || d.Removed {
			continue
		}
		if d.Old == "" {
			delete(t, d.Bucket)
		} else {
			t[d.Bucket] = d.Old
		}
	}
	return t, nil
}

// PeerList is GET /v1/peers, sorted by id.
func (s *State) PeerList() []PeerView {
	counts := s.peerCounts()
	out := []PeerView{}
	for _, id := range sortedKeys(s.d.Peers) {
		p := s.d.Peers[id]
		c := counts[id]
		out = append(out, PeerView{ID: id, GUID: p.GUID, Site: s.peerSite(p), Host: p.Host, Attrs: maps.Clone(p.Attrs),
			State: p.State, Since: p.Since, Buckets: c[0], Primaries: c[1], Searchable: c[2], Detention: p.Detention})
	}
	return out
}

// BucketList is GET /v1/buckets, filtered by index and by a peer holding a
// copy ("" for any), sorted by id.
func (s *State) BucketList(index, peer string) []BucketView {
	out := []BucketView{}
	for _, id := range s.bucketIDs() {
		b := s.d.Buckets[id]
		if index != "" && b.Index != index {
			continue
		}
		if _, ok := b.Copies[peer]; peer != "" && !ok {
			continue
		}
		out = append(out, s.bucketView(id, b))
	}
	return out
}

// BucketViews returns the views of the buckets named in ids that the state
// knows, in the order asked (unknown ids are left out): a point read per
// id, for a peer that asks about its own buckets (mgr.buckets) without
// listing the whole cluster.
func (s *State) BucketViews(ids []string) []BucketView {
	out := []BucketView{}
	for _, id := range ids {
		if b, ok := s.d.Buckets[id]; ok {
			out = append(out, s.bucketView(id, b))
		}
	}
	return out
}

func (s *State) bucketView(id string, b *Bucket) BucketView {
	bv := BucketView{ID: id, Index: b.Index, Origin: b.Origin, Hot: b.Hot, Sealed: b.Sealed,
		Earliest: b.Earliest, Latest: b.Latest, Size: b.Size, Events: b.Events,
		Copies: []CopyView{}, Primary: map[string]string{}}
	for _, p := range sortedKeys(b.Copies) {
		c := b.Copies[p]
		bv.Copies = append(bv.Copies, CopyView{Peer: p, Site: s.siteOf(p), Searchable: c.Searchable, Corrupt: c.Corrupt,
			Short: !usable(b, c) && c.Searchable && !c.Corrupt})
	}
	for _, t := range sortedKeys(b.Primary) {
		bv.Primary[t] = b.Primary[t]
	}
	return bv
}

// SealedLength is a sealed bucket's length: its blocks and last block's
// checksum (ok false when the bucket is unknown or not sealed). A point
// read, so callers need not encode the state to find one bucket's record.
func (s *State) SealedLength(id string) (blocks int64, lastChecksum string, ok bool) {
	b, found := s.d.Buckets[id]
	if !found || !b.Sealed {
		return 0, "", false
	}
	return b.Blocks, b.LastChecksum, true
}
