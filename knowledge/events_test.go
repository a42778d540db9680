package knowledge

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func events(t *testing.T, r *Rule, body string) []string {
	t.Helper()
	var out []string
	if err := r.Events([]byte(body), func(raw []byte) error {
		out = append(out, string(raw))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

const javaTrace = `2026-01-01 10:00:00 ERROR boom
java.lang.IllegalStateException: bad
	at a.b.C.d(C.java:10)
	at a.b.C.e(C.java:20)
2026-01-01 10:00:01 INFO fine
2026-01-01 10:00:02 WARN slow
  detail line
`

func TestEvents(t *testing.T) {
	tests := []struct {
		name, props, st, body string
		want                  []string
	}{
		{"default one per line", "[s]\nTZ = UTC\n", "s", "a\r\nb\n\n\nc", []string{"a", "b", "c"}},
		{"lone CR breaks", "[s]\nTZ = UTC\n", "s", "a\rb\n", []string{"a", "b"}},
		{"whitespace-only dropped", "[s]\nTZ = UTC\n", "s", "a\n   \n\t\nb\n", []string{"a", "b"}},
		{"empty body", "[s]\nTZ = UTC\n", "s", "", nil},
		{"custom breaker, rest of match starts next event",
			"[s]\nLINE_BREAKER = ([\\r\\n]+)\\d{4}-\n", "s",
			"2026-01-01 a\n  more\n2026-01-02 b\n\n2026-01-03 c",
			[]string{"2026-01-01 a\n  more", "2026-01-02 b", "2026-01-03 c"}},
		{"breaker quoted to the end with \\Q (no \\E)",
			"[s]\nLINE_BREAKER = ([\\r\\n]+)\\Q{4-\n", "s",
			"a\n{4-b\nc\n{4-d",
			[]string{"a", "{4-b\nc", "{4-d"}},
		{"breaker with text before the group ends the event",
			"[s]\nLINE_BREAKER = ;(\\s*)\n", "s", "a; b;c;",
			[]string{"a;", "b;", "c;"}},
		{"merge with BREAK_ONLY_BEFORE",
			"[s]\nSHOULD_LINEMERGE = true\nBREAK_ONLY_BEFORE = ^\\d{4}-\\d{2}-\\d{2}\n", "s", javaTrace,
			[]string{
				"2026-01-01 10:00:00 ERROR boom\njava.lang.IllegalStateException: bad\n\tat a.b.C.d(C.java:10)\n\tat a.b.C.e(C.java:20)",
				"2026-01-01 10:00:01 INFO fine",
				"2026-01-01 10:00:02 WARN slow\n  detail line",
			}},
		{"merge with BREAK_ONLY_BEFORE_DATE default",
			"[s]\nSHOULD_LINEMERGE = true\n", "s", javaTrace,
			[]string{
				"2026-01-01 10:00:00 ERROR boom\njava.lang.IllegalStateException: bad\n\tat a.b.C.d(C.java:10)\n\tat a.b.C.e(C.java:20)",
				"2026-01-01 10:00:01 INFO fine",
				"2026-01-01 10:00:02 WARN slow\n  detail line",
			}},
		{"merge dates found with the rule's TIME_FORMAT",
			"[s]\nSHOULD_LINEMERGE = true\nTIME_FORMAT = %d.%m.%Y\n", "s", "01.02.2026 a\nx\n2026-01-01 y\n02.02.2026 b\n",
			[]string{"01.02.2026 a\nx\n2026-01-01 y", "02.02.2026 b"}},
		{"merge without any break rule runs to MAX_EVENTS",
			"[s]\nSHOULD_LINEMERGE = true\nBREAK_ONLY_BEFORE_DATE = false\nMAX_EVENTS = 2\n", "s", "a\nb\nc\nd\ne",
			[]string{"a\nb", "c\nd", "e"}},
		{"MAX_EVENTS caps a merged event",
			"[s]\nSHOULD_LINEMERGE = true\nBREAK_ONLY_BEFORE = ^START\nMAX_EVENTS = 3\n", "s",
			"START 1\na\nb\nc\nd\nSTART 2\n",
			[]string{"START 1\na\nb", "c\nd", "START 2"}},
		{"leading continuation lines form their own event",
			"[s]\nSHOULD_LINEMERGE = true\nBREAK_ONLY_BEFORE = ^S\n", "s", "\n\nx\nS1\ny\n",
			[]string{"x", "S1\ny"}},
		{"TRUNCATE", "[s]\nTRUNCATE = 4\n", "s", "abcdefgh\nab\n", []string{"abcd", "ab"}},
		{"TRUNCATE at a rune boundary", "[s]\nTRUNCATE = 4\n", "s", "abcé\n", []string{"abc"}},
		{"TRUNCATE 0 is no limit", "[s]\nTRUNCATE = 0\n", "s", strings.Repeat("x", 20000), []string{strings.Repeat("x", 20000)}},
		{"TRUNCATE default 10000", "[s]\nTZ = UTC\n", "s", strings.Repeat("x", 10001), []string{strings.Repeat("x", 10000)}},
		{"TRUNCATE after merging", "[s]\nSHOULD_LINEMERGE = true\nBREAK_ONLY_BEFORE = ^S\nTRUNCATE = 6\n", "s",
			"S1\nabc\nS2\n", []string{"S1\nabc", "S2"}},
		{"a user stanza that does not set SHOULD_LINEMERGE does not merge", "[s]\nBREAK_ONLY_BEFORE = ^S\n", "s",
			"S1\nx\n", []string{"S1", "x"}},
		{"built-in syslog one per line", "", "syslog", "Jan  2 10:00:00 h a\n b\n", []string{"Jan  2 10:00:00 h a", " b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := mustRules(t, tt.props)
			r := rules.For(tt.st, "/src", "host")
			if r == nil {
				t.Fatal("no rule")
			}
			if got := events(t, r, tt.body); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestEventsNilRule(t *testing.T) {
	var r *Rule
	long := strings.Repeat("y", 20000)
	if got := events(t, r, "a\n\nb\r\n"+long); !reflect.DeepEqual(got, []string{"a", "b", long}) {
		t.Errorf("nil rule: %q", got)
	}
	if r.Truncate() != 0 {
		t.Error("nil rule truncates")
	}
	if _, ok := r.Time([]byte("2026-01-01T00:00:00Z"), fixedNow); ok {
		t.Error("nil rule found a time")
	}
}

func TestEventsStopsOnEmitError(t *testing.T) {
	for _, props := range []string{"[s]\nTZ = UTC\n", "[s]\nSHOULD_LINEMERGE = true\n", "[s]\nLINE_BREAKER = (\\n)\n"} {
		r := mustRules(t, props).For("s", "", "")
		stop := errors.New("stop")
		n := 0
		err := r.Events([]byte("2026-01-01 a\n2026-01-02 b\n2026-01-03 c\n"), func([]byte) error {
			n++
			return stop
		})
		if !errors.Is(err, stop) || n != 1 {
			t.Errorf("%q: err %v after %d events, want stop after 1", props, err, n)
		}
	}
}

func TestEventsDefaultAllocatesNothing(t *testing.T) {
	r := mustRules(t, "[s]\nTZ = UTC\n").For("s", "", "")
	body := []byte("a\nb\nc\n")
	emit := func([]byte) error { return nil }
	if n := testing.AllocsPerRun(100, func() { _ = r.Events(body, emit) }); n != 0 {
		t.Errorf("Events allocates %v times per call", n)
	}
}

func TestLineBreakerFastPath(t *testing.T) {
	tests := []struct {
		pattern string
		first   string // "" when the pattern is searched for in one pass
	}{
		{`([\r\n]+)\d{4}-`, "\n\r"},
		{`([\r\n]+)(?:\d{4}-|\[)`, "\n\r"},
		{`(;)`, ";"},
		{`(?i)(x)`, "Xx"},
		{`(\s*)\n`, ""},   // \s is more than 4 bytes
		{`([\r\n]*)`, ""}, // matches empty
		{`^(\n)`, ""},     // an assertion
		{`(\n)\b`, ""},
		{`(.)`, ""},
		{`(é)`, ""},
		{`(\n)\Q{4-`, "\n"}, // quoted to the end of the source
	}
	for _, tt := range tests {
		rules := mustRules(t, "[s]\nLINE_BREAKER = "+tt.pattern+"\n")
		b := rules.For("s", "", "").breaker
		if b == nil || string(b.first) != tt.first || (b.anchored != nil) != (tt.first != "") {
			t.Errorf("%s: start bytes %q (anchored %v), want %q", tt.pattern, b.first, b.anchored != nil, tt.first)
		}
	}
}
