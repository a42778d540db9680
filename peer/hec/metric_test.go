package hec

import (
	"fmt"
	"strings"
	"testing"
)

// TestMetricEvents: Splunk's HEC metric data points (single measure with
// metric_name and _value, several with metric_name:NAME) become one event
// per measure with metric_name, _value and the dimensions as fields and a
// key=value _raw; malformed ones are refused whole with code 15; `_value`
// is refused on other events; "event":"metric" without a measure stays a
// plain event.
func TestMetricEvents(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		code       int
		want       []string // each event: _raw | fields
	}{
		{"single", `{"time":1700000000,"event":"metric","host":"h1","fields":{"metric_name":"cpu.idle","_value":99.1,"region":"us-west"}}`, 0,
			[]string{`metric_name=cpu.idle _value=99.1 region=us-west | metric_name=cpu.idle _value=99.1 region=us-west`}},
		{"multiple", `{"event":"metric","fields":{"metric_name:cpu.usr":11.12,"metric_name:cpu.sys":"12.5","dc":"a b"}}`, 0,
			[]string{`metric_name=cpu.usr _value=11.12 dc="a b" | metric_name=cpu.usr _value=11.12 dc=a b`,
				`metric_name=cpu.sys _value=12.5 dc="a b" | metric_name=cpu.sys _value=12.5 dc=a b`}},
		{"both forms", `{"event":"metric","fields":{"metric_name":"a","_value":1,"metric_name:b":2}}`, 0,
			[]string{`metric_name=a _value=1 | metric_name=a _value=1`, `metric_name=b _value=2 | metric_name=b _value=2`}},
		{"no measure: a plain event", `{"event":"metric","fields":{"region":"x"}}`, 0, []string{`metric | region=x`}},
		{"not a number", `{"event":"metric","fields":{"metric_name":"a","_value":"high"}}`, 15, nil},
		{"infinite", `{"event":"metric","fields":{"metric_name:a":"1e999"}}`, 15, nil},
		{"name without value", `{"event":"metric","fields":{"metric_name":"a"}}`, 15, nil},
		{"value without name", `{"event":"metric","fields":{"_value":1,"metric_name:b":2}}`, 15, nil},
		{"empty measure name", `{"event":"metric","fields":{"metric_name:":1}}`, 15, nil},
		{"_value on a plain event", `{"event":"hello","fields":{"_value":1}}`, 15, nil},
		{"other _ names still refused", `{"event":"metric","fields":{"metric_name":"a","_value":1,"_time":2}}`, 15, nil},
		{"one bad data point refuses the request", `{"event":"x"}{"event":"metric","fields":{"metric_name":"a","_value":"x"}}`, 15, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d decoder
			evs, r := d.decodeEnvelopes([]byte(tc.body), Defaults{Index: "main"}, func(string) bool { return true }, 1<<20)
			if r.Code != tc.code {
				t.Fatalf("code %d (%s), want %d", r.Code, r.Text, tc.code)
			}
			var got []string
			for _, e := range evs {
				var fs []string
				for _, f := range e.Fields {
					fs = append(fs, string(f.Name)+"="+string(f.Value))
				}
				got = append(got, string(e.Raw)+" | "+strings.Join(fs, " "))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("events\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	// A data point that would multiply its fields is refused.
	var b strings.Builder
	b.WriteString(`{"event":"metric","fields":{`)
	for i := range 200 {
		fmt.Fprintf(&b, `"metric_name:m%d":1,"d%d":"x",`, i, i)
	}
	b.WriteString(`"z":"y"}}`)
	var d decoder
	if _, r := d.decodeEnvelopes([]byte(b.String()), Defaults{Index: "main"}, func(string) bool { return true }, 1<<20); r.Code != 15 {
		t.Fatalf("200 measures × 201 dimensions: code %d, want 15", r.Code)
	}
}
