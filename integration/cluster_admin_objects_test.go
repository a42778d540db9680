package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/manager"
)

// adminClient is a client of every harness manager with the admin token.
func adminClient(t *testing.T, c *Cluster) *manager.Client {
	t.Helper()
	cl, err := manager.NewClient(c.ManagerURLs(), AdminToken, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// ingestAckedWith sends raws through peer id's HEC with token into index
// and waits until the batch is acknowledged.
func ingestAckedWith(t *testing.T, c *Cluster, id, token, index string, raws []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := c.NewHECClient(id)
	h.Token, h.Index = token, index
	ack, err := h.Send(ctx, raws)
	if err != nil {
		t.Fatalf("ingest through %s into %s: %v", id, index, err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		st, err := h.Acked(ctx, []int64{ack})
		if err != nil || !st[ack] {
			return fmt.Errorf("batch through %s not acknowledged yet (%v)", id, err)
		}
		return nil
	})
}

// hecPostBody posts body to a peer's /event with token on a fixed channel
// and returns the HTTP status, the HEC code and the ack id.
func hecPostBody(t *testing.T, url, token, body string) (int, int, *int64) {
	t.Helper()
	return hecPostTo(t, url+"/services/collector/event", token, body)
}

// hecPostTo is hecPostBody to any HEC path (with its query).
func hecPostTo(t *testing.T, url, token, body string) (int, int, *int64) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Splunk "+token)
	req.Header.Set("X-Splunk-Request-Channel", "11111111-2222-3333-4444-555555555555")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Code  int    `json:"code"`
		AckID *int64 `json:"ackId"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("HEC reply %q: %v", b, err)
	}
	return resp.StatusCode, r.Code, r.AckID
}

// hecIndexPost posts one event for index through a peer's HEC with a
// token that needs no channel, and returns the HTTP status and HEC code.
func hecIndexPost(t *testing.T, url, token, index string) (int, int) {
	t.Helper()
	s, code, _ := hecPostBody(t, url, token, fmt.Sprintf(`{"event":"index test","index":%q}`, index))
	return s, code
}

// TestRevokedTokenRefusedEverywhere (issue 13's acceptance line): a HEC
// token and a search token added through the admin API are used — an
// acknowledged ingest, a search that answers it — then revoked, and within
// 5 s every peer's HEC refuses the HEC token (403, code 4) and every search
// head (and every peer's search API) refuses the search token (403).
func TestRevokedTokenRefusedEverywhere(t *testing.T) {
	// A search token that stays, so revoking the other leaves the heads
	// with a token list (an empty one on loopback means no token needed).
	c := Start(t, Options{PeersPerSite: 2, SearchTokens: []fsm.SearchToken{{Token: "search-keep-0001"}}})
	heads := []*struct {
		id, site string
		url      string
	}{{id: "sh1", site: "site1"}, {id: "sh2", site: "site2"}, {id: "sh0", site: "site0"}}
	for _, h := range heads {
		h.url = c.StartSearchHead(h.id, h.site).URL()
	}
	cl := adminClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hec, err := cl.AddToken(ctx, manager.TokenRequest{Kind: manager.TokenKindHEC, Indexes: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	srch, err := cl.AddToken(ctx, manager.TokenRequest{Kind: manager.TokenKindSearch, Indexes: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}

	// Used: acknowledged on every peer, answered by every search head.
	raws := []string{"revoke-me one", "revoke-me two", "revoke-me three"}
	for i, id := range c.PeerIDs() {
		testutil.WaitFor(t, 10*time.Second, func() error { // peers read the config every heartbeat
			if s, code, _ := hecPostBody(t, "http://"+c.Peer(id).Addr(), hec.Token, `{"event":"probe","index":"nope"}`); s != 400 || code != 7 {
				return fmt.Errorf("peer %s does not know the new token yet: %d code %d", id, s, code)
			}
			return nil
		})
		if i == 0 {
			ingestAckedWith(t, c, id, hec.Token, "web", raws)
		}
	}
	for _, h := range heads {
		testutil.WaitFor(t, 20*time.Second, func() error {
			a, err := SearchHTTP(ctx, h.url, srch.Token, map[string]any{"query": "revoke-me"})
			if err != nil || a.Status != 200 || len(a.Resp.Results) != len(raws) {
				return fmt.Errorf("search head %s with the new token: %v %d %s, %d results", h.id, err, a.Status, a.Error, len(a.Resp.Results))
			}
			return nil
		})
	}

	// Revoked: refused everywhere within 5 s.
	for _, id := range []string{hec.ID, srch.ID} {
		if _, err := cl.RevokeToken(ctx, id); err != nil {
			t.Fatalf("revoke %s: %v", id, err)
		}
	}
	start := time.Now()
	testutil.WaitFor(t, 5*time.Second, func() error {
		var open []string
		for _, id := range c.PeerIDs() {
			url := "http://" + c.Peer(id).Addr()
			if s, code, _ := hecPostBody(t, url, hec.Token, `{"event":"after revoke","index":"web"}`); s != http.StatusForbidden || code != 4 {
				open = append(open, fmt.Sprintf("%s HEC %d code %d", id, s, code))
			}
			if a, err := SearchHTTP(ctx, url, srch.Token, map[string]any{"query": "revoke-me"}); err != nil || a.Status != http.StatusForbidden {
				open = append(open, fmt.Sprintf("%s search %d %v", id, a.Status, err))
			}
		}
		for _, h := range heads {
			if a, err := SearchHTTP(ctx, h.url, srch.Token, map[string]any{"query": "revoke-me"}); err != nil || a.Status != http.StatusForbidden || a.Code != "invalid_token" {
				open = append(open, fmt.Sprintf("%s %d %s %v", h.id, a.Status, a.Code, err))
			}
		}
		if len(open) > 0 {
			return fmt.Errorf("revoked tokens still work: %s", strings.Join(open, "; "))
		}
		return nil
	})
	t.Logf("revoked tokens refused everywhere %v after the revocations", time.Since(start).Round(time.Millisecond))
	// The token that stayed still searches.
	if a, err := SearchHTTP(ctx, heads[0].url, "search-keep-0001", map[string]any{"query": "revoke-me"}); err != nil || a.Status != 200 || len(a.Resp.Results) != len(raws) {
		t.Fatalf("the remaining search token: %v %d %s", err, a.Status, a.Error)
	}
}

// TestIndexAddAndRemove: an index added through the admin API takes
// events on every peer; removed, every peer's HEC refuses events for it
// with "Incorrect index" (code 7), even through a token that names no
// index; bad edits are refused and change nothing.
func TestIndexAddAndRemove(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2})
	cl := adminClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range c.PeerIDs() {
		if s, code := hecIndexPost(t, "http://"+c.Peer(id).Addr(), NoAckHECToken, "app"); s != 400 || code != 7 {
			t.Fatalf("peer %s took an undeclared index: %d code %d", id, s, code)
		}
	}
	if _, err := cl.AddIndex(ctx, manager.IndexRequest{Name: "app", FrozenTimePeriod: "30d"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range c.PeerIDs() {
		testutil.WaitFor(t, 10*time.Second, func() error {
			if s, code := hecIndexPost(t, "http://"+c.Peer(id).Addr(), NoAckHECToken, "app"); s != 200 || code != 0 {
				return fmt.Errorf("peer %s refuses the new index: %d code %d", id, s, code)
			}
			return nil
		})
	}
	ingestAckedWith(t, c, "site2-p1", HECToken, "app", []string{"app event one", "app event two"})
	c.State(func(s *fsm.State) {
		if len(s.BucketList("app", "")) == 0 {
			t.Errorf("no bucket of index app after an acknowledged ingest")
		}
	})

	// A token scoped to app holds it; the removal is refused until it goes.
	tok, err := cl.AddToken(ctx, manager.TokenRequest{Kind: manager.TokenKindHEC, Indexes: []string{"app"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveIndex(ctx, "app"); err == nil || !strings.Contains(err.Error(), "index_in_use") || !strings.Contains(err.Error(), tok.ID) {
		t.Fatalf("removing an index a token names: %v", err)
	}
	if _, err := cl.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveIndex(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		for _, id := range c.PeerIDs() {
			if s, code := hecIndexPost(t, "http://"+c.Peer(id).Addr(), NoAckHECToken, "app"); s != 400 || code != 7 {
				return fmt.Errorf("peer %s still takes the removed index: %d code %d", id, s, code)
			}
		}
		return nil
	})
	// Other indexes are untouched.
	for _, ix := range []string{"main", "web"} {
		if s, code := hecIndexPost(t, "http://"+c.Peer("site1-p1").Addr(), NoAckHECToken, ix); s != 200 || code != 0 {
			t.Fatalf("index %s after removing app: %d code %d", ix, s, code)
		}
	}
	if err := cl.RemoveIndex(ctx, "app"); err == nil || !strings.Contains(err.Error(), "unknown_index") {
		t.Fatalf("removing it again: %v", err)
	}
}
