package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// PeerState is a peer's lifecycle state (SPEC §3).
type PeerState string

// Peer states. Up and Detention peers serve searches and may hold primaries;
// only Up peers take new data and replications.
const (
	StateUp               PeerState = "Up"
	StatePending          PeerState = "Pending"
	StateDown             PeerState = "Down"
	StateDecommissioning  PeerState = "Decommissioning"
	StateGracefulShutdown PeerState = "GracefulShutdown"
	StateRestarting       PeerState = "Restarting"
	StateDetention        PeerState = "Detention"
	StateRemoved          PeerState = "Removed"
)

var peerStates = []PeerState{StateUp, StatePending, StateDown, StateDecommissioning, StateGracefulShutdown, StateRestarting, StateDetention, StateRemoved}

// Serving reports whether a peer in this state answers searches, and so may
// hold primaries and counts in the "set of Up peers" of generation rule 1:
// Up, and Detention (which stops taking data but keeps serving searches).
func (s PeerState) Serving() bool { return s == StateUp || s == StateDetention }

// Valid reports whether s is one of the known states.
func (s PeerState) Valid() bool {
	for _, v := range peerStates {
		if v == s {
			return true
		}
	}
	return false
}

// Sentinel errors returned (wrapped, with the input) as Apply responses.
var (
	// ErrUnknownPeer: the command names a peer the FSM does not know.
	ErrUnknownPeer = errors.New("unknown peer")
	// ErrUnknownBucket: the command names a bucket the FSM does not know.
	ErrUnknownBucket = errors.New("unknown bucket")
	// ErrBucketExists: AddBucket for an id already present.
	ErrBucketExists = errors.New("bucket exists")
	// ErrCopyExists: AddCopy for a copy already present.
	ErrCopyExists = errors.New("copy exists")
	// ErrUnknownCopy: the peer holds no copy of that bucket.
	ErrUnknownCopy = errors.New("unknown copy")
	// ErrBadBucketID: a bucket id not of the form <index>~<localid>~<originGUID>,
	// or not matching its index or origin.
	ErrBadBucketID = errors.New("bad bucket id")
	// ErrUnknownIndex: an index neither declared nor auto-creatable.
	ErrUnknownIndex = errors.New("unknown index")
	// ErrPeerNotUp: the peer is not in a state that allows the command
	// (a target that is not Up, an origin that cannot take data).
	ErrPeerNotUp = errors.New("peer not up")
	// ErrGUIDInUse: RegisterPeer with a GUID another peer id holds.
	ErrGUIDInUse = errors.New("guid in use")
	// ErrBadState: an unknown peer state or a transition that is not allowed.
	ErrBadState = errors.New("bad peer state")
	// ErrBucketNotHot: roll or seal of a bucket that is already warm, or a
	// sealed length that contradicts the one committed.
	ErrBucketNotHot = errors.New("bucket not hot")
	// ErrNotOrigin: a roll sent by a peer that is not the bucket's origin
	// (RollBucket.Origin); only the origin may roll its hot bucket.
	ErrNotOrigin = errors.New("not the bucket's origin")
	// ErrHotOrigin: removing or demoting the origin copy of a hot bucket.
	ErrHotOrigin = errors.New("origin copy of a hot bucket")
	// ErrNotSealed: a copy length reported for a bucket whose length is not
	// sealed.
	ErrNotSealed = errors.New("bucket not sealed")
	// ErrSealMoved: an ExtendSeal verified against a sealed length that is
	// not the committed one (another copy extended it first, or it was
	// never that); the copy must be checked against the current seal.
	ErrSealMoved = errors.New("sealed length moved")
	// ErrSealFinal: an ExtendSeal of a bucket whose seal is final (not
	// Provisional): a copy holding every acknowledged block answered the
	// seal, so blocks past it were never acknowledged and a longer copy
	// is truncated instead.
	ErrSealFinal = errors.New("seal is final")
	// ErrUnknownTask: FixupDone for a task id that is not open.
	ErrUnknownTask = errors.New("unknown fixup task")
	// ErrTaskExists: CreateFixup for work an open task already does.
	ErrTaskExists = errors.New("fixup task exists")
	// ErrBadTask: a fixup task that does not make sense for the state.
	ErrBadTask = errors.New("bad fixup task")
)

