package query

// Limits on what one search can cost inside the query package (SPEC §11,
// issue 26). The parser's limits (MaxQueryBytes, MaxNesting, MaxHeight)
// live beside the parser in parse.go; see DESIGN.md "Compile-time limits"
// and "Value and regex limits".

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// MaxValueBytes caps every value eval and where produce (1 MiB, as an
// event): a function or operator whose result would be longer fails the
// search with an ErrLimit error instead of building the value. Review N4:
// chained `eval x=replace(x,"(.+)","$1$1…")` multiplied a value by 10 a
// step until the peer died out of memory.
const MaxValueBytes = 1 << 20

// MaxRegexBytes caps the source of a regular expression (rex, match,
// replace): 4 KiB. MaxRegexInsts caps its compiled program (RE2
// instructions): 2,500. A regex's cost per byte of input grows with its
// program (review M1: a 139 KB alternation took 1.7 s per 210-byte
// event). Measured on that shape (`.{0,20}NNNzz|` repeated): 4 KiB of it
// is 13,800 instructions and 21 ms a 210-byte event; at 2,500
// instructions it is about 5 ms (a loaded 2-core machine). An ordinary rex (an access-log line,
// a key=value pair) is a few hundred instructions.
const (
	MaxRegexBytes = 4 << 10
	MaxRegexInsts = 2500
)

// MaxValues caps the distinct values values() shows for one group:
// 10,000 (Splunk's list() shows 100; its values() is capped by maxvalues).
// More are cut to the first 10,000 in sort order and the search's summary
// carries a warning saying so (valuesWarning) — never a silent cut.
const MaxValues = 10000

// valuesWarning is the summary warning of a values() cut to MaxValues.
var valuesWarning = fmt.Sprintf("values() limit of %d distinct values per group reached: the lists shown are cut to their first %d values", MaxValues, MaxValues)

// ErrLimit marks a search ended because it reached one of its limits; the
// message names the limit. It is the request's fault (HTTP 400).
var ErrLimit = errors.New("search limit reached")

// IsLimitError reports whether err is a search ended by a limit.
func IsLimitError(err error) bool { return errors.Is(err, ErrLimit) }

// limitError names the limit an ErrLimit error reached (LimitName).
type limitError struct {
	name string
	err  error // wraps ErrLimit
}

func (e *limitError) Error() string { return e.err.Error() }
func (e *limitError) Unwrap() error { return e.err }

// CompileLimit names the compile-time limit a refused request passed —
// "query_size", "nesting", "expression_height", "regex" (a *SyntaxError)
// or "preference" (a *PreferenceError) — or is "" when err is not such a
// refusal. The roles count it beside LimitName's in their limit metrics.
func CompileLimit(err error) string {
	var se *SyntaxError
	if errors.As(err, &se) {
		return se.Limit
	}
	var pe *PreferenceError
	if errors.As(err, &pe) {
		return pe.Limit
	}
	return ""
}

// LimitName is the name of the limit a search reached, for metrics:
// "search_memory" (the memory budget), "eval_value" (MaxValueBytes), or
// "other" for any other ErrLimit error.
func LimitName(err error) string {
	var le *limitError
	if errors.As(err, &le) {
		return le.name
	}
	return "other"
}

// valueTooLarge records, once per row pass, that a function or operator
// would produce a value of n bytes; the value becomes null and the
// executor fails the search with env.err.
func (env *evalEnv) valueTooLarge(what string, n int) any {
	if env.err == nil {
		env.err = &limitError{"eval_value", fmt.Errorf("%w: %s would make a value of up to %d bytes, more than the %d-byte limit on an eval value (MaxValueBytes)", ErrLimit, what, n, MaxValueBytes)}
	}
	return nil
}

// capped returns s, or null with env.err set when s passes MaxValueBytes
// (for results that can only grow a little past their input: upper, lower).
func (env *evalEnv) capped(what, s string) any {
	if len(s) > MaxValueBytes {
		return env.valueTooLarge(what, len(s))
	}
	return s
}

// concat joins l and r unless the result would pass MaxValueBytes.
func (env *evalEnv) concat(what, l, r string) any {
	if n := len(l) + len(r); n > MaxValueBytes {
		return env.valueTooLarge(what, n)
	}
	return l + r
}

// errRegexLimit marks a regular expression refused for its size.
var errRegexLimit = errors.New("a regular expression")

// regexSyntaxError is the syntax error of a query's regular expression at
// pos that failed to compile; one refused for its size names the "regex"
// limit.
func regexSyntaxError(q string, pos int, err error) *SyntaxError {
	se := &SyntaxError{Query: q, Pos: pos, Expected: "a valid regular expression", Found: err.Error()}
	if errors.Is(err, errRegexLimit) {
		se.Limit = "regex"
	}
	return se
}

// compileRegex compiles a regular expression of a query under
// MaxRegexBytes and MaxRegexInsts.
func compileRegex(src string) (*regexp.Regexp, error) {
	if len(src) > MaxRegexBytes {
		return nil, fmt.Errorf("%w of at most %d bytes, not %d", errRegexLimit, MaxRegexBytes, len(src))
	}
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, err
	}
	if n := len(prog.Inst); n > MaxRegexInsts {
		return nil, fmt.Errorf("%w of at most %d program instructions, not %d", errRegexLimit, MaxRegexInsts, n)
	}
	return regexp.Compile(src)
}

// replaceBounded is regexp's ReplaceAllString unless its result could pass
// MaxValueBytes. Every group a replacement names lies inside its match, so
// one match's expansion is at most len(repl) + refs × len(match) (refs:
// the $ signs of repl); the bound is checked first from len(s) alone and,
// when that is not enough, from one pass over the matches. A result that
// may pass the limit is refused (ok false) without being built, with the
// bound as its size.
func replaceBounded(re *regexp.Regexp, s, repl string) (out string, bound int, ok bool) {
	refs := strings.Count(repl, "$")
	// Matches do not overlap, so their lengths add up to at most len(s),
	// and there are at most len(s)+1 of them.
	if quick := len(s)*(1+refs) + (len(s)+1)*len(repl); quick <= MaxValueBytes && quick >= 0 {
		return re.ReplaceAllString(s, repl), quick, true
	}
	bound = len(s)
	re.ReplaceAllStringFunc(s, func(m string) string {
		if bound <= MaxValueBytes {
			bound += len(repl) + refs*len(m) - len(m)
		}
		return ""
	})
	if bound > MaxValueBytes {
		return "", bound, false
	}
	return re.ReplaceAllString(s, repl), bound, true
}
