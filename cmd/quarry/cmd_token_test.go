package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/manager"
)

// mustStartManager starts one bootstrapped manager on loopback (no bus)
// and returns its HTTP URL; it closes at the end of the test.
func mustStartManager(t *testing.T) (string, *manager.Manager) {
	t.Helper()
	seed := fsm.DefaultConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := manager.New(ctx, manager.Config{ID: "m1", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		AdminToken: "admin-secret", Bootstrap: []manager.Server{{ID: "m1", RaftAddr: "127.0.0.1:0"}}, Seed: &seed,
		RaftLogLevel: "error", LogOutput: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for !m.IsLeader() || len(m.Members()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("manager m1 not leader within 20s")
		}
		time.Sleep(20 * time.Millisecond) // poll interval of the condition above
	}
	// Token ids are keyed once the cluster has its token key: wait for it,
	// so the ids a test expects (tokenIDOf) stay the same throughout.
	testutil.WaitFor(t, 20*time.Second, func() error {
		if tokenKeyOf(m) == nil {
			return fmt.Errorf("manager m1 has no token key yet")
		}
		return nil
	})
	return "http://" + m.HTTPAddr(), m
}

func tokenKeyOf(m *manager.Manager) []byte {
	var key []byte
	m.Read(func(s *fsm.State) { key = fsm.TokenKeyOf(s) })
	return key
}

// tokenIDOf is a secret's id as m lists it (manager.KeyedTokenID).
func tokenIDOf(m *manager.Manager, secret string) string {
	return manager.KeyedTokenID(tokenKeyOf(m), secret)
}

// runQuarry runs `quarry args…` in process and returns stdout, stderr and
// the error main would print.
func runInProcess(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.Run(append([]string{"quarry"}, args...))
	return out.String(), errOut.String(), err
}

// TestIndexAndTokenCommands: quarry index and quarry token against a
// running manager — table and JSON output, secrets only when asked, one
// clear error line for every refusal, nothing changed by a refusal.
func TestIndexAndTokenCommands(t *testing.T) {
	for _, v := range []string{"QUARRY_OUTPUT", "QUARRY_TIMEOUT", "QUARRY_TOKEN_FILE", "QUARRY_TLS_CA"} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	url, m := mustStartManager(t)
	t.Setenv("QUARRY_MANAGER", url)
	t.Setenv("QUARRY_TOKEN", "admin-secret")
	run := func(args ...string) string {
		t.Helper()
		out, _, err := runInProcess(t, args...)
		if err != nil {
			t.Fatalf("quarry %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	configOf := func() fsm.Config {
		var c fsm.Config
		m.Read(func(s *fsm.State) { c = s.Config() })
		return c
	}

	if out := run("index", "add", "web", "--frozen-time-period", "90d", "--max-total-bytes", "2GB", "--max-data-size", "64MB"); out != "index web added\n" {
		t.Fatalf("index add: %q", out)
	}
	cfg := configOf()
	if len(cfg.Indexes) != 2 || cfg.Indexes[1] != (fsm.IndexConfig{Name: "web", FrozenTimePeriod: 90 * 24 * time.Hour, MaxTotalBytes: 2 << 30, MaxDataSize: 64 << 20}) {
		t.Fatalf("indexes %+v", cfg.Indexes)
	}
	out := run("index", "list")
	if !strings.Contains(out, "INDEX") || !strings.Contains(out, "web    yes       2160h0m0s           2147483648       67108864") {
		t.Fatalf("index list:\n%s", out)
	}

	// A HEC token with its secret given, a generated search token.
	out = run("token", "add", "hec", "--indexes", "web", "--useack=false", "--value", "hec-token-0001", "--output", "json")
	var added struct{ Token manager.TokenView }
	if err := json.Unmarshal([]byte(out), &added); err != nil || added.Token.Token != "hec-token-0001" || added.Token.ID != tokenIDOf(m, "hec-token-0001") {
		t.Fatalf("token add json: %q %v", out, err)
	}
	// Per-token event defaults (issue 29 item 2).
	out = run("token", "add", "hec", "--sourcetype", "app_json", "--host", "web-7", "--value", "hec-token-0002", "--output", "json")
	if err := json.Unmarshal([]byte(out), &added); err != nil || added.Token.Sourcetype != "app_json" || added.Token.Host != "web-7" || added.Token.Source != "" {
		t.Fatalf("token add hec with defaults: %q %v", out, err)
	}
	run("token", "revoke", manager.TokenID("hec-token-0002"))
	out = run("token", "add", "search", "--indexes", "main,web")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "shown only now") || len(lines[1]) != 48 {
		t.Fatalf("token add search: %q", out)
	}
	searchSecret := lines[1]
	cfg = configOf()
	if len(cfg.HECTokens) != 1 || cfg.HECTokens[0].Ack || cfg.HECTokens[0].DefaultIndex != "web" || len(cfg.SearchTokens) != 1 || cfg.SearchTokens[0].Token != searchSecret {
		t.Fatalf("tokens %+v %+v", cfg.HECTokens, cfg.SearchTokens)
	}
	out = run("token", "list")
	if strings.Contains(out, "hec-token-0001") || strings.Contains(out, searchSecret) || !strings.Contains(out, tokenIDOf(m, "hec-token-0001")) || !strings.Contains(out, "hec-…") {
		t.Fatalf("token list shows a secret or misses the id:\n%s", out)
	}

	// Refusals: one line, non-nil error, config unchanged.
	before := configOf()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"index", "add", "web"}, "already declared"},
		{[]string{"index", "add", "x", "--frozen-time-period", "soon"}, `frozen_time_period "soon"`},
		{[]string{"index", "add", "x", "--max-total-bytes", "lots"}, `size "lots"`},
		{[]string{"index", "add", "x", "--max-data-size", "1KB"}, "max_data_size 1024"},
		{[]string{"index", "add"}, "want one index name"},
		{[]string{"index", "remove", "ghost"}, "no such declared index"},
		{[]string{"index", "remove", "web"}, "named by tokens"},
		{[]string{"token", "add", "hec", "--indexes", "ghost"}, `index "ghost", which is not declared`},
		{[]string{"token", "add", "search", "--useack=false"}, "--useack is a HEC token setting"},
		{[]string{"token", "add", "admin"}, "want hec or search"},
		{[]string{"token", "add", "hec", "--value", "hec-token-0001"}, "already a HEC token"},
		{[]string{"token", "revoke", "not-a-token-at-all"}, `no token with id or secret "not-…"`},
		{[]string{"token", "list", "--token", "wrong"}, "admin token"},
		{[]string{"index", "list", "--output", "yaml"}, "want table or json"},
	} {
		out, _, err := runInProcess(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("quarry %s: %v (stdout %q); want one line with %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	if after := configOf(); !jsonEqual(t, before, after) {
		t.Fatalf("refused commands changed the config")
	}

	// Revoke by secret and by id, then the index can go.
	if out := run("token", "revoke", "hec-token-0001"); out != "token "+tokenIDOf(m, "hec-token-0001")+" revoked (hec)\n" {
		t.Fatalf("revoke by secret: %q", out)
	}
	out, errOut, err := runInProcess(t, "token", "revoke", manager.TokenID(searchSecret))
	if err != nil || !strings.Contains(out, "revoked (search)") || !strings.Contains(errOut, "warning: no search token is left") {
		t.Fatalf("revoke the last search token: %q %q %v", out, errOut, err)
	}
	if out := run("index", "remove", "web"); !strings.HasPrefix(out, "index web removed") {
		t.Fatalf("index remove: %q", out)
	}
	out = run("index", "list", "--output", "json")
	var list struct{ Indexes []manager.IndexView }
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Indexes) != 2 || list.Indexes[1].Name != "web" || list.Indexes[1].Declared {
		t.Fatalf("index list json after remove: %s %v", out, err)
	}
	if cfg := configOf(); len(cfg.Indexes) != 1 || len(cfg.HECTokens)+len(cfg.SearchTokens) != 0 {
		t.Fatalf("config after revoke and remove: %+v", cfg)
	}

	// The secret from a file (not in ps); with --value too it is refused.
	f := t.TempDir() + "/tok"
	if err := os.WriteFile(f, []byte("file-token-0001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run("token", "add", "hec", "--value-file", f); !strings.Contains(out, "\nfile-token-0001\n") {
		t.Fatalf("token add --value-file: %q", out)
	}
	if cfg := configOf(); len(cfg.HECTokens) != 1 || cfg.HECTokens[0].Token != "file-token-0001" || !cfg.HECTokens[0].Ack {
		t.Fatalf("token from a file: %+v", cfg.HECTokens)
	}
	if _, _, err := runInProcess(t, "token", "add", "hec", "--value", "other-token-01", "--value-file", f); err == nil {
		t.Fatal("--value with --value-file accepted")
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestTokenAddPublishFlag: `quarry token add search --publish a,b.*` sends
// the publish names; on a HEC token the flag is refused (review L2).
func TestTokenAddPublishFlag(t *testing.T) {
	parse := func(args ...string) (manager.TokenRequest, error) {
		t.Helper()
		cmd := tokenCommand()
		var add *cli.Command
		for _, sc := range cmd.Subcommands {
			if sc.Name == "add" {
				add = sc
			}
		}
		var (
			req manager.TokenRequest
			err error
		)
		add.Action = func(c *cli.Context) error {
			req, err = tokenRequest(c, c.Args().First())
			return nil
		}
		app := &cli.App{Name: "quarry", Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
		if rerr := app.Run(append([]string{"quarry", "token", "add"}, args...)); rerr != nil {
			return req, rerr
		}
		return req, err
	}
	req, err := parse("--publish", "nightly, team-a.*", "search")
	if err != nil || strings.Join(req.Publish, ",") != "nightly,team-a.*" {
		t.Fatalf("search --publish: %+v, %v", req.Publish, err)
	}
	if req, err := parse("search"); err != nil || req.Publish != nil {
		t.Fatalf("search without --publish: %+v, %v; want no list (any name)", req.Publish, err)
	}
	if _, err := parse("--publish", "nightly", "hec"); err == nil || !strings.Contains(err.Error(), "search token setting") {
		t.Fatalf("hec --publish: %v, want refused", err)
	}
}
