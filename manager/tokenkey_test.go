package manager

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestShortTokensWarnedNotRefused: a manager started with a short admin
// token and short seed HEC tokens starts (short tokens are not refused),
// warns once per kind, and never prints a secret nor the token key.
func TestShortTokensWarnedNotRefused(t *testing.T) {
	var buf testutil.LockedBuffer
	g := newGroup(t, 1, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.AdminToken = "T"
		c.Seed.HECTokens = []fsm.HECToken{{Token: "shorthec1", Ack: true}, {Token: "shorthec2", Ack: true}}
		c.Seed.SearchTokens = []fsm.SearchToken{{Token: "a-long-enough-search-token"}}
	})
	key := waitTokenKey(t, g.leader())
	// The leader logs the key's commit once its Apply returns.
	testutil.WaitFor(t, 5*time.Second, func() error {
		if !strings.Contains(buf.String(), "cluster token key set") {
			return errors.New("no log line says the key was set")
		}
		return nil
	})
	out := buf.String()
	for kind, want := range map[string]int{"admin token": 1, "HEC token": 1, "search token": 0, "read token": 0} {
		if n := strings.Count(out, "a configured "+kind+" is shorter"); n != want {
			t.Errorf("%d warnings about a short %s, want %d:\n%s", n, kind, want, out)
		}
	}
	for _, s := range []string{"shorthec1", "shorthec2", "a-long-enough-search-token", "admin_token=T", fsm.TokenDigest("shorthec1")} {
		if strings.Contains(out, s) {
			t.Errorf("the log shows %q", s)
		}
	}
	for _, s := range []string{string(key), hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key)} {
		if strings.Contains(out, s) {
			t.Error("the log shows the token key")
		}
	}
}

// TestConfigSecretsNeverLeave: no read shows a token's secret (SPEC §7).
// Once the cluster has its token key, GET /v1/config and the peers'
// config over NATS carry each token's keyed digest — never the unkeyed
// SHA-256 of a secret (review L1) nor the key, which only the NATS config
// carries — and GET /v1/status no digest at all; POSTing back what GET
// answered (or a config read before the key, unkeyed) keeps the secrets; a
// digest that names no token is refused and changes nothing.
func TestConfigSecretsNeverLeave(t *testing.T) {
	g := newGroup(t, 2, nil)
	l := g.leader()
	key := waitTokenKey(t, l)
	c, _ := NewClient([]string{"http://" + l.HTTPAddr()}, testToken, 5*time.Second)
	var cfg fsm.Config
	if err := c.do(ctxT(t), http.MethodGet, "/v1/config", nil, &cfg); err != nil {
		t.Fatal(err)
	}
	const hecSecret, searchSecret = "hec-secret-0001", "search-secret-0001"
	cfg.HECTokens = []fsm.HECToken{{Token: hecSecret, Ack: true}}
	cfg.SearchTokens = []fsm.SearchToken{{Token: searchSecret}}
	var set struct {
		Config json.RawMessage `json:"config"`
	}
	if err := c.do(ctxT(t), http.MethodPost, "/v1/config", cfg, &set); err != nil {
		t.Fatal(err)
	}
	noLeak := func(what string, b []byte, allowKey bool) {
		t.Helper()
		bad := []string{hecSecret, searchSecret, testToken, fsm.TokenDigest(hecSecret), fsm.TokenDigest(searchSecret), fsm.TokenDigest(testToken)}
		if !allowKey {
			kb, _ := json.Marshal(key)
			bad = append(bad, string(kb[1:len(kb)-1]), hex.EncodeToString(key), "token_key")
		}
		for _, x := range bad {
			if strings.Contains(string(b), x) {
				t.Fatalf("%s shows %q: %s", what, x, b)
			}
		}
	}
	noLeak("POST /v1/config's answer", set.Config, false)
	committed := func() fsm.Config {
		var got fsm.Config
		l.Read(func(s *fsm.State) { got = s.Config() })
		return got
	}
	var raw json.RawMessage
	if err := c.do(ctxT(t), http.MethodGet, "/v1/config", nil, &raw); err != nil {
		t.Fatal(err)
	}
	noLeak("GET /v1/config", raw, false)
	if !strings.Contains(string(raw), fsm.KeyedDigest(key, hecSecret)) || !strings.Contains(string(raw), fsm.KeyedDigest(key, searchSecret)) {
		t.Fatalf("GET /v1/config misses the keyed digests: %s", raw)
	}
	var status json.RawMessage
	if err := c.do(ctxT(t), http.MethodGet, "/v1/status", nil, &status); err != nil {
		t.Fatal(err)
	}
	noLeak("GET /v1/status", status, false)
	if strings.Contains(string(status), fsm.TokenDigestPrefix) {
		t.Fatalf("GET /v1/status shows a digest: %s", status)
	}
	var pc api.PeerConfig
	l.Read(func(s *fsm.State) { pc = l.peerConfigFor(s, true) })
	pb, _ := json.Marshal(pc)
	noLeak("the peers' config", pb, true)
	if len(pc.HECTokens) != 1 || !bytes.Equal(pc.TokenKey, key) || !fsm.TokenMatches(pc.TokenKey, pc.HECTokens[0].Token, hecSecret) ||
		!fsm.TokenMatches(pc.TokenKey, pc.SearchTokens[0].Token, searchSecret) || !fsm.TokenMatches(pc.TokenKey, pc.AdminTokenDigest, testToken) ||
		fsm.TokenMatches(pc.TokenKey, pc.HECTokens[0].Token, searchSecret) || fsm.TokenMatches(pc.TokenKey, pc.AdminTokenDigest, hecSecret) {
		t.Fatalf("the peers' config cannot check its tokens: %s", pb)
	}

	// An older peer or search head (its config request without
	// keyed_digests, mid rolling upgrade) is sent the unkeyed digests it
	// can check and no key, under the same config id.
	var old api.PeerConfig
	l.Read(func(s *fsm.State) { old = l.peerConfigFor(s, false) })
	if old.ID != pc.ID || old.TokenKey != nil || len(old.HECTokens) != 1 || old.HECTokens[0].Token != fsm.TokenDigest(hecSecret) ||
		old.SearchTokens[0].Token != fsm.TokenDigest(searchSecret) || old.AdminTokenDigest != fsm.TokenDigest(testToken) {
		t.Fatalf("an older build's config: %+v, want the unkeyed digests under id %s", old, pc.ID)
	}

	// Round trip: what GET answered, edited, posted back, keeps the secrets;
	// so does a config read before the cluster had its key (unkeyed).
	for _, form := range []string{"keyed", "unkeyed"} {
		var back fsm.Config
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if form == "unkeyed" {
			back.HECTokens[0].Token, back.SearchTokens[0].Token = fsm.TokenDigest(hecSecret), fsm.TokenDigest(searchSecret)
		}
		back.HeartbeatTimeout = 3 * time.Second
		if form == "unkeyed" {
			back.HeartbeatTimeout = 5 * time.Second
		}
		if err := c.do(ctxT(t), http.MethodPost, "/v1/config", back, nil); err != nil {
			t.Fatalf("POST back what GET answered (%s): %v", form, err)
		}
		got := committed()
		if got.HeartbeatTimeout != back.HeartbeatTimeout || len(got.HECTokens) != 1 || got.HECTokens[0].Token != hecSecret || len(got.SearchTokens) != 1 || got.SearchTokens[0].Token != searchSecret {
			t.Fatalf("after the %s round trip: %+v %+v %v", form, got.HECTokens, got.SearchTokens, got.HeartbeatTimeout)
		}
	}

	// A digest of no token of the cluster: 400 bad_config, nothing changed.
	before := committed()
	for _, d := range []string{fsm.TokenDigest("not-a-token-of-ours"), fsm.KeyedDigest(key, "not-a-token-of-ours")} {
		var forged fsm.Config
		if err := json.Unmarshal(raw, &forged); err != nil {
			t.Fatal(err)
		}
		forged.HeartbeatTimeout = 4 * time.Second
		forged.HECTokens = []fsm.HECToken{{Token: d, Ack: true}}
		body, _ := json.Marshal(forged)
		code, resp := post(t, noRedirect, "http://"+l.HTTPAddr()+"/v1/config", testToken, string(body))
		if code != http.StatusBadRequest || !strings.Contains(resp, `"bad_config"`) {
			t.Fatalf("POST an unknown digest: %d %s, want 400 bad_config", code, resp)
		}
		if after := committed(); !reflect.DeepEqual(before, after) {
			t.Fatalf("a refused config changed the committed one: %+v -> %+v", before, after)
		}
	}
}