// Peer is one indexer peer as the FSM knows it.
type Peer struct {
	ID    string            `json:"id"`
	GUID  string            `json:"guid"`
	Site  string            `json:"site"`
	Host  string            `json:"host,omitempty"`
	Attrs map[string]string `json:"attrs,omitempty"`
	State PeerState         `json:"state"`
	// Since is the time (unix ns, from the command) the state was entered.
	Since int64 `json:"since"`
	// Registered is the Raft index of the last RegisterPeer.
	Registered uint64 `json:"registered"`
	// Detention says who put the peer in detention ("" none); it outlives
	// Down and a re-registration (detention.go).
	Detention DetentionBy `json:"detention,omitempty"`
}

// Copy is one bucket's copy on one peer.
type Copy struct {
	Peer       string `json:"peer"`
	Searchable bool   `json:"searchable"`
	// Blocks is the journal length the peer last reported (0: unknown,
	// unless LengthKnown). LastChecksum is its last block's checksum when
	// reported ("" unknown).
	Blocks       int64  `json:"blocks,omitempty"`
	LastChecksum string `json:"last_checksum,omitempty"`
	// LengthKnown is set when Blocks came from a length report (a seal
	// answer, a length event, a finished fetch or truncate), so a copy
	// known to hold 0 blocks is told from one of unknown length. A copy
	// with Blocks > 0 is known either way (snapshots before this field).
	LengthKnown bool `json:"length_known,omitempty"`
	// Corrupt is set when the peer reported a checksum failure; a corrupt
	// copy counts for nothing.
	Corrupt bool `json:"corrupt,omitempty"`
	// Short is set when the origin reported that the copy misses blocks
	// that were acknowledged without it (CopyShort); see usable.
	Short bool `json:"short,omitempty"`
}

// known reports whether the copy's length is known.
func (c *Copy) known() bool { return c.LengthKnown || c.Blocks > 0 }

// atSealed reports whether a copy of a sealed bucket has the sealed length:
// the sealed blocks, and the sealed last checksum when both are known.
func (c *Copy) atSealed(b *Bucket) bool {
	return c.known() && c.Blocks == b.Blocks &&
		(c.LastChecksum == "" || b.LastChecksum == "" || c.LastChecksum == b.LastChecksum)
}

// confirmSeal clears a provisional seal when copy cp — not known short, so
// in the replication set for every acknowledgement and holding every
// acknowledged block — shows a length within the seal (blocks, as
// reported; a copy known longer than the seal is not counted: its length
// is what a truncate left).
// It reports whether the seal changed (a generation-table change).
func (b *Bucket) confirmSeal(cp *Copy, blocks int64) bool {
	if b.Provisional && !cp.Short && !cp.Corrupt && blocks > 0 && blocks <= b.Blocks && !(cp.known() && cp.Blocks > b.Blocks) {
		b.Provisional = false
		return true
	}
	return false
}

// releaseSeal clears a provisional seal once no copy that could confirm
// it is left (its holders are all known short).
func (b *Bucket) releaseSeal() bool {
	if !b.Provisional {
		return false
	}
	for _, c := range b.Copies {
		if !c.Short {
			return false
		}
	}
	b.Provisional = false
	return true
}

// SealAnsweredWhole reports whether one of holders — the peers that
// answered a seal of bucket id — holds a copy not known short, or is its
// origin: such a copy holds every acknowledged block, so a seal at the
// longest answer is final (SealBucket.Final).
func (s *State) SealAnsweredWhole(id string, holders []string) bool {
	b := s.d.Buckets[id]
	if b == nil {
		return false
	}
	for _, h := range holders {
		if c, ok := b.Copies[h]; ok && (h == b.Origin || !c.Short) && !c.Corrupt {
			return true
		}
	}
	return false
}

// setLength records a reported length.
func (c *Copy) setLength(blocks int64, checksum string) {
	c.Blocks, c.LastChecksum, c.LengthKnown = blocks, checksum, true
}

