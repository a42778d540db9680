package knowledge

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func mustRules(t testing.TB, props string) *IndexRules {
	t.Helper()
	r, err := ParseIndexRules(Files{PropsConf: []byte(props)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tzOf names the TZ a rule resolved to, to tell stanzas apart in tests.
func tzOf(r *Rule) string {
	if r == nil {
		return "<nil>"
	}
	return r.loc.String()
}

func TestForPrecedence(t *testing.T) {
	r := mustRules(t, `
[default]
TZ = Etc/GMT+1
[app]
TZ = Etc/GMT+2
[host::web-*]
TZ = Etc/GMT+3
[host::web-01]
TZ = Etc/GMT+4
[source::/var/log/.../*.log]
TZ = Etc/GMT+5
[source::/var/log/app/*.log]
TZ = Etc/GMT+6
[source::/opt/(a|b)/x]
TZ = Etc/GMT+7
[source::(?i)/WIN/*]
TZ = Etc/GMT+8
[searchonly]
KV_MODE = json
[source::C:\\logs\\*.log]
TZ = Etc/GMT+11
[source::/srv/*]
priority = 10
TZ = Etc/GMT+9
[source::/srv/x]
TZ = Etc/GMT+10
`)
	tests := []struct {
		name, st, src, host, want string
	}{
		{"default only", "other", "/tmp/x", "h", "Etc/GMT+1"},
		{"sourcetype over default", "app", "/tmp/x", "h", "Etc/GMT+2"},
		{"host over sourcetype", "app", "/tmp/x", "web-07", "Etc/GMT+3"},
		{"literal host over wildcard host", "app", "/tmp/x", "web-01", "Etc/GMT+4"},
		{"source over host", "app", "/var/log/nginx/a.log", "web-01", "Etc/GMT+5"},
		{"... spans segments", "x", "/var/log/a/b/c/d.log", "h", "Etc/GMT+5"},
		{"* stays in a segment", "x", "/var/log/a.log/b", "h", "Etc/GMT+1"},
		{"ASCII-first name wins among equals", "x", "/var/log/app/z.log", "h", "Etc/GMT+5"},
		{"whole value", "x", "/var/log/a.logx", "h", "Etc/GMT+1"},
		{"alternation", "x", "/opt/b/x", "h", "Etc/GMT+7"},
		{"alternation no match", "x", "/opt/c/x", "h", "Etc/GMT+1"},
		{"case-insensitive pattern", "x", "/win/abc", "h", "Etc/GMT+8"},
		{"search-time stanza does not apply", "searchonly", "/tmp", "h", "Etc/GMT+1"},
		{"literal (100) beats priority 10", "x", "/srv/x", "h", "Etc/GMT+10"},
		{"priority 10 beats wildcard 0", "x", "/srv/y", "h", "Etc/GMT+9"},
		{"\\\\ is one backslash, * stops at one", "x", `C:\logs\app.log`, "h", "Etc/GMT+11"},
		{"* stops at a backslash", "x", `C:\logs\a\b.log`, "h", "Etc/GMT+1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // second time from the cache
				if got := tzOf(r.For(tt.st, tt.src, tt.host)); got != tt.want {
					t.Errorf("For(%q, %q, %q) TZ = %s, want %s", tt.st, tt.src, tt.host, got, tt.want)
				}
			}
		})
	}
}

func TestForKeyByKeyAndBuiltins(t *testing.T) {
	r := mustRules(t, `
[syslog]
TZ = Europe/Paris
[host::h1]
TRUNCATE = 5
`)
	rule := r.For("syslog", "/x", "h1")
	if tzOf(rule) != "Europe/Paris" || rule.Truncate() != 5 || rule.lookahead != 32 || rule.format == nil {
		t.Errorf("syslog on h1: TZ %s TRUNCATE %d lookahead %d format %v: want the built-in's format and lookahead with the user's TZ and the host's TRUNCATE",
			tzOf(rule), rule.Truncate(), rule.lookahead, rule.format)
	}
	if got := r.For("unknown", "/x", "h2"); got != nil {
		t.Errorf("For with nothing applying = %+v, want nil", got)
	}
	if got := r.For("unknown", "/x", "h1"); got == nil || got.Truncate() != 5 || got.lineMerge {
		t.Errorf("host stanza alone: %+v, want TRUNCATE 5 and no line merging", got)
	}
	var none *IndexRules
	if none.For("syslog", "", "") == nil || none.For("access_combined", "", "") == nil ||
		none.For("_json", "", "") == nil || none.For("json", "", "") == nil {
		t.Error("nil *IndexRules lacks a built-in")
	}
	if none.For("nginx", "", "") != nil || none.Hash() != "" {
		t.Error("nil *IndexRules: want nil for an unknown sourcetype and an empty hash")
	}
	empty, err := ParseIndexRules(nil)
	if err != nil || empty.Hash() != "" || empty.For("syslog", "", "") == nil {
		t.Errorf("ParseIndexRules(nil) = %v, %v", empty, err)
	}
}

func TestForCacheBounded(t *testing.T) {
	r := mustRules(t, "[source::/a/*]\nTRUNCATE = 7\n")
	for i := range maxCachedRules + 10 {
		src := "/a/" + strconv.Itoa(i)
		if got := r.For("st", src, "h"); got == nil || got.Truncate() != 7 {
			t.Fatalf("For(%q) = %+v", src, got)
		}
	}
	if n := len(r.cache); n > maxCachedRules {
		t.Errorf("cache holds %d rules, over %d", n, maxCachedRules)
	}
}

func TestForConcurrent(t *testing.T) {
	r := mustRules(t, "[source::/a/*]\nTRUNCATE = 7\n[host::h*]\nTZ = Europe/Paris\n")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				src := "/a/" + strconv.Itoa(g*10000+i)
				if got := r.For("st", src, "h1"); got == nil || got.Truncate() != 7 || tzOf(got) != "Europe/Paris" {
					t.Errorf("For(%q) = %+v", src, got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestParseIndexRulesErrors(t *testing.T) {
	tests := []struct {
		name, props, want string
	}{
		{"unknown directive", "[s]\n\nTIME_FORMAT = %Y %K\n", "props.conf:3: TIME_FORMAT: unknown directive %K"},
		{"width on a non-subsecond", "[s]\nTIME_FORMAT = %3S\n", "props.conf:2: TIME_FORMAT: unknown directive %3S"},
		{"dangling percent", "[s]\nTIME_FORMAT = %Y%\n", "props.conf:2: TIME_FORMAT: unknown directive %"},
		{"no directive", "[s]\nTIME_FORMAT = abc\n", "props.conf:2: TIME_FORMAT: no date or time directive"},
		{"bad regex", "[s]\nTIME_PREFIX = (\n", "props.conf:2: TIME_PREFIX: bad regular expression"},
		{"lookahead refused with the fix", "[s]\nLINE_BREAKER = ([\\r\\n]+)(?=\\d{4}-)\n", `([\r\n]+)\d{4}-`},
		{"breaker without group", "[s]\nLINE_BREAKER = \\n+\n", "props.conf:2: LINE_BREAKER: \"\\\\n+\" has no capture group"},
		{"bad TZ", "[s]\nTZ = Mars/Olympus\n", "props.conf:2: TZ: unknown time zone \"Mars/Olympus\""},
		{"local TZ", "[s]\nTZ = Local\n", "props.conf:2: TZ:"},
		{"bad bool", "[s]\nSHOULD_LINEMERGE = maybe\n", "props.conf:2: SHOULD_LINEMERGE: not a boolean"},
		{"bad int", "[s]\nTRUNCATE = -1\n", "props.conf:2: TRUNCATE: not an integer >= 0"},
		{"bad MAX_EVENTS", "[s]\nMAX_EVENTS = 0\n", "props.conf:2: MAX_EVENTS"},
		{"bad MAX_DAYS_AGO", "[s]\nMAX_DAYS_AGO = -5\n", "props.conf:2: MAX_DAYS_AGO"},
		{"bad DATETIME_CONFIG", "[s]\nDATETIME_CONFIG = /opt/my.xml\n", "props.conf:2: DATETIME_CONFIG: unsupported value"},
		{"bad priority", "[source::/x]\nTZ = UTC\npriority = high\n", "props.conf:3: priority: not an integer"},
		{"bad pattern", "[source::/x/(a]\nTZ = UTC\n", "props.conf:1: bad pattern"},
		{"malformed line", "[s]\nTZ\n", "props.conf:2: malformed line"},
		{"in a search-time stanza too", "[s]\nKV_MODE = json\nBREAK_ONLY_BEFORE = [\n", "props.conf:3: BREAK_ONLY_BEFORE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseIndexRules(Files{PropsConf: []byte(tt.props)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	_, err := ParseIndexRules(Files{PropsConf: []byte("[a]\nTZ = X/Y\n[b]\nTRUNCATE = z\n")})
	if err == nil || !strings.Contains(err.Error(), "props.conf:2:") || !strings.Contains(err.Error(), "props.conf:4:") {
		t.Errorf("want both errors reported, got %v", err)
	}
	_, err = ParseIndexRules(Files{TransformsConf: []byte("[t]\nREGEX\n")})
	if err == nil || !strings.Contains(err.Error(), "transforms.conf:2: malformed line") {
		t.Errorf("transforms.conf syntax: got %v", err)
	}
	_, err = ParseIndexRules(Files{PropsConf: make([]byte, MaxBundleBytes+1)})
	if !errors.Is(err, ErrBundleTooLarge) {
		t.Errorf("oversized bundle: got %v", err)
	}
}

func TestSearchTimeKeysIgnored(t *testing.T) {
	r := mustRules(t, "[web]\nEXTRACT-a = (?<x>\\d+)\nREPORT-b = t\nKV_MODE = json\nTRANSFORMS-x = y\nFOO = bar\n")
	if got := r.For("web", "", ""); got != nil {
		t.Errorf("a stanza with only search-time keys applies: %+v", got)
	}
}

func TestLoadDirAndHash(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadDir(dir); !errors.Is(err, ErrNoConf) || err.Error() != dir+" holds no props.conf or transforms.conf" {
		t.Errorf("empty dir: %v", err)
	}
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(PropsConf, "[s]\nTZ = UTC\n")
	f, err := LoadDir(dir)
	if err != nil || len(f) != 1 || string(f[PropsConf]) != "[s]\nTZ = UTC\n" {
		t.Fatalf("LoadDir = %v, %v", f, err)
	}
	h1 := f.Hash()
	write(TransformsConf, "[t]\nREGEX = x\n")
	f2, err := LoadDir(dir)
	if err != nil || len(f2) != 2 {
		t.Fatalf("LoadDir = %v, %v", f2, err)
	}
	if h2 := f2.Hash(); h2 == h1 || !strings.HasPrefix(h2, "sha256:") || len(h2) != 7+64 {
		t.Errorf("hashes %s and %s", h1, h2)
	}
	same := Files{PropsConf: []byte("[s]\nTZ = UTC\n")}
	if same.Hash() != h1 {
		t.Error("equal content, different hash")
	}
	// Moving bytes between name and content changes the hash.
	if (Files{"ab": []byte("c")}).Hash() == (Files{"a": []byte("bc")}).Hash() {
		t.Error("ambiguous hash framing")
	}
	r, err := ParseIndexRules(f2)
	if err != nil || r.Hash() != f2.Hash() {
		t.Errorf("rules hash %q, files hash %q, err %v", r.Hash(), f2.Hash(), err)
	}
	write(TransformsConf, strings.Repeat("#", MaxBundleBytes))
	if _, err := LoadDir(dir); !errors.Is(err, ErrBundleTooLarge) {
		t.Errorf("oversized: %v", err)
	}
}
