package knowledge

import (
	"testing"
	"time"
)

// fixedNow is the "now" the tests infer missing years from.
var fixedNow = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func TestTime(t *testing.T) {
	tests := []struct {
		name, props, raw string
		want             string // RFC 3339 in UTC; "" for ok=false
	}{
		// TIME_FORMAT directives.
		{"%Y-%m-%d %H:%M:%S", "TIME_FORMAT = %Y-%m-%d %H:%M:%S", "2026-03-04 05:06:07 x", "2026-03-04T05:06:07Z"},
		{"%y", "TIME_FORMAT = %y%m%d", "260304", "2026-03-04T00:00:00Z"},
		{"%y 19xx", "TIME_FORMAT = %y-%m-%d", "99-03-04", "1999-03-04T00:00:00Z"},
		{"%e space-padded", "TIME_FORMAT = %b %e %Y", "Mar  4 2026", "2026-03-04T00:00:00Z"},
		{"%d one digit", "TIME_FORMAT = %d/%m/%Y", "4/3/2026", "2026-03-04T00:00:00Z"},
		{"%I %p pm", "TIME_FORMAT = %Y-%m-%d %I:%M %p", "2026-03-04 01:30 PM", "2026-03-04T13:30:00Z"},
		{"%I %p 12am", "TIME_FORMAT = %Y-%m-%d %I:%M %p", "2026-03-04 12:30 am", "2026-03-04T00:30:00Z"},
		{"%I out of range", "TIME_FORMAT = %Y-%m-%d %I:%M %p", "2026-03-04 13:30 pm", ""},
		{"%k", "TIME_FORMAT = %F %k:%M", "2026-03-04  7:05", "2026-03-04T07:05:00Z"},
		{"%b", "TIME_FORMAT = %d %b %Y", "04 mar 2026", "2026-03-04T00:00:00Z"},
		{"%B", "TIME_FORMAT = %d %B %Y", "04 March 2026", "2026-03-04T00:00:00Z"},
		{"%h", "TIME_FORMAT = %d %h %Y", "04 Mar 2026", "2026-03-04T00:00:00Z"},
		{"%a %A ignored", "TIME_FORMAT = %a %A %F", "Wed Wednesday 2026-03-04", "2026-03-04T00:00:00Z"},
		{"%j", "TIME_FORMAT = %Y.%j", "2026.063", "2026-03-04T00:00:00Z"},
		{"%j 366 in a common year", "TIME_FORMAT = %Y.%j", "2026.366", ""},
		{"%z", "TIME_FORMAT = %FT%T%z", "2026-03-04T05:06:07+0130", "2026-03-04T03:36:07Z"},
		{"%:z", "TIME_FORMAT = %FT%T%:z", "2026-03-04T05:06:07-05:00", "2026-03-04T10:06:07Z"},
		{"%::z", "TIME_FORMAT = %FT%T%::z", "2026-03-04T05:06:07+01:00:30", "2026-03-04T04:05:37Z"},
		{"%z Z", "TIME_FORMAT = %FT%T%z", "2026-03-04T05:06:07Z", "2026-03-04T05:06:07Z"},
		{"%Z known", "TIME_FORMAT = %F %T %Z", "2026-03-04 05:06:07 PST", "2026-03-04T13:06:07Z"},
		{"%Z GMT+offset", "TIME_FORMAT = %F %T %Z", "2026-03-04 05:06:07 GMT+02:00", "2026-03-04T03:06:07Z"},
		{"%Z unknown falls back to TZ", "TIME_FORMAT = %F %T %Z\nTZ = Etc/GMT-3", "2026-03-04 05:06:07 XYZ", "2026-03-04T02:06:07Z"},
		{"%s", "TIME_FORMAT = %s", "at 1772600767 ok", "2026-03-04T05:06:07Z"},
		{"%s%3N epoch millis", "TIME_FORMAT = %s%3N", "1772600767123", "2026-03-04T05:06:07.123Z"},
		{"%N default 9", "TIME_FORMAT = %T.%N %F", "05:06:07.123456789 2026-03-04", "2026-03-04T05:06:07.123456789Z"},
		{"%3N", "TIME_FORMAT = %F %T.%3N", "2026-03-04 05:06:07.123", "2026-03-04T05:06:07.123Z"},
		{"%6N", "TIME_FORMAT = %F %T.%6N", "2026-03-04 05:06:07.123456", "2026-03-04T05:06:07.123456Z"},
		{"%3N fraction of fewer digits", "TIME_FORMAT = %F %T.%3N", "2026-03-04 05:06:07.12", "2026-03-04T05:06:07.12Z"},
		{"%Q default 3", "TIME_FORMAT = %F %T,%Q", "2026-03-04 05:06:07,456789", "2026-03-04T05:06:07.456Z"},
		{"%f", "TIME_FORMAT = %F %T.%f", "2026-03-04 05:06:07.000042", "2026-03-04T05:06:07.000042Z"},
		{"%T and %F", "TIME_FORMAT = %F %T", "2026-03-04 05:06:07", "2026-03-04T05:06:07Z"},
		{"%D %R", "TIME_FORMAT = %D %R", "03/04/26 05:06", "2026-03-04T05:06:00Z"},
		{"%%", "TIME_FORMAT = %%%F", "x %2026-03-04", "2026-03-04T00:00:00Z"},
		{"literal must match", "TIME_FORMAT = %Y-%m-%d", "2026/03/04", ""},
		{"whitespace matches a run", "TIME_FORMAT = %Y %m %d", "2026 \t 03  04", "2026-03-04T00:00:00Z"},
		{"bad day", "TIME_FORMAT = %F", "2026-02-30", ""},
		{"bad hour", "TIME_FORMAT = %F %T", "2026-02-03 24:00:00", ""},
		{"no year: this year", "TIME_FORMAT = %m-%d %T", "03-04 05:06:07", "2026-03-04T05:06:07Z"},
		{"no year: last year when > now+2d", "TIME_FORMAT = %m-%d %T", "12-25 05:06:07", "2025-12-25T05:06:07Z"},
		{"no year: within 2 days stays", "TIME_FORMAT = %m-%d %T", "12-08 05:06:07", "2026-12-08T05:06:07Z"},
		{"no date: today", "TIME_FORMAT = %T", "05:06:07", "2026-12-07T05:06:07Z"},
		{"format found after other text", "TIME_FORMAT = %F", "id=12 at 2026-03-04", "2026-03-04T00:00:00Z"},
		{"format needs a token start", "TIME_FORMAT = %y-%m-%d", "1226-03-04", ""},

		// TZ and zones.
		{"TZ", "TIME_FORMAT = %F %T\nTZ = America/New_York", "2026-03-04 05:06:07", "2026-03-04T10:06:07Z"},
		{"TZ in summer", "TIME_FORMAT = %F %T\nTZ = Europe/Paris", "2026-07-04 05:06:07", "2026-07-04T03:06:07Z"},
		{"%z beats TZ", "TIME_FORMAT = %F %T %z\nTZ = America/New_York", "2026-03-04 05:06:07 +0000", "2026-03-04T05:06:07Z"},
		{"built-in zone beats TZ", "TZ = America/New_York", "2026-03-04T05:06:07Z", "2026-03-04T05:06:07Z"},
		{"built-in without zone takes TZ", "TZ = Asia/Tokyo", "2026-03-04T05:06:07", "2026-03-03T20:06:07Z"},

		// TIME_PREFIX, MAX_TIMESTAMP_LOOKAHEAD, DATETIME_CONFIG.
		{"ts= prefix", "TIME_PREFIX = ts=\nTIME_FORMAT = %Y-%m-%dT%H:%M:%S", "a=2025-01-01T00:00:00 ts=2026-01-01T05:00:00", "2026-01-01T05:00:00Z"},
		{"regex prefix", "TIME_PREFIX = \\bat\\s+", "1999-01-01T00:00:00 at 2026-01-01T05:00:00", "2026-01-01T05:00:00Z"},
		{"prefix missing", "TIME_PREFIX = ts=", "2026-01-01T05:00:00", ""},
		{"lookahead reaches", "MAX_TIMESTAMP_LOOKAHEAD = 30", "abcdefghij 2026-01-01T05:00:00", "2026-01-01T05:00:00Z"},
		{"lookahead cuts the timestamp", "MAX_TIMESTAMP_LOOKAHEAD = 29", "abcdefghij 2026-01-01T05:00:00", ""},
		{"lookahead counts from the prefix", "TIME_PREFIX = ts=\nMAX_TIMESTAMP_LOOKAHEAD = 19", "xxxxxxxxxxxxxxxxxxxxxxxxx ts=2026-01-01T05:00:00", "2026-01-01T05:00:00Z"},
		{"default lookahead 128", "TZ = UTC", string(make([]byte, 128)) + "2026-01-01T05:00:00", ""},
		{"lookahead 0 is no limit", "MAX_TIMESTAMP_LOOKAHEAD = 0", string(make([]byte, 500)) + "2026-01-01T05:00:00", "2026-01-01T05:00:00Z"},
		{"CURRENT", "DATETIME_CONFIG = CURRENT", "2026-01-01T05:00:00Z", ""},
		{"NONE", "DATETIME_CONFIG = NONE", "2026-01-01T05:00:00Z", ""},
		{"datetime.xml is the default", "DATETIME_CONFIG = /etc/datetime.xml", "2026-01-01T05:00:00Z", "2026-01-01T05:00:00Z"},

		// MAX_DAYS_AGO, MAX_DAYS_HENCE: an implausible candidate is skipped.
		{"MAX_DAYS_AGO skips to the next candidate", "MAX_DAYS_AGO = 10", "id 1999-01-01T00:00:00 at 2026-12-01T00:00:00", "2026-12-01T00:00:00Z"},
		{"MAX_DAYS_AGO none left", "MAX_DAYS_AGO = 10", "2026-11-01T00:00:00", ""},
		{"MAX_DAYS_HENCE", "MAX_DAYS_HENCE = 2", "2026-12-10T00:00:00 2026-12-08T00:00:00", "2026-12-08T00:00:00Z"},
		{"MAX_DAYS_HENCE 0", "MAX_DAYS_HENCE = 0", "2026-12-07T12:00:01", ""},
		{"%s needs a plausible epoch", "TIME_FORMAT = %s\nMAX_DAYS_AGO = 2000", "id=12 t=1772600767", "2026-03-04T05:06:07Z"},
		{"no limit by default", "TZ = UTC", "1970-01-02T00:00:00 2126-01-01T00:00:00", "1970-01-02T00:00:00Z"},

		// Built-in formats.
		{"RFC 3339 nano", "TZ = UTC", "x 2026-01-01T05:00:00.123456789+01:00 y", "2026-01-01T04:00:00.123456789Z"},
		{"ISO space millis", "TZ = UTC", "[2026-01-01 05:00:00.250] x", "2026-01-01T05:00:00.25Z"},
		{"ISO comma fraction", "TZ = UTC", "2026-01-01 05:00:00,5 x", "2026-01-01T05:00:00.5Z"},
		{"ISO -0700", "TZ = UTC", "2026-01-01T05:00:00-0700", "2026-01-01T12:00:00Z"},
		{"syslog", "TZ = UTC", "<13>Mar  4 05:06:07 host app: x", "2026-03-04T05:06:07Z"},
		{"syslog last year", "TZ = UTC", "Dec 31 23:00:00 host", "2025-12-31T23:00:00Z"},
		{"access log", "TZ = UTC", `1.2.3.4 - - [04/Mar/2026:05:06:07 -0700] "GET /"`, "2026-03-04T12:06:07Z"},
		{"epoch seconds", "TZ = UTC", "t=1772600767 x", "2026-03-04T05:06:07Z"},
		{"epoch seconds fraction", "TZ = UTC", "t=1772600767.5 x", "2026-03-04T05:06:07.5Z"},
		{"epoch millis", "TZ = UTC", "t=1772600767123 x", "2026-03-04T05:06:07.123Z"},
		{"11 digits is not epoch", "TZ = UTC", "t=17726007671 x", ""},
		{"earliest position wins", "TZ = UTC", "1772600767 2025-01-01T00:00:00Z", "2026-03-04T05:06:07Z"},
		{"no timestamp", "TZ = UTC", "nothing to see 12:00", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRules(t, "[s]\n"+tt.props+"\n").For("s", "", "")
			got, ok := r.Time([]byte(tt.raw), fixedNow)
			switch {
			case tt.want == "" && ok:
				t.Errorf("Time(%q) = %v, want none", tt.raw, got)
			case tt.want != "" && (!ok || got.Format(time.RFC3339Nano) != tt.want):
				t.Errorf("Time(%q) = %v, %v; want %s", tt.raw, got.Format(time.RFC3339Nano), ok, tt.want)
			}
		})
	}
}

