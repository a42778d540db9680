package query

// A rex whose regular expression is a literal, one named group of a run of
// ASCII class characters, and an optional literal — `rt=(?<ms>\d+)ms`,
// `user=(?<user>\w+)` — is matched without the regexp engine: find the
// prefix, take the run, check the suffix. Such a pattern is most rex
// commands users write, and the regexp engine's backtracker spent a fifth
// of `* | rex "rt=(?<ms>\d+)ms" | stats avg(ms)` on it.
//
// The answer is the regexp package's, leftmost-first: a match starts where
// the prefix starts (earliest first); from there the greedy run can only
// end at the run's end, because the suffix's first byte is not a class
// character (a pattern where it is goes to the regexp engine). The class is
// ASCII only, so no byte of a multi-byte UTF-8 sequence is in it, and the
// literals hold no U+FFFD (which the engine matches against invalid UTF-8).

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// litGroup is a pattern prefix(?<name>[class]+)suffix.
type litGroup struct {
	prefix, suffix string
	class          [4]uint64 // bit b: byte b is a class character
	name           string
	// rare is the offset in prefix of the byte a log line holds least
	// often (rareByteOffset): the prefix is looked for where that byte is,
	// '=' of "rt=" rather than the 'r' of every word.
	rare int
}

// byteCommonness ranks how often a byte occurs in log text: letters and
// digits most, then the space and the separators of paths, addresses and
// times, then other punctuation; a guess, which only decides how fast a
// prefix is found, never whether.
func byteCommonness(c byte) int {
	switch {
	case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return 4
	case c >= 'A' && c <= 'Z', c == ' ':
		return 3
	case c == '/', c == '.', c == '-', c == ':', c == '"', c == ',':
		return 2
	}
	return 1
}

// rareByteOffset is the offset of prefix's least common byte (the last of
// equals).
func rareByteOffset(prefix string) int {
	best := 0
	for i := 1; i < len(prefix); i++ {
		if byteCommonness(prefix[i]) <= byteCommonness(prefix[best]) {
			best = i
		}
	}
	return best
}

// compileLitGroup is re's litGroup, or nil when re is not of that form.
func compileLitGroup(re *regexp.Regexp) *litGroup {
	if re.NumSubexp() != 1 || re.SubexpNames()[1] == "" {
		return nil
	}
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	t = t.Simplify()
	if t.Op != syntax.OpConcat || len(t.Sub) < 2 || len(t.Sub) > 3 {
		return nil
	}
	g := &litGroup{name: re.SubexpNames()[1]}
	var ok bool
	if g.prefix, ok = literalOf(t.Sub[0]); !ok || g.prefix == "" {
		return nil
	}
	capt := t.Sub[1]
	if capt.Op != syntax.OpCapture || len(capt.Sub) != 1 {
		return nil
	}
	plus := capt.Sub[0]
	if plus.Op != syntax.OpPlus || plus.Flags&syntax.NonGreedy != 0 || len(plus.Sub) != 1 {
		return nil
	}
	cc := plus.Sub[0]
	if cc.Op != syntax.OpCharClass {
		return nil
	}
	for i := 0; i+1 < len(cc.Rune); i += 2 {
		lo, hi := cc.Rune[i], cc.Rune[i+1]
		if lo < 0 || hi >= utf8.RuneSelf {
			return nil
		}
		for c := lo; c <= hi; c++ {
			g.class[c>>6] |= 1 << (c & 63)
		}
	}
	g.rare = rareByteOffset(g.prefix)
	if len(t.Sub) == 3 {
		if g.suffix, ok = literalOf(t.Sub[2]); !ok || g.suffix == "" || g.in(g.suffix[0]) {
			return nil
		}
	}
	return g
}

// literalOf is a case-sensitive literal's text.
func literalOf(t *syntax.Regexp) (string, bool) {
	if t.Op != syntax.OpLiteral || t.Flags&syntax.FoldCase != 0 {
		return "", false
	}
	for _, r := range t.Rune {
		if r == utf8.RuneError || r < 0 || r > utf8.MaxRune {
			return "", false
		}
	}
	return string(t.Rune), true
}

func (g *litGroup) in(c byte) bool { return g.class[c>>6]&(1<<(c&63)) != 0 }

// find is the group's value in s's leftmost match, as the regexp engine
// would give it; false when s does not match.
//
// The prefix's starts are visited in ascending order: each one has the
// prefix's rare byte at start+rare, so the walk looks for that byte and
// checks the prefix around it.
func (g *litGroup) find(s string) (string, bool) {
	rb := g.prefix[g.rare]
	for at := g.rare; at < len(s); at++ {
		k := strings.IndexByte(s[at:], rb)
		if k < 0 {
			return "", false
		}
		at += k
		start := at - g.rare
		if !strings.HasPrefix(s[start:], g.prefix) {
			continue
		}
		i := start + len(g.prefix)
		j := i
		for j < len(s) && g.in(s[j]) {
			j++
		}
		if j > i && strings.HasPrefix(s[j:], g.suffix) {
			return s[i:j], true
		}
	}
	return "", false
}
