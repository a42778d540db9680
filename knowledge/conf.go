package knowledge

import (
	"bytes"
	"fmt"
	"strings"
)

// Stanza is one [name] section of a .conf file with its settings in the order
// they first appear. Line is the header's line (for the implicit "default"
// stanza, the line of its first setting).
type Stanza struct {
	Name string
	Line int
	Keys []KV
}

// KV is one setting of a stanza; Line is where it starts (a continued value
// starts on the line of its key).
type KV struct {
	Key, Value string
	Line       int
}

// Get returns the value of key in the stanza and whether it is set.
func (s *Stanza) Get(key string) (string, bool) {
	for _, kv := range s.Keys {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// ParseConf parses one .conf file named name (used in errors): [stanza]
// headers, key = value settings (whitespace around key and value trimmed),
// '#' comment lines and blank lines; a line whose last non-blank character is
// a backslash continues on the next line, joined with "\n" as Splunk does.
// Settings before any header belong to "default". A stanza written twice is
// one stanza (as Splunk merges them); a key set twice keeps the last value at
// the place it first appeared. Errors read "NAME:LINE: what".
func ParseConf(name string, b []byte) ([]Stanza, error) {
	p := confParser{name: name, index: map[string]int{}, cur: -1}
	n := 0
	for len(b) > 0 {
		var phys []byte
		phys, b = cutLine(b)
		n++
		start := n
		text := strings.TrimLeft(string(phys), " \t")
		if text == "" || text[0] == '#' {
			continue
		}
		for {
			trimmed := strings.TrimRight(text, " \t")
			if !strings.HasSuffix(trimmed, `\`) {
				break
			}
			text = trimmed[:len(trimmed)-1]
			if len(b) == 0 {
				break
			}
			phys, b = cutLine(b)
			n++
			text += "\n" + string(phys)
		}
		if text == "" { // a lone backslash continued into nothing
			continue
		}
		if err := p.line(text, start); err != nil {
			return nil, err
		}
	}
	return p.out, nil
}

// cutLine returns the first line of b without its "\n" or "\r\n", and the rest.
func cutLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		line, rest = b, nil
	} else {
		line, rest = b[:i], b[i+1:]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest
}

type confParser struct {
	name  string
	out   []Stanza
	index map[string]int   // stanza name → position in out
	keys  []map[string]int // per stanza: key → position in Keys
	cur   int
}

func (p *confParser) errorf(line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", p.name, line, fmt.Sprintf(format, args...))
}

// line takes one logical line: not blank, not a comment, left-trimmed.
func (p *confParser) line(text string, n int) error {
	if text[0] == '[' {
		t := strings.TrimRight(text, " \t")
		if !strings.HasSuffix(t, "]") || strings.ContainsRune(t, '\n') {
			return p.errorf(n, "malformed stanza header %q (want [name])", firstLine(text))
		}
		name := strings.TrimSpace(t[1 : len(t)-1])
		if name == "" {
			return p.errorf(n, "empty stanza name")
		}
		p.stanza(name, n)
		return nil
	}
	key, value, ok := strings.Cut(text, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" || strings.ContainsAny(key, "\n") {
		return p.errorf(n, "malformed line %q (want [stanza], key = value, # comment or blank)", firstLine(text))
	}
	if p.cur < 0 {
		p.stanza("default", n)
	}
	value = strings.TrimSpace(value)
	st := &p.out[p.cur]
	if i, dup := p.keys[p.cur][key]; dup {
		st.Keys[i] = KV{Key: key, Value: value, Line: n}
		return nil
	}
	p.keys[p.cur][key] = len(st.Keys)
	st.Keys = append(st.Keys, KV{Key: key, Value: value, Line: n})
	return nil
}

func (p *confParser) stanza(name string, n int) {
	if i, ok := p.index[name]; ok {
		p.cur = i
		return
	}
	p.index[name] = len(p.out)
	p.cur = len(p.out)
	p.out = append(p.out, Stanza{Name: name, Line: n})
	p.keys = append(p.keys, map[string]int{})
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + `\`
	}
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
