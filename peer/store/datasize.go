package store

import (
	"maps"
	"time"
)

// Per-index roll sizes: the cluster config's max_data_size (Splunk's
// maxDataSize), pushed to running peers. A hot bucket of an index with a
// size set rolls once its event bytes (uncompressed, as MaxHotBytes counts
// them) reach that size or MaxHotBytes, whichever is smaller; a bucket
// already past a size lowered while it was hot rolls at its next append.

// SetMaxDataSizes replaces the per-index roll sizes (index → bytes; absent
// or 0: MaxHotBytes alone). It takes effect at the next Append.
func (l Limits) SetMaxDataSizes(sizes map[string]int64) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dataSizes = maps.Clone(sizes)
}

// MaxDataSize is the size at which a hot bucket of index rolls.
func (l Limits) MaxDataSize(index string) int64 {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return l.rollBytes(index)
}

// rollBytes is MaxDataSize with s.mu held.
func (l Limits) rollBytes(index string) int64 {
	s := l.s
	if n := s.dataSizes[index]; n > 0 && n < s.opts.MaxHotBytes {
		return n
	}
	return s.opts.MaxHotBytes
}

// SetRollLimits replaces the roll limits the store was opened with (a
// cluster peer takes them from the managers' config, SPEC §3): a hot bucket
// rolls at maxHotBytes, spans at most maxHotSpan, and an index keeps at
// most maxHotBuckets hot. A value ≤ 0 leaves that limit as it is. It
// takes effect at the next Append; a bucket already past a lowered
// maxHotBytes rolls then.
func (l Limits) SetRollLimits(maxHotBytes int64, maxHotSpan time.Duration, maxHotBuckets int) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if maxHotBytes > 0 {
		s.opts.MaxHotBytes = maxHotBytes
	}
	if maxHotSpan > 0 {
		s.opts.MaxHotSpan = maxHotSpan
	}
	if maxHotBuckets > 0 {
		s.opts.MaxHotBuckets = maxHotBuckets
	}
}

// RollLimits are the roll limits in force.
func (l Limits) RollLimits() (maxHotBytes int64, maxHotSpan time.Duration, maxHotBuckets int) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.MaxHotBytes, s.opts.MaxHotSpan, s.opts.MaxHotBuckets
}