// Bucket is one bucket and its copies.
type Bucket struct {
	ID     string `json:"id"`
	Index  string `json:"index"`
	Origin string `json:"origin"` // peer id of the origin
	// OriginSite is the origin's site when the bucket was created; the
	// policy's origin count applies there.
	OriginSite string `json:"origin_site"`
	Hot        bool   `json:"hot"`
	Earliest   int64  `json:"earliest"` // unix ns
	Latest     int64  `json:"latest"`   // unix ns
	Size       int64  `json:"size"`
	Events     int64  `json:"events"`
	// Sealed is set once the bucket's length is fixed (roll by its origin,
	// or streaming fixup after the origin went Down).
	Sealed       bool   `json:"sealed,omitempty"`
	Blocks       int64  `json:"blocks,omitempty"`
	LastChecksum string `json:"last_checksum,omitempty"`
	// Provisional is set on a seal (cluster version SealFinalVersion)
	// computed from copies none of which is known to hold every
	// acknowledged block — every holder that answered was reported short —
	// so acknowledged blocks may lie past it on copies the managers could
	// not reach. Only a provisional seal may be extended (ExtendSeal); a
	// search cannot prove such a bucket complete (BucketInfo.Provisional).
	// It clears when a copy not known short shows a length within the
	// seal (confirmSeal), when an extension comes from such a copy, or
	// when no such copy is left to come back (a peer removed).
	Provisional bool `json:"provisional,omitempty"`
	// Degraded is set when the targets chosen at creation could not meet the
	// policy (a site was down); fixup restores it.
	Degraded bool `json:"degraded,omitempty"`
	// Created is the Raft index of AddBucket; Version the Raft index of the
	// last change visible in the generation table (time range, hot, the
	// searchable copies).
	Created uint64 `json:"created"`
	Version uint64 `json:"version"`
	// LeftAt is, per peer, the Raft index at which its copy last left the
	// bucket's searchable set while the bucket stayed hot (marked short or
	// corrupt, or dropped; recorded from cluster version LeftAtVersion).
	// It outlives the copy's return to the set and the copy itself, so a
	// search head that read a hot replica can tell, after the bucket was
	// sealed longer than the read, whether the replica was whole the whole
	// time since the table it planned with (searchhead confirmHotReplicas):
	// the ack rule acknowledges a block without a replica only after the
	// managers marked it short. Nil when no copy ever left.
	LeftAt map[string]uint64 `json:"left_at,omitempty"`
	// Copies by peer id.
	Copies map[string]*Copy `json:"copies"`
	// Primary by site name (and Site0): the peer id.
	Primary map[string]string `json:"primary"`

	// held is what the retention index holds for the bucket (derived,
	// incremental.go).
	held retKey
}

// BucketID builds a bucket id, <index>~<localid>~<originGUID> (SPEC §2).
func BucketID(index, localID, originGUID string) string {
	return index + "~" + localID + "~" + originGUID
}

// ParseBucketID splits a bucket id into its index, local id and origin GUID.
func ParseBucketID(id string) (index, localID, originGUID string, err error) {
	parts := strings.Split(id, "~")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("%w: %q is not <index>~<localid>~<originGUID>", ErrBadBucketID, id)
	}
	return parts[0], parts[1], parts[2], nil
}

// TaskKind is the work a fixup task asks for.
type TaskKind string

// Fixup task kinds.
const (
	// TaskSeal: collect the surviving copies' lengths of a hot bucket whose
	// origin is gone, commit SealBucket at the longest.
	TaskSeal TaskKind = "seal"
	// TaskTruncate (destructive): cut a copy longer than the sealed length.
	TaskTruncate TaskKind = "truncate"
	// TaskFetch: a copy shorter than the sealed length fetches the rest.
	TaskFetch TaskKind = "fetch"
	// TaskReplicate: stream the bucket from Source to Target, which holds
	// it searchable or not as Searchable says.
	TaskReplicate TaskKind = "replicate"
	// TaskMakeSearchable: Target rebuilds the index of its rawdata copy.
	TaskMakeSearchable TaskKind = "make_searchable"
	// TaskRemoveCopy (destructive): Target deletes its copy (corrupt or
	// excess copies, a decommissioned peer's leftovers).
	TaskRemoveCopy TaskKind = "remove_copy"
	// TaskFreeze (destructive): every copy of a bucket past retention is
	// deleted; done removes the bucket.
	TaskFreeze TaskKind = "freeze"
	// TaskRoll: Target, the origin of a hot bucket whose copies fall short
	// of the policy while peers that could hold them are Up (the bucket
	// began while a site or peers were away), rolls it, so the warm bucket
	// gets its copies through ordinary fixup and new data gets a full set
	// of targets (Splunk's manager asks origins to roll for fixup too).
	TaskRoll TaskKind = "roll"
)

