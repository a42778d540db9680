package manager

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRedirectSendsTheTokenOnlyToManagers (security review L5): a write
// through a follower follows its 307 to the leader with the admin token
// only when the leader is in the follower's member table; a redirect to
// any other host gets nothing — the call fails, naming the host — and a
// redirect from HTTPS to HTTP is refused.
func TestRedirectSendsTheTokenOnlyToManagers(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{} // server → Authorization it saw on the write
	record := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[name] = r.Header.Get("Authorization")
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{}`))
		}
	}
	leader := httptest.NewServer(record("leader"))
	defer leader.Close()
	stranger := httptest.NewServer(record("stranger"))
	defer stranger.Close()
	follower := func(to string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/managers" {
				json.NewEncoder(w).Encode(ManagersView{Managers: []ManagerView{
					{ID: "m1", HTTPAddr: strings.TrimPrefix(leader.URL, "http://")},
					{ID: "m2", HTTPAddr: r.Host}}})
				return
			}
			http.Redirect(w, r, to+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	toLeader := follower(leader.URL)
	defer toLeader.Close()
	c, err := NewClient([]string{toLeader.URL}, "admin-secret", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetMaintenance(ctx, true); err != nil {
		t.Fatalf("a write through a follower to a leader of its group: %v", err)
	}
	if got["leader"] != "Bearer admin-secret" {
		t.Fatalf("the leader saw Authorization %q, want the admin token", got["leader"])
	}

	toStranger := follower(stranger.URL)
	defer toStranger.Close()
	c, _ = NewClient([]string{toStranger.URL}, "admin-secret", 5*time.Second)
	err = c.SetMaintenance(ctx, true)
	if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(stranger.URL, "http://")) {
		t.Fatalf("a redirect to a host outside the group: %v, want an error naming it", err)
	}
	if a, ok := got["stranger"]; ok {
		t.Fatalf("the stranger was sent the write (Authorization %q)", a)
	}

	// HTTPS → HTTP: refused before anything is sent.
	tlsFollower := httptest.NewTLSServer(http.RedirectHandler(leader.URL+"/v1/maintenance", http.StatusTemporaryRedirect))
	defer tlsFollower.Close()
	hc := redirectClient(5*time.Second, tlsFollower.Client().Transport.(*http.Transport).TLSClientConfig)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tlsFollower.URL+"/v1/maintenance", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer admin-secret")
	mu.Lock()
	delete(got, "leader")
	mu.Unlock()
	if res, err := hc.Do(req); err == nil || !strings.Contains(err.Error(), "refusing to leave HTTPS") {
		if res != nil {
			res.Body.Close()
		}
		t.Fatalf("an HTTPS → HTTP redirect: %v, want refused", err)
	}
	if _, ok := got["leader"]; ok {
		t.Fatal("the HTTP target was sent the write after an HTTPS redirect")
	}
}
