package manager

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestReadToken: with --read-token every read of the layout needs it or
// the admin token (401 unauthorized otherwise, a wrong token and a search
// token alike), /healthz and the cluster page's files stay open, and the
// read token writes nothing (review L8).
func TestReadToken(t *testing.T) {
	const readToken = "read-secret-1"
	g := newGroup(t, 1, func(c *Config) { c.ReadToken = readToken })
	base := "http://" + g.leader().HTTPAddr()
	do := func(method, path, token string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{"enabled":true}`))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		c := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/v1/status", "/v1/generation?site=site0", "/v1/generations", "/v1/peers", "/v1/buckets",
		"/v1/indexes", "/v1/fixups", "/v1/managers", "/v1/state/hash", "/metrics"} {
		for _, tok := range []string{"", "wrong", "search-token-of-someone"} {
			if got := do("GET", path, tok); got != http.StatusUnauthorized {
				t.Errorf("GET %s with token %q: %d, want 401", path, tok, got)
			}
		}
		for _, tok := range []string{readToken, testToken} {
			if got := do("GET", path, tok); got != http.StatusOK {
				t.Errorf("GET %s with token %q: %d, want 200", path, tok, got)
			}
		}
	}
	for _, path := range []string{"/healthz", "/", "/ui/cluster.js"} {
		if got := do("GET", path, ""); got != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200 (open)", path, got)
		}
	}
	// The read token is not an admin token: no admin read, no write.
	if got := do("GET", "/v1/config", readToken); got != http.StatusUnauthorized {
		t.Errorf("GET /v1/config with the read token: %d, want 401", got)
	}
	if got := do("POST", "/v1/maintenance", readToken); got != http.StatusUnauthorized {
		t.Errorf("POST /v1/maintenance with the read token: %d, want 401", got)
	}
	var maint bool
	g.leader().Read(func(s *fsm.State) { maint = s.Maintenance() })
	if maint {
		t.Fatal("a write with the read token changed the state")
	}
}
