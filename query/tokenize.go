package query

// Splunk-style segmentation (segmenters.conf): major breakers split _raw into
// segments; minor breakers split a segment further. Both the whole major
// segment and each of its minor parts are indexed, lowercased, so that
// `192.168.1.1`, `192` and `168` all find an event holding 192.168.1.1, and
// `/api/v1/cart` as well as `cart` find a request path. Intermediate joins
// (`192.168`) are not indexed; a search for one is verified against _raw.

// MaxTokenLen bounds an indexed token; longer segments are cut to it, and a
// search term longer than it is looked up by its prefix and verified on _raw.
const MaxTokenLen = 128

var breakerClass [256]uint8

const (
	major = 1
	minor = 2
)

func init() {
	for _, c := range " \t\n\r\v\f[]<>(){}|!;,'\"*&?+" {
		breakerClass[c] = major
	}
	for _, c := range "/:=@.-$#%\\_" {
		breakerClass[c] = minor
	}
}

// IsMajorBreaker reports whether c splits _raw into major segments.
func IsMajorBreaker(c byte) bool { return breakerClass[c] == major }

// IsMinorBreaker reports whether c splits a major segment into minor parts.
func IsMinorBreaker(c byte) bool { return breakerClass[c] == minor }

// Tokenizer turns _raw into index terms. The zero value is ready to use; it
// keeps a scratch buffer so tokenizing allocates nothing in steady state. A
// Tokenizer is not safe for concurrent use.
type Tokenizer struct {
	buf []byte
}

// Tokenize calls fn with every term of raw: each major segment and, where a
// major segment contains minor breakers, each non-empty minor part, all
// lowercased (ASCII) and cut to MaxTokenLen. The same term may be passed more
// than once; tok is only valid during the call and must not be modified (it
// may point into raw).
func (t *Tokenizer) Tokenize(raw []byte, fn func(tok []byte)) {
	n := len(raw)
	i := 0
	for i < n {
		for i < n && breakerClass[raw[i]] == major {
			i++
		}
		start := i
		hasMinor := false
		for i < n && breakerClass[raw[i]] != major {
			if breakerClass[raw[i]] == minor {
				hasMinor = true
			}
			i++
		}
		if start == i {
			continue
		}
		seg := raw[start:i]
		// Trim minor breakers at the ends of the whole segment: "foo." and
		// "foo" are one term.
		a, b := 0, len(seg)
		for a < b && breakerClass[seg[a]] == minor {
			a++
		}
		for b > a && breakerClass[seg[b-1]] == minor {
			b--
		}
		if a == b {
			continue
		}
		whole := seg[a:b]
		t.emit(whole, fn)
		if !hasMinor {
			continue
		}
		onlyEdges := true
		for _, c := range whole {
			if breakerClass[c] == minor {
				onlyEdges = false
				break
			}
		}
		if onlyEdges {
			continue
		}
		p := 0
		for j := 0; j <= len(whole); j++ {
			if j == len(whole) || breakerClass[whole[j]] == minor {
				if j > p {
					t.emit(whole[p:j], fn)
				}
				p = j + 1
			}
		}
	}
}

func (t *Tokenizer) emit(tok []byte, fn func([]byte)) {
	if len(tok) > MaxTokenLen {
		tok = tok[:MaxTokenLen]
	}
	// Fast path: most tokens are already lower case and need no copy.
	upper := -1
	for k, c := range tok {
		if c-'A' < 26 {
			upper = k
			break
		}
	}
	if upper < 0 {
		fn(tok)
		return
	}
	t.buf = append(t.buf[:0], tok...)
	for k := upper; k < len(t.buf); k++ {
		if c := t.buf[k]; c-'A' < 26 {
			t.buf[k] = c + ('a' - 'A')
		}
	}
	fn(t.buf)
}

// Terms returns the distinct terms of s in first-seen order; a convenience
// for search terms and tests, not for the ingest hot path.
func Terms(s string) []string {
	var t Tokenizer
	seen := map[string]bool{}
	var out []string
	t.Tokenize([]byte(s), func(tok []byte) {
		if !seen[string(tok)] {
			seen[string(tok)] = true
			out = append(out, string(tok))
		}
	})
	return out
}