func TestTimeBuiltinSourcetypes(t *testing.T) {
	tests := []struct {
		st, raw, want string
	}{
		{"access_combined", `1.2.3.4 - - [04/Mar/2026:05:06:07 +0100] "GET / HTTP/1.1" 200 5`, "2026-03-04T04:06:07Z"},
		{"access_combined", `no bracket 2026-01-01T00:00:00Z`, ""},
		{"syslog", "Mar  4 05:06:07 host sshd[1]: ok", "2026-03-04T05:06:07Z"},
		{"syslog", "Mar 14 05:06:07 host sshd[1]: ok", "2026-03-14T05:06:07Z"},
		{"syslog", "host: 2026-01-01T00:00:00Z", ""},
		{"syslog", "<34>                              Mar  4 05:06:07 x", ""}, // past the lookahead of 32
		{"_json", `{"level":"info","time":"2026-03-04T05:06:07.5Z","msg":"x"}`, "2026-03-04T05:06:07.5Z"},
		{"json", `{"timestamp": 1772600767123, "time": "junk"}`, "2026-03-04T05:06:07.123Z"},
		{"json", `{"@timestamp":"2026-03-04 05:06:07"}`, "2026-03-04T05:06:07Z"},
		{"json", `{"time":"junk","timestamp":1772600767}`, "2026-03-04T05:06:07Z"},
		{"json", `{"time" : 1772600767.25}`, "2026-03-04T05:06:07.25Z"},
		{"json", `{"msg":"2026-03-04T05:06:07Z"}`, ""},
		{"json", `{"time"`, ""},
		{"json", `{"@time":1772600767,"mytime":1772600767,"time_ms":1772600767,"times":"2026-01-01T00:00:00Z"}`, ""},
		{"json", `{"timestampx":1,"stamp":2,"@timestamp":1772600767}`, "2026-03-04T05:06:07Z"},
		{"json", `time"time":1772600767`, "2026-03-04T05:06:07Z"},
	}
	for _, tt := range tests {
		r := (*IndexRules)(nil).For(tt.st, "", "")
		got, ok := r.Time([]byte(tt.raw), fixedNow)
		if tt.want == "" {
			if ok {
				t.Errorf("%s %q: %v, want none", tt.st, tt.raw, got)
			}
			continue
		}
		if !ok || got.Format(time.RFC3339Nano) != tt.want {
			t.Errorf("%s %q: %v %v, want %s", tt.st, tt.raw, got.Format(time.RFC3339Nano), ok, tt.want)
		}
	}
	// A user TIME_FORMAT on a JSON sourcetype replaces the key scan.
	r := mustRules(t, "[_json]\nTIME_PREFIX = \"when\":\"\nTIME_FORMAT = %F\n").For("_json", "", "")
	if got, ok := r.Time([]byte(`{"time":1772600767,"when":"2026-01-02"}`), fixedNow); !ok || !got.Equal(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("user TIME_FORMAT over _json: %v %v", got, ok)
	}
}

