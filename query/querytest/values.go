package querytest

import (
	"cmp"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/query"
)

// The oracle's own reading of values (see query/value.go for the kinds a
// field holds) and its own total order of them, written apart from the
// executor's so that the two can only agree by both being right.

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// text is a single value as a string; false for absent.
func text(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return numText(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case int:
		return strconv.FormatInt(int64(x), 10), true
	case query.Time:
		return time.Unix(0, int64(x)).UTC().Format(time.RFC3339Nano), true
	case bool:
		return strconv.FormatBool(x), true
	case []string:
		return strings.Join(x, "\n"), len(x) > 0
	}
	return "", false
}

// numText writes a number the shortest way, an integral one without a
// fraction (and zero without a sign).
func numText(f float64) string {
	if f == 0 {
		return "0"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// number is a value as a number: numbers as they are, _time in seconds,
// a string (or a one-value multivalue) that reads as a finite number.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case string:
		return parseNumber(x)
	case []string:
		if len(x) != 1 {
			return 0, false
		}
		return parseNumber(x[0])
	case query.Time:
		return float64(x) / 1e9, true
	case float64, int64, int:
		return reflect.ValueOf(x).Convert(reflect.TypeFor[float64]()).Float(), true
	}
	return 0, false
}

// parseNumber reads s (spaces around it allowed) as a finite number that
// starts with a digit, a sign or a point.
func parseNumber(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || !strings.Contains("0123456789+-.", s[:1]) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && finite(f)
}

// valuesOf lists a field's values: none when absent, each of a multivalue.
func valuesOf(v any) []string {
	switch x := v.(type) {
	case nil:
		return nil
	case []string:
		return x
	}
	s, _ := text(v)
	return []string{s}
}

// rank places a value in the order: class 0 numbers (by f), 1 strings (by
// s), 2 absent. mode "num" ranks every non-number alike, "str" every value
// by its text.
type rank struct {
	class int
	f     float64
	s     string
}

func rankOf(v any, mode string) rank {
	if v == nil {
		return rank{class: 2}
	}
	if mode != "str" {
		if f, ok := number(v); ok {
			return rank{class: 0, f: f}
		}
		if mode == "num" {
			return rank{class: 1}
		}
	}
	s, _ := text(v)
	return rank{class: 1, s: s}
}

func (a rank) compare(b rank) int {
	if a.class != b.class {
		return cmp.Compare(a.class, b.class)
	}
	if a.class == 0 {
		return compareFloats(a.f, b.f)
	}
	return strings.Compare(a.s, b.s)
}

// compareFloats is -1, 0 or 1 (0 when either is NaN).
func compareFloats(a, b float64) int { return b2i(a > b) - b2i(a < b) }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// compareValues is the oracle's total order: numbers first (numerically),
// then strings, absent last.
func compareValues(a, b any) int { return rankOf(a, "").compare(rankOf(b, "")) }

// keyLess orders group keys: each part by compareValues, then bytewise.
func keyLess(a, b []string) bool {
	for i := range a {
		if c := compareValues(a[i], b[i]); c != 0 {
			return c < 0
		}
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
