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
	row *Row
	now time.Time
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
		return sl + sr
	}
	fl, okl := num(l)
	fr, okr := num(r)
	if !okl || !okr {
		if e.op == "+" {
			sl, _ := str(l)
			sr, _ := str(r)
			return sl + sr
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

// likeMatch is SQL LIKE: % any sequence, _ one byte.
func likeMatch(pat, s string) bool { return wildcardMatch(pat, s, '%', '_') }

func (e callExpr) Eval(env *evalEnv) any {
	arg := func(i int) any {
		if i < len(e.args) {
			return e.args[i].Eval(env)
		}
		return nil
	}
	sarg := func(i int) (string, bool) { return str(arg(i)) }
	narg := func(i int) (float64, bool) { return num(arg(i)) }
	switch e.fn {
	case "if":
		if truthy(arg(0)) {
			return arg(1)
		}
		return arg(2)
	case "case":
		for i := 0; i+1 < len(e.args); i += 2 {
			if truthy(arg(i)) {
				return arg(i + 1)
			}
		}
		return nil
	case "coalesce":
		for i := range e.args {
			if v := arg(i); v != nil {
				return v
			}
		}
		return nil
	case "null":
		return nil
	case "true":
		return true
	case "false":
		return false
	case "now":
		return float64(env.now.UnixNano()) / 1e9
	case "isnull":
		return arg(0) == nil
	case "isnotnull":
		return arg(0) != nil
	case "isnum":
		_, ok := narg(0)
		return ok
	case "isstr":
		v := arg(0)
		_, isS := v.(string)
		_, isN := num(v)
		return isS && !isN
	case "len":
		s, ok := sarg(0)
		if !ok {
			return nil
		}
		return float64(len(s))
	case "lower", "upper":
		s, ok := sarg(0)
		if !ok {
			return nil
		}
		if e.fn == "lower" {
			return strings.ToLower(s)
		}
		return strings.ToUpper(s)
	case "substr":
		s, ok := sarg(0)
		st, ok2 := narg(1)
		if !ok || !ok2 {
			return nil
		}
		start := int(st)
		if start < 0 {
			start = len(s) + start + 1
		}
		if start < 1 {
			start = 1
		}
		if start > len(s) {
			return ""
		}
		out := s[start-1:]
		if n, ok := narg(2); ok && len(e.args) > 2 {
			if n < 0 {
				n = 0
			}
			if int(n) < len(out) {
				out = out[:int(n)]
			}
		}
		return out
	case "trim", "ltrim", "rtrim":
		s, ok := sarg(0)
		if !ok {
			return nil
		}
		cut := " \t"
		if c, ok := sarg(1); ok && len(e.args) > 1 {
			cut = c
		}
		switch e.fn {
		case "ltrim":
			return strings.TrimLeft(s, cut)
		case "rtrim":
			return strings.TrimRight(s, cut)
		}
		return strings.Trim(s, cut)
	case "replace":
		s, ok := sarg(0)
		repl, ok2 := sarg(2)
		re := e.re
		if re == nil {
			p, ok3 := sarg(1)
			var err error
			if re, err = regexp.Compile(p); err != nil || !ok3 {
				return nil
			}
		}
		if !ok || !ok2 {
			return nil
		}
		return re.ReplaceAllString(s, repl)
	case "like":
		s, ok := sarg(0)
		p, ok2 := sarg(1)
		if !ok || !ok2 {
			return false
		}
		return likeMatch(p, s)
	case "match":
		s, ok := sarg(0)
		re := e.re
		if re == nil {
			p, ok3 := sarg(1)
			var err error
			if re, err = regexp.Compile(p); err != nil || !ok3 {
				return false
			}
		}
		return ok && re.MatchString(s)
	case "round":
		x, ok := narg(0)
		if !ok {
			return nil
		}
		d, _ := narg(1)
		p := math.Pow(10, math.Trunc(d))
		return math.Round(x*p) / p
	case "floor", "ceil", "ceiling", "abs", "sqrt", "exp", "ln":
		x, ok := narg(0)
		if !ok {
			return nil
		}
		var r float64
		switch e.fn {
		case "floor":
			r = math.Floor(x)
		case "ceil", "ceiling":
			r = math.Ceil(x)
		case "abs":
			r = math.Abs(x)
		case "sqrt":
			r = math.Sqrt(x)
		case "exp":
			r = math.Exp(x)
		default:
			r = math.Log(x)
		}
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return nil
		}
		return r
	case "pow":
		x, ok := narg(0)
		y, ok2 := narg(1)
		if !ok || !ok2 {
			return nil
		}
		r := math.Pow(x, y)
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return nil
		}
		return r
	case "log":
		x, ok := narg(0)
		if !ok || x <= 0 {
			return nil
		}
		b := 10.0
		if v, ok := narg(1); ok && len(e.args) > 1 {
			b = v
		}
		if b <= 0 || b == 1 {
			return nil
		}
		return math.Log(x) / math.Log(b)
	case "min", "max":
		var best any
		for i := range e.args {
			v := arg(i)
			if v == nil {
				continue
			}
			if best == nil {
				best = v
				continue
			}
			c := compareValues(v, best)
			if e.fn == "min" && c < 0 || e.fn == "max" && c > 0 {
				best = v
			}
		}
		return best
	case "tostring":
		v := arg(0)
		if v == nil {
			return nil
		}
		if f, ok := sarg(1); ok && len(e.args) > 1 {
			x, ok := num(v)
			if !ok {
				s, _ := str(v)
				return s
			}
			switch f {
			case "hex":
				return "0x" + strings.ToUpper(strconv.FormatInt(int64(x), 16))
			case "commas":
				return commas(x)
			}
		}
		s, _ := str(v)
		return s
	case "tonumber":
		s, ok := sarg(0)
		if !ok {
			return nil
		}
		if b, ok := narg(1); ok && len(e.args) > 1 {
			n, err := strconv.ParseInt(strings.TrimPrefix(strings.ToLower(s), "0x"), int(b), 64)
			if err != nil {
				return nil
			}
			return float64(n)
		}
		if f, ok := parseNum(s); ok {
			return f
		}
		return nil
	case "mvcount":
		v := arg(0)
		if v == nil {
			return nil
		}
		return float64(len(values(v)))
	}
	return nil
}