// Destructive reports whether tasks of this kind destroy data, so a peer
// confirms them against the leader's committed state before acting.
func (k TaskKind) Destructive() bool {
	return k == TaskTruncate || k == TaskRemoveCopy || k == TaskFreeze
}

// Level is a fixup priority level, in Splunk's order (lower runs first).
type Level int

// Fixup levels, highest priority first.
const (
	LevelCorruption Level = iota + 1
	LevelStreaming
	LevelDataSafety
	LevelGeneration
	LevelReplication
	LevelSearch
	LevelExcess
	LevelRetention
)

var levelNames = map[Level]string{
	LevelCorruption:  "corruption",
	LevelStreaming:   "streaming",
	LevelDataSafety:  "data_safety",
	LevelGeneration:  "generation",
	LevelReplication: "replication_factor",
	LevelSearch:      "search_factor",
	LevelExcess:      "excess",
	LevelRetention:   "retention",
}

func (l Level) String() string {
	if s, ok := levelNames[l]; ok {
		return s
	}
	return fmt.Sprintf("level(%d)", int(l))
}

// MarshalText writes the level's name; an unknown level is an error, so
// Encode never writes a command a follower could not read.
func (l Level) MarshalText() ([]byte, error) {
	s, ok := levelNames[l]
	if !ok {
		return nil, fmt.Errorf("unknown fixup level %d", int(l))
	}
	return []byte(s), nil
}

// UnmarshalText reads a level's name.
func (l *Level) UnmarshalText(b []byte) error {
	for k, v := range levelNames {
		if v == string(b) {
			*l = k
			return nil
		}
	}
	return fmt.Errorf("unknown fixup level %q", b)
}

// Task is a fixup task record. Its id is the Raft index of the CreateFixup
// that made it, so every manager names it alike and a new leader continues
// it instead of repeating it.
type Task struct {
	ID     uint64   `json:"id"`
	Kind   TaskKind `json:"kind"`
	Level  Level    `json:"level"`
	Bucket string   `json:"bucket"`
	// Source is the peer that sends (replicate, fetch); Target the peer that
	// acts or receives. Seal and freeze are coordinated by the manager and
	// leave Target empty.
	Source      string `json:"source,omitempty"`
	Target      string `json:"target,omitempty"`
	Searchable  bool   `json:"searchable,omitempty"`
	Destructive bool   `json:"destructive"`
	Reason      string `json:"reason"`
	Created     int64  `json:"created"` // unix ns, from the command
}

// State is the whole cluster state. Read it only inside FSM.Read; mutate it
// only through Apply.
type State struct {
	d stateData
	// primaryCount[site][peer] counts the primaries a peer holds in a site's
	// table; derived, rebuilt on restore.
	primaryCount map[string]map[string]int
	// copyCount[peer] counts copies a peer holds; derived.
	copyCount map[string]int
	// requests maps remembered request ids to their index; derived.
	requests map[string]uint64
	// ids caches the sorted bucket ids (bucketIDs), idset keeps them in
	// order; derived. sortedHint, set by the snapshot reader, is the
	// bucket ids in the order read when that order is sorted.
	ids        *idCache
	idset      *idSet
	sortedHint []string
	// byPeer indexes the buckets by the peers holding a copy (copyIndex);
	// derived, nil until a write path needs it.
	byPeer *copyIndex
	// unsettled holds the ids of the buckets the planner must visit,
	// unsettledVer counts its changes, and ret is the retention index
	// (derived, incremental.go); unsettledList caches the sorted ids (the
	// planner's private state only); needs caches needsOf per origin site
	// until the config changes; touched collects the buckets the entry
	// being applied edited, each with its current record (nil: removed).
	unsettled        map[string]struct{}
	unsettledVer     uint64
	unsettledList    []string
	unsettledListVer uint64
	ret              *retention
	needs            map[string]needs
	touched          map[string]*Bucket
	// base, gone and nBuckets are set in the planner's private state only
	// (planCopy): base is the committed state's bucket map, shared and
	// never written; d.Buckets holds the buckets the simulation edited
	// (copied from base on first edit), gone the base buckets it removed,
	// nBuckets the table's size.
	base     map[string]*Bucket
	gone     map[string]struct{}
	nBuckets int
	// supports is the highest cluster version the build applying this
	// state supports (Version; lower in tests that play an older build).
	// Not part of the state: a property of the process.
	supports int
}

