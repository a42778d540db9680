package searchhead

import (
	"net"
	"net/http"
	"testing"

	"github.com/quarry-dev/quarry/fsm"
)

// TestAuthorizeWithoutTokens: a head with no search token and no admin
// token serves searches without one only on loopback. One that started
// with tokens on another address (allowed then) and saw the last one
// revoked refuses every request instead of opening up.
func TestAuthorizeWithoutTokens(t *testing.T) {
	listen := func(addr string) net.Listener {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("listen %s: %v", addr, err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	req := func(tok string) *http.Request {
		r, _ := http.NewRequest("POST", "http://127.0.0.1/v1/search", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return r
	}
	loop := &Head{ln: listen("127.0.0.1:0")}
	if _, err := loop.authorize(req("")); err != nil {
		t.Fatalf("loopback head without tokens: %v", err)
	}
	wide := &Head{ln: listen("0.0.0.0:0"), tokens: []fsm.SearchToken{{Token: "search-1"}}}
	if _, err := wide.authorize(req("search-1")); err != nil {
		t.Fatalf("token on a wide head: %v", err)
	}
	wide.tokens = nil // the last search token revoked
	for _, tok := range []string{"search-1", ""} {
		if _, err := wide.authorize(req(tok)); err == nil {
			t.Fatalf("wide head with no tokens left served token %q", tok)
		}
	}
}
