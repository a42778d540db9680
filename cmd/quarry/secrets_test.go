package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/searchhead"
)

// clearSecretEnv unsets the QUARRY_* variables of secret flags for one
// test, so the caller's environment does not leak in.
func clearSecretEnv(t *testing.T) {
	t.Helper()
	for _, name := range []string{"token", "admin-token", "read-token", "hec-token", "search-token", "nats-password"} {
		for _, v := range []string{envVars(name)[0], envVars(name + "-file")[0]} {
			if old, ok := os.LookupEnv(v); ok {
				os.Unsetenv(v)
				t.Cleanup(func() { os.Setenv(v, old) })
			}
		}
	}
}

// secretFile writes content to a file of the test's temp dir.
func secretFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runPeerFlags parses `quarry peer ARGS` through the app's command tree
// and returns the config the peer would start with.
func runPeerFlags(t *testing.T, args ...string) (peer.Config, error) {
	t.Helper()
	cmd := peerCommand()
	var got peer.Config
	var cfgErr error
	cmd.Action = func(c *cli.Context) error {
		got, cfgErr = peerConfig(c)
		return nil
	}
	app := &cli.App{Name: "quarry", Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	if err := app.Run(append([]string{"quarry", "peer"}, args...)); err != nil {
		return got, err
	}
	return got, cfgErr
}

func runSearchheadFlags(t *testing.T, args ...string) (searchhead.Config, error) {
	t.Helper()
	cmd := searchheadCommand()
	var got searchhead.Config
	var cfgErr error
	cmd.Action = func(c *cli.Context) error {
		got, cfgErr = searchheadConfig(c)
		return nil
	}
	app := &cli.App{Name: "quarry", Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	if err := app.Run(append([]string{"quarry", "searchhead"}, args...)); err != nil {
		return got, err
	}
	return got, cfgErr
}

// TestSecretFilesPeer: a standalone peer's --admin-token-file,
// --hec-token-file (one token spec per line, --hec-token's syntax) and
// --search-token-file, and a cluster peer's --token-file and
// --nats-password-file; the trailing newline is trimmed; a file named by
// QUARRY_<FLAG>_FILE works too.
func TestSecretFilesPeer(t *testing.T) {
	clearSecretEnv(t)
	cfg, err := runPeerFlags(t, "--id", "p1", "--data-dir", "/d",
		"--admin-token-file", secretFile(t, "admin", "s3cret admin\n"),
		"--hec-token-file", secretFile(t, "hec", "h1=main,web\n\n  h2:useack=false  \r\n"),
		"--search-token-file", secretFile(t, "search", "s1=web\ns2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminToken != "s3cret admin" {
		t.Fatalf("admin token %q, want the file's line without its newline", cfg.AdminToken)
	}
	var hec []string
	for _, tk := range cfg.Tokens {
		hec = append(hec, tk.Value+"="+strings.Join(tk.Indexes, ","))
	}
	if strings.Join(hec, " ") != "h1=main,web h2=" || cfg.Tokens[0].Ack != true || cfg.Tokens[1].Ack != false {
		t.Fatalf("hec tokens %v (%+v)", hec, cfg.Tokens)
	}
	if len(cfg.SearchTokens) != 2 || cfg.SearchTokens[0].Token != "s1" || strings.Join(cfg.SearchTokens[0].Indexes, ",") != "web" || cfg.SearchTokens[1].Token != "s2" {
		t.Fatalf("search tokens %+v", cfg.SearchTokens)
	}

	t.Setenv("QUARRY_TOKEN_FILE", secretFile(t, "mgr", "mgr-admin\r\n"))
	cfg, err = runPeerFlags(t, "--id", "p1", "--data-dir", "/d", "--nats", "nats://127.0.0.1:4222", "--nats-user", "p1",
		"--nats-password-file", secretFile(t, "nats", "pw\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ManagerToken != "mgr-admin" || cfg.NATSPassword != "pw" {
		t.Fatalf("cluster peer: token %q, nats password %q", cfg.ManagerToken, cfg.NATSPassword)
	}
}

// TestSecretFilesManagerAndSearchHead: the manager's --admin-token-file,
// --hec-token-file, --search-token-file and --nats-password-file, and the
// search head's --admin-token-file and --nats-password-file.
func TestSecretFilesManagerAndSearchHead(t *testing.T) {
	clearSecretEnv(t)
	t.Setenv("QUARRY_INDEX", "")
	cfg, err := runManagerFlags(t, "--id", "m1", "--data-dir", "/d",
		"--admin-token-file", secretFile(t, "admin", "madmin\n"),
		"--read-token-file", secretFile(t, "read", "mread\n"),
		"--hec-token-file", secretFile(t, "hec", "t1=main\nt2:useack=false\n"),
		"--search-token-file", secretFile(t, "search", "st=main\n"),
		"--nats-password-file", secretFile(t, "nats", "npw"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminToken != "madmin" || cfg.ReadToken != "mread" || cfg.NATSPassword != "npw" {
		t.Fatalf("admin token %q, read token %q, nats password %q", cfg.AdminToken, cfg.ReadToken, cfg.NATSPassword)
	}
	var toks []string
	for _, tk := range cfg.Seed.HECTokens {
		toks = append(toks, tk.Token)
	}
	if strings.Join(toks, ",") != "t1,t2" || len(cfg.Seed.SearchTokens) != 1 || cfg.Seed.SearchTokens[0].Token != "st" {
		t.Fatalf("seed hec tokens %v, search tokens %+v", toks, cfg.Seed.SearchTokens)
	}
	sh, err := runSearchheadFlags(t, "--id", "sh1", "--site", "site1",
		"--admin-token-file", secretFile(t, "admin", "shadmin\n"), "--nats-password-file", secretFile(t, "nats", "shpw\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sh.AdminToken != "shadmin" || sh.NATSPassword != "shpw" {
		t.Fatalf("search head admin token %q, nats password %q", sh.AdminToken, sh.NATSPassword)
	}
}

// TestSecretFilesRefused: a flag and its file together (from flags or the
// environment), an empty file, a missing file and a two-line single
// secret are each refused with a line naming the flag.
func TestSecretFilesRefused(t *testing.T) {
	clearSecretEnv(t)
	admin := secretFile(t, "admin", "a\n")
	base := []string{"--id", "p1", "--data-dir", "/d", "--hec-token", "h"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"flag and file", nil, []string{"--admin-token", "a", "--admin-token-file", admin}, "--admin-token and --admin-token-file exclude each other"},
		{"env and file", map[string]string{"QUARRY_ADMIN_TOKEN": "a"}, []string{"--admin-token-file", admin}, "--admin-token and --admin-token-file exclude each other"},
		{"flag and env file", map[string]string{"QUARRY_ADMIN_TOKEN_FILE": admin}, []string{"--admin-token", "a"}, "exclude each other"},
		{"hec flag and file", nil, []string{"--hec-token-file", secretFile(t, "hec", "x\n")}, "--hec-token and --hec-token-file exclude each other"},
		{"search flag and file", nil, []string{"--search-token", "s", "--search-token-file", secretFile(t, "s", "x\n")}, "--search-token and --search-token-file"},
		{"token flag and file", nil, []string{"--token", "t", "--token-file", admin}, "--token and --token-file"},
		{"nats password flag and file", nil, []string{"--nats-password", "p", "--nats-password-file", admin}, "--nats-password and --nats-password-file"},
		{"empty file", nil, []string{"--admin-token-file", secretFile(t, "empty", "\n")}, "--admin-token-file"},
		{"missing file", nil, []string{"--admin-token-file", filepath.Join(t.TempDir(), "nope")}, "--admin-token-file"},
		{"two lines", nil, []string{"--admin-token-file", secretFile(t, "two", "a\nb\n")}, "more than one line"},
		{"bad hec line", nil, nil, "--hec-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append(append([]string{}, base...), tc.args...)
			if tc.name == "bad hec line" {
				args = []string{"--id", "p1", "--data-dir", "/d", "--hec-token-file", secretFile(t, "bad", "ok\n=x\n")}
			}
			_, err := runPeerFlags(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: %v, want an error containing %q", args, err, tc.want)
			}
		})
	}
	if _, err := runManagerFlags(t, "--id", "m1", "--data-dir", "/d", "--admin-token", "x", "--admin-token-file", admin); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("manager --admin-token with --admin-token-file: %v", err)
	}
}

// TestTokenFileAdminAndSearchCLI: the admin commands' and quarry search's
// --token-file is what they send as the bearer token.
func TestTokenFileAdminAndSearchCLI(t *testing.T) {
	clearSecretEnv(t)
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/maintenance":
			json.NewEncoder(w).Encode(map[string]any{"maintenance": true})
		case "/v1/status":
			json.NewEncoder(w).Encode(fsm.Status{Maintenance: true})
		default:
			json.NewEncoder(w).Encode(map[string]any{"results": []any{}, "summary": map[string]any{}})
		}
	}))
	defer srv.Close()
	tok := secretFile(t, "tok", "from-file\n")
	app := newApp()
	if err := app.Run([]string{"quarry", "maintenance", "enable", "--manager", srv.URL, "--token-file", tok, "--output", "json"}); err != nil {
		t.Fatalf("maintenance enable --token-file: %v", err)
	}
	if _, err := runCLI(t, "--peer", srv.URL, "--token-file", tok, "--output", "json", "error"); err != nil {
		t.Fatalf("search --token-file: %v", err)
	}
	if _, err := runCLI(t, "--peer", srv.URL, "--token", "x", "--token-file", tok, "error"); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("search --token with --token-file: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || !strings.HasPrefix(seen[0], "POST /v1/maintenance Bearer from-file") || seen[1] != "POST /v1/search Bearer from-file" {
		t.Fatalf("requests %q, want the maintenance write and the search with Bearer from-file", seen)
	}
}

