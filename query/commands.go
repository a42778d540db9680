package query

import (
	"sort"
	"strings"
	"time"
)

func sortStrings(s []string, less func(a, b string) bool) {
	sort.SliceStable(s, func(i, j int) bool { return less(s[i], s[j]) })
}

// ApplyRow runs one streaming command (search, where, eval, rex, fields,
// table) on a row as the executor does, with now as eval's now(); false
// drops the row. These row functions define the language rather than
// execute a plan, so the reference oracle (query/querytest) calls them.
func ApplyRow(c Command, r *Row, now time.Time) bool {
	return applyStreaming(c, r, &evalEnv{now: now})
}

// applyStreaming runs one streaming command on a row; false drops the row.
func applyStreaming(c Command, r *Row, env *evalEnv) bool {
	switch x := c.(type) {
	case SearchCmd:
		return compiledSearch(x).matchRow(r)
	case WhereCmd:
		env.row = r
		return truthy(x.Expr.Eval(env)) && env.err == nil
	case EvalCmd:
		env.row = r
		for _, a := range x.Assign {
			v := a.Expr.Eval(env)
			if env.err != nil {
				return false // the executor fails the search with env.err
			}
			if a.Field == "_time" {
				if f, ok := num(v); ok {
					r.T = int64(f * 1e9)
					r.F["_time"] = Time(r.T)
				}
				continue
			}
			if v == nil {
				delete(r.F, a.Field)
			} else {
				r.F[a.Field] = v
			}
		}
	case RexCmd:
		src, ok := str(r.F[x.Field])
		if !ok {
			return true
		}
		if x.fast != nil {
			if v, ok := x.fast.find(src); ok {
				r.F[x.fast.name] = v
			}
			return true
		}
		m := x.Re.FindStringSubmatch(src)
		if m == nil {
			return true
		}
		for i, n := range x.Re.SubexpNames() {
			if n != "" && i < len(m) {
				r.F[n] = m[i]
			}
		}
	case LookupCmd:
		env.know.lookupCmd(x, r)
	case FieldsCmd:
		for k := range r.F {
			if !x.keeps(k) {
				delete(r.F, k)
			}
		}
	case TableCmd:
		for k := range r.F {
			keep := false
			for _, p := range x.Fields {
				if globMatch(p, k) {
					keep = true
					break
				}
			}
			if !keep {
				delete(r.F, k)
			}
		}
	}
	return true
}

// keeps reports whether the fields command keeps field k: `fields` keeps
// what matches one of its patterns and every _-field, `fields -` removes
// what matches.
func (x FieldsCmd) keeps(k string) bool {
	matched := false
	for _, p := range x.Fields {
		if globMatch(p, k) {
			matched = true
			break
		}
	}
	return x.Remove != matched || (!x.Remove && strings.HasPrefix(k, "_"))
}

func compiledSearch(s SearchCmd) *cnode {
	if s.compiled != nil {
		return s.compiled
	}
	return compileNode(s.Expr)
}

// runCommands runs commands over rows in one process (the head's part).
func (p *Plan) runCommands(cmds []Command, rows []Row) ([]Row, []string, error) {
	var cols []string
	env := &evalEnv{now: p.now, know: p.know}
	for _, c := range cmds {
		if isStreaming(c) {
			out := rows[:0]
			grows := growsValues(c)
			for i := range rows {
				var before int64
				if grows {
					before = rowEstimate(&rows[i])
				}
				if applyStreaming(c, &rows[i], env) {
					out = append(out, rows[i])
				}
				if env.err == nil && grows {
					// Every row is held to the end: what an eval or rex
					// added to it is charged to the budget — every row's
					// growth, not only a row past rowAllowance (FuzzSearchBudget
					// found 10,000 rows each grown to a few KiB, 240 MiB of
					// live heap uncharged).
					if grew := rowEstimate(&rows[i]) - before; grew > 0 {
						env.err = p.Charge(grew, "rows with large eval or rex values after "+c.Name())
					}
				}
				if env.err != nil {
					return nil, nil, env.err
				}
			}
			rows = out
			if _, ok := c.(TableCmd); ok {
				cols = nil
			}
			continue
		}
		switch x := c.(type) {
		case StatsCmd:
			a := newAggregator(x.Aggs, x.By, 0, false)
			for i := range rows {
				a.add(&rows[i])
			}
			rows, cols = x.finalize(a)
			if a.valuesCut {
				p.warn(valuesWarning)
			}
		case TopCmd:
			a := newAggregator([]AggSpec{{Func: "count"}}, x.keys(), 0, false)
			for i := range rows {
				a.add(&rows[i])
			}
			rows, cols = x.finalize(a)
		case TimechartCmd:
			a := newAggregator(x.Aggs, x.keys(), x.Span, x.By != "")
			for i := range rows {
				a.add(&rows[i])
			}
			rows, cols = x.finalize(a, p.earliest, p.latest, p.Bounded())
			if a.valuesCut {
				p.warn(valuesWarning)
			}
		default:
			rows = blockingOp(c, rows, true)
		}
	}
	return rows, cols, nil
}

// blockingOp runs head, tail, dedup or sort over rows in order. With final
// false it is the peer's pre-reduction: it keeps a superset of what the
// final op keeps from any merge of partitions (tail keeps the oldest N in
// order, unreversed).
func blockingOp(c Command, rows []Row, final bool) []Row {
	switch x := c.(type) {
	case HeadCmd:
		if len(rows) > x.N {
			rows = rows[:x.N]
		}
	case TailCmd:
		if len(rows) > x.N {
			rows = rows[len(rows)-x.N:]
		}
		if final {
			out := make([]Row, len(rows))
			for i := range rows {
				out[len(rows)-1-i] = rows[i]
			}
			rows = out
		}
	case DedupCmd:
		seen := map[string]int{}
		out := rows[:0]
		var kb strings.Builder
		for _, r := range rows {
			kb.Reset()
			empty := false
			for _, f := range x.Fields {
				s, ok := str(r.F[f])
				if !ok {
					empty = true
				}
				kb.WriteString(s)
				kb.WriteByte(0)
			}
			if empty {
				if x.KeepEmpty {
					out = append(out, r)
				}
				continue
			}
			k := kb.String()
			if seen[k] < x.N {
				seen[k]++
				out = append(out, r)
			}
		}
		rows = out
	case SortCmd:
		sort.SliceStable(rows, func(i, j int) bool { return sortLess(x.Keys, &rows[i], &rows[j]) })
		if x.Limit > 0 && len(rows) > x.Limit {
			rows = rows[:x.Limit]
		}
	}
	return rows
}

func sortLess(keys []SortKey, a, b *Row) bool {
	for _, k := range keys {
		va, vb := a.F[k.Field], b.F[k.Field]
		if va == nil && k.Field == "_time" {
			va, vb = Time(a.T), Time(b.T)
		}
		var c int
		switch {
		case va == nil || vb == nil:
			// Missing values sort last whatever the direction.
			c = compareValues(va, vb)
			if c != 0 {
				return c < 0
			}
			continue
		case k.Mode == "str":
			sa, _ := str(va)
			sb, _ := str(vb)
			c = strings.Compare(sa, sb)
		case k.Mode == "num":
			fa, oka := num(va)
			fb, okb := num(vb)
			switch {
			case oka && okb:
				if fa < fb {
					c = -1
				} else if fa > fb {
					c = 1
				}
			case oka:
				c = -1
			case okb:
				c = 1
			}
		default:
			c = compareValues(va, vb)
		}
		if k.Desc {
			c = -c
		}
		if c != 0 {
			return c < 0
		}
	}
	return false
}