// stateData is everything a snapshot holds. encoding/json writes struct
// fields in order and map keys sorted, so its encoding is deterministic.
type stateData struct {
	Version      int                `json:"version"`
	Applied      uint64             `json:"applied"`
	Generation   uint64             `json:"generation"`
	TableVersion uint64             `json:"table_version"`
	Config       Config             `json:"config"`
	Maintenance  bool               `json:"maintenance"`
	Indexes      []string           `json:"indexes"` // sorted; declared and auto-created
	Peers        map[string]*Peer   `json:"peers"`
	Buckets      map[string]*Bucket `json:"buckets"`
	Tasks        map[uint64]*Task   `json:"tasks"`
	// Frozen holds the tombstones of frozen buckets (frozen.go).
	Frozen map[string]*Frozen `json:"frozen,omitempty"`
	// UpSet is the sorted set of serving peers as of the current generation.
	UpSet []string `json:"up_set"`
	// History holds the primary-table deltas of the last generations.
	History []Delta `json:"history"`
	// HistoryFloor is the newest version whose deltas were dropped: a
	// since-query older than it gets the whole table.
	HistoryFloor uint64 `json:"history_floor"`
	// Requests remembers recent request ids and the index that applied them.
	Requests []RequestRecord `json:"requests"`
	// ClusterVersion is the command-set version the group agreed
	// (SetClusterVersion); 0 in snapshots from before it, read as 1.
	ClusterVersion int `json:"cluster_version,omitempty"`
	// LeftAtFrom is the Raft index from which Bucket.LeftAt is recorded:
	// the SetClusterVersion that raised the cluster version to
	// LeftAtVersion or beyond (0: not recorded yet). A search head trusts
	// the absence of a LeftAt entry only for tables from then on.
	LeftAtFrom uint64 `json:"left_at_from,omitempty"`
	// Marks are the fixup delivery marks of open tasks, by task id
	// (MarkFixup, version.go); a closed task's marks go with it.
	Marks map[uint64]*TaskMarks `json:"marks,omitempty"`
	// Bundle is the configuration bundle in force (bundle.go), nil: none.
	Bundle *ConfigBundle `json:"bundle,omitempty"`
	// Saved holds the saved searches and their slots (savedsearch.go);
	// nil in snapshots from before them and while there are none.
	Saved *savedSearches `json:"saved_searches,omitempty"`
	// TokenKey is the cluster's token key (tokenkey.go); nil in snapshots
	// from before it and until the leader proposed it. Never shown by a
	// read: Marshal's bytes are hashed (GET /v1/state/hash), never served.
	TokenKey []byte `json:"token_key,omitempty"`
}

// RequestRecord remembers one applied request id.
type RequestRecord struct {
	ID    string `json:"id"`
	Index uint64 `json:"index"`
}

// Delta is one change in the generation table: a primary that moved (Peer
// empty: the bucket lost its primary for Site), a bucket that changed (Site
// empty), or a bucket that went away (Removed).
type Delta struct {
	Version    uint64 `json:"version"`    // Raft index of the change
	Generation uint64 `json:"generation"` // generation after the change
	Site       string `json:"site,omitempty"`
	Bucket     string `json:"bucket"`
	Peer       string `json:"peer,omitempty"`
	Old        string `json:"old,omitempty"` // the primary before (primary deltas)
	Removed    bool   `json:"removed,omitempty"`
}

// HistoryGenerations is how many generations of deltas the FSM keeps
// (SPEC §3 asks for at least 32).
const HistoryGenerations = 64

