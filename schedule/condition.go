package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadCondition: an alert condition that does not parse.
var ErrBadCondition = errors.New("bad alert condition")

// Condition is an alert condition, "count OP N": it holds when the number
// of result rows compares so with N.
type Condition struct {
	Op string
	N  int64
}

// ops are the comparison operators, longest first (so ">=" is not read
// as ">").
var ops = []struct {
	op string
	f  func(a, b int64) bool
}{
	{">=", func(a, b int64) bool { return a >= b }},
	{"<=", func(a, b int64) bool { return a <= b }},
	{"==", func(a, b int64) bool { return a == b }},
	{"!=", func(a, b int64) bool { return a != b }},
	{">", func(a, b int64) bool { return a > b }},
	{"<", func(a, b int64) bool { return a < b }},
}

// ParseCondition reads "count OP N", OP one of > >= < <= == !=, N a whole
// number; spaces are optional.
func ParseCondition(s string) (Condition, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: %q: %s (want count OP N, OP one of > >= < <= == !=)", ErrBadCondition, s, why)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "count")
	if !ok {
		return Condition{}, bad("does not start with count")
	}
	rest = strings.TrimSpace(rest)
	for _, o := range ops {
		if num, ok := strings.CutPrefix(rest, o.op); ok {
			num = strings.TrimSpace(num)
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				return Condition{}, bad(fmt.Sprintf("%q is not a whole number", num))
			}
			return Condition{Op: o.op, N: n}, nil
		}
	}
	return Condition{}, bad("no comparison operator")
}

// Holds reports whether count satisfies the condition.
func (c Condition) Holds(count int64) bool {
	for _, o := range ops {
		if o.op == c.Op {
			return o.f(count, c.N)
		}
	}
	return false
}

// String is the condition's canonical form, "count > 5".
func (c Condition) String() string { return fmt.Sprintf("count %s %d", c.Op, c.N) }
