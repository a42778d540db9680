package peer_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/store"
)

// TestTimeSpreadRequestHoldsHotCap: one HEC request (about 40 KB) of 1,000
// events over 500 distinct days — years back, months ahead, and the last
// 900 days — makes at most max_hot_buckets + 1 buckets per index (the
// one more is the quarantine bucket); POST /v1/search counts every event
// exactly once, also over time ranges (which prune buckets by their
// earliest/latest).
func TestTimeSpreadRequestHoldsHotCap(t *testing.T) {
	tok, err := hec.ParseTokenFlag("N=main,web:useack=false")
	if err != nil {
		t.Fatal(err)
	}
	p, err := peer.Start(peer.Config{ID: "p1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := "http://" + p.Addr()
	now := time.Now().UTC().Truncate(24 * time.Hour)
	rng := rand.New(rand.NewSource(7))
	var body strings.Builder
	var times []time.Time
	for i, d := range rng.Perm(1700)[:500] {
		for j, idx := range []string{"main", "web"} {
			tm := now.Add(time.Duration(d-1500)*24*time.Hour + time.Duration(1+j)*time.Hour)
			times = append(times, tm)
			fmt.Fprintf(&body, `{"time":%d,"index":%q,"event":"e%dx%d spread"}`, tm.Unix(), idx, i, j)
		}
	}
	req, _ := http.NewRequest("POST", url+"/services/collector/event", strings.NewReader(body.String()))
	req.Header.Set("Authorization", "Splunk N")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ingest: %d %s", resp.StatusCode, b)
	}
	t.Logf("one request of %d bytes, %d events", body.Len(), len(times))
	if err := p.Store().WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	var inv struct {
		Buckets []store.CopyInfo `json:"buckets"`
	}
	if getJSON(t, url+"/v1/buckets", &inv) != 200 {
		t.Fatal("GET /v1/buckets")
	}
	perIndex, quarantine := map[string]int{}, map[string]int{}
	for _, c := range inv.Buckets {
		perIndex[c.Index]++
		if c.Quarantine {
			quarantine[c.Index]++
		}
		if c.Events == 0 || c.Latest < c.Earliest {
			t.Fatalf("bucket %s lists %d..%d", c.ID, c.Earliest, c.Latest)
		}
	}
	for _, idx := range []string{"main", "web"} {
		if perIndex[idx] > 4 || quarantine[idx] != 1 {
			t.Fatalf("index %s: %d buckets (%d quarantine), want at most 3 + 1 quarantine", idx, perIndex[idx], quarantine[idx])
		}
	}
	count := func(earliest, latest string) int {
		t.Helper()
		q, _ := json.Marshal(map[string]any{"query": "spread | stats count", "earliest": earliest, "latest": latest, "allow_partial": false})
		status, ans := searchPeer(t, http.DefaultClient, url, string(q))
		if status != 200 {
			t.Fatalf("search: %d %v", status, ans)
		}
		return resultCount(ans)
	}
	if n := count("", ""); n != len(times) {
		t.Fatalf("search counts %d events, want %d", n, len(times))
	}
	for _, w := range [][2]int{{-1500, -1300}, {-905, -895}, {-400, -10}, {-1, 1}, {25, 35}, {100, 200}} {
		lo, hi := now.Add(time.Duration(w[0])*24*time.Hour), now.Add(time.Duration(w[1])*24*time.Hour)
		want := 0
		for _, tm := range times {
			if !tm.Before(lo) && tm.Before(hi) {
				want++
			}
		}
		if got := count(lo.Format(time.RFC3339), hi.Format(time.RFC3339)); got != want {
			t.Fatalf("days %v: search counts %d, want %d", w, got, want)
		}
	}
}
