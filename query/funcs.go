package query

// The functions of eval and where: one small function each, looked up by
// name at parse time (evalFuncs) and kept in the callExpr, so evaluating a
// call is one indirect call, not a switch over every name.

import (
	"math"
	"strconv"
	"strings"
)

// evalFunc computes a call of one function; e holds its arguments (each
// evaluated only when the function asks for it) and a pattern compiled at
// parse time.
type evalFunc func(e callExpr, env *evalEnv) any

// evalFuncSpec is a function's arity and implementation.
type evalFuncSpec struct {
	min, max int
	eval     evalFunc
}

// evalFuncs are the functions of eval and where, by lower-case name.
var evalFuncs = map[string]evalFuncSpec{
	"if": {3, 3, fnIf}, "case": {2, 64, fnCase}, "coalesce": {1, 64, fnCoalesce},
	"null": {0, 0, fnConst(nil)}, "true": {0, 0, fnConst(true)}, "false": {0, 0, fnConst(false)},
	"now": {0, 0, fnNow}, "isnull": {1, 1, fnIsNull}, "isnotnull": {1, 1, fnIsNotNull},
	"isnum": {1, 1, fnIsNum}, "isstr": {1, 1, fnIsStr},
	"len": {1, 1, fnLen}, "lower": {1, 1, fnString(strings.ToLower)}, "upper": {1, 1, fnString(strings.ToUpper)},
	"substr": {2, 3, fnSubstr},
	"trim":   {1, 2, fnTrim(strings.Trim)}, "ltrim": {1, 2, fnTrim(strings.TrimLeft)}, "rtrim": {1, 2, fnTrim(strings.TrimRight)},
	"replace": {3, 3, fnReplace}, "like": {2, 2, fnLike}, "match": {2, 2, fnMatch}, "round": {1, 2, fnRound},
	"floor": {1, 1, fnMath(math.Floor)}, "ceil": {1, 1, fnMath(math.Ceil)}, "ceiling": {1, 1, fnMath(math.Ceil)},
	"abs": {1, 1, fnMath(math.Abs)}, "sqrt": {1, 1, fnMath(math.Sqrt)}, "exp": {1, 1, fnMath(math.Exp)},
	"ln": {1, 1, fnMath(math.Log)}, "pow": {2, 2, fnPow}, "log": {1, 2, fnLog},
	"min": {1, 64, fnExtreme(-1)}, "max": {1, 64, fnExtreme(1)},
	"tostring": {1, 2, fnToString}, "tonumber": {1, 2, fnToNumber}, "mvcount": {1, 1, fnMvcount},
}

// arg evaluates argument i; nil when the call has fewer arguments.
func (e callExpr) arg(env *evalEnv, i int) any {
	if i < len(e.args) {
		return e.args[i].Eval(env)
	}
	return nil
}

func (e callExpr) sarg(env *evalEnv, i int) (string, bool)  { return str(e.arg(env, i)) }
func (e callExpr) narg(env *evalEnv, i int) (float64, bool) { return num(e.arg(env, i)) }

func fnConst(v any) evalFunc { return func(callExpr, *evalEnv) any { return v } }

func fnIf(e callExpr, env *evalEnv) any {
	if truthy(e.arg(env, 0)) {
		return e.arg(env, 1)
	}
	return e.arg(env, 2)
}

func fnCase(e callExpr, env *evalEnv) any {
	for i := 0; i+1 < len(e.args); i += 2 {
		if truthy(e.arg(env, i)) {
			return e.arg(env, i+1)
		}
	}
	return nil
}

func fnCoalesce(e callExpr, env *evalEnv) any {
	for i := range e.args {
		if v := e.arg(env, i); v != nil {
			return v
		}
	}
	return nil
}

func fnNow(_ callExpr, env *evalEnv) any { return float64(env.now.UnixNano()) / 1e9 }

func fnIsNull(e callExpr, env *evalEnv) any    { return e.arg(env, 0) == nil }
func fnIsNotNull(e callExpr, env *evalEnv) any { return e.arg(env, 0) != nil }

func fnIsNum(e callExpr, env *evalEnv) any {
	_, ok := e.narg(env, 0)
	return ok
}

func fnIsStr(e callExpr, env *evalEnv) any {
	v := e.arg(env, 0)
	_, isS := v.(string)
	_, isN := num(v)
	return isS && !isN
}

func fnLen(e callExpr, env *evalEnv) any {
	s, ok := e.sarg(env, 0)
	if !ok {
		return nil
	}
	return float64(len(s))
}

// fnString is lower and upper: f of the string, null for null.
func fnString(f func(string) string) evalFunc {
	return func(e callExpr, env *evalEnv) any {
		s, ok := e.sarg(env, 0)
		if !ok {
			return nil
		}
		return env.capped(e.fn, f(s))
	}
}

