package query

import (
	"strings"
)

// Matching semantics of search terms (the executor's verification; the
// oracle in querytest/match.go implements the same rules with its own code):
//
//   - A word or quoted phrase without '*' is lowercased and trimmed of
//     leading and trailing breakers; it matches an event whose lowercased
//     _raw contains it at a token boundary on both sides (a breaker or the
//     end of _raw). So `error` matches "upstream error:", `192.168` matches
//     "192.168.1.1" and `err` does not match "error". An empty term matches
//     every event.
//   - A word with '*' is a glob over the event's terms (Tokenize): it is
//     lowercased, trimmed of leading and trailing minor breakers, and
//     matches when any term of _raw matches it. `*` alone matches all.
//   - field<op>value compares the field's value(s) on the row (indexed
//     fields win over search-time extractions). `=` is a glob match,
//     case-insensitive (ASCII); a multivalue field matches when any value
//     does. `!=` matches rows that have the field and no value equal to
//     the pattern (NOT field=value also matches rows without the field).
//     `<`, `<=`, `>`, `>=` compare numerically when both sides are numbers,
//     else as lowercased strings.

// cnode is a compiled search expression.
type cnode struct {
	kind        byte // '&' '|' '!' 't' (term) 'g' (glob term) 'f' (field) '*' (all)
	l, r        *cnode
	text        string   // lowered trimmed term or pattern; lowered field value
	atoms       []string // term: its parts split at every breaker
	field, op   string
	wild        bool // field value has '*'
	num         float64
	isNum       bool
	hasLetters  bool
	exactTokens bool // term: postings answer it without verification
	wholeToken  bool // term: no major breaker, so it can be a whole segment
}

func isBreaker(c byte) bool { return breakerClass[c] != 0 }

func compileNode(n Node) *cnode {
	switch x := n.(type) {
	case nil:
		return &cnode{kind: '*'}
	case AndNode:
		return &cnode{kind: '&', l: compileNode(x.L), r: compileNode(x.R)}
	case OrNode:
		return &cnode{kind: '|', l: compileNode(x.L), r: compileNode(x.R)}
	case NotNode:
		return &cnode{kind: '!', l: compileNode(x.X)}
	case TermNode:
		low := asciiLower(x.Text)
		if !x.Quoted && strings.Contains(low, "*") {
			a, b := 0, len(low)
			for a < b && IsMinorBreaker(low[a]) {
				a++
			}
			for b > a && IsMinorBreaker(low[b-1]) {
				b--
			}
			pat := low[a:b]
			if strings.Trim(pat, "*") == "" {
				return &cnode{kind: '*'}
			}
			return &cnode{kind: 'g', text: pat}
		}
		a, b := 0, len(low)
		for a < b && isBreaker(low[a]) {
			a++
		}
		for b > a && isBreaker(low[b-1]) {
			b--
		}
		t := low[a:b]
		c := &cnode{kind: 't', text: t}
		p := 0
		for i := 0; i <= len(t); i++ {
			if i == len(t) || isBreaker(t[i]) {
				if i > p {
					c.atoms = append(c.atoms, t[p:i])
				}
				p = i + 1
			}
		}
		c.exactTokens = len(c.atoms) == 1 && c.atoms[0] == t && len(t) < MaxTokenLen
		c.wholeToken = !c.exactTokens && len(t) < MaxTokenLen
		for i := 0; i < len(t); i++ {
			if IsMajorBreaker(t[i]) {
				c.wholeToken = false
			}
		}
		if t == "" {
			return &cnode{kind: '*'}
		}
		return c
	case FieldNode:
		c := &cnode{kind: 'f', field: x.Field, op: x.Op, text: asciiLower(x.Value)}
		c.wild = strings.Contains(x.Value, "*")
		c.num, c.isNum = parseNum(x.Value)
		for i := 0; i < len(x.Value); i++ {
			if ch := x.Value[i]; ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' {
				c.hasLetters = true
			}
		}
		return c
	}
	return &cnode{kind: '*'}
}

