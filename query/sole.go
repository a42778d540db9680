package query

// Sole partials (issue 27): a search whose buckets (after the head prunes
// them by time) all go first to one peer in one request gets one partial
// for them all — the peer combines every bucket's into one batch — so
// nothing merges it with another: the peer can send each dc's count
// (aggState.DN) instead of its set and each perc's value (aggState.PV)
// instead of every number. For `stats dc(clientip) by host` over an hour
// that is fifty numbers instead of 42k addresses front-coded, shipped and
// decoded. The head asks (api.SearchRequest.SolePartial, SetSolePartial)
// only for such a search. A site's searchable copies often all sit on the
// peer that ingested them, so this is most searches of a small cluster.
//
// The head never merges a final form: a count or value that meets any
// other part of the same aggregate (a failover that spread the buckets, a
// bucket the head's table did not know, answered too) makes the merge
// undecided, Merge answers ErrSoleUndecided and the head runs the search
// again without. The answer is always the one sets and values give: the
// peer's value is aggState.final's, the function the head would run.

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrSoleUndecided is Merge's answer when a sole partial's final form
// (a dc's count, a perc's value) would have to be merged with another part
// of the same aggregate: the caller searches again without SetSolePartial.
var ErrSoleUndecided = errors.New("a sole partial's final count or value met another part of the same aggregate; search again with sets and values")

// SetSolePartial makes EncodePartial send each dc's count and each perc's
// value instead of its set or values (the head asked: one peer serves the
// search), and makes the head's CheckPartial accept them (only when on).
func (p *Plan) SetSolePartial(on bool) { p.forms.sole = on && p.TakesSole() }

// SolePartial reports whether EncodePartial sends final forms (the head
// asked, SetSolePartial): the peer then sends one partial for all its
// buckets.
func (p *Plan) SolePartial() bool { return p.forms.sole }

// TakesSole reports whether the search is a stats with a dc or a perc: the
// one split whose finalize reads each group's aggregate on its own (a
// timechart's OTHER column unions several series).
func (p *Plan) TakesSole() bool {
	if _, ok := p.split.(StatsCmd); !ok {
		return false
	}
	return slices.ContainsFunc(p.aggSpecs, func(s AggSpec) bool { return s.Func == "dc" || s.Func == "perc" })
}

// soleSpecs are the specs a sole partial sends final: dc and perc; nil at
// the others.
func soleSpecs(specs []AggSpec) []*AggSpec {
	out := make([]*AggSpec, len(specs))
	for i := range specs {
		if specs[i].Func == "dc" || specs[i].Func == "perc" {
			out[i] = &specs[i]
		}
	}
	return out
}

// soleState is st with its final form for spec (compactStates): a dc's
// count, a perc's value; ok is false when st has nothing to replace.
func soleState(st *aggState, spec *AggSpec) (c aggState, ok bool) {
	c = *st
	switch {
	case spec.Func == "dc" && len(st.Set) > 0:
		c.DN, c.Set = int64(len(st.Set)), nil
	case spec.Func == "perc" && len(st.Nums) > 0:
		one := aggState{Nums: slices.Clone(st.Nums)}
		v, isNum := one.final(spec).(float64)
		if !isNum {
			return c, false
		}
		c.PV, c.Nums = &v, nil
	default:
		return c, false
	}
	return c, true
}

// hasPart reports whether s holds any part of a dc or perc.
func (s *aggState) hasPart() bool {
	return s.DN > 0 || s.PV != nil || len(s.set) > 0 || len(s.runs) > 0 || len(s.Set) > 0 || len(s.Nums) > 0 || len(s.numRuns) > 0
}

// mergeSole folds o's final forms into s (merge); false when either side
// has one and the other any part of the same aggregate: a final form
// cannot be merged.
func (s *aggState) mergeSole(o *aggState) bool {
	if s.DN == 0 && o.DN == 0 && s.PV == nil && o.PV == nil {
		return true
	}
	if s.hasPart() && o.hasPart() {
		return false
	}
	s.DN += o.DN
	if o.PV != nil {
		s.PV = o.PV
	}
	return true
}

// checkSole refuses final forms the plan did not ask for, on an aggregate
// of another function, negative, not finite, or beside a set or values.
func (p *Plan) checkSole(pt *Partial) error {
	var specs []*AggSpec
	for _, g := range pt.Groups {
		for j, st := range g.States {
			if st == nil || st.DN == 0 && st.PV == nil {
				continue
			}
			if !p.forms.sole {
				return fmt.Errorf("a final count or value the search did not ask for")
			}
			if specs == nil {
				specs = soleSpecs(p.aggSpecs)
			}
			var fn string
			if j < len(specs) && specs[j] != nil {
				fn = specs[j].Func
			}
			beside := len(st.Set) > 0 || st.SB != nil || st.SBX != nil || len(st.Nums) > 0 || st.NB != nil || st.NBX != nil
			badDC := st.DN != 0 && (fn != "dc" || st.DN < 0)
			badPV := st.PV != nil && (fn != "perc" || math.IsNaN(*st.PV) || math.IsInf(*st.PV, 0))
			if beside || badDC || badPV {
				return fmt.Errorf("a final count or value where the search cannot take one")
			}
		}
	}
	return nil
}