// maxRequests bounds the remembered request ids.
const maxRequests = 4096

func newState() *State {
	s := &State{d: stateData{
		Version: 1,
		Config:  DefaultConfig(),
		Indexes: []string{"main"},
		Peers:   map[string]*Peer{},
		Buckets: map[string]*Bucket{},
		Tasks:   map[uint64]*Task{},
	}, supports: Version}
	s.rebuildDerived()
	return s
}

// AppliedIndex is the Raft index of the last applied command.
func (s *State) AppliedIndex() uint64 { return s.d.Applied }

// CurrentGeneration is the current generation id: the Raft index of the
// entry that began it (0 before the first).
func (s *State) CurrentGeneration() uint64 { return s.d.Generation }

// TableVersion is the Raft index of the last change to the generation table
// (peers, buckets, searchable copies, primaries).
func (s *State) TableVersion() uint64 { return s.d.TableVersion }

// Config returns the current config.
func (s *State) Config() Config { return s.d.Config }

// Maintenance reports whether maintenance mode is on.
func (s *State) Maintenance() bool { return s.d.Maintenance }

// Peer returns a copy of one peer's record.
func (s *State) Peer(id string) (Peer, bool) {
	p, ok := s.d.Peers[id]
	if !ok {
		return Peer{}, false
	}
	return *p, true
}

// Tasks returns the open fixup tasks, by id.
func (s *State) Tasks() []Task {
	out := make([]Task, 0, len(s.d.Tasks))
	for _, id := range sortedTaskIDs(s.d.Tasks) {
		out = append(out, *s.d.Tasks[id])
	}
	return out
}

// Task returns a copy of one open fixup task; false when no task of that
// id is open (done, failed or never created).
func (s *State) Task(id uint64) (Task, bool) {
	t, ok := s.d.Tasks[id]
	if !ok {
		return Task{}, false
	}
	return *t, true
}

// Indexes returns the known index names, sorted.
func (s *State) Indexes() []string { return append([]string(nil), s.d.Indexes...) }

// peerSite is the effective site of a peer: DefaultSite in single-site mode.
func (s *State) peerSite(p *Peer) string {
	if !s.d.Config.Multisite() {
		return DefaultSite
	}
	return p.Site
}

func (s *State) serving(peer string) bool {
	p, ok := s.d.Peers[peer]
	return ok && p.State.Serving()
}

func (s *State) rebuildDerived() {
	s.ids = &idCache{}
	s.byPeer = nil
	s.primaryCount = map[string]map[string]int{}
	s.copyCount = map[string]int{}
	s.requests = map[string]uint64{}
	for _, r := range s.d.Requests {
		s.requests[r.ID] = r.Index
	}
	ids := s.sortedHint
	s.sortedHint = nil
	if len(ids) != len(s.d.Buckets) {
		ids = sortedKeys(s.d.Buckets)
	}
	keys := make([]idKey, len(ids))
	for i, id := range ids {
		keys[i] = idKey(id)
	}
	s.idset = &idSet{owner: s, chunked: fromSorted(keys)}
	s.ids.p.Store(&idList{owner: s, ids: ids})
	for _, b := range s.d.Buckets {
		for site, p := range b.Primary {
			s.incPrimary(site, p, 1)
		}
		for p := range b.Copies {
			s.copyCount[p]++
		}
	}
	// The copy index, each peer's set sized from its count (no rehash).
	ci := &copyIndex{owner: s, m: make(map[string]map[string]struct{}, len(s.copyCount))}
	for p, n := range s.copyCount {
		ci.m[p] = make(map[string]struct{}, n)
	}
	for _, id := range ids {
		for p := range s.d.Buckets[id].Copies {
			ci.m[p][id] = struct{}{}
		}
	}
	s.byPeer = ci
	s.rebuildIncremental()
}

func (s *State) incPrimary(site, peer string, d int) {
	m := s.primaryCount[site]
	if m == nil {
		m = map[string]int{}
		s.primaryCount[site] = m
	}
	m[peer] += d
	if m[peer] == 0 {
		delete(m, peer)
	}
}

func sortedTaskIDs(m map[uint64]*Task) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