func commas(x float64) string {
	neg := x < 0
	x = math.Abs(x)
	r := math.Round(x*100) / 100
	ip := int64(r)
	s := strconv.FormatInt(ip, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if frac := r - float64(ip); frac > 0 {
		out += strings.TrimPrefix(strconv.FormatFloat(frac, 'f', 2, 64), "0")
	}
	if neg {
		out = "-" + out
	}
	return out
}

var funcArity = map[string][2]int{
	"if": {3, 3}, "case": {2, 64}, "coalesce": {1, 64}, "null": {0, 0}, "true": {0, 0}, "false": {0, 0},
	"now": {0, 0}, "isnull": {1, 1}, "isnotnull": {1, 1}, "isnum": {1, 1}, "isstr": {1, 1},
	"len": {1, 1}, "lower": {1, 1}, "upper": {1, 1}, "substr": {2, 3}, "trim": {1, 2}, "ltrim": {1, 2},
	"rtrim": {1, 2}, "replace": {3, 3}, "like": {2, 2}, "match": {2, 2}, "round": {1, 2},
	"floor": {1, 1}, "ceil": {1, 1}, "ceiling": {1, 1}, "abs": {1, 1}, "sqrt": {1, 1}, "exp": {1, 1},
	"ln": {1, 1}, "pow": {2, 2}, "log": {1, 2}, "min": {1, 64}, "max": {1, 64}, "tostring": {1, 2},
	"tonumber": {1, 2}, "mvcount": {1, 1},
}

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
}

