package query

import "math"

// rex straight into stats: `* | rex "rt=(?<ms>\d+)ms" | stats avg(ms)
// max(ms) count(ms)` reads one value of each event and folds it into three
// numbers. On the raw path (rowProj.fromRaw) an event whose rex matches
// hands the group's value to the aggregates directly, without a row: the
// row the general path builds would hold _raw and the group, the rex would
// overwrite whatever extraction gave the group with the match, and the
// aggregates would read that one value. An event the rex does not match
// takes the general path (its group's value, if any, comes from
// search-time extraction and may be a multivalue).

// fusedRex is the rex whose matches feed agg without a row, or nil when the
// plan is not of that shape:
//   - the streaming prefix is one rex of _raw in the fast form (rexfast.go);
//   - the aggregation has no group keys and only count, sum, avg, min, max
//     and perc (borrowsRaw: nothing of the row is kept), each of the rex's
//     group or a plain count;
//   - the rows read nothing but _raw and the group (rowProj).
//
// Such an aggregation retains no values, so bigRow would charge nothing.
func fusedRex(p *Plan, agg *aggregator) *litGroup {
	if p.rows == nil || !borrowsRaw(agg) || agg.countOnly || len(p.pre) != 1 {
		return nil
	}
	rx, ok := p.pre[0].(RexCmd)
	if !ok || rx.fast == nil || rx.Field != "_raw" {
		return nil
	}
	g := rx.fast
	for _, n := range p.rows.names {
		if n != "_raw" && n != g.name {
			return nil
		}
	}
	for _, s := range agg.specs {
		if s.Field != g.name && (s.Func != "count" || s.Field != "") {
			return nil
		}
	}
	return g
}

// rexFold folds a fused rex's matches into the aggregation's one group.
// Its ops are the aggregates' functions, decided once: count, sum and avg,
// min and max of numbers are folded here with the value parsed once; a
// string min or max and perc go through aggState.addFrom, which gives the
// same answer for every function.
type rexFold struct {
	rx  *litGroup
	agg *aggregator
	ops []foldOp
	g   *group // the group, looked up at the first match
}

type foldOp uint8

const (
	foldCount  foldOp = iota // count, count(g)
	foldSum                  // sum, avg
	foldMinMax               // min, max
	foldOther                // through aggState.addFrom
)

func newRexFold(rx *litGroup, agg *aggregator) *rexFold {
	f := &rexFold{rx: rx, agg: agg, ops: make([]foldOp, len(agg.specs))}
	for j, s := range agg.specs {
		switch s.Func {
		case "count":
			f.ops[j] = foldCount
		case "sum", "avg":
			f.ops[j] = foldSum
		case "min", "max":
			f.ops[j] = foldMinMax
		default:
			f.ops[j] = foldOther
		}
	}
	return f
}

// add folds raw's match into the aggregates; false when raw does not match
// (the event then takes the general path).
func (f *rexFold) add(raw string) bool {
	v, ok := f.rx.find(raw)
	if !ok {
		return false
	}
	if f.g == nil {
		f.g = f.agg.groupFor(nil)
	}
	num, isNum := parseNum(v)
	for j, op := range f.ops {
		st := f.g.States[j]
		switch {
		case op == foldCount:
			st.N++
		case op == foldSum && isNum:
			st.Sum += num
			st.NumN++
		case op == foldSum:
		case op == foldMinMax && isNum && st.HasNum:
			st.NumMin = math.Min(st.NumMin, num)
			st.NumMax = math.Max(st.NumMax, num)
		default:
			var none Row
			m := rowValue{field: f.rx.name, looked: true, v: v, single: true, parsed: true, num: num, isNum: isNum}
			st.addFrom(&f.agg.specs[j], &none, &m)
		}
	}
	return true
}
