package query

import (
	"fmt"
	"slices"
	"time"

	"github.com/quarry-dev/quarry/knowledge"
)

// Search-time knowledge (SPEC §5, issue 28 item 2): a knowledge bundle
// (package knowledge parses it) applied to every event's row where the
// search builds it — on the peers, in the streaming half — so a field the
// bundle alone defines can be filtered and aggregated in the cluster.
//
// Exactness comes first. With a bundle in force:
//   - a filter on a field no event indexes never narrows the events by
//     postings (an EVAL-, FIELDALIAS- or LOOKUP- value need not appear in
//     _raw, and an EXTRACT- capture need not be a whole term): every event
//     in the time range is decoded and checked on its row;
//   - the column paths (aggregations, dedup and sort from columns) are off:
//     columns hold what the built-in extraction sees, not the bundle's;
//   - fields the bundle makes never replace the default fields or an
//     event's indexed fields; EVAL- and LOOKUP- OUTPUT replace other
//     search-time fields, as in Splunk;
//   - `eventtype=NAME` and `tag=TAG` are rewritten into the searches they
//     stand for before the plan is made (an unknown name matches nothing);
//     rows do not carry eventtype or tag fields.

// Knowledge is a knowledge bundle compiled for searches. Immutable; one
// search uses one Knowledge from start to end.
type Knowledge struct {
	b     *knowledge.SearchBundle
	evals map[*knowledge.SearchRules][]compiledEval
}

type compiledEval struct {
	field string
	expr  Expr
}

// CompileKnowledge compiles a bundle's EVAL- expressions; a bad one is
// refused with its file and line.
func CompileKnowledge(b *knowledge.SearchBundle) (*Knowledge, error) {
	k := &Knowledge{b: b, evals: map[*knowledge.SearchRules][]compiledEval{}}
	seen := map[*knowledge.SearchRules]bool{}
	for _, st := range append(b.Sourcetypes(), "") {
		r := b.For(st)
		if r == nil || seen[r] {
			continue
		}
		seen[r] = true
		for _, e := range r.Evals {
			x, err := parseExpr(e.Expr, e.Expr, 0)
			if err != nil {
				return nil, fmt.Errorf("%s: EVAL-%s: %w", e.Where, e.Field, err)
			}
			k.evals[r] = append(k.evals[r], compiledEval{field: e.Field, expr: x})
		}
	}
	return k, nil
}

// Hash names the bundle (its files' content hash).
func (k *Knowledge) Hash() string {
	if k == nil {
		return ""
	}
	return k.b.Hash()
}

// Knowledge is the plan's knowledge bundle, nil: none.
func (p *Plan) Knowledge() *Knowledge { return p.know }

// rowRules reports whether the bundle changes rows at all.
func (k *Knowledge) rowRules() bool { return k != nil && k.b.HasRules() }

// apply adds the bundle's fields for ev to the row f, in Splunk's order:
// EXTRACT- and REPORT-, KV_MODE, FIELDALIAS-, EVAL-, LOOKUP-.
func (k *Knowledge) apply(ev *Event, r *Row, now time.Time) {
	rules := k.b.For(ev.Sourcetype)
	if rules == nil {
		extractFields(ev.Raw, r.F)
		return
	}
	f := r.F
	protected := func(name string) bool {
		if isDefaultField(name) {
			return true
		}
		return slices.ContainsFunc(ev.Fields, func(x Field) bool { return x.Name == name })
	}
	added := map[string]bool{}
	add := func(name, v string) {
		if old, ok := f[name]; ok {
			if !added[name] {
				return
			}
			switch x := old.(type) {
			case string:
				f[name] = []string{x, v}
			case []string:
				f[name] = append(x, v)
			}
			return
		}
		added[name] = true
		f[name] = v
	}
	for i := range rules.Extracts {
		x := &rules.Extracts[i]
		src := ev.Raw
		if x.In != "" {
			s, ok := str(f[x.In])
			if !ok {
				continue
			}
			src = s
		}
		x.Apply(src, add)
	}
	switch rules.KVMode {
	case "auto":
		extractFields(ev.Raw, f)
	case "json":
		extractJSON(ev.Raw, f)
	}
	for _, a := range rules.Aliases {
		if v, ok := f[a.From]; ok && !protected(a.To) {
			f[a.To] = v
		}
	}
	if evs := k.evals[rules]; len(evs) > 0 {
		env := &evalEnv{row: r, now: now}
		for _, e := range evs {
			if protected(e.field) {
				continue
			}
			v := e.expr.Eval(env)
			if env.err != nil {
				env.err = nil
				continue // a value past a limit: the field is left out
			}
			if v == nil {
				delete(f, e.field)
			} else {
				f[e.field] = v
			}
		}
	}
	for _, l := range rules.Lookups {
		if t, ok := k.b.Lookup(l.Table); ok {
			applyLookup(l, t, r, protected)
		}
	}
}