func fnSubstr(e callExpr, env *evalEnv) any {
	s, ok := e.sarg(env, 0)
	st, ok2 := e.narg(env, 1)
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
	if n, ok := e.narg(env, 2); ok && len(e.args) > 2 {
		if n < 0 {
			n = 0
		}
		if int(n) < len(out) {
			out = out[:int(n)]
		}
	}
	return out
}

// fnTrim is trim, ltrim and rtrim: cut the given characters (default space
// and tab) with f.
func fnTrim(f func(s, cut string) string) evalFunc {
	return func(e callExpr, env *evalEnv) any {
		s, ok := e.sarg(env, 0)
		if !ok {
			return nil
		}
		cut := " \t"
		if c, ok := e.sarg(env, 1); ok && len(e.args) > 1 {
			cut = c
		}
		return f(s, cut)
	}
}

// fnReplace is replace(s, re, repl) under MaxValueBytes (replaceBounded):
// a result that could pass it is not built and fails the search.
func fnReplace(e callExpr, env *evalEnv) any {
	s, ok := e.sarg(env, 0)
	repl, ok2 := e.sarg(env, 2)
	re := e.re
	if re == nil {
		p, ok3 := e.sarg(env, 1)
		var err error
		if re, err = compileRegex(p); err != nil || !ok3 {
			return nil
		}
	}
	if !ok || !ok2 {
		return nil
	}
	out, bound, ok := replaceBounded(re, s, repl)
	if !ok {
		return env.valueTooLarge("replace", bound)
	}
	return out
}

func fnLike(e callExpr, env *evalEnv) any {
	s, ok := e.sarg(env, 0)
	p, ok2 := e.sarg(env, 1)
	if !ok || !ok2 {
		return false
	}
	return likeMatch(p, s)
}

// likeMatch is SQL LIKE: % any sequence, _ one byte.
func likeMatch(pat, s string) bool { return wildcardMatch(pat, s, '%', '_') }

func fnMatch(e callExpr, env *evalEnv) any {
	s, ok := e.sarg(env, 0)
	re := e.re
	if re == nil {
		p, ok3 := e.sarg(env, 1)
		var err error
		if re, err = compileRegex(p); err != nil || !ok3 {
			return false
		}
	}
	return ok && re.MatchString(s)
}

func fnRound(e callExpr, env *evalEnv) any {
	x, ok := e.narg(env, 0)
	if !ok {
		return nil
	}
	d, _ := e.narg(env, 1)
	p := math.Pow(10, math.Trunc(d))
	return math.Round(x*p) / p
}

// fnMath is floor, ceil, abs, sqrt, exp and ln: f of the number, null for
// a non-number or a result that is not finite.
func fnMath(f func(float64) float64) evalFunc {
	return func(e callExpr, env *evalEnv) any {
		x, ok := e.narg(env, 0)
		if !ok {
			return nil
		}
		r := f(x)
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return nil
		}
		return r
	}
}

func fnPow(e callExpr, env *evalEnv) any {
	x, ok := e.narg(env, 0)
	y, ok2 := e.narg(env, 1)
	if !ok || !ok2 {
		return nil
	}
	r := math.Pow(x, y)
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return nil
	}
	return r
}

func fnLog(e callExpr, env *evalEnv) any {
	x, ok := e.narg(env, 0)
	if !ok || x <= 0 {
		return nil
	}
	b := 10.0
	if v, ok := e.narg(env, 1); ok && len(e.args) > 1 {
		b = v
	}
	if b <= 0 || b == 1 {
		return nil
	}
	return math.Log(x) / math.Log(b)
}

// fnExtreme is min (sign -1) and max (sign 1) of the non-null arguments in
// compareValues' order.
func fnExtreme(sign int) evalFunc {
	return func(e callExpr, env *evalEnv) any {
		var best any
		for i := range e.args {
			v := e.arg(env, i)
			if v == nil {
				continue
			}
			if best == nil {
				best = v
				continue
			}
			if compareValues(v, best)*sign > 0 {
				best = v
			}
		}
		return best
	}
}

func fnToString(e callExpr, env *evalEnv) any {
	v := e.arg(env, 0)
	if v == nil {
		return nil
	}
	if f, ok := e.sarg(env, 1); ok && len(e.args) > 1 {
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
}

func fnToNumber(e callExpr, env *evalEnv) any {
	s, ok := e.sarg(env, 0)
	if !ok {
		return nil
	}
	if b, ok := e.narg(env, 1); ok && len(e.args) > 1 {
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
}

func fnMvcount(e callExpr, env *evalEnv) any {
	v := e.arg(env, 0)
	if v == nil {
		return nil
	}
	return float64(len(values(v)))
}

// commas renders x with thousands separators and at most two decimals.
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
