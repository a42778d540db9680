package query

// Distinct counts instead of sets (issue 27): a search whose buckets (after
// the head prunes them by time) all go first to one peer in one request
// gets one partial for them all — the peer combines every bucket's into one
// batch — so nothing merges its dc sets: the peer can send each dc's count
// (aggState.DN) instead of the set, which for `stats dc(clientip) by host`
// over an hour is 42k addresses front-coded, shipped and decoded for fifty
// numbers. The head asks (api.SearchRequest.DistinctCounts,
// SetDistinctCounts) only for such a search. A site's searchable copies
// often all sit on the peer that ingested them, so this is most searches
// of a small cluster.
//
// The head never adds two counts: a count that meets any other part of the
// same group's dc (a second partial for the group — another bucket a peer
// answered that the head's table did not know, a bucket split over
// batches) makes the merge undecided, Merge answers ErrDistinctUndecided
// and the head runs the search again with sets. The answer is always the
// one sets give.

import (
	"errors"
	"fmt"
)

// ErrDistinctUndecided is Merge's answer when a distinct count would have
// to be merged with another part of the same dc: the caller searches again
// without SetDistinctCounts.
var ErrDistinctUndecided = errors.New("a distinct count met another part of the same dc; search again with sets")

// SetDistinctCounts makes EncodePartial send each dc's count instead of its
// set (the head asked: the search covers one bucket), and makes the head's
// CheckPartial accept such counts (only when on).
func (p *Plan) SetDistinctCounts(on bool) { p.forms.distinct = on && p.HasDistinct() }

// DistinctCounts reports whether EncodePartial sends dc counts (the head
// asked, SetDistinctCounts): the peer then sends one partial for all its
// buckets.
func (p *Plan) DistinctCounts() bool { return p.forms.distinct }

// HasDistinct reports whether the search is a stats with a dc: the one
// split whose finalize reads each group's dc on its own (a timechart's
// OTHER column unions the sets of several series).
func (p *Plan) HasDistinct() bool {
	if _, ok := p.split.(StatsCmd); !ok {
		return false
	}
	for _, s := range p.aggSpecs {
		if s.Func == "dc" {
			return true
		}
	}
	return false
}

// dcSpecs marks the specs that are dc.
func dcSpecs(specs []AggSpec) []bool {
	out := make([]bool, len(specs))
	for i, s := range specs {
		out[i] = s.Func == "dc"
	}
	return out
}

// mergeDistinct folds o's distinct count into s (merge); false when either
// side has a count and the other any part of the dc: the count cannot be
// added to it.
func (s *aggState) mergeDistinct(o *aggState) bool {
	if s.DN == 0 && o.DN == 0 {
		return true
	}
	sHas := s.DN > 0 || len(s.set) > 0 || len(s.runs) > 0 || len(s.Set) > 0
	oHas := o.DN > 0 || len(o.set) > 0 || len(o.runs) > 0 || len(o.Set) > 0
	if sHas && oHas {
		return false
	}
	s.DN += o.DN
	return true
}

// checkDistinct refuses distinct counts the plan did not ask for, on an
// aggregate that is not dc, negative, or beside a set.
func (p *Plan) checkDistinct(pt *Partial) error {
	var dc []bool
	for _, g := range pt.Groups {
		for j, st := range g.States {
			if st == nil || st.DN == 0 {
				continue
			}
			if !p.forms.distinct {
				return fmt.Errorf("a distinct count the search did not ask for")
			}
			if dc == nil {
				dc = dcSpecs(p.aggSpecs)
			}
			if j >= len(dc) || !dc[j] || st.DN < 0 || len(st.Set) > 0 || st.SB != nil || st.SBX != nil {
				return fmt.Errorf("a distinct count %d where the search cannot take one", st.DN)
			}
		}
	}
	return nil
}
