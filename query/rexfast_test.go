package query

import (
	"regexp"
	"testing"
)

// rexFastPatterns: which patterns take the fast matcher (true) and which
// stay with the regexp engine.
var rexFastPatterns = []struct {
	re   string
	fast bool
}{
	{`rt=(?<ms>\d+)ms`, true},
	{`user=(?<user>\w+)`, true},
	{`"(?<path>[a-z/._]+)"`, true},
	{`ré=(?<v>[0-9a-f]+);`, true},
	{`a=a=(?<v>\d+)`, true}, // the prefix overlaps itself
	{`x/y=(?<v>[a-z]+)`, true},
	{`rt=(?<ms>\d+)\d`, false},       // the suffix starts with a class character
	{`(?i)rt=(?<ms>\d+)ms`, false},   // case-insensitive literal
	{`rt=(?<ms>\d+?)ms`, false},      // lazy run
	{`rt=(?<ms>\d*)ms`, false},       // may be empty
	{`rt=(?<ms>[^ ]+)`, false},       // the class holds non-ASCII runes
	{`(?<ms>\d+)ms`, false},          // no prefix
	{`rt=(?<ms>\d+)m(?<u>s)`, false}, // two groups
	{`rt=(\d+)ms`, false},            // no name
	{`^rt=(?<ms>\d+)`, false},        // anchored
	{`rt=(?<ms>\d+)ms|x=(?<y>\d+)`, false},
}

func TestRexFastForm(t *testing.T) {
	for _, c := range rexFastPatterns {
		g := compileLitGroup(regexp.MustCompile(c.re))
		if (g != nil) != c.fast {
			t.Errorf("%s: fast %v, want %v", c.re, g != nil, c.fast)
		}
	}
}

// sameAsRegexp checks the fast matcher against the regexp engine on s.
func sameAsRegexp(t *testing.T, re *regexp.Regexp, g *litGroup, s string) {
	t.Helper()
	m := re.FindStringSubmatch(s)
	v, ok := g.find(s)
	if (m != nil) != ok || ok && m[1] != v {
		t.Fatalf("%s on %q: fast (%q, %v), regexp %q", re, s, v, ok, m)
	}
}

func TestRexFastMatchesRegexp(t *testing.T) {
	inputs := []string{
		"", "rt=", "rt=ms", "rt=12ms", "x rt=12 rt=13ms", "rt=rt=7ms", "rt=12m rt=9ms",
		"rt=99999ms tail", "rrt=1ms", "rt=1", "rt=12mss", "user=", "user=bob,x", "user=_a9 user=z",
		`GET "/api/v1/cart" 200`, `""`, `"/a b"`, "ré=ff;", "ré=fg;", "ré=\xffab;", "rt=\xff12ms",
		"rt=١٢ms", "rt=12ms\x00", "x=rt=5msrt=6ms", "a=a=a=5", "a=a=a=a=", "=a=a=1", "x/y=x/y=ab", "/y=ab x/y=c",
	}
	for _, c := range rexFastPatterns {
		if !c.fast {
			continue
		}
		re := regexp.MustCompile(c.re)
		g := compileLitGroup(re)
		for _, s := range inputs {
			sameAsRegexp(t, re, g, s)
		}
	}
}

// FuzzRexFast: on any input the fast matcher answers what the regexp
// engine does, for every fast pattern.
func FuzzRexFast(f *testing.F) {
	for _, s := range []string{"rt=12ms", "user=bob", `"/x"`, "ré=0a;", "rt=1m rt=2ms"} {
		f.Add(s)
	}
	type pair struct {
		re *regexp.Regexp
		g  *litGroup
	}
	var ps []pair
	for _, c := range rexFastPatterns {
		if c.fast {
			re := regexp.MustCompile(c.re)
			ps = append(ps, pair{re, compileLitGroup(re)})
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range ps {
			sameAsRegexp(t, p.re, p.g, s)
		}
	})
}
