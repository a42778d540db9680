package query

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Values held by a row's fields are one of:
//   - nil (absent),
//   - string,
//   - float64 (numbers from eval and aggregates),
//   - int64 (counts, _cd),
//   - Time (_time, unix nanoseconds),
//   - []string (a multivalue field: repeated indexed fields, values()).
//
// Eval sees Time as float seconds, like Splunk's _time.

// Time is an event time in unix nanoseconds (UTC).
type Time int64

// Row is one result flowing through the pipeline. Key orders events: T is
// the event's _time and B/C its bucket and ordinal, kept beside the fields so
// that `fields`/`table` can drop _time and the head can still merge in time
// order.
type Row struct {
	T int64
	B string
	C uint32
	F map[string]any
}

// rowLess orders events newest first: _time descending, then bucket id
// ascending, then _cd descending (later in the journal first).
func rowLess(a, b *Row) bool {
	if a.T != b.T {
		return a.T > b.T
	}
	if a.B != b.B {
		return a.B < b.B
	}
	return a.C > b.C
}

func sortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool { return rowLess(&rows[i], &rows[j]) })
}

// str renders a single value as a string; ok is false for nil.
func str(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case float64:
		return fmtNum(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case int:
		return strconv.Itoa(x), true
	case Time:
		return time.Unix(0, int64(x)).UTC().Format(time.RFC3339Nano), true
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	case []string:
		if len(x) == 0 {
			return "", false
		}
		return strings.Join(x, "\n"), true
	}
	return "", false
}

func fmtNum(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// num reads a value as a number; strings are parsed (Splunk converts numeric
// strings implicitly). Time becomes float seconds.
func num(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case Time:
		return float64(x) / 1e9, true
	case string:
		return parseNum(x)
	case bool:
		return 0, false
	case []string:
		if len(x) == 1 {
			return parseNum(x[0])
		}
	}
	return 0, false
}

func parseNum(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	c := s[0]
	if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.') {
		return 0, false
	}
	if len(s) <= 15 {
		// plain digits (rt=123ms's 123): the integer, exact in a float64
		// below 10^15, is what ParseFloat would give
		n := int64(0)
		i := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			n = n*10 + int64(s[i]-'0')
		}
		if i == len(s) {
			return float64(n), true
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// values lists the values of a field (one for a single value, each for a
// multivalue, none for absent).
func values(v any) []string {
	switch x := v.(type) {
	case nil:
		return nil
	case []string:
		return x
	}
	s, _ := str(v)
	return []string{s}
}

// valuesIn is values with a single value listed in one, so a caller that
// only reads the list allocates nothing.
func valuesIn(v any, one *[1]string) []string {
	switch x := v.(type) {
	case nil:
		return nil
	case []string:
		return x
	}
	one[0], _ = str(v)
	return one[:]
}

// compareValues orders two values: numerically when both are numbers,
// a number before a string, else as strings; absent values sort last. It
// is a total order, so a sort or a merge of sorted runs gives the same
// answer whatever set it starts from (comparing numbers numerically and
// everything else as strings was not: "9" < "10" < "10a" < "9").
func compareValues(a, b any) int {
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
		switch {
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	case oka:
		return -1 // numbers before strings: a total order (Splunk: strings are greater)
	case okb:
		return 1
	}
	sa, _ := str(a)
	sb, _ := str(b)
	return strings.Compare(sa, sb)
}

// outputValue is how a value appears in a Response result.
func outputValue(v any) any {
	switch x := v.(type) {
	case Time:
		s, _ := str(x)
		return s
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmtNum(x)
		}
	case bool:
		s, _ := str(x)
		return s
	}
	return v
}

func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// globMatch matches s against a pattern where * matches any sequence.
func globMatch(pat, s string) bool { return wildcardMatch(pat, s, '*', 0) }

// wildcardMatch matches s against pat, where any matches any sequence of
// bytes and one (when not 0) exactly one byte: an iterative matcher that
// backtracks to the last any.
func wildcardMatch(pat, s string, any, one byte) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		if p < len(pat) && pat[p] == any {
			star = p
			mark = i
			p++
			continue
		}
		if p < len(pat) && ((one != 0 && pat[p] == one) || pat[p] == s[i]) {
			p++
			i++
			continue
		}
		if star >= 0 {
			p = star + 1
			mark++
			i = mark
			continue
		}
		return false
	}
	for p < len(pat) && pat[p] == any {
		p++
	}
	return p == len(pat)
}
