package query

import (
	"fmt"
	"github.com/quarry-dev/quarry/knowledge"
	"regexp"
	"strconv"
	"strings"
)

// SyntaxError is a query that does not parse. Pos is the 0-based byte
// offset in the query where the parser stopped; the message shows it as a
// 1-based column.
type SyntaxError struct {
	Query    string
	Pos      int
	Expected string
	Found    string
	// Limit names the compile-time limit the query passed ("query_size",
	// "nesting", "expression_height", "regex"), or is empty for a plain
	// syntax error; LimitName reports it for the roles' limit metrics.
	Limit string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("syntax error at column %d: expected %s, found %s", e.Pos+1, e.Expected, e.Found)
}

// Query is a parsed search: the search expression (nil matches every event),
// the time modifiers it carried, and the commands after it.
type Query struct {
	Search   Node
	Earliest string
	Latest   string
	Commands []Command
}

// Node is a search-expression node.
type Node interface{ isNode() }

// AndNode matches when both sides do.
type AndNode struct{ L, R Node }

// OrNode matches when either side does.
type OrNode struct{ L, R Node }

// NotNode matches when X does not.
type NotNode struct{ X Node }

// TermNode is a word or quoted phrase matched against _raw.
type TermNode struct {
	Text   string
	Quoted bool
	Pos    int
}

// FieldNode is field<op>value: op is =, !=, <, <=, >, >=.
type FieldNode struct {
	Field, Op, Value string
	Pos              int
}

func (AndNode) isNode()   {}
func (OrNode) isNode()    {}
func (NotNode) isNode()   {}
func (TermNode) isNode()  {}
func (FieldNode) isNode() {}

// Command is one pipeline command.
type Command interface{ Name() string }

// Assignment is one `field = expr` of eval.
type Assignment struct {
	Field string
	Expr  Expr
}

// AggSpec is one aggregate of stats or timechart: fn(field) [as name].
type AggSpec struct {
	Func  string // count sum avg min max dc values earliest latest perc
	Field string // empty for count
	Perc  float64
	As    string
}

// SortKey is one key of sort.
type SortKey struct {
	Field string
	Desc  bool
	Mode  string // "", "num", "str"
}

type (
	// SearchCmd filters rows by a search expression.
	SearchCmd struct {
		Expr     Node
		compiled *cnode
	}
	// LookupCmd enriches rows from a lookup table of the knowledge
	// bundle (knowledge.go).
	LookupCmd struct{ Spec knowledge.AutoLookup }
	// WhereCmd keeps rows whose expression is true.
	WhereCmd struct{ Expr Expr }
	// EvalCmd computes fields.
	EvalCmd struct{ Assign []Assignment }
	// FieldsCmd keeps (or with Remove drops) fields; wildcards allowed.
	FieldsCmd struct {
		Remove bool
		Fields []string
	}
	// TableCmd keeps exactly the listed columns, in order.
	TableCmd struct{ Fields []string }
	// RexCmd extracts named groups of a regular expression from a field.
	RexCmd struct {
		Field string
		Re    *regexp.Regexp
		// fast matches Re without the regexp engine when Re is a
		// literal, one named group of ASCII class characters and a
		// literal (rexfast.go); nil otherwise.
		fast *litGroup
	}
	// StatsCmd aggregates by fields.
	StatsCmd struct {
		Aggs []AggSpec
		By   []string
	}
	// TimechartCmd aggregates by time span and an optional split field.
	TimechartCmd struct {
		Span int64
		Aggs []AggSpec
		By   string
		// Limit, UseOther, OtherStr: with a split field, the Limit series
		// of the highest sum of values are shown (0: all), and the rest
		// merged into one series named OtherStr when UseOther — Splunk's
		// limit=10 useother=t otherstr=OTHER.
		Limit    int
		UseOther bool
		OtherStr string
	}
	// TopCmd is top (or rare with Rare set).
	TopCmd struct {
		Rare         bool
		Limit        int
		Fields       []string
		By           []string
		CountField   string
		PercentField string
		ShowCount    bool
		ShowPerc     bool
	}
	// SortCmd sorts rows; Limit 0 means all.
	SortCmd struct {
		Limit int
		Keys  []SortKey
	}
	// HeadCmd keeps the first N rows.
	HeadCmd struct{ N int }
	// TailCmd keeps the last N rows, last first.
	TailCmd struct{ N int }
	// DedupCmd keeps the first N rows of each combination of field values.
	DedupCmd struct {
		N         int
		Fields    []string
		KeepEmpty bool
	}
)

