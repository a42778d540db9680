package querytest

import (
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/quarry-dev/quarry/query"
)

// The oracle's own matching: substring search at token boundaries for
// terms, its own tokenizer and a regular expression for wildcards, its own
// field comparisons (the rules are in query/match.go's comment).

const major = " \t\n\r\v\f[]<>(){}|!;,'\"*&?+"
const minor = "/:=@.-$#%\\_"

func isBreaker(c byte) bool {
	return strings.IndexByte(major, c) >= 0 || strings.IndexByte(minor, c) >= 0
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

// tokens lists the terms of raw: each segment between major breakers
// (trimmed of minor ones), then its parts between minor breakers; at most
// 128 bytes each, lower-cased.
func tokens(raw string) []string {
	var out []string
	cut := func(s string) string {
		if len(s) > 128 {
			s = s[:128]
		}
		return lower(s)
	}
	for _, seg := range strings.FieldsFunc(raw, func(r rune) bool { return r < 128 && strings.IndexByte(major, byte(r)) >= 0 }) {
		seg = strings.Trim(seg, minor)
		if seg == "" {
			continue
		}
		out = append(out, cut(seg))
		if strings.ContainsAny(seg, minor) {
			for _, p := range strings.FieldsFunc(seg, func(r rune) bool { return r < 128 && strings.IndexByte(minor, byte(r)) >= 0 }) {
				out = append(out, cut(p))
			}
		}
	}
	return out
}

var globCache sync.Map

// glob is pat (where * is any sequence) as a cached regular expression.
func glob(pat string) *regexp.Regexp {
	if re, ok := globCache.Load(pat); ok {
		return re.(*regexp.Regexp)
	}
	parts := strings.Split(pat, "*")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	re := regexp.MustCompile("(?s)^" + strings.Join(parts, ".*") + "$")
	globCache.Store(pat, re)
	return re
}

// matches reports whether the row satisfies the search expression n.
func matches(n query.Node, r *query.Row) bool {
	switch x := n.(type) {
	case nil:
		return true
	case query.AndNode:
		return matches(x.L, r) && matches(x.R, r)
	case query.OrNode:
		return matches(x.L, r) || matches(x.R, r)
	case query.NotNode:
		return !matches(x.X, r)
	case query.TermNode:
		return matchTerm(x, r)
	case query.FieldNode:
		return matchField(x, r)
	}
	return false
}

func matchTerm(x query.TermNode, r *query.Row) bool {
	raw, ok := r.F["_raw"].(string)
	if !x.Quoted && strings.Contains(x.Text, "*") {
		pat := strings.Trim(lower(x.Text), minor)
		if strings.Trim(pat, "*") == "" {
			return true
		}
		if !ok {
			return false
		}
		re := glob(pat)
		for _, t := range tokens(raw) {
			if re.MatchString(t) {
				return true
			}
		}
		return false
	}
	t := strings.TrimFunc(lower(x.Text), func(c rune) bool { return c < 128 && isBreaker(byte(c)) })
	if t == "" {
		return true
	}
	if !ok {
		return false
	}
	lr := lower(raw)
	for i := 0; i+len(t) <= len(lr); i++ {
		if lr[i:i+len(t)] == t && (i == 0 || isBreaker(lr[i-1])) && (i+len(t) == len(lr) || isBreaker(lr[i+len(t)])) {
			return true
		}
	}
	return false
}

func matchField(x query.FieldNode, r *query.Row) bool {
	vals := valuesOf(r.F[x.Field])
	if len(vals) == 0 {
		return false
	}
	re := glob(lower(x.Value))
	eq := func(v string) bool { return re.MatchString(lower(v)) }
	switch x.Op {
	case "=":
		for _, v := range vals {
			if eq(v) {
				return true
			}
		}
		return false
	case "!=":
		for _, v := range vals {
			if eq(v) {
				return false
			}
		}
		return true
	}
	for _, v := range vals {
		var c int
		fv, e1 := strconv.ParseFloat(strings.TrimSpace(v), 64)
		fq, e2 := strconv.ParseFloat(x.Value, 64)
		if e1 == nil && e2 == nil && finite(fv) && strings.TrimSpace(v) != "" && strings.IndexAny(strings.TrimSpace(v)[:1], "0123456789-+.") == 0 {
			c = compareFloats(fv, fq)
		} else {
			c = strings.Compare(lower(v), lower(x.Value))
		}
		if x.Op == "<" && c < 0 || x.Op == "<=" && c <= 0 || x.Op == ">" && c > 0 || x.Op == ">=" && c >= 0 {
			return true
		}
	}
	return false
}