// applyLookup enriches a row from a lookup table: the rows matching every
// input field; each output column's values (one: a value, several: a
// multivalue) set on the row — only where absent with OUTPUTNEW. A row
// matching nothing is left as it was.
func applyLookup(l knowledge.AutoLookup, t *knowledge.Lookup, r *Row, protected func(string) bool) {
	var match []int
	for i, in := range l.In {
		c := t.Column(in.Column)
		if c < 0 {
			return
		}
		v, ok := firstValue(r.F[in.Field])
		if !ok {
			return
		}
		rows := t.Match(c, v)
		if i == 0 {
			match = rows
		} else {
			match = slices.DeleteFunc(slices.Clone(match), func(j int) bool { return !slices.Contains(rows, j) })
		}
		if len(match) == 0 {
			return
		}
	}
	outs := l.Out
	if len(outs) == 0 {
		for _, c := range t.Columns {
			if !slices.ContainsFunc(l.In, func(m knowledge.FieldMap) bool { return m.Column == c }) {
				outs = append(outs, knowledge.FieldMap{Column: c, Field: c})
			}
		}
	}
	for _, o := range outs {
		c := t.Column(o.Column)
		if c < 0 || protected(o.Field) {
			continue
		}
		if _, has := r.F[o.Field]; has && l.OutputNew {
			continue
		}
		var vals []string
		for _, j := range match {
			if v := t.Rows[j][c]; v != "" && !slices.Contains(vals, v) {
				vals = append(vals, v)
			}
		}
		switch len(vals) {
		case 0:
			delete(r.F, o.Field)
		case 1:
			r.F[o.Field] = vals[0]
		default:
			r.F[o.Field] = vals
		}
	}
}

// firstValue is a field's value, or its first when multivalue.
func firstValue(v any) (string, bool) {
	if mv, ok := v.([]string); ok {
		if len(mv) == 0 {
			return "", false
		}
		return mv[0], true
	}
	return str(v)
}

// rewriteKnowledge replaces eventtype= and tag= terms of a search
// expression with the searches they stand for.
func (k *Knowledge) rewrite(n Node) (Node, error) {
	switch x := n.(type) {
	case AndNode:
		l, err := k.rewrite(x.L)
		if err != nil {
			return nil, err
		}
		r, err := k.rewrite(x.R)
		return AndNode{L: l, R: r}, err
	case OrNode:
		l, err := k.rewrite(x.L)
		if err != nil {
			return nil, err
		}
		r, err := k.rewrite(x.R)
		return OrNode{L: l, R: r}, err
	case NotNode:
		e, err := k.rewrite(x.X)
		return NotNode{X: e}, err
	case FieldNode:
		if x.Op != "=" || (x.Field != "eventtype" && x.Field != "tag") {
			return n, nil
		}
		var searches []string
		if x.Field == "eventtype" {
			searches = k.b.Eventtypes(x.Value)
		} else {
			for _, t := range k.b.Tagged(x.Value) {
				if t.Field == "eventtype" {
					searches = append(searches, k.b.Eventtypes(t.Value)...)
				} else {
					searches = append(searches, fmt.Sprintf("%s=%q", t.Field, t.Value))
				}
			}
		}
		return k.orOf(searches, 0)
	}
	return n, nil
}

// orOf parses searches into one OR (none: a search that matches nothing).
// depth bounds eventtypes that name eventtypes.
func (k *Knowledge) orOf(searches []string, depth int) (Node, error) {
	if depth > 8 {
		return nil, fmt.Errorf("%w: eventtypes nest more than 8 deep", ErrBadRequest)
	}
	var out Node
	for _, s := range searches {
		q, err := Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%w: eventtype search %q: %w", ErrBadRequest, s, err)
		}
		if len(q.Commands) > 0 {
			return nil, fmt.Errorf("%w: eventtype search %q: a search expression only, no commands", ErrBadRequest, s)
		}
		n, err := k.rewrite(q.Search)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = n
		} else {
			out = OrNode{L: out, R: n}
		}
	}
	if out == nil {
		return NotNode{X: TermNode{Text: ""}}, nil // an empty term matches all: NOT it, none
	}
	return out, nil
}

// prepare readies a parsed query for this bundle: eventtype= and tag= are
// rewritten (in the search and in every | search), and each | lookup must
// name a table of the bundle. A query with either and no bundle is
// refused.
func (k *Knowledge) prepare(q *Query) error {
	for i, c := range q.Commands {
		switch x := c.(type) {
		case LookupCmd:
			if k == nil {
				return fmt.Errorf("%w: lookup %s: this search runs with no knowledge bundle (quarry searchhead --knowledge DIR)", ErrBadRequest, x.Spec.Table)
			}
			if _, ok := k.b.Lookup(x.Spec.Table); !ok {
				return fmt.Errorf("%w: lookup %s: no such lookup in the knowledge bundle", ErrBadRequest, x.Spec.Table)
			}
		case SearchCmd:
			if k != nil {
				n, err := k.rewrite(x.Expr)
				if err != nil {
					return err
				}
				q.Commands[i] = SearchCmd{Expr: n, compiled: compileNode(n)}
			}
		}
	}
	if k != nil && q.Search != nil {
		n, err := k.rewrite(q.Search)
		if err != nil {
			return err
		}
		q.Search = n
	}
	return nil
}

// lookupCmd runs | lookup on a row.
func (k *Knowledge) lookupCmd(c LookupCmd, r *Row) {
	if k == nil {
		return
	}
	if t, ok := k.b.Lookup(c.Spec.Table); ok {
		applyLookup(c.Spec, t, r, isDefaultField)
	}
}
