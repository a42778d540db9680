package peer_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/store"
)

// Tokens of the auth tests' standalone peer.
const (
	authAdmin   = "adm-secret"
	authSearch  = "search-all"
	authWebOnly = "search-web"
	authHEC     = "H"
)

// call sends one request with an optional bearer token and returns the
// status and body.
func call(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// mustStartAuthPeer starts a standalone peer on loopback with the auth
// tests' tokens, journal-only copies (so /searchable has work), and one
// hot bucket in each of main and web.
func mustStartAuthPeer(t *testing.T, pprof bool) (*peer.Peer, string) {
	t.Helper()
	tok, err := hec.ParseTokenFlag(authHEC + "=main,web:useack=false")
	if err != nil {
		t.Fatal(err)
	}
	p, err := peer.Start(peer.Config{ID: "p1", Site: "site1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0",
		Tokens: []hec.Token{tok}, Searchable: false, Pprof: pprof, AdminToken: authAdmin,
		SearchTokens: []fsm.SearchToken{{Token: authSearch}, {Token: authWebOnly, Indexes: []string{"web"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	url := "http://" + p.Addr()
	for _, idx := range []string{"main", "web"} {
		req, _ := http.NewRequest("POST", url+"/services/collector/event",
			strings.NewReader(fmt.Sprintf(`{"time":1767225600,"index":%q,"event":"hello %s"}`, idx, idx)))
		req.Header.Set("Authorization", "Splunk "+authHEC)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("ingest into %s: %d", idx, resp.StatusCode)
		}
	}
	if err := p.Store().WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	return p, url
}

// inventory reads GET /v1/buckets with the admin token, by bucket id.
func inventory(t *testing.T, url string) map[string]store.CopyInfo {
	t.Helper()
	code, b := call(t, "GET", url+"/v1/buckets", authAdmin, "")
	if code != 200 {
		t.Fatalf("GET /v1/buckets with the admin token: %d %s", code, b)
	}
	var br peer.BucketsResponse
	if err := json.Unmarshal(b, &br); err != nil {
		t.Fatal(err)
	}
	out := map[string]store.CopyInfo{}
	for _, c := range br.Buckets {
		out[c.ID] = c
	}
	return out
}

func bucketOf(t *testing.T, inv map[string]store.CopyInfo, index string) store.CopyInfo {
	t.Helper()
	for _, c := range inv {
		if c.Index == index {
			return c
		}
	}
	t.Fatalf("no %s bucket in %v", index, inv)
	return store.CopyInfo{}
}

// wantRefused checks a refusal's status and SPEC §7 error body.
func wantRefused(t *testing.T, what string, code int, body []byte, status int) {
	t.Helper()
	want := map[int]string{401: "token_required", 403: "invalid_token"}[status]
	var e struct{ Error, Code string }
	if code != status || json.Unmarshal(body, &e) != nil || e.Code != want || e.Error == "" {
		t.Fatalf("%s: %d %s, want %d {error, code %q}", what, code, body, status, want)
	}
}

// TestAuthPeerEndpoints: every authenticated endpoint of a standalone peer
// answers 401 without a token and 403 with a wrong one (a search token is
// a wrong one for the admin endpoints), and 200 with the right one; a
// refused roll or searchable changes nothing (GET /v1/buckets shows the
// same copies).
func TestAuthPeerEndpoints(t *testing.T) {
	p, url := mustStartAuthPeer(t, true)
	before := inventory(t, url)
	mainB := bucketOf(t, before, "main")
	if mainB.State != "hot" || mainB.Searchable {
		t.Fatalf("main bucket %+v, want hot and journal-only", mainB)
	}
	search := `{"query":"hello | stats count"}`
	roll := url + "/v1/buckets/" + mainB.ID + "/roll"
	searchable := url + "/v1/buckets/" + mainB.ID + "/searchable"
	type endpoint struct {
		name, method, url, body string
		ok, wrong               []string // tokens that pass, and wrong ones besides "nope"
	}
	reads := []endpoint{
		{"GET /v1/buckets", "GET", url + "/v1/buckets", "", []string{authSearch, authWebOnly, authAdmin}, nil},
		{"POST /v1/search", "POST", url + "/v1/search", search, []string{authSearch, authWebOnly, authAdmin}, nil},
		{"GET /debug/pprof/", "GET", url + "/debug/pprof/", "", []string{authAdmin}, []string{authSearch}},
		{"GET /debug/pprof/profile", "GET", url + "/debug/pprof/profile?seconds=1", "", []string{authAdmin}, []string{authSearch}},
	}
	for _, e := range reads {
		t.Run(e.name, func(t *testing.T) {
			code, b := call(t, e.method, e.url, "", e.body)
			wantRefused(t, e.name+" without a token", code, b, 401)
			for _, tok := range append([]string{"nope", authAdmin + "x"}, e.wrong...) {
				code, b = call(t, e.method, e.url, tok, e.body)
				wantRefused(t, e.name+" with token "+tok, code, b, 403)
			}
			for _, tok := range e.ok {
				if code, b = call(t, e.method, e.url, tok, e.body); code != 200 {
					t.Fatalf("%s with token %s: %d %s, want 200", e.name, tok, code, b)
				}
			}
		})
	}
	// A scoped search token sees only its indexes' copies.
	code, b := call(t, "GET", url+"/v1/buckets", authWebOnly, "")
	var br peer.BucketsResponse
	if code != 200 || json.Unmarshal(b, &br) != nil || len(br.Buckets) != 1 || br.Buckets[0].Index != "web" {
		t.Fatalf("GET /v1/buckets with the web-only token: %d %s, want the web copy only", code, b)
	}
	// Writes: refused ones change nothing, then the admin token works.
	writes := []struct {
		name, url string
		after     func(store.CopyInfo) error
	}{
		{"roll", roll, func(c store.CopyInfo) error {
			if c.State != "warm" {
				return fmt.Errorf("state %s, want warm", c.State)
			}
			return nil
		}},
		{"searchable", searchable, func(c store.CopyInfo) error {
			if !c.Searchable {
				return errors.New("not searchable")
			}
			return nil
		}},
	}
	for _, w := range writes {
		t.Run("POST "+w.name, func(t *testing.T) {
			was := inventory(t, url)
			code, b := call(t, "POST", w.url, "", "")
			wantRefused(t, w.name+" without a token", code, b, 401)
			for _, tok := range []string{"nope", authSearch, authWebOnly} {
				code, b = call(t, "POST", w.url, tok, "")
				wantRefused(t, w.name+" with token "+tok, code, b, 403)
			}
			if now := inventory(t, url); !reflect.DeepEqual(now, was) {
				t.Fatalf("a refused %s changed the copies:\nbefore %+v\nafter  %+v", w.name, was, now)
			}
			if code, b = call(t, "POST", w.url, authAdmin, ""); code != 200 {
				t.Fatalf("%s with the admin token: %d %s", w.name, code, b)
			}
			testutil.WaitFor(t, 10*time.Second, func() error { return w.after(inventory(t, url)[mainB.ID]) })
		})
	}
	_ = p
}

// TestPprofOffWithoutFlag: without Config.Pprof (--pprof) there is no
// profiling endpoint, whatever the token.
func TestPprofOffWithoutFlag(t *testing.T) {
	_, url := mustStartAuthPeer(t, false)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/heap", "/debug/pprof/cmdline"} {
		for _, tok := range []string{"", authAdmin} {
			if code, b := call(t, "GET", url+path, tok, ""); code != 404 || !strings.Contains(string(b), "--pprof") {
				t.Fatalf("GET %s (token %q) without --pprof: %d %s, want 404 naming --pprof", path, tok, code, b)
			}
		}
	}
}

// TestAuthLoopbackWithoutTokens: a peer with no admin or search token on
// loopback serves everything without one (SPEC §7: said at start).
func TestAuthLoopbackWithoutTokens(t *testing.T) {
	tok, _ := hec.ParseTokenFlag(authHEC + ":useack=false")
	p, err := peer.Start(peer.Config{ID: "p1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true, Pprof: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := "http://" + p.Addr()
	for _, e := range [][3]string{{"GET", "/v1/buckets", ""}, {"POST", "/v1/search", `{"query":"*"}`}, {"GET", "/debug/pprof/", ""}} {
		if code, b := call(t, e[0], url+e[1], "", e[2]); code != 200 {
			t.Fatalf("%s %s without a token on loopback: %d %s", e[0], e[1], code, b)
		}
	}
	if code, b := call(t, "POST", url+"/v1/buckets/nope/roll", "", ""); code != 404 {
		t.Fatalf("roll without a token on loopback: %d %s, want 404 no_bucket (not refused)", code, b)
	}
	// Only for this machine's own clients (the review's M7): a rebound
	// name or a web page's origin is refused, and nothing is done.
	for _, e := range [][3]string{{"POST", "/v1/search", `{"query":"*"}`}, {"GET", "/v1/buckets", ""}, {"POST", "/v1/buckets/nope/roll", ""}} {
		for _, h := range [][2]string{{"attacker.example:32973", ""}, {"attacker.example:32973", "http://attacker.example:32973"}, {"", "http://attacker.example"}} {
			req, _ := http.NewRequest(e[0], url+e[1], strings.NewReader(e[2]))
			req.Header.Set("Content-Type", "text/plain")
			if h[0] != "" {
				req.Host = h[0]
			}
			if h[1] != "" {
				req.Header.Set("Origin", h[1])
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 403 || !strings.Contains(string(b), "not_local") && !strings.Contains(string(b), "loopback") {
				t.Fatalf("%s %s with Host %q Origin %q: %d %s, want 403", e[0], e[1], h[0], h[1], res.StatusCode, b)
			}
		}
	}
}

// TestAuthNonLoopbackRefused: a peer configured on a non-loopback address
// without an admin token refuses to start, before it opens its store,
// joins a cluster or listens. (0.0.0.0 is never bound here.)
func TestAuthNonLoopbackRefused(t *testing.T) {
	tok, _ := hec.ParseTokenFlag(authHEC)
	for _, tc := range []struct {
		name string
		cfg  peer.Config
	}{
		{"wildcard, no token", peer.Config{HTTPAddr: "0.0.0.0:0"}},
		{"every interface, no token", peer.Config{HTTPAddr: ":0"}},
		{"search token only", peer.Config{HTTPAddr: "0.0.0.0:0", SearchTokens: []fsm.SearchToken{{Token: authSearch}}}},
		{"host name", peer.Config{HTTPAddr: "peer1.example:8088"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cfg := tc.cfg
			cfg.ID, cfg.DataDir, cfg.Tokens = "p1", dir, []hec.Token{tok}
			start := time.Now()
			p, err := peer.Start(cfg)
			if err == nil {
				p.Close()
				t.Fatalf("peer started on %s without an admin token", cfg.HTTPAddr)
			}
			if !errors.Is(err, peer.ErrTokenRequired) || !strings.Contains(err.Error(), cfg.HTTPAddr) || !strings.Contains(err.Error(), "token") {
				t.Fatalf("error %q, want ErrTokenRequired naming %s", err, cfg.HTTPAddr)
			}
			if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) || time.Since(start) > 2*time.Second {
				t.Fatalf("refused after touching the data dir (%v) or waiting %v", serr, time.Since(start))
			}
		})
	}
}
