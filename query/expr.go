package query

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The expression language of eval and where.
//
// Literals: numbers (12, 1.5), "strings", true, false. A bare identifier
// ([A-Za-z_][A-Za-z0-9_.]*) or a 'single-quoted name' is a field. Operators,
// loosest first: OR (also ||), XOR, AND (also &&), NOT (also !), comparison
// (= == != < <= > >= LIKE), concatenation (.), + -, * / %, unary -. `+`
// adds numbers and concatenates otherwise; comparisons are numeric when both
// sides are numbers (numeric strings count) and byte-wise otherwise. A
// missing field is null: arithmetic with null is null, a comparison with null
// is false.
//
// Functions: if(c,a,b) case(c1,v1,…) coalesce(…) null() isnull(x)
// isnotnull(x) isnum(x) isstr(x) len(s) lower(s) upper(s) substr(s,start[,n])
// (1-based) trim/ltrim/rtrim(s[,chars]) replace(s,re,repl) like(s,pattern)
// (% and _) match(s,re) round(x[,digits]) floor(x) ceil(x) abs(x) sqrt(x)
// pow(x,y) exp(x) ln(x) log(x[,base]) min(…) max(…) tostring(x[,"hex"|
// "commas"]) tonumber(s[,base]) mvcount(f) now() true() false().

// fixedNow validates time modifiers at parse time.
var fixedNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Expr is an eval expression.
type Expr interface {
	Eval(env *evalEnv) any
}

type evalEnv struct {
	row  *Row
	now  time.Time
	know *Knowledge // the search's knowledge bundle (| lookup), nil: none
	err  error      // set when a value passed a limit (limits.go); the search fails
}

type litExpr struct{ v any }
type fieldExpr struct{ name string }
type unaryExpr struct {
	op string
	x  Expr
}
type binExpr struct {
	op   string
	l, r Expr
}
type callExpr struct {
	fn   string
	args []Expr
	re   *regexp.Regexp // match/replace with a literal pattern, compiled once
	eval evalFunc       // the function, resolved at parse time (evalFuncs)
}

func (e litExpr) Eval(*evalEnv) any { return e.v }

func (e fieldExpr) Eval(env *evalEnv) any {
	v := env.row.F[e.name]
	if v == nil && e.name == "_time" && env.row.T != 0 {
		return float64(env.row.T) / 1e9
	}
	if t, ok := v.(Time); ok {
		return float64(t) / 1e9
	}
	return v
}

func truthy(v any) bool {
	b, ok := v.(bool)
	return ok && b
}

func (e unaryExpr) Eval(env *evalEnv) any {
	v := e.x.Eval(env)
	switch e.op {
	case "NOT":
		if v == nil {
			return nil
		}
		return !truthy(v)
	case "-":
		if f, ok := num(v); ok {
			return -f
		}
		return nil
	}
	return nil
}

func (e binExpr) Eval(env *evalEnv) any {
	switch e.op {
	case "AND":
		return truthy(e.l.Eval(env)) && truthy(e.r.Eval(env))
	case "OR":
		return truthy(e.l.Eval(env)) || truthy(e.r.Eval(env))
	case "XOR":
		return truthy(e.l.Eval(env)) != truthy(e.r.Eval(env))
	}
	l, r := e.l.Eval(env), e.r.Eval(env)
	if l == nil || r == nil {
		if e.op == "=" || e.op == "!=" || e.op == "<" || e.op == "<=" || e.op == ">" || e.op == ">=" || e.op == "LIKE" {
			return false
		}
		return nil
	}
	switch e.op {
	case "=", "!=", "<", "<=", ">", ">=":
		var c int
		fl, okl := num(l)
		fr, okr := num(r)
		if okl && okr {
			switch {
			case fl < fr:
				c = -1
			case fl > fr:
				c = 1
			}
		} else {
			sl, _ := str(l)
			sr, _ := str(r)
			c = strings.Compare(sl, sr)
		}
		switch e.op {
		case "=":
			return c == 0
		case "!=":
			return c != 0
		case "<":
			return c < 0
		case "<=":
			return c <= 0
		case ">":
			return c > 0
		}
		return c >= 0
	case "LIKE":
		sl, _ := str(l)
		sr, _ := str(r)
		return likeMatch(sr, sl)
	case ".":
		sl, _ := str(l)
		sr, _ := str(r)
		return env.concat(`"."`, sl, sr)
	}
	fl, okl := num(l)
	fr, okr := num(r)
	if !okl || !okr {
		if e.op == "+" {
			sl, _ := str(l)
			sr, _ := str(r)
			return env.concat(`"+"`, sl, sr)
		}
		return nil
	}
	switch e.op {
	case "+":
		return fl + fr
	case "-":
		return fl - fr
	case "*":
		return fl * fr
	case "/":
		if fr == 0 {
			return nil
		}
		return fl / fr
	case "%":
		if fr == 0 {
			return nil
		}
		return math.Mod(fl, fr)
	}
	return nil
}

