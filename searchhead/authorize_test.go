package searchhead

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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
	if _, err := loop.identify(req("")); err != nil {
		t.Fatalf("loopback head without tokens: %v", err)
	}
	wide := &Head{ln: listen("0.0.0.0:0"), tokens: []fsm.SearchToken{{Token: "search-1"}}}
	if _, err := wide.identify(req("search-1")); err != nil {
		t.Fatalf("token on a wide head: %v", err)
	}
	wide.tokens = nil // the last search token revoked
	for _, tok := range []string{"search-1", ""} {
		if _, err := wide.identify(req(tok)); err == nil {
			t.Fatalf("wide head with no tokens left served token %q", tok)
		}
	}
}

// TestPublishNamesPerToken: a search token with a publish list may publish
// only under those names (a prefix ending in * covers its names); one
// without may publish anywhere, as may the admin token; a refused request
// is 403 publish_not_allowed before anything is searched (review L2).
func TestPublishNamesPerToken(t *testing.T) {
	h := &Head{cfg: Config{AdminToken: "admin-1"}, tokens: []fsm.SearchToken{
		{Token: fsm.TokenDigest("scoped-1"), Publish: []string{"nightly", "team-a.*"}},
		{Token: "open-1"},
		{Token: "none-1", Publish: []string{}},
	}}
	for _, tc := range []struct {
		tok, name string
		ok        bool
	}{
		{"scoped-1", "nightly", true},
		{"scoped-1", "team-a.errors", true},
		{"scoped-1", "team-b.errors", false},
		{"scoped-1", "nightly2", false},
		{"open-1", "anything.at.all", true},
		{"none-1", "nightly", false},
		{"admin-1", "team-b.errors", true},
	} {
		c, err := h.identifyToken(tc.tok)
		if err != nil {
			t.Fatalf("%s: %v", tc.tok, err)
		}
		if got := c.mayPublish(tc.name); got != tc.ok {
			t.Errorf("token %s publishing %q: %v, want %v", tc.tok, tc.name, got, tc.ok)
		}
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/search", strings.NewReader(`{"query":"*","publish":"team-b.errors"}`))
	r.Header.Set("Authorization", "Bearer scoped-1")
	h.serveSearch(w, r)
	if w.Code != 403 || !strings.Contains(w.Body.String(), "publish_not_allowed") {
		t.Fatalf("a publish outside the token's names: %d %s, want 403 publish_not_allowed", w.Code, w.Body)
	}
}

// TestKeyedSearchTokens: with the cluster's token key, a search token given
// by its keyed digest is taken for its secret and nothing else, keeps its
// index scope, and its caller's label is the keyed id (as quarry token
// list shows it), not a prefix of the unkeyed SHA-256 (review L1).
func TestKeyedSearchTokens(t *testing.T) {
	key := bytes.Repeat([]byte{5}, fsm.TokenKeySize)
	h := &Head{tokenKey: key, tokens: []fsm.SearchToken{
		{Token: fsm.KeyedDigest(key, "search-secret-1"), Indexes: []string{"web"}},
		{Token: fsm.TokenDigest("old-form-secret")}, // a config from before the key
	}}
	c, err := h.identifyToken("search-secret-1")
	if err != nil || len(c.indexes) != 1 || c.indexes[0] != "web" {
		t.Fatalf("the keyed token: %+v %v", c, err)
	}
	sum, _ := fsm.DigestSum(fsm.KeyedDigest(key, "search-secret-1"))
	unkeyed := strings.TrimPrefix(fsm.TokenDigest("search-secret-1"), fsm.TokenDigestPrefix)
	if c.label != hex.EncodeToString(sum[:8]) || strings.HasPrefix(unkeyed, c.label) {
		t.Fatalf("label %q: want the keyed id", c.label)
	}
	if _, err := h.identifyToken("old-form-secret"); err != nil {
		t.Fatalf("an unkeyed digest: %v", err)
	}
	for _, bad := range []string{"search-secret-2", fsm.KeyedDigest(key, "search-secret-1"), "old-form-secreT"} {
		if _, err := h.identifyToken(bad); err == nil {
			t.Errorf("token %q was taken", bad)
		}
	}
	h.tokenKey = bytes.Repeat([]byte{6}, fsm.TokenKeySize) // another cluster's key
	if _, err := h.identifyToken("search-secret-1"); err == nil {
		t.Error("the keyed token was taken under another key")
	}
}
