package query

import (
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ReferenceSearch (the oracle) is a separate, naive search: it scans every event of every
// segment, matches the search expression with its own code (substring
// search for terms, its own tokenizer for wildcards, its own field
// comparisons), and runs every blocking command and aggregate in one pass
// over plain lists of rows. It shares with the executor only what defines
// the language rather than executes it: the parser, time modifiers, field
// extraction (eventRow) and the eval/where/rex/fields/table row functions.

const oMajor = " \t\n\r\v\f[]<>(){}|!;,'\"*&?+"
const oMinor = "/:=@.-$#%\\_"

func oIsBreaker(c byte) bool {
	return strings.IndexByte(oMajor, c) >= 0 || strings.IndexByte(oMinor, c) >= 0
}

func oLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

func oTokens(raw string) []string {
	var out []string
	cut := func(s string) string {
		if len(s) > 128 {
			s = s[:128]
		}
		return oLower(s)
	}
	for _, seg := range strings.FieldsFunc(raw, func(r rune) bool { return r < 128 && strings.IndexByte(oMajor, byte(r)) >= 0 }) {
		seg = strings.Trim(seg, oMinor)
		if seg == "" {
			continue
		}
		out = append(out, cut(seg))
		if strings.ContainsAny(seg, oMinor) {
			for _, p := range strings.FieldsFunc(seg, func(r rune) bool { return r < 128 && strings.IndexByte(oMinor, byte(r)) >= 0 }) {
				out = append(out, cut(p))
			}
		}
	}
	return out
}

var oGlobCache sync.Map

func oGlob(pat string) *regexp.Regexp {
	if re, ok := oGlobCache.Load(pat); ok {
		return re.(*regexp.Regexp)
	}
	re := oGlobCompile(pat)
	oGlobCache.Store(pat, re)
	return re
}

func oGlobCompile(pat string) *regexp.Regexp {
	parts := strings.Split(pat, "*")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile("(?s)^" + strings.Join(parts, ".*") + "$")
}

func oMatch(n Node, r *Row) bool {
	switch x := n.(type) {
	case nil:
		return true
	case AndNode:
		return oMatch(x.L, r) && oMatch(x.R, r)
	case OrNode:
		return oMatch(x.L, r) || oMatch(x.R, r)
	case NotNode:
		return !oMatch(x.X, r)
	case TermNode:
		raw, ok := r.F["_raw"].(string)
		if !x.Quoted && strings.Contains(x.Text, "*") {
			pat := strings.Trim(oLower(x.Text), oMinor)
			if strings.Trim(pat, "*") == "" {
				return true
			}
			if !ok {
				return false
			}
			re := oGlob(pat)
			for _, t := range oTokens(raw) {
				if re.MatchString(t) {
					return true
				}
			}
			return false
		}
		t := strings.TrimFunc(oLower(x.Text), func(c rune) bool { return c < 128 && oIsBreaker(byte(c)) })
		if t == "" {
			return true
		}
		if !ok {
			return false
		}
		lr := oLower(raw)
		for i := 0; i+len(t) <= len(lr); i++ {
			if lr[i:i+len(t)] == t && (i == 0 || oIsBreaker(lr[i-1])) && (i+len(t) == len(lr) || oIsBreaker(lr[i+len(t)])) {
				return true
			}
		}
		return false
	case FieldNode:
		vals := values(r.F[x.Field])
		if len(vals) == 0 {
			return false
		}
		re := oGlob(oLower(x.Value))
		eq := func(v string) bool { return re.MatchString(oLower(v)) }
		switch x.Op {
		case "=":
			for _, v := range vals {
				if eq(v) {
					return true
				}
			}
			return false
		case "!=":
			for _, v := range vals {
				if eq(v) {
					return false
				}
			}
			return true
		}
		for _, v := range vals {
			var c int
			fv, e1 := strconv.ParseFloat(strings.TrimSpace(v), 64)
			fq, e2 := strconv.ParseFloat(x.Value, 64)
			if e1 == nil && e2 == nil && !math.IsNaN(fv) && !math.IsInf(fv, 0) && strings.TrimSpace(v) != "" && strings.IndexAny(strings.TrimSpace(v)[:1], "0123456789-+.") == 0 {
				c = cmpF(fv, fq)
			} else {
				c = strings.Compare(oLower(v), oLower(x.Value))
			}
			if x.Op == "<" && c < 0 || x.Op == "<=" && c <= 0 || x.Op == ">" && c > 0 || x.Op == ">=" && c >= 0 {
				return true
			}
		}
		return false
	}
	return false
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// EventRow is an event's row as searches see it: default fields, indexed
// fields, then search-time extractions.
func EventRow(ev *Event, bkt string, ord uint32, server string) Row {
	return eventRow(ev, bkt, ord, server)
}

// SegmentRows scans every event of segments as rows, for ReferenceSearch.
func SegmentRows(segs []Segment, server string) func(fn func(Row) bool) error {
	return func(fn func(Row) bool) error {
		for _, s := range segs {
			stop := false
			err := s.Events(nil, func(ord uint32, ev *Event) bool {
				stop = !fn(eventRow(ev, s.BucketID(), ord, server))
				return !stop
			})
			if err != nil || stop {
				return err
			}
		}
		return nil
	}
}

// Reference is the naive oracle of the tests and the bench: it looks at
// every row it is given and never uses an index. It is not used to serve
// searches. Feed it rows with Add (several References can share one scan),
// then read Results.
type Reference struct {
	keep   map[string]bool // fields a matching row keeps; nil: all (oKeep)
	q      *Query
	lo, hi int64
	now    time.Time
	rows   []Row
}

// NewReference parses and prepares a request for the oracle.
func NewReference(req Request) (*Reference, error) {
	q, err := Parse(req.Query)
	if err != nil {
		return nil, err
	}
	r := &Reference{q: q, now: req.Now, lo: math.MinInt64, hi: math.MaxInt64, keep: oKeep(q.Commands)}
	if r.now.IsZero() {
		r.now = time.Now()
	}
	e, l := req.Earliest, req.Latest
	if q.Earliest != "" {
		e = q.Earliest
	}
	if q.Latest != "" {
		l = q.Latest
	}
	if e != "" {
		tm, err := ParseTime(e, r.now)
		if err != nil {
			return nil, err
		}
		r.lo = tm.UnixNano()
	}
	if l != "" {
		tm, err := ParseTime(l, r.now)
		if err != nil {
			return nil, err
		}
		r.hi = tm.UnixNano()
	}
	return r, nil
}

// Add looks at one event row; a matching row is copied.
func (o *Reference) Add(r Row) {
	if r.T < o.lo || r.T >= o.hi || !oMatch(o.q.Search, &r) {
		return
	}
	var f map[string]any
	if o.keep != nil {
		f = make(map[string]any, len(o.keep))
		for k := range o.keep {
			if v, ok := r.F[k]; ok {
				f[k] = v
			}
		}
	} else {
		f = make(map[string]any, len(r.F))
		for k, v := range r.F {
			f[k] = v
		}
	}
	r.F = f
	o.rows = append(o.rows, r)
}

// oKeep is the fields a pipeline that starts with stats, top, rare or
// timechart can observe (its by-fields and aggregated fields, and _time):
// a matching row keeps only those, so the oracle holds millions of small
// rows instead of whole events (the 5M bench set: `* | stats dc(path)`).
// Any other pipeline keeps every field (nil).
func oKeep(cmds []Command) map[string]bool {
	if len(cmds) == 0 {
		return nil
	}
	keep := map[string]bool{"_time": true}
	var aggs []AggSpec
	switch x := cmds[0].(type) {
	case StatsCmd:
		aggs = x.Aggs
		for _, f := range x.By {
			keep[f] = true
		}
	case TopCmd:
		for _, f := range append(append([]string(nil), x.Fields...), x.By...) {
			keep[f] = true
		}
	case TimechartCmd:
		aggs = x.Aggs
		if x.By != "" {
			keep[x.By] = true
		}
	default:
		return nil
	}
	for _, a := range aggs {
		if a.Field != "" {
			keep[a.Field] = true
		}
	}
	return keep
}

// Results runs the commands over the matching rows, newest first.
func (o *Reference) Results() []map[string]any {
	rows := o.rows
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.T != b.T {
			return a.T > b.T
		}
		if a.B != b.B {
			return a.B < b.B
		}
		return a.C > b.C
	})
	env := &evalEnv{now: o.now}
	for _, c := range o.q.Commands {
		rows = oracleCommand(c, rows, env, o.lo, o.hi)
	}
	return Results(rows)
}

