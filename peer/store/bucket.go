package store

import (
	"encoding/hex"
	"hash"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/query"
)

// CopyInfo is one copy in the per-copy inventory (GET /v1/buckets).
type CopyInfo struct {
	ID               string `json:"id"`
	Index            string `json:"index"`
	State            string `json:"state"`
	Searchable       bool   `json:"searchable"`
	Events           uint32 `json:"events"`
	SearchableEvents uint32 `json:"searchable_events"`
	Blocks           int    `json:"blocks"`
	JournalBytes     int64  `json:"journal_bytes"`
	IndexBytes       int64  `json:"index_bytes"`
	Earliest         int64  `json:"earliest"`
	Latest           int64  `json:"latest"`
	ContentHash      string `json:"content_hash"`
	Problem          string `json:"problem,omitempty"`
	// Quarantine marks the bucket that holds an index's events far from
	// the origin's clock (placement.go); origin copies only.
	Quarantine bool `json:"quarantine,omitempty"`
}

// Inventory lists every copy: events and blocks count what is durable in
// its journal; the content hash is SHA-256 over the blocks' checksums, so
// two copies with the same blocks have the same hash.
func (s *Store) Inventory() []CopyInfo {
	var out []CopyInfo
	for _, b := range s.sortedBuckets() {
		out = append(out, b.info())
	}
	return out
}

// Bucket is one copy on this peer.
type Bucket struct {
	s       *Store
	id      string
	index   string
	localID uint64
	dir     string

	mu            sync.RWMutex
	state         State
	searchable    bool
	blocks        []blockInfo // durable blocks
	pending       []*sealedBlock
	events        uint32 // events in durable blocks
	journalBytes  int64
	hash          hash.Hash
	contentHash   string
	rd            *cachedFile // the journal, read through the file cache
	hidx          *hotIndex
	widx          *indexReader
	meta          metaInfo
	problem       string
	journalClosed chan struct{}
	// reopenable: a hot replica rolled by this process's open, which its
	// origin may still extend (reopenReplica); cleared once reopened or cut.
	reopenable bool

	// append side, guarded by Store.mu
	open         *blockBuilder
	openTok      *blockToken
	openFirstOrd uint32
	openSince    time.Time
	appended     uint32
	rawBytes     int64
	minT, maxT   int64
	nextBlock    uint32
	lastUse      int64
	lastWrite    time.Time // when the last event was appended (MaxHotIdle)

	replica    bool          // a hot replica written by ReplicaAppend (replica.go)
	sealHold   bool          // answered a seal task: no more origin blocks while hot (HoldForSeal); b.mu
	quarantine bool          // the index's quarantine bucket (placement.go); set at creation
	ackCopies  int           // copy.json's ack_copies (0: not recorded); set at creation
	rollRetry  time.Duration // roller only: the pause before retrying a roll short of descriptors

	// writer side, owned by the writer goroutine
	jf      *os.File
	jsize   int64
	written []blockInfo
}

// State of a copy.
type State string

// Copy states.
const (
	StateHot     State = "hot"
	StateRolling State = "rolling"
	StateWarm    State = "warm"
	StateCorrupt State = "corrupt"
	StateRemoved State = "removed"
)

func (b *Bucket) info() CopyInfo {
	b.mu.RLock()
	defer b.mu.RUnlock()
	ci := CopyInfo{ID: b.id, Index: b.index, State: string(b.state), Searchable: b.searchable,
		Events: b.events, Blocks: len(b.blocks), JournalBytes: b.journalBytes, Problem: b.problem,
		Earliest: 0, Latest: -1, Quarantine: b.quarantine}
	for i, bl := range b.blocks {
		if i == 0 || bl.minT < ci.Earliest {
			ci.Earliest = bl.minT
		}
		if i == 0 || bl.maxT > ci.Latest {
			ci.Latest = bl.maxT
		}
	}
	switch {
	case b.state == StateWarm:
		ci.ContentHash = b.contentHash
		ci.IndexBytes = b.meta.IndexBytes
		if b.searchable {
			ci.SearchableEvents = b.events
		}
	case b.hash != nil:
		ci.ContentHash = hex.EncodeToString(b.hash.Sum(nil))
		if b.searchable && b.hidx != nil {
			ci.SearchableEvents = b.hidx.length()
		}
	}
	return ci
}

// ID is the bucket id.
func (b *Bucket) ID() string { return b.id }

func (b *Bucket) segment() query.Segment {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if !b.searchable {
		return nil
	}
	switch b.state {
	case StateWarm:
		if b.widx == nil {
			return nil
		}
		return &warmSegment{b: b, r: b.widx}
	case StateHot, StateRolling:
		if b.hidx == nil {
			return nil
		}
		h := b.hidx
		h.mu.RLock()
		seg := &hotSegment{b: b, h: h, n: h.n, times: h.times[:h.n:h.n]}
		h.mu.RUnlock()
		return seg
	}
	return nil
}

// helpers for ids on disk
func parseBucketDir(name string) (index string, localID uint64, guid string, ok bool) {
	// Bucket ids arrive from the network (replication, fixups) and name
	// directories: nothing but <index>~<number>~<guid> is one.
	index, local, guid, err := fsm.ValidBucketID(name)
	if err != nil {
		return "", 0, "", false
	}
	id, err := strconv.ParseUint(local, 10, 64)
	if err != nil {
		return "", 0, "", false
	}
	return index, id, guid, true
}