func (SearchCmd) Name() string    { return "search" }
func (WhereCmd) Name() string     { return "where" }
func (EvalCmd) Name() string      { return "eval" }
func (LookupCmd) Name() string    { return "lookup" }
func (FieldsCmd) Name() string    { return "fields" }
func (TableCmd) Name() string     { return "table" }
func (RexCmd) Name() string       { return "rex" }
func (StatsCmd) Name() string     { return "stats" }
func (TimechartCmd) Name() string { return "timechart" }
func (t TopCmd) Name() string {
	if t.Rare {
		return "rare"
	}
	return "top"
}
func (SortCmd) Name() string  { return "sort" }
func (HeadCmd) Name() string  { return "head" }
func (TailCmd) Name() string  { return "tail" }
func (DedupCmd) Name() string { return "dedup" }

const commandList = "a command (search, where, eval, fields, table, rex, lookup, stats, timechart, top, rare, sort, head, tail, dedup)"

// Parse parses a query. Errors are *SyntaxError.
func Parse(q string) (*Query, error) {
	if len(q) > MaxQueryBytes {
		return nil, &SyntaxError{Query: q, Pos: MaxQueryBytes, Expected: fmt.Sprintf("a query of at most %d bytes", MaxQueryBytes), Found: fmt.Sprintf("%d bytes", len(q)), Limit: "query_size"}
	}
	segs, err := splitPipes(q)
	if err != nil {
		return nil, err
	}
	out := &Query{}
	first := segs[0]
	body := first.text
	// An optional leading `search` keyword.
	if w, rest := firstWord(body); strings.EqualFold(w, "search") {
		first.pos += len(body) - len(rest)
		body = rest
	}
	p := &searchParser{q: q, src: body, base: first.pos}
	node, err := p.parseAll()
	if err != nil {
		return nil, err
	}
	node, err = liftTimeMods(q, node, out)
	if err != nil {
		return nil, err
	}
	out.Search = node
	for _, s := range segs[1:] {
		c, err := parseCommand(q, s)
		if err != nil {
			return nil, err
		}
		out.Commands = append(out.Commands, c)
	}
	return out, nil
}

type pipeSeg struct {
	text string
	pos  int
}

func splitPipes(q string) ([]pipeSeg, error) {
	var segs []pipeSeg
	start := 0
	inQ := byte(0)
	qpos := 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		if inQ != 0 {
			if c == '\\' {
				i++
			} else if c == inQ {
				inQ = 0
			}
			continue
		}
		switch c {
		case '"':
			inQ = c
			qpos = i
		case '|':
			segs = append(segs, pipeSeg{q[start:i], start})
			start = i + 1
		}
	}
	if inQ != 0 {
		return nil, &SyntaxError{Query: q, Pos: qpos, Expected: "a closing quote", Found: "end of query"}
	}
	segs = append(segs, pipeSeg{q[start:], start})
	return segs, nil
}