func TestTimeAllocatesNothing(t *testing.T) {
	for _, tc := range []struct{ st, props, raw string }{
		{"s", "[s]\nTIME_PREFIX = ts=\nTIME_FORMAT = %FT%T%z\nTZ = Europe/Paris\n", "a ts=2026-01-01T05:00:00+0100 b"},
		{"s", "[s]\nTZ = Europe/Paris\n", "a 2026-01-01T05:00:00.123 b"},
		{"syslog", "", "Mar  4 05:06:07 host sshd[1]: ok"},
		{"access_combined", "", `1.2.3.4 - - [04/Mar/2026:05:06:07 +0100] "GET /"`},
		{"_json", "", `{"level":"info","time":"2026-03-04T05:06:07.5Z"}`},
	} {
		rules, err := ParseIndexRules(Files{PropsConf: []byte(tc.props)})
		if err != nil {
			t.Fatal(err)
		}
		r := rules.For(tc.st, "", "")
		raw := []byte(tc.raw)
		if _, ok := r.Time(raw, fixedNow); !ok {
			t.Fatalf("%s: no time in %q", tc.st, tc.raw)
		}
		if n := testing.AllocsPerRun(100, func() { r.Time(raw, fixedNow) }); n != 0 {
			t.Errorf("%s: Time allocates %v times per call", tc.st, n)
		}
	}
}
