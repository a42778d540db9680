package peer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer/hec"
)

// TestMetricEventsSearchable: metric data points sent over HEC as Splunk's
// shippers send them (one measure, and several in one data point) are
// searched by metric_name, with _value numeric and the dimensions as
// fields (issue 29).
func TestMetricEventsSearchable(t *testing.T) {
	tok, err := hec.ParseTokenFlag("T=main:useack=false")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(Config{ID: "p1", Site: "site1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	url := "http://" + p.Addr()
	var b strings.Builder
	for i := range 4 {
		region := []string{"us", "eu"}[i%2]
		fmt.Fprintf(&b, `{"time":%d,"event":"metric","fields":{"metric_name":"cpu.idle","_value":%d,"region":%q}}`, 1767225600+i, 10*(i+1), region)
		fmt.Fprintf(&b, `{"time":%d,"event":"metric","fields":{"metric_name:mem.used":%d,"metric_name:mem.free":%d,"region":%q}}`, 1767225600+i, 100+i, 200+i, region)
	}
	postEventsOK(t, url, b.String())
	testutil.WaitFor(t, 10*time.Second, func() error {
		_, rep := searchOnce(t, url, "* | stats count")
		if len(rep.Results) != 1 || rep.Results[0]["count"] != float64(12) {
			return fmt.Errorf("count %+v, want 12 events (4 + 2×4)", rep.Results)
		}
		return nil
	})
	for q, want := range map[string]string{
		"metric_name=cpu.idle | stats avg(_value) by region":        `[map[avg(_value):30 region:eu] map[avg(_value):20 region:us]]`,
		"metric_name=mem.* | stats sum(_value) as s by metric_name": `[map[metric_name:mem.free s:806] map[metric_name:mem.used s:406]]`,
		`"metric_name=mem.free" region=eu | stats count`:            `[map[count:2]]`,
		"metric_name=cpu.idle _value>15 | stats count":              `[map[count:3]]`,
	} {
		resp, rep := searchOnce(t, url, q)
		if resp.StatusCode != 200 || fmt.Sprint(rep.Results) != want {
			t.Errorf("%s: %d %v %s, want %s", q, resp.StatusCode, rep.Results, rep.Error, want)
		}
	}
}