// TestSecretFilesBus (security review L7): `quarry bus` takes its admin
// password from --password-file and its role users from --role-user-file
// (one ROLE=NAME:PASSWORD per line), so neither shows in ps; a flag with its
// file twin is refused. --print-auth-config shows what the node would run
// with.
func TestSecretFilesBus(t *testing.T) {
	for _, v := range []string{"password", "role-user"} {
		for _, e := range []string{envVars(v)[0], envVars(v + "-file")[0]} {
			t.Setenv(e, "")
			os.Unsetenv(e)
		}
	}
	run := func(args ...string) (string, error) {
		return runCommand(busCommand(), append([]string{"--name", "n1", "--site", "site1", "--user", "admin", "--print-auth-config"}, args...)...)
	}
	out, err := run("--password-file", secretFile(t, "pw", "bus-admin-pw\n"),
		"--role-user-file", secretFile(t, "users", "peer/site1/p1=p1:p1-secret\n\nsearchhead/sh1=sh1:sh1-secret\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bus-admin-pw", "p1-secret", "sh1-secret"} {
		if !strings.Contains(out, want) {
			t.Fatalf("auth config lacks %q read from the files:\n%s", want, out)
		}
	}
	if _, err := run("--password", "x", "--password-file", secretFile(t, "pw2", "y\n")); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("--password with --password-file: %v, want refused", err)
	}
	if _, err := run("--role-user", "manager=m1:a", "--role-user-file", secretFile(t, "u2", "manager=m2:b\n")); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("--role-user with --role-user-file: %v, want refused", err)
	}
}
