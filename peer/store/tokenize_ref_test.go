package store

import (
	"reflect"
	"testing"

	"github.com/quarry-dev/quarry/query"
	"pgregory.net/rapid"
)

// refTokenize is the tokenizer as first written on main (copy, then
// lowercase every token): query/tokenize.go was since optimised for speed
// and must produce exactly the same terms.
func refTokenize(raw []byte, fn func(tok []byte)) {
	emit := func(tok []byte) {
		if len(tok) > query.MaxTokenLen {
			tok = tok[:query.MaxTokenLen]
		}
		c := append([]byte(nil), tok...)
		for k := range c {
			if c[k] >= 'A' && c[k] <= 'Z' {
				c[k] += 32
			}
		}
		fn(c)
	}
	n, i := len(raw), 0
	for i < n {
		for i < n && query.IsMajorBreaker(raw[i]) {
			i++
		}
		start, hasMinor := i, false
		for i < n && !query.IsMajorBreaker(raw[i]) {
			if query.IsMinorBreaker(raw[i]) {
				hasMinor = true
			}
			i++
		}
		if start == i {
			continue
		}
		seg := raw[start:i]
		a, b := 0, len(seg)
		for a < b && query.IsMinorBreaker(seg[a]) {
			a++
		}
		for b > a && query.IsMinorBreaker(seg[b-1]) {
			b--
		}
		if a == b {
			continue
		}
		whole := seg[a:b]
		emit(whole)
		inner := false
		for _, c := range whole {
			inner = inner || query.IsMinorBreaker(c)
		}
		if !hasMinor || !inner {
			continue
		}
		p := 0
		for j := 0; j <= len(whole); j++ {
			if j == len(whole) || query.IsMinorBreaker(whole[j]) {
				if j > p {
					emit(whole[p:j])
				}
				p = j + 1
			}
		}
	}
}

func TestTokenizerMatchesReference(t *testing.T) {
	alphabet := []byte("aZ09 .-/:=_\t\"[]GET,;x\xc3\xa9")
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(rt, "n")
		raw := make([]byte, n)
		for i := range raw {
			raw[i] = rapid.SampledFrom(alphabet).Draw(rt, "c")
		}
		var got, want [][]byte
		var tok query.Tokenizer
		tok.Tokenize(raw, func(b []byte) { got = append(got, append([]byte(nil), b...)) })
		refTokenize(raw, func(b []byte) { want = append(want, b) })
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("%q: got %q want %q", raw, got, want)
		}
	})
}
