package querytest

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/quarry-dev/quarry/query"
)

// The oracle's commands: each runs over the whole list of rows at once.

// command runs one command over every row.
func (o *Reference) command(c query.Command, rows []query.Row) []query.Row {
	switch x := c.(type) {
	case query.SearchCmd:
		return filter(rows, func(r *query.Row) bool { return matches(x.Expr, r) })
	case query.WhereCmd, query.EvalCmd, query.RexCmd, query.FieldsCmd, query.TableCmd:
		return filter(rows, func(r *query.Row) bool { return query.ApplyRow(c, r, o.now) })
	case query.HeadCmd:
		return rows[:min(len(rows), x.N)]
	case query.TailCmd:
		var out []query.Row
		for i := len(rows) - 1; i >= 0 && len(out) < x.N; i-- {
			out = append(out, rows[i])
		}
		return out
	case query.DedupCmd:
		return dedup(x, rows)
	case query.SortCmd:
		return sortRows(x, rows)
	case query.StatsCmd:
		return stats(x, rows)
	case query.TopCmd:
		return top(x, rows)
	case query.TimechartCmd:
		return timechart(x, rows, o.lo, o.hi)
	}
	panic("oracle: unknown command " + c.Name())
}

func filter(rows []query.Row, keep func(*query.Row) bool) []query.Row {
	var out []query.Row
	for i := range rows {
		if keep(&rows[i]) {
			out = append(out, rows[i])
		}
	}
	return out
}

func dedup(x query.DedupCmd, rows []query.Row) []query.Row {
	seen := map[string]int{}
	var out []query.Row
	for _, r := range rows {
		var parts []string
		ok := true
		for _, f := range x.Fields {
			s, has := text(r.F[f])
			ok = ok && has
			parts = append(parts, s)
		}
		if !ok {
			if x.KeepEmpty {
				out = append(out, r)
			}
			continue
		}
		k := strings.Join(parts, "\x01")
		if seen[k] < x.N {
			seen[k]++
			out = append(out, r)
		}
	}
	return out
}

// sortRows: a stable sort by the keys, absent values last whatever the
// direction, then the first Limit.
func sortRows(x query.SortCmd, rows []query.Row) []query.Row {
	sort.SliceStable(rows, func(i, j int) bool {
		for _, k := range x.Keys {
			a, b := rows[i].F[k.Field], rows[j].F[k.Field]
			c := rankOf(a, k.Mode).compare(rankOf(b, k.Mode))
			if k.Desc && a != nil && b != nil {
				c = -c
			}
			if c != 0 {
				return c < 0
			}
		}
		return false
	})
	if x.Limit > 0 && len(rows) > x.Limit {
		rows = rows[:x.Limit]
	}
	return rows
}

// spanKey stands for the time bucket among a timechart's group keys.
const spanKey = "\x00span"

// expand lists the distinct key tuples of a row (multivalue fields expand).
func expand(r *query.Row, keys []string, span int64, nullBy bool) [][]string {
	out := [][]string{{}}
	for _, k := range keys {
		var vals []string
		if k == spanKey {
			vals = []string{strconv.FormatInt(floorTo(r.T, span), 10)}
		} else {
			v := r.F[k]
			if v == nil && k == "_time" {
				v = query.Time(r.T)
			}
			seen := map[string]bool{}
			for _, x := range valuesOf(v) {
				if !seen[x] {
					seen[x] = true
					vals = append(vals, x)
				}
			}
			if len(vals) == 0 && nullBy {
				vals = []string{"NULL"}
			}
		}
		var next [][]string
		for _, o := range out {
			for _, v := range vals {
				next = append(next, append(append([]string(nil), o...), v))
			}
		}
		out = next
	}
	return out
}

// floorTo rounds t down to a multiple of span (towards minus infinity).
func floorTo(t, span int64) int64 { return t - (t%span+span)%span }

type group struct {
	key  []string
	rows []*query.Row
}