// Eval runs the function resolved at parse time.
func (e callExpr) Eval(env *evalEnv) any { return e.eval(e, env) }

// ---- expression parser ----

type etok struct {
	kind byte // 'n' number, 's' string, 'i' ident, 'o' operator, '(' ')' ',', 0 eof
	text string
	pos  int
}

type exprParser struct {
	q     string
	toks  []etok
	i     int
	end   int
	depth int
	h     int // height of the expression the last parse function returned
}

// nest counts one level of nesting at t; the caller defers p.depth--.
func (p *exprParser) nest(t etok) error {
	if p.depth++; p.depth > MaxNesting {
		return tooDeep(p.q, t.pos, fmt.Sprintf("%q", t.text))
	}
	return nil
}

// join records a binary node at t over a left operand of height hl and
// the operand just parsed (p.h), and refuses a tree taller than MaxHeight.
func (p *exprParser) join(t etok, hl int) (int, error) {
	h := joinHeight(hl, p.h)
	if h > MaxHeight {
		return 0, tooTall(p.q, t.pos, fmt.Sprintf("%q", t.text))
	}
	return h, nil
}

func lexExpr(q, s string, base int) ([]etok, error) {
	var out []etok
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) {
			return out, nil
		}
		c := s[i]
		st := i
		switch {
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
				(s[i] == '-' || s[i] == '+') && (s[i-1] == 'e' || s[i-1] == 'E')) {
				i++
			}
			if _, err := strconv.ParseFloat(s[st:i], 64); err != nil {
				return nil, &SyntaxError{Query: q, Pos: base + st, Expected: "a number", Found: describe(s[st:i])}
			}
			out = append(out, etok{'n', s[st:i], base + st})
		case c == '"':
			str, n := unquote(s[i:])
			i += n
			out = append(out, etok{'s', str, base + st})
		case c == '\'':
			e := strings.IndexByte(s[i+1:], '\'')
			if e < 0 {
				return nil, &SyntaxError{Query: q, Pos: base + st, Expected: "a closing '", Found: "end of expression"}
			}
			out = append(out, etok{'i', s[i+1 : i+1+e], base + st})
			i += e + 2
		case isFieldStart(c):
			for i < len(s) && (isFieldChar(s[i]) && !(s[i] == '.' && (i+1 >= len(s) || !isFieldChar(s[i+1])))) {
				i++
			}
			out = append(out, etok{'i', s[st:i], base + st})
		case c == '(' || c == ')' || c == ',':
			i++
			out = append(out, etok{c, string(c), base + st})
		default:
			ops := []string{"==", "!=", "<=", ">=", "&&", "||", "=", "<", ">", "+", "-", "*", "/", "%", ".", "!"}
			found := ""
			for _, o := range ops {
				if strings.HasPrefix(s[i:], o) {
					found = o
					break
				}
			}
			if found == "" {
				return nil, &SyntaxError{Query: q, Pos: base + st, Expected: "an expression", Found: describe(s[i : i+1])}
			}
			i += len(found)
			out = append(out, etok{'o', found, base + st})
		}
	}
}

