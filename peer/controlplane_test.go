package peer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/quarry-dev/quarry/api"
)

// TestHTTPControlPlaneFollowsRedirectWithToken: a follower's 307 is
// followed to the leader with the admin token kept; a 409 register_first
// is ErrRegisterFirst; a dead first URL falls through to the next.
func TestHTTPControlPlaneFollowsRedirectWithToken(t *testing.T) {
	var gotAuth string
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		if r.URL.Path == "/v1/peers/p1/heartbeat" {
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":"register","code":"register_first"}`))
			return
		}
		w.Write([]byte(`{"peer":"p1"}`))
	}))
	defer leader.Close()
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, leader.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer follower.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	cp := NewHTTPControlPlane([]string{dead.URL, follower.URL}, "tok")
	if err := cp.Register(context.Background(), "p1", RegisterRequest{GUID: "g", Site: "site1"}); err != nil {
		t.Fatalf("register through a follower: %v", err)
	}
	if gotAuth != "Bearer tok" {
		t.Fatalf("leader saw Authorization %q, want the token", gotAuth)
	}
	if _, err := cp.Heartbeat(context.Background(), "p1", api.PeerStats{}); !errors.Is(err, ErrRegisterFirst) {
		t.Fatalf("heartbeat: %v, want ErrRegisterFirst", err)
	}
}
