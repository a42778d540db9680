package manager

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

func TestParseRetentionPeriod(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"", 0, ""},
		{"0", 0, ""},
		{"90d", 90 * 24 * time.Hour, ""},
		{"2w", 14 * 24 * time.Hour, ""},
		{"720h", 720 * time.Hour, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"86400", 24 * time.Hour, ""},
		{" 7d ", 7 * 24 * time.Hour, ""},
		{"-1h", 0, "negative"},
		{"-3d", 0, "whole number"},
		{"1.5d", 0, "whole number"},
		{"d", 0, "whole number"},
		{"forever", 0, "not a duration"},
		{"10y", 0, "not a duration"},
		{"99999999999999999d", 0, "too large"},
		{"99999999999999999999", 0, "whole number"},
	} {
		got, err := ParseRetentionPeriod(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseRetentionPeriod(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "frozen_time_period") {
			t.Errorf("ParseRetentionPeriod(%q) = %v, %v; want an error naming frozen_time_period and %q", tc.in, got, err, tc.err)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true},
		{"0", 0, true},
		{"1048576", 1 << 20, true},
		{"10KB", 10 << 10, true},
		{"10kib", 10 << 10, true},
		{"500MB", 500 << 20, true},
		{"2 GB", 2 << 30, true},
		{"1TiB", 1 << 40, true},
		{"3g", 3 << 30, true},
		{"12b", 12, true},
		{"-1", 0, false},
		{"1.5GB", 0, false},
		{"GB", 0, false},
		{"ten", 0, false},
		{"10PB", 0, false},
		{"9999999999TB", 0, false},
	} {
		got, err := ParseByteSize(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestTokenID(t *testing.T) {
	id := TokenID("hec-secret")
	if !IsTokenID(id) || len(id) != 16 || id != TokenID("hec-secret") || id == TokenID("hec-secreT") {
		t.Fatalf("TokenID(hec-secret) = %q", id)
	}
	for _, s := range []string{"", "hec-secret", strings.ToUpper(id), id + "0", "0123456789abcdeg"} {
		if IsTokenID(s) {
			t.Errorf("IsTokenID(%q) = true", s)
		}
	}
}

// configOf is the committed config of m.
func configOf(m *Manager) fsm.Config {
	var c fsm.Config
	m.Read(func(s *fsm.State) { c = s.Config() })
	return c
}

// TestAdminAPIIndexesAndTokens: index and token objects through a
// follower (writes follow its 307 to the leader, DELETE included), the
// rules that refuse bad input with a stable code and leave the config
// unchanged, secrets kept out of listings, and concurrent edits from two
// clients that all land (none lost to another's read-modify-write).
func TestAdminAPIIndexesAndTokens(t *testing.T) {
	g := newGroup(t, 3, nil)
	l := g.leader()
	var follower *Manager
	for _, m := range g.ms {
		if m != l {
			follower = m
		}
	}
	cl, err := NewClient([]string{"http://" + follower.HTTPAddr()}, testToken, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := waitTokenKey(t, l)

	v, err := cl.AddIndex(ctx, IndexRequest{Name: "web", FrozenTimePeriod: "30d", MaxTotalBytes: 1 << 30, MaxDataSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "web" || !v.Declared || v.FrozenTimePeriod != (720*time.Hour).String() || v.MaxTotalBytes != 1<<30 || v.MaxDataSize != 8<<20 {
		t.Fatalf("added index %+v", v)
	}
	hec, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindHEC, Indexes: []string{"web"}, UseAck: new(bool)})
	if err != nil {
		t.Fatal(err)
	}
	// Ids are keyed once the cluster has its token key (review L1): no
	// listing is an offline oracle for the unkeyed SHA-256 of a secret.
	if len(hec.Token) != 48 || hec.ID != KeyedTokenID(key, hec.Token) || hec.ID == TokenID(hec.Token) || hec.DefaultIndex != "web" || hec.UseAck == nil || *hec.UseAck {
		t.Fatalf("added hec token %+v", hec)
	}
	srch, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindSearch, Token: "search-secret-1", Indexes: []string{"main"}})
	if err != nil || srch.Token != "search-secret-1" {
		t.Fatalf("added search token %+v, %v", srch, err)
	}
	cfg := configOf(l)
	if n := len(cfg.HECTokens); n != 1 || cfg.HECTokens[0].Token != hec.Token || cfg.HECTokens[0].Ack || len(cfg.SearchTokens) != 1 {
		t.Fatalf("committed tokens %+v %+v", cfg.HECTokens, cfg.SearchTokens)
	}

	// Listings name tokens by id and prefix; the secret only when asked.
	// (A follower answers reads from what it has applied: wait for it.)
	var list []TokenView
	testutil.WaitFor(t, 10*time.Second, func() error {
		list, err = cl.Tokens(ctx)
		if err != nil || len(list) != 2 {
			return fmt.Errorf("tokens %+v, %v", list, err)
		}
		return nil
	})
	for _, tv := range list {
		if tv.Token != "" || strings.Contains(tv.Prefix, hec.Token) || len(tv.Prefix) > 8 {
			t.Fatalf("listing shows a secret: %+v", tv)
		}
		if tv.ID != hec.ID && tv.ID != KeyedTokenID(key, "search-secret-1") {
			t.Fatalf("listing's id %s is not a keyed id", tv.ID)
		}
	}
	// No read shows a secret (SPEC §7): ?reveal is refused.
	var ae *APIError
	if err := cl.do(ctx, "GET", "/v1/tokens?reveal=true", nil, nil); !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("tokens with reveal: %v, want a 400", err)
	}
	anon, _ := NewClient([]string{"http://" + follower.HTTPAddr()}, "", 5*time.Second)
	if _, err := anon.Tokens(ctx); !errors.As(err, &ae) || ae.Code != "unauthorized" {
		t.Fatalf("token list without the admin token: %v", err)
	}
	if _, err := anon.AddIndex(ctx, IndexRequest{Name: "sneaky"}); !errors.As(err, &ae) || ae.Code != "unauthorized" {
		t.Fatalf("index add without the admin token: %v", err)
	}

	// Bad input: a clear error, a stable code, nothing changed.
	before := configOf(l)
	for _, tc := range []struct {
		name string
		call func() error
		code string
		want string
	}{
		{"duplicate index", func() error { _, err := cl.AddIndex(ctx, IndexRequest{Name: "web"}); return err }, "index_exists", `"web"`},
		{"main again", func() error { _, err := cl.AddIndex(ctx, IndexRequest{Name: "main"}); return err }, "index_exists", `"main"`},
		{"bad index name", func() error { _, err := cl.AddIndex(ctx, IndexRequest{Name: "Bad Name"}); return err }, "bad_config", "Bad Name"},
		{"bad period", func() error {
			_, err := cl.AddIndex(ctx, IndexRequest{Name: "x", FrozenTimePeriod: "soon"})
			return err
		}, "bad_request", "soon"},
		{"negative size", func() error { _, err := cl.AddIndex(ctx, IndexRequest{Name: "x", MaxTotalBytes: -1}); return err }, "bad_request", "max_total_bytes"},
		{"remove unknown", func() error { return cl.RemoveIndex(ctx, "nope") }, "unknown_index", `"nope"`},
		{"remove main", func() error { return cl.RemoveIndex(ctx, "main") }, "index_in_use", "main"},
		{"remove used", func() error { return cl.RemoveIndex(ctx, "web") }, "index_in_use", hec.ID},
		{"token unknown index", func() error {
			_, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindHEC, Indexes: []string{"ghost"}})
			return err
		}, "unknown_index", `"ghost"`},
		{"search token unknown index", func() error {
			_, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindSearch, Indexes: []string{"web", "ghost"}})
			return err
		}, "unknown_index", `"ghost"`},
		{"default index outside", func() error {
			_, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindHEC, Indexes: []string{"web"}, DefaultIndex: "main"})
			return err
		}, "bad_config", "default index"},
		{"duplicate token", func() error {
			_, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindHEC, Token: "search-secret-1"})
			return err
		}, "token_exists", "search token"},
		{"short token", func() error { _, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindHEC, Token: "abc"}); return err }, "bad_request", "8 to 256"},
		{"bad kind", func() error { _, err := cl.AddToken(ctx, TokenRequest{Kind: "admin"}); return err }, "bad_request", "admin"},
		{"ack on search", func() error {
			_, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindSearch, UseAck: new(bool)})
			return err
		}, "bad_request", "use_ack"},
		{"revoke unknown", func() error { _, err := cl.RevokeToken(ctx, TokenID("never")); return err }, "unknown_token", TokenID("never")},
	} {
		err := tc.call()
		if !errors.As(err, &ae) || ae.Code != tc.code || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("%s: %v; want code %s naming %s", tc.name, err, tc.code, tc.want)
		}
	}
	if after := configOf(l); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused edits changed the config:\n%+v\n%+v", before, after)
	}

	// Revoke by id, then the index is free to go.
	if res, err := cl.RevokeToken(ctx, hec.ID); err != nil || !reflect.DeepEqual(res.Kinds, []string{TokenKindHEC}) || res.Warning != "" {
		t.Fatalf("revoke %s: %+v %v", hec.ID, res, err)
	}
	if err := cl.RemoveIndex(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		ixs, err := cl.Indexes(ctx)
		// The cluster still knows web (buckets could hold it), undeclared.
		if err != nil || len(ixs) != 2 || ixs[0].Name != "main" || ixs[1].Name != "web" || ixs[1].Declared {
			return fmt.Errorf("indexes after remove: %+v %v", ixs, err)
		}
		return nil
	})
	// By the unkeyed id the CLI computes from a secret it is given.
	if res, err := cl.RevokeToken(ctx, TokenID(srch.Token)); err != nil || res.Warning != NoSearchTokensWarning || res.Revoked != srch.ID {
		t.Fatalf("revoke the last search token %s by its unkeyed id: %+v %v; want the warning", srch.ID, res, err)
	}
	g.eventually(10*time.Second, func(id string, m *Manager) error {
		c := configOf(m)
		if len(c.HECTokens) != 0 || len(c.SearchTokens) != 0 || len(c.Indexes) != 1 {
			return fmt.Errorf("config %+v", c)
		}
		return nil
	})

	// Two admins editing at once, through different managers: every change lands.
	cl2, _ := NewClient([]string{"http://" + l.HTTPAddr()}, testToken, 5*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 8; i++ {
		for j, c := range []*Client{cl, cl2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.AddIndex(ctx, IndexRequest{Name: fmt.Sprintf("ix%d-%d", j, i)}); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(configOf(l).Indexes); n != 17 {
		t.Fatalf("%d indexes after 16 concurrent adds to main, want 17", n)
	}
}

// TestAdminAPISearchTokenPublish: POST /v1/tokens takes a search token's
// publish names once the group is at fsm.PublishScopeVersion, lists them,
// and refuses them on a HEC token and malformed ones (nothing added).
func TestAdminAPISearchTokenPublish(t *testing.T) {
	g := newGroup(t, 1, nil)
	cl, err := NewClient([]string{"http://" + g.leader().HTTPAddr()}, testToken, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if v := g.leader().ClusterVersion(); v < fsm.PublishScopeVersion {
			return fmt.Errorf("cluster version %d", v)
		}
		return nil
	})
	v, err := cl.AddToken(ctx, TokenRequest{Kind: TokenKindSearch, Publish: []string{"nightly", "team-a.*"}})
	if err != nil || strings.Join(v.Publish, ",") != "nightly,team-a.*" {
		t.Fatalf("search token with publish names: %+v, %v", v, err)
	}
	for _, req := range []TokenRequest{
		{Kind: TokenKindHEC, Publish: []string{"nightly"}},
		{Kind: TokenKindSearch, Publish: []string{"bad name"}},
	} {
		var ae *APIError
		if _, err := cl.AddToken(ctx, req); !errors.As(err, &ae) || ae.Status != 400 {
			t.Fatalf("%+v: %v, want 400", req, err)
		}
	}
	toks, err := cl.Tokens(ctx)
	if err != nil || len(toks) != 1 || strings.Join(toks[0].Publish, ",") != "nightly,team-a.*" {
		t.Fatalf("tokens %+v, %v: want the one search token with its publish names", toks, err)
	}
}