// waitTokenKey waits until m's committed state holds the cluster's token
// key (the leader proposes it once the cluster version allows) and
// returns it.
func waitTokenKey(t testing.TB, m *Manager) []byte {
	t.Helper()
	var key []byte
	testutil.WaitFor(t, 10*time.Second, func() error {
		m.Read(func(s *fsm.State) { key = fsm.TokenKeyOf(s) })
		if key == nil {
			return fmt.Errorf("no token key yet")
		}
		return nil
	})
	return key
}

// TestOlderPeerGetsUnkeyedDigests (review L1, rolling upgrade): over the
// bus, a registration or config request that leaves keyed_digests out — a
// peer of a build before the token key — is answered with the unkeyed
// digests it can check and no key; one that sets it gets the keyed ones
// and the key; both under the same config id.
func TestOlderPeerGetsUnkeyedDigests(t *testing.T) {
	b := startTestBus(t, "p1")
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	key := waitTokenKey(t, g.leader())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p1 := newFakePeer(t, b, "p1")
	reg := func(keyed bool) api.PeerConfig {
		r, err := p1.cli.Register(ctx, api.Register{RequestID: fmt.Sprintf("reg-%v", keyed), Peer: "p1", GUID: p1.guid, Site: "site1", KeyedDigests: keyed})
		if err != nil {
			t.Fatal(err)
		}
		return r.Config
	}
	old, cur := reg(false), reg(true)
	if old.TokenKey != nil || old.AdminTokenDigest != fsm.TokenDigest(testToken) {
		t.Fatalf("an older peer's registration: key %v, admin digest %q; want no key and the unkeyed digest", old.TokenKey, old.AdminTokenDigest)
	}
	if !bytes.Equal(cur.TokenKey, key) || cur.AdminTokenDigest != fsm.KeyedDigest(key, testToken) || cur.ID != old.ID {
		t.Fatalf("a current peer's registration: key %v, admin digest %q, id %s (older's %s)", cur.TokenKey, cur.AdminTokenDigest, cur.ID, old.ID)
	}
	subj, err := b.subj.MgrOp(api.OpConfig, "p1")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := bus.Request[api.ConfigRequest, api.PeerConfig](ctx, p1.nc, subj, api.ConfigRequest{V: api.WireVersion, Peer: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	if pc.TokenKey != nil || pc.AdminTokenDigest != fsm.TokenDigest(testToken) || pc.ID != old.ID {
		t.Fatalf("an older peer's config request: key %v, admin digest %q, id %s", pc.TokenKey, pc.AdminTokenDigest, pc.ID)
	}
}