// nest counts one level of nesting at t; the caller defers p.depth--.
func (p *exprParser) nest(t etok) error {
	if p.depth++; p.depth > MaxNesting {
		return tooDeep(p.q, t.pos, fmt.Sprintf("%q", t.text))
	}
	return nil
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
	for p.isWord("OR", "||") {
		p.i++
		r, err := p.parseXor()
		if err != nil {
			return nil, err
		}
		l = binExpr{"OR", l, r}
	}
	return l, nil
}

func (p *exprParser) parseXor() (Expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isWord("XOR") {
		p.i++
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = binExpr{"XOR", l, r}
	}
	return l, nil
}

func (p *exprParser) parseAnd() (Expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isWord("AND", "&&") {
		p.i++
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = binExpr{"AND", l, r}
	}
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
		return unaryExpr{"NOT", x}, nil
	}
	return p.parseCmp()
}

func (p *exprParser) parseCmp() (Expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
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
			return l, nil
		}
		p.i++
		r, err := p.parseConcat()
		if err != nil {
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
	for t := p.peek(); t.kind == 'o' && t.text == "."; t = p.peek() {
		p.i++
		r, err := p.parseAdd()
		if err != nil {
			return nil, err
		}
		l = binExpr{".", l, r}
	}
	return l, nil
}

func (p *exprParser) parseAdd() (Expr, error) {
	l, err := p.parseMul()
	if err != nil {
		return nil, err
	}
	for t := p.peek(); t.kind == 'o' && (t.text == "+" || t.text == "-"); t = p.peek() {
		p.i++
		r, err := p.parseMul()
		if err != nil {
			return nil, err
		}
		l = binExpr{t.text, l, r}
	}
	return l, nil
}

func (p *exprParser) parseMul() (Expr, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for t := p.peek(); t.kind == 'o' && (t.text == "*" || t.text == "/" || t.text == "%"); t = p.peek() {
		p.i++
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		l = binExpr{t.text, l, r}
	}
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
		return unaryExpr{"-", x}, nil
	}
	return p.parsePrimary()
}

func (p *exprParser) parsePrimary() (Expr, error) {
	t := p.next()
	switch t.kind {
	case 'n':
		f, _ := strconv.ParseFloat(t.text, 64)
		return litExpr{f}, nil
	case 's':
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
			fn := strings.ToLower(t.text)
			ar, ok := funcArity[fn]
			if !ok {
				return nil, p.errAt(t, "a known function (if, case, coalesce, len, lower, upper, substr, round, tostring, tonumber, like, match, …)")
			}
			p.i++
			var args []Expr
			if p.peek().kind == ')' {
				p.i++
			} else {
				for {
					a, err := p.parseOr()
					if err != nil {
						return nil, err
					}
					args = append(args, a)
					c := p.next()
					if c.kind == ')' {
						break
					}
					if c.kind != ',' {
						return nil, p.errAt(c, `"," or ")"`)
					}
				}
			}
			if len(args) < ar[0] || len(args) > ar[1] {
				return nil, &SyntaxError{Query: p.q, Pos: t.pos, Expected: fmt.Sprintf("%s with %d to %d arguments", fn, ar[0], ar[1]), Found: fmt.Sprintf("%d arguments", len(args))}
			}
			if fn == "case" && len(args)%2 != 0 {
				return nil, &SyntaxError{Query: p.q, Pos: t.pos, Expected: "case with condition, value pairs", Found: fmt.Sprintf("%d arguments", len(args))}
			}
			c := callExpr{fn: fn, args: args}
			if fn == "match" || fn == "replace" {
				if l, ok := args[1].(litExpr); ok {
					s, _ := str(l.v)
					re, err := regexp.Compile(s)
					if err != nil {
						return nil, &SyntaxError{Query: p.q, Pos: t.pos, Expected: "a valid regular expression", Found: err.Error()}
					}
					c.re = re
				}
			}
			return c, nil
		}
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
