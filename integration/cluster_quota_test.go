package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/searchhead"
)

// TestSearchHeadQuotas (issue 26 item 3): one token may hold at most
// --max-searches-per-token of a head's --max-searches slots, and is refused
// at once beyond it (429, Retry-After); a head whose slots are all taken
// makes the next search wait for one, then refuses it the same way; the
// searches that held the slots still answer exactly, and the refused
// token searches again once its search is done.
func TestSearchHeadQuotas(t *testing.T) {
	var holding atomic.Bool
	release := make(chan struct{})
	c := Start(t, Options{SearchTokens: []fsm.SearchToken{{Token: "quota-a"}, {Token: "quota-b"}, {Token: "quota-c"}},
		PeerTweak: func(id string, cfg *peer.Config) {
			cfg.BeforeSearchBucket = func(ctx context.Context, bucket string) {
				if holding.Load() {
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
			}
		}})
	raws := searchIngest(t, c, "quota", 500)
	sh := c.StartSearchHead("sh-quota", "site1", func(cfg *searchhead.Config) {
		cfg.MaxSearches, cfg.MaxSearchesPerToken, cfg.PeerTimeout = 2, 1, 30*time.Second
	})
	count := func(tok string) (int, string, string) {
		req, _ := http.NewRequest("POST", sh.URL()+"/v1/search", strings.NewReader(`{"query":"* | stats count"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := c.HTTPClient(60 * time.Second).Do(req)
		if err != nil {
			t.Error(err)
			return 0, "", ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Retry-After"), string(b)
	}
	running := func(n int) func() error {
		return func() error {
			if text, _ := scrape(t, sh.URL()+"/metrics"); !strings.Contains(text, fmt.Sprintf("quarry_searchhead_searches_running %d", n)) {
				return fmt.Errorf("not %d searches running", n)
			}
			return nil
		}
	}
	want := fmt.Sprintf(`"count":%d`, len(raws))
	holding.Store(true)
	done := make(chan string, 2)
	for _, tok := range []string{"quota-a", "quota-b"} {
		go func() {
			code, _, b := count(tok)
			done <- fmt.Sprintf("%d %s", code, b)
		}()
		if tok == "quota-a" {
			testutil.WaitFor(t, 30*time.Second, running(1))
		}
	}
	testutil.WaitFor(t, 30*time.Second, running(2))
	// quota-a holds its one slot: refused at once.
	start := time.Now()
	if code, ra, b := count("quota-a"); code != 429 || ra != "1" || !strings.Contains(b, "too_many_searches") || !strings.Contains(b, "per token") {
		t.Fatalf("a second search of one token: %d Retry-After %q %s, want 429 per token", code, ra, b)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("the per-token refusal waited %s", d)
	}
	// The head is full: quota-c waits for a slot, then is refused.
	if code, ra, b := count("quota-c"); code != 429 || ra != "1" || !strings.Contains(b, "--max-searches;") {
		t.Fatalf("a search on a full head: %d Retry-After %q %s, want 429 after waiting", code, ra, b)
	}
	holding.Store(false)
	close(release)
	for range 2 {
		if got := <-done; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, want) {
			t.Fatalf("a search that held a slot: %s, want 200 with %s", got, want)
		}
	}
	if code, _, b := count("quota-a"); code != 200 || !strings.Contains(b, want) {
		t.Fatalf("quota-a once its search is done: %d %s", code, b)
	}
}
