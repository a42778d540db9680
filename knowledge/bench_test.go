package knowledge

import (
	"strings"
	"testing"
)

// BenchmarkEventsTime splits a body and finds each event's time, per event.
func BenchmarkEventsTime(b *testing.B) {
	cases := []struct {
		name, props, st, line string
	}{
		{"iso-auto", "[s]\nTZ = UTC\n", "s", "2026-03-04T05:06:07.123Z level=info msg=\"request served\" path=/api/v1/x status=200"},
		{"format-prefix", "[s]\nTIME_PREFIX = ts=\nTIME_FORMAT = %Y-%m-%dT%H:%M:%S\nTZ = Europe/Paris\n", "s", "level=info ts=2026-01-01T05:00:00 msg=\"request served\" status=200"},
		{"access_combined", "", "access_combined", `10.1.2.3 - - [04/Mar/2026:05:06:07 -0700] "GET /index.html HTTP/1.1" 200 5120 "-" "curl/8"`},
		{"syslog", "", "syslog", "Mar  4 05:06:07 web-01 sshd[4242]: Accepted publickey for deploy from 10.0.0.1"},
		{"json", "", "_json", `{"level":"info","msg":"request served","status":200,"time":"2026-03-04T05:06:07.5Z"}`},
		{"linemerge", "[s]\nSHOULD_LINEMERGE = true\nBREAK_ONLY_BEFORE = ^\\d{4}-\\d{2}-\\d{2}\n", "s",
			"2026-03-04 05:06:07 ERROR boom\njava.lang.IllegalStateException: bad\n\tat a.b.C.d(C.java:10)"},
		{"custom-breaker", "[s]\nLINE_BREAKER = ([\\r\\n]+)\\d{4}-\n", "s", "2026-03-04 05:06:07 INFO request served status=200"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rules, err := ParseIndexRules(Files{PropsConf: []byte(c.props)})
			if err != nil {
				b.Fatal(err)
			}
			rule := rules.For(c.st, "/var/log/x.log", "web-01")
			const lines = 1000
			body := []byte(strings.Repeat(c.line+"\n", lines))
			n, found := 0, 0
			emit := func(raw []byte) error {
				n++
				if _, ok := rule.Time(raw, fixedNow); ok {
					found++
				}
				return nil
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := rule.Events(body, emit); err != nil {
					b.Fatal(err)
				}
			}
			if found != n {
				b.Fatalf("%d of %d events without a time", n-found, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
		})
	}
}

// BenchmarkFor resolves a cached rule with source and host stanzas.
func BenchmarkFor(b *testing.B) {
	rules, err := ParseIndexRules(Files{PropsConf: []byte("[source::/var/log/.../*.log]\nTZ = UTC\n[host::web-*]\nTRUNCATE = 100\n")})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rules.For("app", "/var/log/a/b.log", "web-01") == nil {
			b.Fatal("no rule")
		}
	}
}
