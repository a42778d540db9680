package knowledge

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		"", "[s]\nA = 1\n", "A=1\n[default]\nB = 2\\\n  more\n", "[s\n", "[]\n", "x\n", "# c \\\n[s]\r\nK = v\\",
		"[source::/var/.../*.log]\nTIME_FORMAT = %F\n[s]\nA=1\n[s]\nA=2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		stanzas, err := ParseConf("f.conf", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.conf:") {
				t.Fatalf("error without a place: %v", err)
			}
			return
		}
		names := map[string]bool{}
		for _, st := range stanzas {
			if st.Name == "" || names[st.Name] || st.Line < 1 {
				t.Fatalf("bad stanza %+v", st)
			}
			names[st.Name] = true
			keys := map[string]bool{}
			for _, kv := range st.Keys {
				if kv.Key == "" || keys[kv.Key] || kv.Line < 1 || strings.TrimSpace(kv.Key) != kv.Key {
					t.Fatalf("bad key %+v in %+v", kv, st)
				}
				keys[kv.Key] = true
			}
		}
	})
}

func FuzzParseIndexRules(f *testing.F) {
	for _, s := range []string{
		"", "[s]\nTIME_FORMAT = %Y %K\n", "[s]\nLINE_BREAKER = ([\\r\\n]+)\\d{4}-\nSHOULD_LINEMERGE = true\n",
		"[host::web-*]\nTZ = Europe/Paris\n[source::/a/.../(x|y).log]\npriority = 3\nTRUNCATE = 4\n",
		"[syslog]\nDATETIME_CONFIG = CURRENT\n[_json]\nTIME_PREFIX = x\n",
	} {
		f.Add([]byte(s), []byte("2026-01-01 a\n b\nMar  4 05:06:07 c\n{\"time\":1772600767}\n"))
	}
	f.Fuzz(func(t *testing.T, props, body []byte) {
		r, err := ParseIndexRules(Files{PropsConf: props})
		if err != nil {
			return
		}
		for _, st := range []string{"s", "syslog", "_json", "access_combined", "other"} {
			for _, src := range []string{"/a/b/x.log", "/var/log/y"} {
				rule := r.For(st, src, "web-1")
				_ = rule.Events(body, func(raw []byte) error {
					rule.Time(raw, fixedNow)
					return nil
				})
			}
		}
	})
}

func FuzzTime(f *testing.F) {
	for _, tc := range [][3]string{
		{"2026-01-01T05:00:00.123+01:00", "", ""},
		{"ts=2026-01-01T05:00:00", "%Y-%m-%dT%H:%M:%S", "ts="},
		{"[04/Mar/2026:05:06:07 -0700]", "%d/%b/%Y:%H:%M:%S %z", `\[`},
		{"Mar  4 05:06:07 h", "%b %e %T", "^"},
		{"1772600767123", "%s%3N", ""},
		{"2026.063 01:02 PM PST", "%Y.%j %I:%M %p %Z", ""},
		{"12-25 05:06:07", "%m-%d %T", ""},
		{`{"time":"2026-03-04 05:06:07"}`, "", ""},
	} {
		f.Add(tc[0], tc[1], tc[2])
	}
	f.Fuzz(func(t *testing.T, raw, format, prefix string) {
		s := defaultSettings()
		if format != "" {
			tf, err := compileTimeFormat(format)
			if err != nil {
				return
			}
			s.format = tf
		}
		if prefix != "" {
			if parseRegex(prefix, &s.timePrefix) != nil {
				return
			}
		}
		for _, lookahead := range []int{0, 8, 128} {
			s.lookahead = lookahead
			r := newRule(&s)
			if tm, ok := r.Time([]byte(raw), fixedNow); ok && tm.Location() != time.UTC {
				t.Fatalf("time %v not in UTC", tm)
			}
		}
		for _, st := range []string{"syslog", "_json", "access_combined"} {
			(*IndexRules)(nil).For(st, "", "").Time([]byte(raw), fixedNow)
		}
	})
}

func FuzzEvents(f *testing.F) {
	f.Add([]byte("a\nb\r\n\nc"), "", false, 0, 256)
	f.Add([]byte("2026-01-01 a\n  at x\n2026-01-02 b\n"), `([\r\n]+)\d{4}-`, true, 10, 2)
	f.Add([]byte("x;y;;z"), `;(;?)`, false, 3, 1)
	f.Add([]byte("é\nab"), `()`, true, 1, 5)
	f.Add([]byte("a\r\n2026-01-01 x\n\n2026-x\n1999-01 y"), `([\r\n]+)\d{4}-`, false, 0, 1)
	f.Add([]byte("ab;cd; ;EF"), `(?i)(;\s*)(e|c)`, false, 0, 1)
	f.Add([]byte("x\n\ny"), `(\n)|(x)`, false, 0, 1)
	f.Fuzz(func(t *testing.T, body []byte, breaker string, merge bool, truncate, maxEvents int) {
		props := "[s]\nTRUNCATE = " + strconv.Itoa(truncate) + "\nMAX_EVENTS = " + strconv.Itoa(maxEvents) +
			"\nSHOULD_LINEMERGE = " + map[bool]string{true: "true", false: "false"}[merge] + "\n"
		if breaker != "" && !strings.ContainsAny(breaker, "\r\n\\") {
			props += "LINE_BREAKER = " + breaker + "\n"
		}
		rules, err := ParseIndexRules(Files{PropsConf: []byte(props)})
		if err != nil {
			return
		}
		rule := rules.For("s", "", "")
		body = body[:len(body):len(body)]
		if b := rule.breaker; b != nil {
			fast, all := pieces(t, body, b.split), pieces(t, body, func(body []byte, fn func(int, int) error) error {
				return splitAll(b.re, body, fn)
			})
			if !reflect.DeepEqual(fast, all) {
				t.Fatalf("LINE_BREAKER %q: fast path %v, one search %v", breaker, fast, all)
			}
		}
		prevEnd := 0
		err = rule.Events(body, func(ev []byte) error {
			off := cap(body) - cap(ev) // ev is a sub-slice of body
			if off < prevEnd || off+len(ev) > len(body) || string(body[off:off+len(ev)]) != string(ev) {
				t.Fatalf("event %q at %d overlaps the previous (ending %d) or leaves body (%d bytes)", ev, off, prevEnd, len(body))
			}
			if blank(ev) {
				t.Fatalf("blank event %q", ev)
			}
			if tr := rule.Truncate(); tr > 0 && len(ev) > tr {
				t.Fatalf("event of %d bytes over TRUNCATE %d", len(ev), tr)
			}
			prevEnd = off + len(ev)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func pieces(t *testing.T, body []byte, split func([]byte, func(int, int) error) error) [][2]int {
	var out [][2]int
	if err := split(body, func(start, end int) error {
		out = append(out, [2]int{start, end})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
