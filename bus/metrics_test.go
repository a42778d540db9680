package bus

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestMetricsCountOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	cli := mustConnect(t, s.ClientURL(), ConnectOptions{})
	srv := mustConnect(t, s.ClientURL(), ConnectOptions{})
	mustServe(t, srv, "quarry.bundle.abc", ServeOptions{}, echo("sh"))

	before := func(outcome string) float64 {
		var m dto.Metric
		if err := metricRequests.WithLabelValues("bundle", outcome).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	ok0, nr0, re0 := before("ok"), before("no_responders"), before("remote_error")
	_, _ = Request[echoReq, echoResp](ctxTimeout(t, time.Second), cli, "quarry.bundle.abc", echoReq{})
	_, _ = Request[echoReq, echoResp](ctxTimeout(t, time.Second), cli, "quarry.bundle.abc", echoReq{Fail: "x"})
	_, err := Request[echoReq, echoResp](ctxTimeout(t, time.Second), cli, "quarry.bundle.none", echoReq{})
	if !errors.Is(err, ErrNoResponders) {
		t.Fatal(err)
	}
	if d := before("ok") - ok0; d != 1 {
		t.Errorf("ok requests +%v, want +1", d)
	}
	if d := before("remote_error") - re0; d != 1 {
		t.Errorf("remote errors +%v, want +1", d)
	}
	if d := before("no_responders") - nr0; d != 1 {
		t.Errorf("no-responders +%v, want +1", d)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		found = found || (f.GetName() == "quarry_bus_requests_total" && len(f.GetMetric()) > 0)
	}
	if !found {
		t.Error("quarry_bus_requests_total not gathered from the registry")
	}
}

func TestFamilyLabelIsBounded(t *testing.T) {
	for subj, want := range map[string]string{
		"quarry.mgr.register":      "mgr",
		"quarry.fixup.site1.repl":  "fixup",
		"prod.quarry.search.s1.p1": "search",
		"_INBOX.abc.def":           "other",
		"quarry.whatever.x":        "other",
		"mgr":                      "other",
	} {
		if got := family(subj); got != want {
			t.Errorf("family(%q) = %q, want %q", subj, got, want)
		}
	}
}
