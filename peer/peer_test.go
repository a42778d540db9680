package peer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
)

func mustStartPeer(t *testing.T, dir string) *peer.Peer {
	t.Helper()
	tok, err := hec.ParseTokenFlag("T=main,web")
	if err != nil {
		t.Fatal(err)
	}
	p, err := peer.Start(peer.Config{ID: "p1", Site: "site1", DataDir: dir, HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("decode %s: %v", url, err)
		}
	}
	return resp.StatusCode
}

func TestIngestClientEnvelopesAndLinesThenEndpoints(t *testing.T) {
	dir := t.TempDir()
	p := mustStartPeer(t, dir)
	url := "http://" + p.Addr()
	files := t.TempDir()
	var env, lines strings.Builder
	for i := 0; i < 2500; i++ {
		fmt.Fprintf(&env, `{"time":%d,"host":"h%d","event":"envelope %d ok","fields":{"k":"v%d"}}`+"\n", 1767225600+i, i%3, i, i%2)
	}
	for i := 0; i < 1200; i++ {
		fmt.Fprintf(&lines, "plain line %d here\n", i)
	}
	os.WriteFile(filepath.Join(files, "a.hec"), []byte(env.String()), 0o644)
	os.WriteFile(filepath.Join(files, "b.log"), []byte(lines.String()), 0o644)
	res, err := hec.Ingest(context.Background(), hec.ClientConfig{URL: url, Token: "T", Streams: 2, Batch: 300, Sourcetype: "plain", Index: "web"},
		[]string{filepath.Join(files, "a.hec"), filepath.Join(files, "b.log")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 3700 {
		t.Fatalf("ingest acknowledged %d events, want 3700", res.Events)
	}
	var br peer.BucketsResponse
	testutil.WaitFor(t, 5*time.Second, func() error {
		getJSON(t, url+"/v1/buckets", &br)
		n, byIndex := uint32(0), map[string]uint32{}
		for _, b := range br.Buckets {
			n += b.SearchableEvents
			byIndex[b.Index] += b.Events
		}
		if n != 3700 || byIndex["web"] != 3700 {
			return fmt.Errorf("searchable %d, by index %v", n, byIndex)
		}
		return nil
	})
	if br.Peer != "p1" || br.GUID != p.GUID() || len(br.Buckets) == 0 || br.Buckets[0].ContentHash == "" || br.Buckets[0].State != "hot" {
		t.Fatalf("buckets answer %+v", br)
	}
	// plain lines got the sourcetype default; envelopes kept theirs
	st := p.Store()
	plain, env2 := 0, 0
	for _, seg := range st.Segments() {
		if bm, _ := seg.FieldValue("sourcetype", "plain"); bm != nil {
			plain += int(bm.GetCardinality())
		}
		if bm, _ := seg.Term("envelope"); bm != nil {
			env2 += int(bm.GetCardinality())
		}
	}
	// envelopes name no sourcetype either, so both files carry "plain"
	if plain != 3700 || env2 != 2500 {
		t.Fatalf("sourcetype=plain %d (want 3700), envelope term %d (want 2500)", plain, env2)
	}
	// /v1/search: the single-peer search through the index; a bad query
	// or time range is the request's fault (400), with the position.
	resp, err := http.Post(url+"/v1/search", "application/json", strings.NewReader(`{"query":"sourcetype=plain | stats count"}`))
	if err != nil {
		t.Fatal(err)
	}
	var sr struct {
		Results []map[string]any `json:"results"`
	}
	json.NewDecoder(resp.Body).Decode(&sr)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(sr.Results) != 1 || sr.Results[0]["count"] != float64(3700) {
		t.Fatalf("search count: %d %+v (want 200, count 3700)", resp.StatusCode, sr.Results)
	}
	for _, bad := range []string{`{"query":"error | stats count by"}`, `{"query":"error","earliest":"yesterday-ish"}`} {
		resp, _ = http.Post(url+"/v1/search", "application/json", strings.NewReader(bad))
		var e struct{ Error, Code string }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 400 || e.Code != "bad_query" || e.Error == "" {
			t.Fatalf("search %s: %d %+v (want 400 bad_query)", bad, resp.StatusCode, e)
		}
	}
	resp, _ = http.Post(url+"/v1/search", "application/json", strings.NewReader(`{not json`))
	var e struct{ Error, Code string }
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e.Code != "bad_request" || e.Error == "" {
		t.Fatalf("bad search body: %d %+v", resp.StatusCode, e)
	}
	if code := getJSON(t, url+"/healthz", nil); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	resp, _ = http.Get(url + "/metrics")
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"quarry_peer_events_appended_total 3700", "quarry_peer_hec_requests_total", "quarry_peer_fsyncs_total"} {
		if !strings.Contains(string(m), name) {
			t.Fatalf("metrics lack %q", name)
		}
	}
	if probs, err := promlint.New(bytes.NewReader(m)).Lint(); err != nil || len(probs) > 0 {
		t.Fatalf("standalone /metrics: lint %v, problems %+v", err, probs)
	}
	// roll on demand, then the GUID and the data survive a restart
	resp, _ = http.Post(url+"/v1/buckets/"+br.Buckets[0].ID+"/roll", "application/json", nil)
	resp.Body.Close()
	guid := p.GUID()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = mustStartPeer(t, dir)
	defer p.Close()
	if p.GUID() != guid {
		t.Fatalf("GUID changed across restart: %s → %s", guid, p.GUID())
	}
	getJSON(t, "http://"+p.Addr()+"/v1/buckets", &br)
	n := uint32(0)
	for _, b := range br.Buckets {
		if b.State != "warm" {
			t.Fatalf("after restart %s is %s", b.ID, b.State)
		}
		if !strings.HasSuffix(b.ID, "~"+guid) || !strings.HasPrefix(b.ID, "web~") {
			t.Fatalf("bucket id %s", b.ID)
		}
		n += b.Events
	}
	if n != 3700 {
		t.Fatalf("after restart %d events, want 3700", n)
	}
}

func TestIngestClientGivesUp(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x.log")
	os.WriteFile(f, []byte("a\n"), 0o644)
	start := time.Now()
	_, err := hec.Ingest(context.Background(), hec.ClientConfig{URL: "http://127.0.0.1:1", Token: "T", GiveUpAfter: 300 * time.Millisecond}, []string{f})
	if err == nil || !strings.Contains(err.Error(), "unreachable") || time.Since(start) > 10*time.Second {
		t.Fatalf("got %v after %v, want an unreachable error soon", err, time.Since(start))
	}
}

func TestIngestClientReportsRefusal(t *testing.T) {
	p := mustStartPeer(t, t.TempDir())
	defer p.Close()
	f := filepath.Join(t.TempDir(), "x.log")
	os.WriteFile(f, []byte("a\nb\n"), 0o644)
	_, err := hec.Ingest(context.Background(), hec.ClientConfig{URL: "http://" + p.Addr(), Token: "wrong"}, []string{f})
	if err == nil || !strings.Contains(err.Error(), "Invalid token") {
		t.Fatalf("got %v, want the server's refusal", err)
	}
}
