package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

func runQuarry(args ...string) error {
	return newApp().Run(append([]string{"quarry"}, args...))
}

// TestTLSGen: `quarry tls gen` writes a CA and a certificate for the hosts,
// keeps a complete folder (the demo runs it at every start), replaces it
// with --force, and refuses a partial one.
func TestTLSGen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "127.0.0.1,localhost", "--hosts", "m1"); err != nil {
		t.Fatal(err)
	}
	f := tlsconfig.FilesIn(dir)
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(f.CA)
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "other"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(f.CA); !bytes.Equal(ca, again) {
		t.Fatal("a complete folder was not kept")
	}
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "localhost", "--force"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(f.CA); bytes.Equal(ca, again) {
		t.Fatal("--force kept the CA")
	}
	os.Remove(f.Key)
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "localhost"); err == nil || !strings.Contains(err.Error(), "some files but not all") {
		t.Fatalf("partial folder: %v", err)
	}
}

// TestTLSFlags: every server role takes --tls-cert/--tls-key/--tls-ca (also
// from QUARRY_TLS_*), every client command --tls-ca.
func TestTLSFlags(t *testing.T) {
	for _, cmd := range []*cli.Command{busCommand(), managerCommand(), peerCommand(), searchheadCommand()} {
		for _, name := range []string{"tls-cert", "tls-key", "tls-ca"} {
			if !hasFlag(cmd, name) {
				t.Errorf("quarry %s has no --%s", cmd.Name, name)
			}
		}
	}
	clients := []*cli.Command{searchCommand(), ingestCommand(), healthCommand(), clusterCommand().Subcommands[0], peersCommand().Subcommands[0]}
	for _, cmd := range clients {
		if !hasFlag(cmd, "tls-ca") {
			t.Errorf("quarry %s has no --tls-ca", cmd.Name)
		}
	}
	t.Setenv("QUARRY_TLS_CA", "/certs/ca.pem")
	cfg, err := runManagerFlags(t, "--id", "m1", "--data-dir", "/d", "--admin-token", "T",
		"--tls-cert", "/certs/cert.pem", "--tls-key", "/certs/key.pem")
	if err != nil {
		t.Fatal(err)
	}
	if want := (tlsconfig.Files{Cert: "/certs/cert.pem", Key: "/certs/key.pem", CA: "/certs/ca.pem"}); cfg.TLS != want {
		t.Fatalf("manager TLS %+v, want %+v", cfg.TLS, want)
	}
}

func hasFlag(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// TestTLSHealth: `quarry health` verifies an HTTPS server against --tls-ca
// and fails without it.
func TestTLSHealth(t *testing.T) {
	f, err := tlsconfig.Generate(t.TempDir(), []string{"127.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	if srv.TLS, err = f.Server(); err != nil {
		t.Fatal(err)
	}
	srv.StartTLS()
	defer srv.Close()
	if err := runQuarry("health", "--tls-ca", f.CA, srv.URL); err != nil {
		t.Fatalf("health with the CA: %v", err)
	}
	if err := runQuarry("health", srv.URL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("health without the CA: %v", err)
	}
	if err := runQuarry("health", "--tls-ca", filepath.Join(t.TempDir(), "none.pem"), srv.URL); err == nil || !strings.Contains(err.Error(), "none.pem") {
		t.Fatalf("health with a missing CA file: %v", err)
	}
}