func firstWord(s string) (string, string) {
	t := strings.TrimLeft(s, " \t\r\n")
	i := 0
	for i < len(t) && !isSpace(t[i]) {
		i++
	}
	return t[:i], t[i:]
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func describe(tok string) string {
	if tok == "" {
		return "end of query"
	}
	return strconv.Quote(tok)
}

// ---- search expressions ----

type stok struct {
	kind byte // 'w' word, 's' string, '(' , ')', 0 eof
	text string
	pos  int // absolute
	end  int // absolute end
}

type searchParser struct {
	q     string
	src   string
	base  int
	i     int
	peek  *stok
	depth int
	h     int // height of the node the last parse function returned
}

// MaxNesting bounds how deeply parentheses and NOT (and eval's
// parentheses, NOT, unary minus and function calls — each call's argument
// list is one level) may nest: deeper queries get a syntax error instead
// of a stack overflow or seconds of CPU (SPEC §11).
const MaxNesting = 100

// MaxHeight bounds the height of a parsed expression tree — a search
// expression or one eval/where expression — counting every node: a chain
// `a OR b OR …` or `x."-".y.…` is as deep as it is long, and matching and
// eval recurse along it. With MaxNesting it bounds every recursion of the
// parser, the planner, the matcher and eval (SPEC §11): 10,000 levels cost
// a few MB of stack at most, and a list of 10,000 alternatives still parses.
const MaxHeight = 10000

// MaxQueryBytes caps the text of a query (256 KiB; Splunk's searches are far
// smaller): Parse refuses a longer one with a syntax error before it reads
// further, whatever the caller's body limit is.
const MaxQueryBytes = 256 << 10

func tooDeep(q string, pos int, found string) error {
	return &SyntaxError{Query: q, Pos: pos, Expected: fmt.Sprintf("at most %d levels of nesting (parentheses, NOT, function calls)", MaxNesting), Found: found, Limit: "nesting"}
}

func tooTall(q string, pos int, found string) error {
	return &SyntaxError{Query: q, Pos: pos, Expected: fmt.Sprintf("an expression at most %d operators deep", MaxHeight), Found: found, Limit: "expression_height"}
}

// joinHeight is the height of a node over children of heights l and r.
func joinHeight(l, r int) int { return max(l, r) + 1 }

func (p *searchParser) next() stok {
	if p.peek != nil {
		t := *p.peek
		p.peek = nil
		return t
	}
	for p.i < len(p.src) && isSpace(p.src[p.i]) {
		p.i++
	}
	if p.i >= len(p.src) {
		return stok{pos: p.base + p.i, end: p.base + p.i}
	}
	start := p.i
	c := p.src[p.i]
	switch c {
	case '(', ')':
		p.i++
		return stok{kind: c, text: string(c), pos: p.base + start, end: p.base + p.i}
	case '"':
		s, n := unquote(p.src[p.i:])
		p.i += n
		return stok{kind: 's', text: s, pos: p.base + start, end: p.base + p.i}
	}
	for p.i < len(p.src) {
		c := p.src[p.i]
		if isSpace(c) || c == '(' || c == ')' || c == '"' {
			break
		}
		p.i++
	}
	return stok{kind: 'w', text: p.src[start:p.i], pos: p.base + start, end: p.base + p.i}
}

func (p *searchParser) unread(t stok) { p.peek = &t }

// unquote reads a double-quoted string at the start of s (\" and \\
// escapes) and returns it with the bytes consumed.
func unquote(s string) (string, int) {
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		if c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
			b.WriteByte(s[i+1])
			i += 2
			continue
		}
		if c == '"' {
			return b.String(), i + 1
		}
		b.WriteByte(c)
		i++
	}
	return b.String(), i
}

func (p *searchParser) errAt(t stok, expected string) error {
	return &SyntaxError{Query: p.q, Pos: t.pos, Expected: expected, Found: describe(t.text)}
}

func (p *searchParser) parseAll() (Node, error) {
	t := p.next()
	if t.kind == 0 {
		return nil, nil
	}
	p.unread(t)
	n, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	if t := p.next(); t.kind != 0 {
		return nil, p.errAt(t, "a search term, AND, OR, NOT or a pipe")
	}
	return n, nil
}

// Splunk's precedence: NOT binds tightest, then OR, then AND (implicit).
func (p *searchParser) parseAnd() (Node, error) {
	left, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	h := p.h
	for {
		t := p.next()
		if t.kind == 0 || t.kind == ')' {
			p.unread(t)
			p.h = h
			return left, nil
		}
		if !(t.kind == 'w' && t.text == "AND") {
			p.unread(t)
		}
		right, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if h = joinHeight(h, p.h); h > MaxHeight {
			return nil, tooTall(p.q, t.pos, describe(t.text))
		}
		left = AndNode{left, right}
	}
}

func (p *searchParser) parseOr() (Node, error) {
	left, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	h := p.h
	for {
		t := p.next()
		if t.kind == 'w' && t.text == "OR" {
			right, err := p.parseNot()
			if err != nil {
				return nil, err
			}
			if h = joinHeight(h, p.h); h > MaxHeight {
				return nil, tooTall(p.q, t.pos, `"OR"`)
			}
			left = OrNode{left, right}
			continue
		}
		p.unread(t)
		p.h = h
		return left, nil
	}
}

func (p *searchParser) parseNot() (Node, error) {
	t := p.next()
	if t.kind == 'w' && t.text == "NOT" {
		if p.depth++; p.depth > MaxNesting {
			return nil, tooDeep(p.q, t.pos, "NOT")
		}
		defer func() { p.depth-- }()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		p.h++
		return NotNode{x}, nil
	}
	p.unread(t)
	return p.parsePrimary()
}

