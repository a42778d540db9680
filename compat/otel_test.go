// Package compat runs real third-party clients against quarry (issue 11):
// the OpenTelemetry collector's Splunk HEC exporter, built from its own Go
// module, ships logs to a standalone peer and to a cluster peer. It is its
// own Go module so the product's go.mod stays lean.
package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/splunkhecexporter"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"gopkg.in/yaml.v3"

	"github.com/quarry-dev/quarry/integration"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
)

const noAckToken = "otel-noack"

// exporterConfig loads testdata/splunk_hec_exporter.yaml — the config the
// README shows — with the peer's URL and token filled in.
func exporterConfig(t *testing.T, hecURL, token string, gzip bool) *splunkhecexporter.Config {
	t.Helper()
	b, err := os.ReadFile("testdata/splunk_hec_exporter.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer("${QUARRY_HEC}", hecURL, "${QUARRY_HEC_TOKEN}", token).Replace(string(b))
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		t.Fatal(err)
	}
	sub, err := confmap.NewFromStringMap(raw).Sub("exporters::splunk_hec")
	if err != nil {
		t.Fatal(err)
	}
	f := splunkhecexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*splunkhecexporter.Config)
	if err := sub.Unmarshal(cfg); err != nil {
		t.Fatalf("exporter config: %v", err)
	}
	cfg.DisableCompression = !gzip
	if err := cfg.Validate(); err != nil {
		t.Fatalf("exporter config: %v", err)
	}
	return cfg
}

// shipment is what the test sends: records per (sourcetype, index), each
// record carrying the run tag and its number as log attributes.
type shipment struct {
	tag     string
	perType map[string]int // sourcetype -> records
	index   string
}

func (s shipment) total() int {
	n := 0
	for _, c := range s.perType {
		n += c
	}
	return n
}

// logs builds the records: one resource per sourcetype with host.name,
// com.splunk.source, com.splunk.sourcetype and com.splunk.index, and log
// attributes that become HEC indexed fields.
func (s shipment) logs() plog.Logs {
	ld := plog.NewLogs()
	types := slices.Sorted(maps.Keys(s.perType))
	ts := pcommon.NewTimestampFromTime(time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC))
	for _, st := range types {
		rl := ld.ResourceLogs().AppendEmpty()
		ra := rl.Resource().Attributes()
		ra.PutStr("host.name", "host-"+st)
		ra.PutStr("com.splunk.source", "/var/log/"+st+".log")
		ra.PutStr("com.splunk.sourcetype", st)
		ra.PutStr("com.splunk.index", s.index)
		sl := rl.ScopeLogs().AppendEmpty()
		for i := 0; i < s.perType[st]; i++ {
			lr := sl.LogRecords().AppendEmpty()
			lr.SetTimestamp(ts + pcommon.Timestamp(i)*1000)
			lr.Body().SetStr(fmt.Sprintf("%s %s record %d user=u%d", s.tag, st, i, i%7))
			lr.Attributes().PutStr("run", s.tag)
			lr.Attributes().PutInt("seq", int64(i))
			lr.SetSeverityText("INFO")
		}
	}
	return ld
}

// ship runs the real exporter: start (its health check on), consume, and
// shut down, which drains its sending queue.
func ship(t *testing.T, cfg *splunkhecexporter.Config, s shipment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := splunkhecexporter.NewFactory()
	exp, err := f.CreateLogs(ctx, exportertest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatalf("exporter start (health check): %v", err)
	}
	if err := exp.ConsumeLogs(ctx, s.logs()); err != nil {
		t.Fatalf("consume: %v", err)
	}
	if err := exp.Shutdown(ctx); err != nil {
		t.Fatalf("exporter shutdown: %v", err)
	}
}

// search asks a peer's /v1/search.
func search(t *testing.T, peerURL, q string) []map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": q})
	resp, err := http.Post(peerURL+"/v1/search", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Results []map[string]any `json:"results"`
	}
	if resp.StatusCode != 200 {
		var e map[string]any
		json.NewDecoder(resp.Body).Decode(&e)
		t.Fatalf("search %q: %d %v", q, resp.StatusCode, e)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Results
}

// countsBy runs `<filter> | stats count by <field>` and returns the counts.
func countsBy(t *testing.T, peerURL, filter, field string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, r := range search(t, peerURL, filter+" | stats count by "+field) {
		var n int
		fmt.Sscan(fmt.Sprint(r["count"]), &n)
		got[fmt.Sprint(r[field])] = n
	}
	return got
}