// groups are the rows by key tuple, in keyLess order.
func groups(rows []query.Row, keys []string, span int64, nullBy bool) []*group {
	m := map[string]*group{}
	var out []*group
	for i := range rows {
		for _, k := range expand(&rows[i], keys, span, nullBy) {
			jk := strings.Join(k, "\x01")
			g := m[jk]
			if g == nil {
				g = &group{key: k}
				m[jk] = g
				out = append(out, g)
			}
			g.rows = append(g.rows, &rows[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return keyLess(out[i].key, out[j].key) })
	return out
}

func stats(x query.StatsCmd, rows []query.Row) []query.Row {
	gs := groups(rows, x.By, 0, false)
	if len(x.By) == 0 && len(gs) == 0 {
		gs = []*group{{}}
	}
	var out []query.Row
	for _, g := range gs {
		f := map[string]any{}
		for i, b := range x.By {
			f[b] = g.key[i]
		}
		for _, a := range x.Aggs {
			if v := aggregate(a, g.rows); v != nil {
				f[aggName(a)] = v
			}
		}
		out = append(out, query.Row{F: f})
	}
	return out
}

func top(x query.TopCmd, rows []query.Row) []query.Row {
	keys := append(append([]string(nil), x.By...), x.Fields...)
	byKey := map[string][]*group{}
	var order []string
	for _, g := range groups(rows, keys, 0, false) {
		k := strings.Join(g.key[:len(x.By)], "\x01")
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], g)
	}
	var out []query.Row
	for _, k := range order {
		list := byKey[k]
		total := 0
		for _, g := range list {
			total += len(g.rows)
		}
		sort.SliceStable(list, func(i, j int) bool {
			a, b := len(list[i].rows), len(list[j].rows)
			if a != b {
				return (a > b) != x.Rare
			}
			return keyLess(list[i].key[len(x.By):], list[j].key[len(x.By):])
		})
		if x.Limit > 0 && len(list) > x.Limit {
			list = list[:x.Limit]
		}
		for _, g := range list {
			f := map[string]any{}
			for i, k := range keys {
				f[k] = g.key[i]
			}
			if x.ShowCount {
				f[x.CountField] = int64(len(g.rows))
			}
			if x.ShowPerc {
				f[x.PercentField] = math.Round(float64(len(g.rows))*100/float64(total)*1e6) / 1e6
			}
			out = append(out, query.Row{F: f})
		}
	}
	return out
}

// timechart: one row per time bucket from the first to the last (the
// search's time range when it has both ends), one column per aggregate or
// per series of the by-field; an empty cell counts 0 for count and dc.
func timechart(x query.TimechartCmd, rows []query.Row, lo, hi int64) []query.Row {
	keys := []string{spanKey}
	if x.By != "" {
		keys = append(keys, x.By)
	}
	cells := map[string]*group{}
	series := map[string]bool{}
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	for _, g := range groups(rows, keys, x.Span, x.By != "") {
		cells[strings.Join(g.key, "\x01")] = g
		tb, _ := strconv.ParseInt(g.key[0], 10, 64)
		first, last = min(first, tb), max(last, tb)
		if x.By != "" {
			series[g.key[1]] = true
		}
	}
	if lo != math.MinInt64 && hi != math.MaxInt64 {
		first, last = floorTo(lo, x.Span), floorTo(hi-1, x.Span)
	}
	var names []string
	for s := range series {
		names = append(names, s)
	}
	sort.Slice(names, func(i, j int) bool { return keyLess([]string{names[i]}, []string{names[j]}) })
	// limit: the series of the highest sum of values over every time
	// bucket (ties in name order); the rest are OTHER, aggregated over
	// their rows together, when useother.
	var others []string
	if x.By != "" && x.Limit > 0 && len(names) > x.Limit {
		score := map[string]float64{}
		for _, g := range cells {
			if f, ok := number(aggregate(x.Aggs[0], g.rows)); ok {
				score[g.key[1]] += f
			}
		}
		ranked := append([]string(nil), names...)
		sort.SliceStable(ranked, func(i, j int) bool { return score[ranked[i]] > score[ranked[j]] })
		keep := map[string]bool{}
		for _, s := range ranked[:x.Limit] {
			keep[s] = true
		}
		var kept []string
		for _, s := range names {
			if keep[s] {
				kept = append(kept, s)
			} else if x.UseOther {
				others = append(others, s)
			}
		}
		names = kept
	}
	cell := func(a query.AggSpec, key string) any {
		if g := cells[key]; g != nil {
			return aggregate(a, g.rows)
		}
		if a.Func == "count" || a.Func == "dc" {
			return int64(0)
		}
		return nil
	}
	var out []query.Row
	for tb := first; tb <= last; tb += x.Span {
		f := map[string]any{"_time": query.Time(tb)}
		ts := strconv.FormatInt(tb, 10)
		if x.By == "" {
			for _, a := range x.Aggs {
				if v := cell(a, ts); v != nil {
					f[aggName(a)] = v
				}
			}
		} else {
			for _, s := range names {
				if v := cell(x.Aggs[0], ts+"\x01"+s); v != nil {
					f[s] = v
				}
			}
			if len(others) > 0 {
				var rs []*query.Row
				for _, s := range others {
					if g := cells[ts+"\x01"+s]; g != nil {
						rs = append(rs, g.rows...)
					}
				}
				switch {
				case len(rs) > 0:
					if v := aggregate(x.Aggs[0], rs); v != nil {
						f[x.OtherStr] = v
					}
				case x.Aggs[0].Func == "count" || x.Aggs[0].Func == "dc":
					f[x.OtherStr] = int64(0)
				}
			}
		}
		out = append(out, query.Row{T: tb, F: f})
	}
	return out
}
