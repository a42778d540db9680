package fsm

// The generation rule: an entry's changes are tracked in a change and
// committed once at its end (a new generation when an existing bucket's
// primary moved or the serving set changed), and the history of deltas is
// trimmed.

import (
	"slices"
	"sort"
)

// change tracks what one entry changed, so the generation rule is applied
// once at its end: a new generation begins exactly when an existing bucket's
// primary changed (any table) or the set of serving peers changed.
type change struct {
	idx    uint64
	moved  bool    // an existing bucket's primary changed
	deltas []Delta // Generation filled at commit
	table  bool    // something visible in the generation table changed
}

// begin starts tracking an entry's changes.
func (s *State) begin(idx uint64) *change { return &change{idx: idx} }

// commit applies the generation rule and records the deltas.
func (s *State) commit(ch *change) {
	if ch.moved || s.servingChanged() {
		s.d.Generation = ch.idx
		s.d.UpSet = s.servingSet()
		ch.table = true
	}
	if len(ch.deltas) > 0 {
		ch.table = true
	}
	if ch.table {
		s.d.TableVersion = ch.idx
	}
	for i := range ch.deltas {
		ch.deltas[i].Generation = s.d.Generation
	}
	s.d.History = append(s.d.History, ch.deltas...)
	s.trimHistory()
}

// trimHistory keeps the deltas of the last HistoryGenerations generations,
// and at most maxHistoryDeltas deltas; HistoryFloor remembers the newest
// version dropped, below which a since-query gets the full table.
//
// It runs at every commit, so it costs O(HistoryGenerations · log n), not
// O(n): the history is in nondecreasing generation order (a delta takes
// the generation current at its commit, and generations only grow), so the
// start of each of the last generations is found by binary search, and the
// cut reslices instead of copying (append reallocates once the capacity is
// spent, copying only the kept deltas, so the dropped prefix is freed then
// and the cost is amortised). Scanning and copying the whole history here
// made every command of a long generation cost O(history): building 20,000
// buckets took 5.3 s, growing quadratically (fsm/scale_test.go).
func (s *State) trimHistory() {
	h := s.d.History
	cut := 0
	end := len(h) // the deltas before end are of older generations
	for gens := 0; end > 0; gens++ {
		if gens == HistoryGenerations {
			cut = end
			break
		}
		g := h[end-1].Generation
		end = sort.Search(end, func(i int) bool { return h[i].Generation >= g })
	}
	if len(h)-cut > maxHistoryDeltas {
		cut = len(h) - maxHistoryDeltas
	}
	if cut > 0 {
		s.d.HistoryFloor = max(s.d.HistoryFloor, h[cut-1].Version)
		s.d.History = h[cut:]
	}
}

// maxHistoryDeltas bounds the delta history however long a generation lives.
const maxHistoryDeltas = 200000

// servingChanged reports whether the set of serving peers differs from
// UpSet, without sorting or allocating (commit asks at every entry; sorting
// 300 peer ids each time was a third of an entry's cost).
func (s *State) servingChanged() bool {
	n := 0
	for id, p := range s.d.Peers {
		if !p.State.Serving() {
			continue
		}
		n++
		if _, found := slices.BinarySearch(s.d.UpSet, id); !found {
			return true
		}
	}
	return n != len(s.d.UpSet)
}

func (s *State) servingSet() []string {
	var out []string
	for _, id := range sortedKeys(s.d.Peers) {
		if s.d.Peers[id].State.Serving() {
			out = append(out, id)
		}
	}
	return out
}

// tables lists the primary tables: every site (DefaultSite when single-site)
// and Site0.
func (s *State) tables() []string {
	return append(s.d.Config.SiteNames(), Site0)
}

// bucketChanged records a change of a bucket's generation-table entry.
func (s *State) bucketChanged(ch *change, b *Bucket) {
	b.Version = ch.idx
	ch.deltas = append(ch.deltas, Delta{Version: ch.idx, Bucket: b.ID})
}