func (p *searchParser) parsePrimary() (Node, error) {
	t := p.next()
	switch t.kind {
	case '(':
		if p.depth++; p.depth > MaxNesting {
			return nil, tooDeep(p.q, t.pos, `"("`)
		}
		defer func() { p.depth-- }()
		n, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		c := p.next()
		if c.kind != ')' {
			return nil, p.errAt(c, `")"`)
		}
		return n, nil
	case 's':
		p.h = 1
		return TermNode{Text: t.text, Quoted: true, Pos: t.pos}, nil
	case 'w':
		switch t.text {
		case "AND", "OR", "NOT":
			return nil, p.errAt(t, "a search term")
		}
		p.h = 1
		return p.word(t)
	}
	return nil, p.errAt(t, "a search term")
}

func isFieldStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func isFieldChar(c byte) bool {
	return isFieldStart(c) || c >= '0' && c <= '9' || c == '.'
}

// word turns a bare word into a term or a field comparison.
func (p *searchParser) word(t stok) (Node, error) {
	w := t.text
	i := 0
	if i < len(w) && isFieldStart(w[i]) {
		for i < len(w) && isFieldChar(w[i]) {
			i++
		}
		if i < len(w) {
			op := ""
			switch {
			case strings.HasPrefix(w[i:], "!="):
				op = "!="
			case strings.HasPrefix(w[i:], "<="):
				op = "<="
			case strings.HasPrefix(w[i:], ">="):
				op = ">="
			case strings.HasPrefix(w[i:], "=="):
				op = "=="
			case w[i] == '=' || w[i] == '<' || w[i] == '>':
				op = w[i : i+1]
			}
			if op != "" {
				field := w[:i]
				val := w[i+len(op):]
				if op == "==" {
					op = "="
				}
				if val == "" {
					// A quoted value right after the operator.
					if p.i < len(p.src) && p.src[p.i] == '"' && p.peek == nil {
						s := p.next()
						return FieldNode{Field: field, Op: op, Value: s.text, Pos: t.pos}, nil
					}
					nt := p.next()
					return nil, p.errAt(nt, fmt.Sprintf("a value after %q", field+op))
				}
				return FieldNode{Field: field, Op: op, Value: val, Pos: t.pos}, nil
			}
		}
	}
	return TermNode{Text: w, Pos: t.pos}, nil
}

// liftTimeMods takes earliest=/latest= out of the top-level AND chain.
func liftTimeMods(q string, n Node, out *Query) (Node, error) {
	var walk func(n Node, top bool) (Node, error)
	walk = func(n Node, top bool) (Node, error) {
		switch x := n.(type) {
		case AndNode:
			l, err := walk(x.L, top)
			if err != nil {
				return nil, err
			}
			r, err := walk(x.R, top)
			if err != nil {
				return nil, err
			}
			switch {
			case l == nil:
				return r, nil
			case r == nil:
				return l, nil
			}
			return AndNode{l, r}, nil
		case OrNode:
			l, err := walk(x.L, false)
			if err != nil {
				return nil, err
			}
			r, err := walk(x.R, false)
			if err != nil {
				return nil, err
			}
			if l == nil || r == nil {
				return nil, &SyntaxError{Query: q, Pos: 0, Expected: "earliest=/latest= only at the top level", Found: "a time modifier under OR"}
			}
			return OrNode{l, r}, nil
		case NotNode:
			c, err := walk(x.X, false)
			if err != nil {
				return nil, err
			}
			if c == nil {
				return nil, &SyntaxError{Query: q, Pos: 0, Expected: "earliest=/latest= only at the top level", Found: "a time modifier under NOT"}
			}
			return NotNode{c}, nil
		case FieldNode:
			f := strings.ToLower(x.Field)
			if f == "earliest" || f == "latest" {
				if !top {
					return nil, &SyntaxError{Query: q, Pos: x.Pos, Expected: "earliest=/latest= only at the top level (not under OR or NOT)", Found: describe(x.Field + x.Op + x.Value)}
				}
				if x.Op != "=" {
					return nil, &SyntaxError{Query: q, Pos: x.Pos, Expected: f + "=<time>", Found: describe(x.Field + x.Op + x.Value)}
				}
				if _, err := ParseTime(x.Value, fixedNow); err != nil {
					return nil, &SyntaxError{Query: q, Pos: x.Pos + len(x.Field) + 1, Expected: "a time (now, -15m, -1h@h, RFC 3339)", Found: describe(x.Value)}
				}
				if f == "earliest" {
					out.Earliest = x.Value
				} else {
					out.Latest = x.Value
				}
				return nil, nil
			}
		}
		return n, nil
	}
	return walk(n, true)
}
