package fsm

// Status is GET /v1/status (SPEC §7) without the leader, which the manager
// fills in. Config is an addition for `quarry cluster status`.
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
}

// GenerationPeer is a peer in the generation table.
type GenerationPeer struct {
	ID    string            `json:"id"`
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
}

// Status computes /v1/status (leader left empty).
func (s *State) Status() Status { return Status{} }

// Generation computes /v1/generation for a site (a configured site, the
// default site, or site0); since > 0 asks for the changes after that table
// version. ErrBadSite for an unknown site.
func (s *State) Generation(site string, since uint64) (GenerationView, error) {
	return GenerationView{}, nil
}

// PeerList is GET /v1/peers, sorted by id.
func (s *State) PeerList() []PeerView { return nil }

// BucketList is GET /v1/buckets, filtered by index and by peer holding a
// copy ("" for any), sorted by id.
func (s *State) BucketList(index, peer string) []BucketView { return nil }
