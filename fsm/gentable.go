package fsm

import (
	"iter"
	"maps"
)

// GenerationTable is a site's generation table as a reader keeps it
// current from GenerationView answers (a whole table, then the changes
// after the version it holds). It is the one delta rule, shared by the
// search heads' tables and the peers' cache of them:
//
//   - A Full view replaces the primaries and the buckets.
//   - Otherwise each primary the view names is set, or removed when it is
//     mapped to "" (lost), and each bucket entry it names is set.
//   - The buckets the view lists as Removed leave the primaries and the
//     buckets.
//   - The generation and the peers are the view's.
//   - A view older than the one held (a follower behind the manager that
//     answered before) is ignored.
//
// A reader keeps only what it needs (NewGenerationTableOf): an entry it
// does not keep is removed as a lost one is, so what it holds is always
// the projection of the whole table. A GenerationTable is not safe for
// concurrent use; its reader locks it.
type GenerationTable[B any] struct {
	keepPrimary func(peer string) bool
	keepBucket  func(BucketInfo) (B, bool)

	held       bool // a view was applied
	generation uint64
	version    uint64
	leftAtFrom uint64
	peers      map[string]GenerationPeer
	primaries  map[string]string // bucket → primary peer
	buckets    map[string]B
}

// NewGenerationTable is a table that keeps every primary and every bucket
// entry whole.
func NewGenerationTable() *GenerationTable[BucketInfo] {
	return NewGenerationTableOf(nil, func(b BucketInfo) (BucketInfo, bool) { return b, true })
}

// NewGenerationTableOf is a table that keeps the primaries keepPrimary
// accepts (nil: all) and, of each bucket entry, what keepBucket makes of
// it (false: nothing, the bucket leaves the table; nil keepBucket: no
// bucket entries at all).
func NewGenerationTableOf[B any](keepPrimary func(peer string) bool, keepBucket func(BucketInfo) (B, bool)) *GenerationTable[B] {
	return &GenerationTable[B]{keepPrimary: keepPrimary, keepBucket: keepBucket,
		peers: map[string]GenerationPeer{}, primaries: map[string]string{}, buckets: map[string]B{}}
}

// Apply applies a view by the delta rule and reports whether it did
// (false: the view is older than the table held).
func (t *GenerationTable[B]) Apply(v GenerationView) bool {
	if t.held && v.Version < t.version {
		return false
	}
	t.held, t.generation, t.version, t.leftAtFrom = true, v.Generation, v.Version, v.LeftAtFrom
	peers := make(map[string]GenerationPeer, len(v.Peers))
	for _, p := range v.Peers {
		peers[p.ID] = p
	}
	t.peers = peers
	if v.Full {
		t.primaries, t.buckets = map[string]string{}, map[string]B{}
	}
	for b, p := range v.Primaries {
		if p != "" && (t.keepPrimary == nil || t.keepPrimary(p)) {
			t.primaries[b] = p
		} else {
			delete(t.primaries, b)
		}
	}
	if t.keepBucket != nil {
		for b, info := range v.Buckets {
			if kept, ok := t.keepBucket(info); ok {
				t.buckets[b] = kept
			} else {
				delete(t.buckets, b)
			}
		}
	}
	for _, b := range v.Removed {
		delete(t.primaries, b)
		delete(t.buckets, b)
	}
	return true
}

// Generation is the generation of the last view applied.
func (t *GenerationTable[B]) Generation() uint64 { return t.generation }

// Version is the table version of the last view applied (0 before one).
func (t *GenerationTable[B]) Version() uint64 { return t.version }

// LeftAtFrom is the table version from which bucket entries carry LeftAt
// (GenerationView.LeftAtFrom; 0: not recorded).
func (t *GenerationTable[B]) LeftAtFrom() uint64 { return t.leftAtFrom }

// Peer is a peer of the table.
func (t *GenerationTable[B]) Peer(id string) (GenerationPeer, bool) {
	p, ok := t.peers[id]
	return p, ok
}

// Peers are the table's peers, by id, in no order.
func (t *GenerationTable[B]) Peers() iter.Seq2[string, GenerationPeer] { return maps.All(t.peers) }

// Primary is the primary peer of a bucket ("", false: none kept).
func (t *GenerationTable[B]) Primary(bucket string) (string, bool) {
	p, ok := t.primaries[bucket]
	return p, ok
}

// Primaries are the primaries kept, bucket → peer, in no order.
func (t *GenerationTable[B]) Primaries() iter.Seq2[string, string] { return maps.All(t.primaries) }

// PrimaryCount is the number of primaries kept.
func (t *GenerationTable[B]) PrimaryCount() int { return len(t.primaries) }

// Bucket is what the table keeps of a bucket's entry.
func (t *GenerationTable[B]) Bucket(id string) (B, bool) {
	b, ok := t.buckets[id]
	return b, ok
}

// Buckets are the bucket entries kept, by id, in no order.
func (t *GenerationTable[B]) Buckets() iter.Seq2[string, B] { return maps.All(t.buckets) }

// BucketCount is the number of bucket entries kept.
func (t *GenerationTable[B]) BucketCount() int { return len(t.buckets) }