// ReferenceSearch answers one request with the oracle over every row scan
// yields.
func ReferenceSearch(req Request, scan func(fn func(Row) bool) error) ([]map[string]any, error) {
	o, err := NewReference(req)
	if err != nil {
		return nil, err
	}
	if err := scan(func(r Row) bool { o.Add(r); return true }); err != nil {
		return nil, err
	}
	return o.Results(), nil
}

func oCompare(a, b any) int {
	if a == nil || b == nil {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return 1
		}
		return -1
	}
	fa, oka := num(a)
	fb, okb := num(b)
	switch {
	case oka && okb:
		return cmpF(fa, fb)
	case oka:
		return -1
	case okb:
		return 1
	}
	sa, _ := str(a)
	sb, _ := str(b)
	return strings.Compare(sa, sb)
}

func oKeyLess(a, b []string) bool {
	for i := range a {
		if c := oCompare(a[i], b[i]); c != 0 {
			return c < 0
		}
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// oExpand lists the distinct key tuples of a row (multivalue fields expand).
func oExpand(r *Row, keys []string, span int64, nullBy bool) [][]string {
	out := [][]string{{}}
	for _, k := range keys {
		var vals []string
		if k == spanKey {
			q := r.T / span
			if r.T%span != 0 && r.T < 0 {
				q--
			}
			vals = []string{strconv.FormatInt(q*span, 10)}
		} else {
			v := r.F[k]
			if v == nil && k == "_time" {
				v = Time(r.T)
			}
			seen := map[string]bool{}
			for _, x := range values(v) {
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

type oGroup struct {
	key  []string
	rows []*Row
}

func oGroups(rows []Row, keys []string, span int64, nullBy bool) []*oGroup {
	m := map[string]*oGroup{}
	var out []*oGroup
	for i := range rows {
		for _, k := range oExpand(&rows[i], keys, span, nullBy) {
			jk := strings.Join(k, "\x01")
			g := m[jk]
			if g == nil {
				g = &oGroup{key: k}
				m[jk] = g
				out = append(out, g)
			}
			g.rows = append(g.rows, &rows[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return oKeyLess(out[i].key, out[j].key) })
	return out
}

func oAgg(a AggSpec, rows []*Row) any {
	var vals []string
	for _, r := range rows {
		v := r.F[a.Field]
		if v == nil && a.Field == "_time" {
			v = Time(r.T)
		}
		vals = append(vals, values(v)...)
	}
	var nums []float64
	for _, v := range vals {
		if f, ok := parseNum(v); ok {
			nums = append(nums, f)
		}
	}
	switch a.Func {
	case "count":
		if a.Field == "" {
			return int64(len(rows))
		}
		n := 0
		for _, r := range rows {
			if r.F[a.Field] != nil {
				n++
			}
		}
		return int64(n)
	case "sum", "avg":
		if len(nums) == 0 {
			return nil
		}
		s := 0.0
		for _, f := range nums {
			s += f
		}
		if a.Func == "avg" {
			return s / float64(len(nums))
		}
		return s
	case "min", "max":
		if len(nums) > 0 {
			sort.Float64s(nums)
			if a.Func == "min" {
				return nums[0]
			}
			return nums[len(nums)-1]
		}
		if len(vals) == 0 {
			return nil
		}
		sort.Strings(vals)
		if a.Func == "min" {
			return vals[0]
		}
		return vals[len(vals)-1]
	case "dc", "values":
		set := map[string]bool{}
		for _, v := range vals {
			set[v] = true
		}
		var u []string
		for v := range set {
			u = append(u, v)
		}
		sort.Strings(u)
		if a.Func == "dc" {
			return int64(len(u))
		}
		if len(u) == 0 {
			return nil
		}
		return u
	case "perc":
		if len(nums) == 0 {
			return nil
		}
		sort.Float64s(nums)
		k := int(math.Ceil(a.Perc/100*float64(len(nums)))) - 1
		return nums[max(0, min(k, len(nums)-1))]
	case "earliest", "latest":
		var best *Row
		var bv string
		for _, r := range rows {
			v, ok := str(r.F[a.Field])
			if !ok {
				continue
			}
			if best == nil || (a.Func == "earliest" && (r.T < best.T || r.T == best.T && v < bv)) ||
				(a.Func == "latest" && (r.T > best.T || r.T == best.T && v < bv)) {
				best, bv = r, v
			}
		}
		if best == nil {
			return nil
		}
		return bv
	}
	return nil
}

func oracleCommand(c Command, rows []Row, env *evalEnv, lo, hi int64) []Row {
	switch x := c.(type) {
	case SearchCmd:
		var out []Row
		for i := range rows {
			if oMatch(x.Expr, &rows[i]) {
				out = append(out, rows[i])
			}
		}
		return out
	case WhereCmd, EvalCmd, RexCmd, FieldsCmd, TableCmd:
		var out []Row
		for i := range rows {
			if applyStreaming(c, &rows[i], env) {
				out = append(out, rows[i])
			}
		}
		return out
	case HeadCmd:
		if len(rows) > x.N {
			return rows[:x.N]
		}
		return rows
	case TailCmd:
		var out []Row
		for i := len(rows) - 1; i >= 0 && len(out) < x.N; i-- {
			out = append(out, rows[i])
		}
		return out
	case DedupCmd:
		seen := map[string]int{}
		var out []Row
		for _, r := range rows {
			var parts []string
			ok := true
			for _, f := range x.Fields {
				s, has := str(r.F[f])
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
	case SortCmd:
		sort.SliceStable(rows, func(i, j int) bool {
			for _, k := range x.Keys {
				a, b := rows[i].F[k.Field], rows[j].F[k.Field]
				if a == nil || b == nil {
					if c := oCompare(a, b); c != 0 {
						return c < 0
					}
					continue
				}
				var c int
				switch k.Mode {
				case "str":
					sa, _ := str(a)
					sb, _ := str(b)
					c = strings.Compare(sa, sb)
				case "num":
					fa, oka := num(a)
					fb, okb := num(b)
					switch {
					case oka && okb:
						c = cmpF(fa, fb)
					case oka:
						c = -1
					case okb:
						c = 1
					}
				default:
					c = oCompare(a, b)
				}
				if k.Desc {
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
	case StatsCmd:
		gs := oGroups(rows, x.By, 0, false)
		if len(x.By) == 0 && len(gs) == 0 {
			gs = []*oGroup{{}}
		}
		var out []Row
		for _, g := range gs {
			f := map[string]any{}
			for i, b := range x.By {
				f[b] = g.key[i]
			}
			for _, a := range x.Aggs {
				if v := oAgg(a, g.rows); v != nil {
					f[aggName(a)] = v
				}
			}
			out = append(out, Row{F: f})
		}
		return out
	case TopCmd:
		keys := append(append([]string(nil), x.By...), x.Fields...)
		gs := oGroups(rows, keys, 0, false)
		byKey := map[string][]*oGroup{}
		var order []*oGroup
		for _, g := range gs {
			k := strings.Join(g.key[:len(x.By)], "\x01")
			if _, ok := byKey[k]; !ok {
				order = append(order, g)
			}
			byKey[k] = append(byKey[k], g)
		}
		var out []Row
		for _, first := range order {
			list := byKey[strings.Join(first.key[:len(x.By)], "\x01")]
			total := 0
			for _, g := range list {
				total += len(g.rows)
			}
			sort.SliceStable(list, func(i, j int) bool {
				a, b := len(list[i].rows), len(list[j].rows)
				if a != b {
					return (a > b) != x.Rare
				}
				return oKeyLess(list[i].key[len(x.By):], list[j].key[len(x.By):])
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
				out = append(out, Row{F: f})
			}
		}
		return out
	case TimechartCmd:
		keys := []string{spanKey}
		if x.By != "" {
			keys = append(keys, x.By)
		}
		gs := oGroups(rows, keys, x.Span, x.By != "")
		cells := map[string]*oGroup{}
		series := map[string]bool{}
		first, last := int64(math.MaxInt64), int64(math.MinInt64)
		for _, g := range gs {
			cells[strings.Join(g.key, "\x01")] = g
			tb, _ := strconv.ParseInt(g.key[0], 10, 64)
			first, last = min(first, tb), max(last, tb)
			if x.By != "" {
				series[g.key[1]] = true
			}
		}
		if lo != math.MinInt64 && hi != math.MaxInt64 {
			first = lo / x.Span * x.Span
			if lo%x.Span != 0 && lo < 0 {
				first -= x.Span
			}
			last = (hi - 1) / x.Span * x.Span
			if (hi-1)%x.Span != 0 && hi-1 < 0 {
				last -= x.Span
			}
		}
		var names []string
		for s := range series {
			names = append(names, s)
		}
		sort.Slice(names, func(i, j int) bool { return oKeyLess([]string{names[i]}, []string{names[j]}) })
		var out []Row
		for tb := first; tb <= last; tb += x.Span {
			f := map[string]any{"_time": Time(tb)}
			ts := strconv.FormatInt(tb, 10)
			if x.By == "" {
				for _, a := range x.Aggs {
					var v any
					if g := cells[ts]; g != nil {
						v = oAgg(a, g.rows)
					} else if a.Func == "count" || a.Func == "dc" {
						v = int64(0)
					}
					if v != nil {
						f[aggName(a)] = v
					}
				}
			} else {
				for _, s := range names {
					var v any
					if g := cells[ts+"\x01"+s]; g != nil {
						v = oAgg(x.Aggs[0], g.rows)
					} else if x.Aggs[0].Func == "count" || x.Aggs[0].Func == "dc" {
						v = int64(0)
					}
					if v != nil {
						f[s] = v
					}
				}
			}
			out = append(out, Row{T: tb, F: f})
		}
		return out
	}
	panic("oracle: unknown command " + c.Name())
}