// rawOnly reports whether the expression looks at _raw alone (terms,
// phrases, wildcards), so an event can be verified before its row is built.
func (c *cnode) rawOnly() bool {
	switch c.kind {
	case '*', 't', 'g':
		return true
	case '&', '|':
		return c.l.rawOnly() && c.r.rawOnly()
	case '!':
		return c.l.rawOnly()
	}
	return false
}

// matchRaw evaluates a raw-only expression on an event's _raw.
func (c *cnode) matchRaw(raw string, lower *string) bool {
	switch c.kind {
	case '*':
		return true
	case '&':
		return c.l.matchRaw(raw, lower) && c.r.matchRaw(raw, lower)
	case '|':
		return c.l.matchRaw(raw, lower) || c.r.matchRaw(raw, lower)
	case '!':
		return !c.l.matchRaw(raw, lower)
	case 't':
		if *lower == "" && raw != "" {
			*lower = asciiLower(raw)
		}
		return phraseIn(*lower, c.text)
	case 'g':
		found := false
		var tk Tokenizer
		tk.Tokenize([]byte(raw), func(tok []byte) {
			if !found && globMatch(c.text, string(tok)) {
				found = true
			}
		})
		return found
	}
	return false
}

// matchRow evaluates a compiled expression on a row.
func (c *cnode) matchRow(r *Row) bool {
	switch c.kind {
	case '*':
		return true
	case '&':
		return c.l.matchRow(r) && c.r.matchRow(r)
	case '|':
		return c.l.matchRow(r) || c.r.matchRow(r)
	case '!':
		return !c.l.matchRow(r)
	case 't':
		raw, ok := r.F["_raw"].(string)
		return ok && phraseIn(asciiLower(raw), c.text)
	case 'g':
		raw, ok := r.F["_raw"].(string)
		if !ok {
			return false
		}
		found := false
		var tk Tokenizer
		tk.Tokenize([]byte(raw), func(tok []byte) {
			if !found && globMatch(c.text, string(tok)) {
				found = true
			}
		})
		return found
	case 'f':
		return c.matchField(r.F[c.field])
	}
	return false
}

// valueEq is the `=` test of one field value (glob, ASCII case-insensitive).
func (c *cnode) valueEq(v string) bool {
	lv := asciiLower(v)
	if c.wild {
		return globMatch(c.text, lv)
	}
	return lv == c.text
}

func (c *cnode) valueCmp(v string) bool {
	var d int
	if f, ok := parseNum(v); ok && c.isNum {
		switch {
		case f < c.num:
			d = -1
		case f > c.num:
			d = 1
		}
	} else {
		d = strings.Compare(asciiLower(v), c.text)
	}
	switch c.op {
	case "<":
		return d < 0
	case "<=":
		return d <= 0
	case ">":
		return d > 0
	}
	return d >= 0
}

func (c *cnode) matchField(v any) bool {
	vals := values(v)
	if len(vals) == 0 {
		return false
	}
	switch c.op {
	case "=":
		for _, s := range vals {
			if c.valueEq(s) {
				return true
			}
		}
		return false
	case "!=":
		for _, s := range vals {
			if c.valueEq(s) {
				return false
			}
		}
		return true
	}
	for _, s := range vals {
		if c.valueCmp(s) {
			return true
		}
	}
	return false
}

// fieldValueMatches is the per-value test used over indexed field postings:
// for `=` and comparisons, whether an event with this value matches.
func (c *cnode) fieldValueMatches(v string) bool {
	if c.op == "=" || c.op == "!=" {
		return c.valueEq(v)
	}
	return c.valueCmp(v)
}

// phraseIn reports whether lowered raw holds t with a token boundary on both
// sides.
func phraseIn(raw, t string) bool {
	off := 0
	for {
		i := strings.Index(raw[off:], t)
		if i < 0 {
			return false
		}
		i += off
		end := i + len(t)
		if (i == 0 || isBreaker(raw[i-1])) && (end == len(raw) || isBreaker(raw[end])) {
			return true
		}
		off = i + 1
	}
}