// checkSearchable checks what the user sees: exact counts per sourcetype,
// and host, source, index and the log attributes as fields.
func checkSearchable(t *testing.T, peerURL string, s shipment) {
	t.Helper()
	want := map[string]int{}
	for st, n := range s.perType {
		want[st] = n
	}
	filter := "index=" + s.index + " run=" + s.tag
	got := countsBy(t, peerURL, filter, "sourcetype")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts by sourcetype %v, want %v", got, want)
	}
	t.Logf("%s: searchable, by sourcetype %v", s.tag, got)
	wantHosts, wantSources := map[string]int{}, map[string]int{}
	for st, n := range s.perType {
		wantHosts["host-"+st] = n
		wantSources["/var/log/"+st+".log"] = n
	}
	if got := countsBy(t, peerURL, filter, "host"); fmt.Sprint(got) != fmt.Sprint(wantHosts) {
		t.Fatalf("counts by host %v, want %v", got, wantHosts)
	}
	if got := countsBy(t, peerURL, filter, "source"); fmt.Sprint(got) != fmt.Sprint(wantSources) {
		t.Fatalf("counts by source %v, want %v", got, wantSources)
	}
	st := slices.Sorted(maps.Keys(s.perType))[0]
	if got := countsBy(t, peerURL, filter+" sourcetype="+st+" seq=3", "index"); fmt.Sprint(got) != fmt.Sprint(map[string]int{s.index: 1}) {
		t.Fatalf("one record by its seq field: %v", got)
	}
}

func startStandalone(t *testing.T) *peer.Peer {
	t.Helper()
	p, err := peer.Start(peer.Config{
		ID: "compat", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Searchable: true,
		Tokens: []hec.Token{{Value: noAckToken}, {Value: "acking", Ack: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// The acceptance shipment: 10,000 records over four sourcetypes.
func bigShipment(tag, index string) shipment {
	return shipment{tag: tag, index: index, perType: map[string]int{"nginx": 4000, "syslog": 3000, "app:json": 2000, "audit": 1000}}
}

func TestOTelExporterStandalone(t *testing.T) {
	p := startStandalone(t)
	url := "http://" + p.Addr()
	for _, gz := range []bool{true, false} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			s := bigShipment(fmt.Sprintf("standalone-gzip-%v", gz), "main")
			ship(t, exporterConfig(t, url, noAckToken, gz), s)
			// The exporter got its 200s: with a token without acks every
			// event is durable now; searchable once indexed.
			if n := p.Store().Stats.EventsAppended.Load(); n < int64(s.total()) {
				t.Fatalf("%d events appended after the exporter finished, want ≥ %d", n, s.total())
			}
			if err := p.Store().WaitIdle(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			checkSearchable(t, url, s)
		})
	}
}

// TestOTelExporterAckingTokenRefused: an acknowledging token answers the
// exporter (which sends no channel) with code 10 — why tokens without acks
// exist.
func TestOTelExporterAckingTokenRefused(t *testing.T) {
	p := startStandalone(t)
	cfg := exporterConfig(t, "http://"+p.Addr(), "acking", true)
	cfg.BackOffConfig.Enabled = false
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := splunkhecexporter.NewFactory()
	cfg.QueueSettings.Enabled = false
	exp, err := f.CreateLogs(ctx, exportertest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	err = exp.ConsumeLogs(ctx, shipment{tag: "refused", index: "main", perType: map[string]int{"x": 3}}.logs())
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("consume with an acknowledging token: %v, want the 400 (code 10) passed on", err)
	}
	if n := p.Store().Stats.EventsAppended.Load(); n != 0 {
		t.Fatalf("%d events appended by refused requests", n)
	}
}

func TestOTelExporterClusterPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := integration.Start(t, integration.Options{PeersPerSite: 2})
	origin := c.Peer("site1-p1")
	url := "http://" + origin.Addr()
	for _, gz := range []bool{true, false} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			s := bigShipment(fmt.Sprintf("cluster-gzip-%v", gz), "main")
			ship(t, exporterConfig(t, url, integration.NoAckHECToken, gz), s)
			// Every 200 came after the ack rule held: right now, with no
			// waiting, each of the origin's buckets has all its events on
			// at least one more copy — min(2, RF) copies, the least the rule
			// ever acknowledges on (a healthy run shows two: total:3).
			checkCopies(t, c, "site1-p1", 1)
			if err := origin.Store().WaitIdle(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			checkSearchable(t, url, s)
		})
	}
}

// checkCopies checks that each bucket of the origin has all its durable
// events on at least `others` other peers' copies.
func checkCopies(t *testing.T, c *integration.Cluster, origin string, others int) {
	t.Helper()
	mine := c.Inventory(origin)
	if len(mine) == 0 {
		t.Fatal("the origin holds no bucket")
	}
	for id, cp := range mine {
		held := 0
		for _, p := range c.PeerIDs() {
			if p == origin {
				continue
			}
			if o, ok := c.Inventory(p)[id]; ok && o.Events >= cp.Events {
				held++
			}
		}
		if held < others {
			t.Fatalf("bucket %s: %d events on the origin, all of them on %d other copies, want ≥ %d", id, cp.Events, held, others)
		}
		t.Logf("bucket %s: %d events, all on %d other copies at the last 200", id, cp.Events, held)
	}
}
