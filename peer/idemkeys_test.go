package peer_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestIdempotencyKeysSurviveRestart: a standalone peer that stored a keyed
// request, stopped and started again (its hot bucket rolled at open),
// knows the key from its journal: the resend is answered and not stored,
// another body under it is 422. Killing instead of stopping is covered by
// integration's TestClusterIdempotencyOriginKilled.
func TestIdempotencyKeysSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	body := `{"event":"restart one","time":1767225600}{"event":"restart two","time":1767225600}`
	post := func(p interface{ Addr() string }, body string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+p.Addr()+"/services/collector/event", strings.NewReader(body))
		req.Header.Set("Authorization", "Splunk T")
		req.Header.Set("X-Splunk-Request-Channel", "11111111-2222-4333-8444-555555555555")
		req.Header.Set("Idempotency-Key", "restart-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	p := mustStartPeer(t, dir)
	if st := post(p, body); st != 200 {
		t.Fatalf("first: %d", st)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = mustStartPeer(t, dir)
	defer p.Close()
	if st := post(p, body); st != 200 {
		t.Fatalf("resend after the restart: %d", st)
	}
	if st := post(p, `{"event":"something else"}`); st != 422 {
		t.Fatalf("another body after the restart: %d, want 422", st)
	}
	testutil.WaitFor(t, 5*time.Second, func() error { return p.Store().Flush() })
	n := 0
	for _, c := range p.Store().Inventory() {
		n += int(c.Events)
	}
	if n != 2 {
		t.Fatalf("the peer holds %d events, want 2", n)
	}
}
