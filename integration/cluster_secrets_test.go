package integration

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// walkSearchToken is the search token secret of TestNoReadShowsASecret.
const walkSearchToken = "walk-search-secret-3c9e1f"

// busTap records every message on every site's bus node, as the harness's
// admin NATS user (who may read every subject, _INBOX.> included).
type busTap struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (b *busTap) add(m *nats.Msg) { b.mu.Lock(); b.msgs = append(b.msgs, m); b.mu.Unlock() }

// find is the first recorded message whose subject, headers or body holds
// one of secrets, and how many messages were recorded.
func (b *busTap) find(secrets []string) (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.msgs {
		text := m.Subject + "\n" + fmt.Sprint(m.Header) + "\n" + string(m.Data)
		for _, s := range secrets {
			if strings.Contains(text, s) {
				return fmt.Sprintf("bus message on %s holds secret %q: %.300s", m.Subject, s, m.Data), len(b.msgs)
			}
		}
	}
	return "", len(b.msgs)
}

// TestNoReadShowsASecret (SPEC §7, §11; issue 25 item 1): no HTTP read of
// a manager, a peer or a search head, and no NATS message a peer or a
// search head can receive, shows a token's secret. The cluster is
// configured with known HEC, search and admin secrets; every GET endpoint
// of every manager (with and without the admin token), every peer and a
// search head is read, a search runs through the head and on a peer, and
// every message on the bus while a peer restarts (its register reply and
// config), a search head starts (its config and generation table), events
// are ingested and searched, and a peer asks each manager operation it may
// ask (config, heartbeat, generation, buckets) is recorded: none holds a
// secret. Review L1: once the cluster has its token key, neither does any
// read or message hold the unkeyed SHA-256 of a secret (an offline
// oracle); no HTTP read holds the key, nor GET /v1/status any digest; on
// the bus only config replies carry the key; and the peers and the head,
// checking with it, take the right HEC, search and admin tokens and refuse
// a wrong one.
func TestNoReadShowsASecret(t *testing.T) {
	c := Start(t, Options{RoleUsers: true, PeersPerSite: 2,
		SearchTokens: []fsm.SearchToken{{Token: walkSearchToken}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secrets := []string{HECToken, NoAckHECToken, walkSearchToken, AdminToken}
	var key []byte
	c.WaitFor(20*time.Second, func() error {
		c.State(func(s *fsm.State) { key = fsm.TokenKeyOf(s) })
		if key == nil {
			return fmt.Errorf("the cluster has no token key yet")
		}
		return nil
	})
	// Unkeyed digests, as the full form and as the bare hex.
	var oracles []string
	for _, s := range secrets {
		d := fsm.TokenDigest(s)
		oracles = append(oracles, d, strings.TrimPrefix(d, fsm.TokenDigestPrefix))
	}
	keyB64, _ := json.Marshal(key)
	keyForms := []string{string(keyB64[1 : len(keyB64)-1]), hex.EncodeToString(key)}

	tap := &busTap{}
	for _, site := range c.Opts.Sites {
		nc, err := bus.Connect(ctx, c.Bus.Server(site).ClientURL(), bus.ConnectOptions{Name: "tap " + site,
			User: AdminNATSUser, Password: AdminNATSPassword, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("connect the tap to %s: %v", site, err)
		}
		t.Cleanup(nc.Close)
		if _, err := nc.Subscribe(">", tap.add); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	// Traffic: a peer re-registers, a head starts, events go in and are searched.
	c.StopPeer("site1-p2")
	c.StartPeer("site1-p2")
	c.WaitPeersUp("site1-p2")
	head := c.StartSearchHead("sh1", "site1")
	if _, un, err := c.IngestAcked(ctx, "site1-p1", Batches("walk", 20, 10), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v (%d batches unacknowledged)", err, len(un))
	}
	walkPeerOps(ctx, t, c, "site2-p1")

	client := c.HTTPClient(10 * time.Second)
	get := func(url, token string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return fmt.Sprintf("%d %v\n%s", res.StatusCode, res.Header, b)
	}
	check := func(what, body string) {
		t.Helper()
		for _, s := range slices.Concat(secrets, oracles, keyForms) {
			if strings.Contains(body, s) {
				t.Errorf("%s shows secret, unkeyed digest or token key %q: %.400s", what, s, body)
			}
		}
	}
	for _, base := range c.ManagerURLs() {
		for _, path := range []string{"/v1/status", "/v1/generation", "/v1/generation?site=site1", "/v1/generation?site=site2&since=0",
			"/v1/generations", "/v1/peers", "/v1/buckets", "/v1/indexes", "/v1/fixups", "/v1/fixups/1", "/v1/managers",
			"/v1/state/hash", "/v1/config", "/v1/tokens", "/metrics", "/healthz", "/", "/ui/cluster.js", "/ui/cluster.css"} {
			check("manager GET "+base+path, get(base+path, ""))
			check("manager GET "+base+path+" (admin token)", get(base+path, AdminToken))
		}
		if st := get(base+"/v1/status", AdminToken); strings.Contains(st, fsm.TokenDigestPrefix) {
			t.Errorf("manager GET %s/v1/status shows a token digest: %.400s", base, st)
		}
	}
	scheme := c.Opts.TLS.Scheme() + "://"
	for _, id := range c.PeerIDs() {
		base := scheme + c.Peer(id).Addr()
		for _, path := range []string{"/v1/buckets", "/metrics", "/healthz", "/services/collector/health", "/debug/pprof/"} {
			check("peer "+id+" GET "+path, get(base+path, walkSearchToken))
			check("peer "+id+" GET "+path+" (admin token)", get(base+path, AdminToken))
		}
	}
	// Splunk's REST API: a job's list, entry (XML and JSON), results and
	// events name its owner by the token's id, never the token.
	job := splunkDo(t, "POST", head.URL()+"/services/search/jobs", "Bearer "+walkSearchToken,
		url.Values{"search": {"search index=main walk | head 5"}, "exec_mode": {"blocking"}, "output_mode": {"json"}})
	sid := job.JSON(t)["sid"].(string)
	for _, path := range []string{"/healthz", "/metrics", "/", "/services/search/jobs", "/services/search/jobs?output_mode=json",
		"/services/search/jobs/" + sid, "/services/search/jobs/" + sid + "?output_mode=json", "/services/search/jobs/" + sid + "/results?output_mode=json",
		"/services/search/jobs/" + sid + "/events", "/services/search/jobs/" + sid + "/results?output_mode=csv"} {
		check("search head GET "+path, get(head.URL()+path, walkSearchToken))
	}
	for _, url := range []string{head.URL(), scheme + c.Peer("site1-p1").Addr()} {
		a, err := SearchHTTPWith(ctx, client, url, walkSearchToken, map[string]any{"query": "index=main walk | head 5"})
		if err != nil || a.Status != http.StatusOK || len(a.Resp.Results) == 0 {
			t.Fatalf("search on %s: %v (HTTP %d %s, %d results)", url, err, a.Status, a.Error, len(a.Resp.Results))
		}
		check("search answer of "+url, fmt.Sprintf("%+v", a))
	}

	// Everything the bus carried, once the tap has seen the last replies.
	seen := 0
	c.WaitFor(10*time.Second, func() error {
		_, n := tap.find(nil)
		if n == 0 || n != seen {
			seen = n
			return fmt.Errorf("the tap still receives (%d messages)", n)
		}
		return nil
	})
	if leak, n := tap.find(slices.Concat(secrets, oracles)); leak != "" {
		t.Errorf("%s (of %d messages)", leak, n)
	}
	// The key rides only in config replies (a peer config: it names the
	// known indexes), to registered peers and heads.
	if leak := tap.findWithout(keyForms, `"known_indexes"`); leak != "" {
		t.Error(leak)
	}
	// The walk saw the configs it meant to: they carry the keyed digests.
	if seen, n := tap.find([]string{fsm.KeyedDigest(key, HECToken)}); seen == "" {
		t.Errorf("no bus message of %d carried the HEC token's keyed digest: the tap missed the config replies", n)
	}
	checkTokensAfterTheKey(ctx, t, c, key, head.URL(), walkSearchToken)
}

// findWithout is the first recorded message that holds one of secrets but
// not marker.
func (b *busTap) findWithout(secrets []string, marker string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.msgs {
		for _, s := range secrets {
			if strings.Contains(string(m.Data), s) && !strings.Contains(string(m.Data), marker) || strings.Contains(m.Subject+fmt.Sprint(m.Header), s) {
				return fmt.Sprintf("bus message on %s holds %q outside a config reply: %.300s", m.Subject, s, m.Data)
			}
		}
	}
	return ""
}

// checkTokensAfterTheKey: with keyed digests, a restarted peer (which got
// the keyed config at registration), every other peer and the head take
// the right HEC, search and admin tokens and refuse wrong ones.
func checkTokensAfterTheKey(ctx context.Context, t *testing.T, c *Cluster, key []byte, headURL, searchToken string) {
	t.Helper()
	scheme := c.Opts.TLS.Scheme() + "://"
	client := c.HTTPClient(10 * time.Second)
	status := func(url, token string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, id := range c.PeerIDs() {
		base := scheme + c.Peer(id).Addr()
		if s, code, _ := hecPostBody(t, base, HECToken, `{"event":"keyed token test"}`); s != http.StatusOK || code != 0 {
			t.Errorf("peer %s HEC with the right token: %d code %d", id, s, code)
		}
		if s, code, _ := hecPostBody(t, base, HECToken+"x", `{"event":"keyed token test"}`); s != http.StatusForbidden || code != 4 {
			t.Errorf("peer %s HEC with a wrong token: %d code %d, want 403 code 4", id, s, code)
		}
		if s, code, _ := hecPostBody(t, base, fsm.KeyedDigest(key, HECToken), `{"event":"keyed token test"}`); s != http.StatusForbidden || code != 4 {
			t.Errorf("peer %s HEC with the token's keyed digest: %d code %d, want 403 code 4", id, s, code)
		}
		for tok, want := range map[string]int{searchToken: 200, AdminToken: 200, "wrong-" + searchToken: 403} {
			if s := status(base+"/v1/buckets", tok); s != want {
				t.Errorf("peer %s GET /v1/buckets: %d, want %d", id, s, want)
			}
		}
	}
	for tok, want := range map[string]int{searchToken: 200, "wrong-" + searchToken: 403} {
		a, err := SearchHTTPWith(ctx, client, headURL, tok, map[string]any{"query": "index=main walk | head 1"})
		if err != nil || a.Status != want {
			t.Errorf("search head with a %s token: %v (HTTP %d), want %d", map[bool]string{true: "right", false: "wrong"}[want == 200], err, a.Status, want)
		}
	}
}

// walkPeerOps asks, as peer id with its own NATS user, every manager
// operation whose reply carries config, status or tables: config,
// heartbeat, generation (one message, peers only, and streamed) and
// buckets. The replies go through the bus, where the tap sees them.
func walkPeerOps(ctx context.Context, t *testing.T, c *Cluster, id string) {
	t.Helper()
	site := strings.SplitN(id, "-", 2)[0]
	nc, err := bus.Connect(ctx, c.Bus.Server(site).ClientURL(), bus.ConnectOptions{Name: "walk " + id,
		User: id, Password: NATSPassword(id), Logger: quietLogger()})
	if err != nil {
		t.Fatalf("connect as %s: %v", id, err)
	}
	defer nc.Close()
	subj, _ := bus.NewSubjects("")
	mc := mgrclient.NewManagerClient(nc, subj)
	mc.Sender = id
	if pc, err := mc.Config(ctx, id); err != nil || len(pc.HECTokens) == 0 {
		t.Fatalf("config as %s: %v (%d HEC tokens)", id, err, len(pc.HECTokens))
	} else {
		for _, tk := range pc.HECTokens {
			if !fsm.IsTokenDigest(tk.Token) {
				t.Errorf("config as %s: HEC token %q is not a digest", id, tk.Token)
			}
		}
	}
	if _, err := mc.Heartbeat(ctx, api.Heartbeat{Peer: id, GUID: c.Peer(id).GUID()}); err != nil {
		t.Fatalf("heartbeat as %s: %v", id, err)
	}
	if _, err := mc.Generation(ctx, site, 0); err != nil {
		t.Fatalf("generation as %s: %v", id, err)
	}
	if _, err := mc.GenerationPeers(ctx); err != nil {
		t.Fatalf("generation peers as %s: %v", id, err)
	}
	if _, err := mc.FetchGeneration(ctx, "site0", 0, 0); err != nil {
		t.Fatalf("streamed generation as %s: %v", id, err)
	}
	var ids []string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", id) {
			ids = append(ids, b.ID)
		}
	})
	if _, err := mc.Buckets(ctx, id, ids); err != nil {
		t.Fatalf("buckets as %s: %v", id, err)
	}
}
