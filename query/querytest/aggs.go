package querytest

import (
	"math"
	"sort"

	"github.com/quarry-dev/quarry/query"
)

// aggName is an aggregate's output column: its `as` name, else fn or
// fn(field), percN for a percentile.
func aggName(a query.AggSpec) string {
	if a.As != "" {
		return a.As
	}
	fn := a.Func
	if fn == "perc" {
		fn += numText(a.Perc)
	}
	if a.Field == "" {
		return fn
	}
	return fn + "(" + a.Field + ")"
}

// aggregate computes one aggregate over a group's rows, each from the whole
// list of values (nil: the aggregate has no value).
func aggregate(a query.AggSpec, rows []*query.Row) any {
	var vals []string
	for _, r := range rows {
		v := r.F[a.Field]
		if v == nil && a.Field == "_time" {
			v = query.Time(r.T)
		}
		vals = append(vals, valuesOf(v)...)
	}
	var nums []float64
	for _, v := range vals {
		if f, ok := parseNumber(v); ok {
			nums = append(nums, f)
		}
	}
	switch a.Func {
	case "count":
		return count(a, rows)
	case "sum", "avg":
		if len(nums) == 0 {
			return nil
		}
		s := 0.0
		for _, f := range nums {
			s += f
		}
		if a.Func == "avg" {
			return s / float64(len(nums))
		}
		return s
	case "min", "max":
		return extreme(a.Func == "max", nums, vals)
	case "dc", "values":
		return distinct(a.Func == "dc", vals)
	case "perc":
		if len(nums) == 0 {
			return nil
		}
		// Nearest rank: the smallest value with at least Perc % at or below.
		sort.Float64s(nums)
		k := int(math.Ceil(a.Perc/100*float64(len(nums)))) - 1
		return nums[max(0, min(k, len(nums)-1))]
	case "earliest", "latest":
		return timed(a, rows)
	}
	return nil
}

func count(a query.AggSpec, rows []*query.Row) any {
	if a.Field == "" {
		return int64(len(rows))
	}
	n := 0
	for _, r := range rows {
		if r.F[a.Field] != nil {
			n++
		}
	}
	return int64(n)
}

// extreme is min or max: numeric when any value is a number, else of the
// strings.
func extreme(isMax bool, nums []float64, vals []string) any {
	pick := func(n int) int {
		if isMax {
			return n - 1
		}
		return 0
	}
	if len(nums) > 0 {
		sort.Float64s(nums)
		return nums[pick(len(nums))]
	}
	if len(vals) == 0 {
		return nil
	}
	sort.Strings(vals)
	return vals[pick(len(vals))]
}

// distinct is dc (the number of distinct values) or values (them, sorted).
func distinct(isCount bool, vals []string) any {
	set := map[string]bool{}
	for _, v := range vals {
		set[v] = true
	}
	var u []string
	for v := range set {
		u = append(u, v)
	}
	sort.Strings(u)
	if isCount {
		return int64(len(u))
	}
	if len(u) == 0 {
		return nil
	}
	return u
}

// timed is earliest or latest: the value of the earliest or latest row
// that has one; ties go to the smaller value.
func timed(a query.AggSpec, rows []*query.Row) any {
	var best *query.Row
	var bv string
	for _, r := range rows {
		v, ok := text(r.F[a.Field])
		if !ok {
			continue
		}
		if best == nil || (a.Func == "earliest" && (r.T < best.T || r.T == best.T && v < bv)) ||
			(a.Func == "latest" && (r.T > best.T || r.T == best.T && v < bv)) {
			best, bv = r, v
		}
	}
	if best == nil {
		return nil
	}
	return bv
}
