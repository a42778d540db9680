package fsm

import "slices"

// Rebuilding the bucket table from the peers' inventories (DESIGN.md,
// "Rebuild from inventories"): when every manager's data is lost, fresh
// managers start with an empty table and the peers re-register with their
// inventories. RegisterPeer adopts the buckets nobody knew (apply.go), and
// adoptReported completes what one inventory cannot say on its own: the
// origin (named by the GUID in the bucket id) once that peer registers, and
// the widest time range and the longest copy's size seen so far. A warm
// bucket adopted this way has no sealed length; while its copies disagree on
// their length the planner holds it (awaitsRebuild: no replication, no
// excess removal, which could remove the longest copy), and RebuildSeals —
// run once by the operator when every peer is back — seals it at the longest
// copy with every holder's length, so the planner's streaming level fetches
// into the shorter copies as after any seal. No new command: the seals are
// ordinary SealBucket entries.

// adoptReported completes a known bucket from one more inventory entry: a
// bucket adopted before its origin registered gets its origin when the
// origin reports it (hot again when the origin still indexes it and it has
// no sealed length); a warm bucket without a sealed length takes the widest
// time range reported and the size and event count of its longest copy.
// Called inside mutateBucket from applyRegisterPeer, before the reported
// copy's length is recorded.
func (s *State) adoptReported(ch *change, b *Bucket, c *RegisterPeer, p *Peer, ci CopyInfo) {
	if b.Origin == "" {
		if _, _, guid, err := ParseBucketID(b.ID); err == nil && guid == c.GUID {
			b.Origin, b.OriginSite = c.ID, s.peerSite(p)
			if ci.Hot && !b.Sealed {
				b.Hot = true
			}
			s.bucketChanged(ch, b)
		}
	}
	if b.Hot || b.Sealed {
		return
	}
	if ci.Events > 0 || ci.Latest > 0 {
		if b.Events == 0 && b.Latest == 0 {
			b.Earliest, b.Latest = ci.Earliest, ci.Latest
		} else {
			b.Earliest, b.Latest = min(b.Earliest, ci.Earliest), max(b.Latest, ci.Latest)
		}
	}
	longest := true
	for _, peer := range sortedKeys(b.Copies) {
		if peer != c.ID && b.Copies[peer].Blocks >= ci.Blocks {
			longest = false
		}
	}
	if longest && ci.Blocks > 0 {
		if ci.Size > 0 {
			b.Size = ci.Size
		}
		if ci.Events > 0 {
			b.Events = ci.Events
		}
	}
}

// awaitsRebuild reports a warm bucket without a sealed length whose copies
// report different lengths: only a seal at the longest (RebuildSeals) says
// which copies are short, so the copy-making and excess levels leave it
// alone until then.
func awaitsRebuild(b *Bucket) bool {
	if b.Hot || b.Sealed {
		return false
	}
	var lengths []int64
	for _, peer := range sortedKeys(b.Copies) {
		if c := b.Copies[peer]; c.known() && !slices.Contains(lengths, c.Blocks) {
			lengths = append(lengths, c.Blocks)
		}
	}
	return len(lengths) > 1
}

// RebuildSeals returns the seals that finish a rebuild from inventories:
// every warm bucket without a sealed length and with at least one copy of a
// known length is sealed at its longest copy, with every known holder's
// length (no checksum: an inventory carries none), so the planner fetches
// into the shorter copies. Sealed and hot buckets are left alone, so running
// it again returns only what is still unsealed. Pure; buckets in id order.
func (s *State) RebuildSeals() []*SealBucket {
	var out []*SealBucket
	for _, id := range s.bucketIDs() {
		b := s.d.Buckets[id]
		if b.Hot || b.Sealed {
			continue
		}
		seal := &SealBucket{Bucket: id}
		for _, peer := range sortedKeys(b.Copies) {
			c := b.Copies[peer]
			if !c.known() {
				continue
			}
			seal.Lengths = append(seal.Lengths, PeerLength{Peer: peer, Blocks: c.Blocks})
			seal.Blocks = max(seal.Blocks, c.Blocks)
		}
		if seal.Blocks == 0 {
			continue
		}
		out = append(out, seal)
	}
	return out
}
