package knowledge

import (
	"bytes"
	"regexp"
	"regexp/syntax"
)

// lineBreaker splits a body at the matches of a custom LINE_BREAKER.
//
// The regexp package runs an unanchored search over a large body in its
// NFA at tens of nanoseconds a byte. When the pattern cannot match empty,
// holds no empty-width assertion (^ $ \A \z \b \B) and every match starts
// with one of a few ASCII bytes (as ([\r\n]+)\d{4}- does), the breaker
// instead finds those bytes with vectorised searches and tries the pattern
// anchored at each: the same leftmost-first matches, found only where a
// match can begin.
type lineBreaker struct {
	re       *regexp.Regexp
	anchored *regexp.Regexp // ^(?:re); nil when the fast path does not apply
	first    []byte         // the bytes a match can start with
}

// maxFirstBytes bounds the start set the fast path searches for.
const maxFirstBytes = 4

func newLineBreaker(re *regexp.Regexp) *lineBreaker {
	b := &lineBreaker{re: re}
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil || hasAssertion(tree) || nullable(tree) {
		return b
	}
	var set [128]bool
	if !firstBytes(tree, &set) {
		return b
	}
	for c := range set {
		if set[c] {
			b.first = append(b.first, byte(c))
		}
	}
	if len(b.first) == 0 || len(b.first) > maxFirstBytes {
		b.first = nil
		return b
	}
	// The parsed tree, not the source: a source ending inside \Q…
	// (quoted to the end) would swallow the closing parenthesis.
	anchored, err := regexp.Compile(`^(?:` + tree.String() + `)`)
	if err != nil {
		b.first = nil
		return b
	}
	b.anchored = anchored
	return b
}

func hasAssertion(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	}
	for _, sub := range re.Sub {
		if hasAssertion(sub) {
			return true
		}
	}
	return false
}

func nullable(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpStar, syntax.OpQuest:
		return true
	case syntax.OpLiteral:
		return len(re.Rune) == 0
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL, syntax.OpNoMatch:
		return false
	case syntax.OpRepeat:
		return re.Min == 0 || nullable(re.Sub[0])
	case syntax.OpCapture, syntax.OpPlus:
		return nullable(re.Sub[0])
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if !nullable(sub) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if nullable(sub) {
				return true
			}
		}
		return false
	}
	return true // an assertion: matches empty
}

// firstBytes adds to set the bytes a match of re can start with; false
// when one is not ASCII or cannot be told.
func firstBytes(re *syntax.Regexp, set *[128]bool) bool {
	addRange := func(lo, hi rune) bool {
		if hi >= 128 || hi-lo >= maxFirstBytes {
			return false
		}
		for c := lo; c <= hi; c++ {
			set[c] = true
		}
		return true
	}
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return true
		}
		c := re.Rune[0]
		if re.Flags&syntax.FoldCase != 0 && c < 128 && isLetter(byte(c)) {
			return addRange(c|0x20, c|0x20) && addRange(c&^0x20, c&^0x20)
		}
		return addRange(c, c)
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if !addRange(re.Rune[i], re.Rune[i+1]) {
				return false
			}
		}
		return true
	case syntax.OpCapture, syntax.OpPlus, syntax.OpStar, syntax.OpQuest, syntax.OpRepeat:
		return firstBytes(re.Sub[0], set)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if !firstBytes(sub, set) {
				return false
			}
			if !nullable(sub) {
				return true
			}
		}
		return true
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if !firstBytes(sub, set) {
				return false
			}
		}
		return true
	case syntax.OpEmptyMatch:
		return true
	}
	return false
}

// split calls fn with each line: the text between matches whose first
// group took part, the group dropped.
func (b *lineBreaker) split(body []byte, fn func(start, end int) error) error {
	if b.anchored == nil {
		return splitAll(b.re, body, fn)
	}
	start := 0
	for pos := 0; pos < len(body); {
		i := b.indexFirst(body[pos:])
		if i < 0 {
			break
		}
		at := pos + i
		m := b.anchored.FindSubmatchIndex(body[at:])
		switch {
		case m == nil:
			pos = at + 1
			continue
		case m[2] >= 0:
			if err := fn(start, at+m[2]); err != nil {
				return err
			}
			start = at + m[3]
		}
		pos = at + m[1] // a match is never empty here
	}
	return fn(start, len(body))
}

// indexFirst is the first position of a start byte in b.
func (b *lineBreaker) indexFirst(s []byte) int {
	best := -1
	for _, c := range b.first {
		lim := s
		if best >= 0 {
			lim = s[:best]
		}
		if i := bytes.IndexByte(lim, c); i >= 0 {
			best = i
		}
	}
	return best
}

// splitAll is split by one unanchored search over the body.
func splitAll(re *regexp.Regexp, body []byte, fn func(start, end int) error) error {
	start := 0
	for _, m := range re.FindAllSubmatchIndex(body, -1) {
		if m[2] < 0 || m[2] < start {
			continue
		}
		if err := fn(start, m[2]); err != nil {
			return err
		}
		start = m[3]
	}
	return fn(start, len(body))
}