func parseExpr(q, s string, base int) (Expr, error) {
	toks, err := lexExpr(q, s, base)
	if err != nil {
		return nil, err
	}
	p := &exprParser{q: q, toks: toks, end: base + len(s)}
	if len(toks) == 0 {
		return nil, p.errAt(p.peek(), "an expression")
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if !p.done() {
		return nil, p.errAt(p.peek(), "an operator or the end of the expression")
	}
	return e, nil
}

func parseEval(q, s string, base int) (Command, error) {
	toks, err := lexExpr(q, s, base)
	if err != nil {
		return nil, err
	}
	p := &exprParser{q: q, toks: toks, end: base + len(s)}
	var c EvalCmd
	for {
		f := p.next()
		if f.kind != 'i' {
			return nil, p.errAt(f, "a field name to assign")
		}
		if eq := p.next(); !(eq.kind == 'o' && eq.text == "=") {
			return nil, p.errAt(eq, fmt.Sprintf(`"=" after %q`, f.text))
		}
		e, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		c.Assign = append(c.Assign, Assignment{Field: f.text, Expr: e})
		if p.done() {
			return c, nil
		}
		if t := p.next(); t.kind != ',' {
			return nil, p.errAt(t, `"," or the end of eval`)
		}
	}
}

func (p *exprParser) peek() etok {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return etok{pos: p.end}
}

func (p *exprParser) next() etok {
	t := p.peek()
	if p.i < len(p.toks) {
		p.i++
	}
	return t
}

func (p *exprParser) done() bool { return p.i >= len(p.toks) }

func (p *exprParser) errAt(t etok, expected string) error {
	return &SyntaxError{Query: p.q, Pos: t.pos, Expected: expected, Found: describe(t.text)}
}

func (p *exprParser) isWord(words ...string) bool {
	t := p.peek()
	if t.kind == 'i' || t.kind == 'o' {
		for _, w := range words {
			if strings.EqualFold(t.text, w) {
				return true
			}
		}
	}
	return false
}

func (p *exprParser) parseOr() (Expr, error) {
	l, err := p.parseXor()
	if err != nil {
		return nil, err
	}
	h := p.h
	for p.isWord("OR", "||") {
		t := p.next()
		r, err := p.parseXor()
		if err != nil {
			return nil, err
		}
		if h, err = p.join(t, h); err != nil {
			return nil, err
		}
		l = binExpr{"OR", l, r}
	}
	p.h = h
	return l, nil
}

func (p *exprParser) parseXor() (Expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	h := p.h
	for p.isWord("XOR") {
		t := p.next()
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		if h, err = p.join(t, h); err != nil {
			return nil, err
		}
		l = binExpr{"XOR", l, r}
	}
	p.h = h
	return l, nil
}

func (p *exprParser) parseAnd() (Expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	h := p.h
	for p.isWord("AND", "&&") {
		t := p.next()
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		if h, err = p.join(t, h); err != nil {
			return nil, err
		}
		l = binExpr{"AND", l, r}
	}
	p.h = h
	return l, nil
}

func (p *exprParser) parseNot() (Expr, error) {
	if p.isWord("NOT", "!") {
		if err := p.nest(p.peek()); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		p.i++
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		p.h++
		return unaryExpr{"NOT", x}, nil
	}
	return p.parseCmp()
}

func (p *exprParser) parseCmp() (Expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	h := p.h
	for {
		t := p.peek()
		op := ""
		if t.kind == 'o' {
			switch t.text {
			case "=", "==":
				op = "="
			case "!=", "<", "<=", ">", ">=":
				op = t.text
			}
		} else if t.kind == 'i' && strings.EqualFold(t.text, "LIKE") {
			op = "LIKE"
		}
		if op == "" {
			p.h = h
			return l, nil
		}
		p.i++
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		if h, err = p.join(t, h); err != nil {
			return nil, err
		}
		l = binExpr{op, l, r}
	}
}

func (p *exprParser) parseConcat() (Expr, error) {
	l, err := p.parseAdd()
	if err != nil {
		return nil, err
	}
	h := p.h
	for t := p.peek(); t.kind == 'o' && t.text == "."; t = p.peek() {
		p.i++
		r, err := p.parseAdd()
		if err != nil {
			return nil, err
		}
		if h, err = p.join(t, h); err != nil {
			return nil, err
		}
		l = binExpr{".", l, r}
	}
	p.h = h
	return l, nil
}

func (p *exprParser) parseAdd() (Expr, error) {
	l, err := p.parseMul()
	if err != nil {
		return nil, err
	}
	h := p.h
	for t := p.peek(); t.kind == 'o' && (t.text == "+" || t.text == "-"); t = p.peek() {
		p.i++
		r, err := p.parseMul()
		if err != nil {
			return nil, err
		}
		if h, err = p.join(t, h); err != nil {
			return nil, err
		}
		l = binExpr{t.text, l, r}
	}
	p.h = h
	return l, nil
}

func (p *exprParser) parseMul() (Expr, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	h := p.h
	for t := p.peek(); t.kind == 'o' && (t.text == "*" || t.text == "/" || t.text == "%"); t = p.peek() {
		p.i++
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		if h, err = p.join(t, h); err != nil {
			return nil, err
		}
		l = binExpr{t.text, l, r}
	}
	p.h = h
	return l, nil
}

func (p *exprParser) parseUnary() (Expr, error) {
	if t := p.peek(); t.kind == 'o' && t.text == "-" {
		if err := p.nest(t); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		p.i++
		x, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		p.h++
		return unaryExpr{"-", x}, nil
	}
	return p.parsePrimary()
}

func (p *exprParser) parsePrimary() (Expr, error) {
	t := p.next()
	switch t.kind {
	case 'n':
		f, _ := strconv.ParseFloat(t.text, 64)
		p.h = 1
		return litExpr{f}, nil
	case 's':
		p.h = 1
		return litExpr{t.text}, nil
	case '(':
		if err := p.nest(t); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		e, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != ')' {
			return nil, p.errAt(c, `")"`)
		}
		return e, nil
	case 'i':
		if p.peek().kind == '(' {
			return p.parseCall(t)
		}
		p.h = 1
		switch strings.ToLower(t.text) {
		case "true":
			return litExpr{true}, nil
		case "false":
			return litExpr{false}, nil
		case "null":
			return litExpr{nil}, nil
		}
		return fieldExpr{t.text}, nil
	}
	return nil, p.errAt(t, "an expression")
}

// parseCall parses a call of the function named t, its "(" next. Its
// argument list is one level of nesting (MaxNesting) and the call one
// node above its tallest argument (MaxHeight).
func (p *exprParser) parseCall(t etok) (Expr, error) {
	fn := strings.ToLower(t.text)
	spec, ok := evalFuncs[fn]
	if !ok {
		return nil, p.errAt(t, "a known function (if, case, coalesce, len, lower, upper, substr, round, tostring, tonumber, like, match, …)")
	}
	if err := p.nest(t); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	p.i++
	var args []Expr
	h := 0
	if p.peek().kind == ')' {
		p.i++
	} else {
		for {
			a, err := p.parseOr()
			if err != nil {
				return nil, err
			}
			args = append(args, a)
			h = max(h, p.h)
			c := p.next()
			if c.kind == ')' {
				break
			}
			if c.kind != ',' {
				return nil, p.errAt(c, `"," or ")"`)
			}
		}
	}
	if p.h = h + 1; p.h > MaxHeight {
		return nil, tooTall(p.q, t.pos, fmt.Sprintf("%q", t.text))
	}
	if len(args) < spec.min || len(args) > spec.max {
		return nil, &SyntaxError{Query: p.q, Pos: t.pos, Expected: fmt.Sprintf("%s with %d to %d arguments", fn, spec.min, spec.max), Found: fmt.Sprintf("%d arguments", len(args))}
	}
	if fn == "case" && len(args)%2 != 0 {
		return nil, &SyntaxError{Query: p.q, Pos: t.pos, Expected: "case with condition, value pairs", Found: fmt.Sprintf("%d arguments", len(args))}
	}
	c := callExpr{fn: fn, args: args, eval: spec.eval}
	if fn == "match" || fn == "replace" {
		if l, ok := args[1].(litExpr); ok {
			s, _ := str(l.v)
			re, err := compileRegex(s)
			if err != nil {
				return nil, regexSyntaxError(p.q, t.pos, err)
			}
			c.re = re
		}
	}
	return c, nil
}
