package main

import (
	"bytes"
	"crypto/x509"
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

// TestTLSGen: `quarry tls gen` writes a CA and one certificate per role
// for the hosts (each carrying its role only: no all-roles certificate),
// keeps a complete folder (the demo runs it at every start), replaces it
// with --force, and refuses a partial one or an older quarry's single
// cert.pem; --roles picks a subset.
func TestTLSGen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "127.0.0.1,localhost", "--hosts", "m1"); err != nil {
		t.Fatal(err)
	}
	for _, r := range tlsconfig.AllRoles {
		f := tlsconfig.FilesIn(dir, r)
		if err := f.Check(); err != nil {
			t.Fatal(err)
		}
		if got := tlsconfig.Roles(mustLeaf(t, f)); len(got) != 1 || got[0] != r {
			t.Fatalf("%s certificate carries roles %q", r, got)
		}
	}
	ca, _ := os.ReadFile(filepath.Join(dir, tlsconfig.CAFile))
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "other"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, tlsconfig.CAFile)); !bytes.Equal(ca, again) {
		t.Fatal("a complete folder was not kept")
	}
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "localhost", "--force"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, tlsconfig.CAFile)); bytes.Equal(ca, again) {
		t.Fatal("--force kept the CA")
	}
	os.Remove(tlsconfig.FilesIn(dir, tlsconfig.RolePeer).Key)
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "localhost"); err == nil || !strings.Contains(err.Error(), "some files but not all") {
		t.Fatalf("partial folder: %v", err)
	}
	// --roles: only those; the manager and bus alone of this folder are complete.
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "localhost", "--roles", "manager,bus"); err != nil {
		t.Fatalf("manager and bus of a folder without the peer key: %v", err)
	}
	sub := filepath.Join(t.TempDir(), "sub")
	if err := runQuarry("tls", "gen", "--dir", sub, "--hosts", "localhost", "--roles", "peer", "--roles", "searchhead"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := tlsconfig.Existing(sub, tlsconfig.RolePeer, tlsconfig.RoleSearchHead); !ok || err != nil {
		t.Fatalf("--roles peer,searchhead: %v %v", ok, err)
	}
	if _, err := os.Stat(tlsconfig.FilesIn(sub, tlsconfig.RoleManager).Cert); err == nil {
		t.Fatal("--roles peer,searchhead wrote a manager certificate")
	}
	if err := runQuarry("tls", "gen", "--dir", sub, "--hosts", "localhost", "--roles", "manager"); err == nil || !strings.Contains(err.Error(), "some files but not all") {
		t.Fatalf("adding a role to an existing CA: %v", err)
	}
	if err := runQuarry("tls", "gen", "--dir", t.TempDir(), "--hosts", "localhost", "--roles", "admin"); err == nil || !strings.Contains(err.Error(), `"admin"`) {
		t.Fatalf("unknown role: %v", err)
	}
	// The folder of an older quarry (ca.pem, cert.pem, key.pem): refused
	// with a message that says so; --force replaces it.
	old := t.TempDir()
	for _, name := range []string{tlsconfig.CAFile, tlsconfig.CertFile, tlsconfig.KeyFile} {
		os.WriteFile(filepath.Join(old, name), []byte("old"), 0o600)
	}
	if err := runQuarry("tls", "gen", "--dir", old, "--hosts", "localhost"); err == nil || !strings.Contains(err.Error(), "older quarry") {
		t.Fatalf("older folder: %v", err)
	}
	if err := runQuarry("tls", "gen", "--dir", old, "--hosts", "localhost", "--force"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := tlsconfig.Existing(old); !ok || err != nil {
		t.Fatalf("older folder after --force: %v %v", ok, err)
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
		"--tls-cert", "/certs/manager/cert.pem", "--tls-key", "/certs/manager/key.pem")
	if err != nil {
		t.Fatal(err)
	}
	if want := (tlsconfig.Files{Cert: "/certs/manager/cert.pem", Key: "/certs/manager/key.pem", CA: "/certs/ca.pem"}); cfg.TLS != want {
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
	files, err := tlsconfig.GenerateRoles(t.TempDir(), []string{"127.0.0.1"}, 0, tlsconfig.RolePeer)
	if err != nil {
		t.Fatal(err)
	}
	f := files[tlsconfig.RolePeer]
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

func mustLeaf(t *testing.T, f tlsconfig.Files) *x509.Certificate {
	t.Helper()
	c, err := f.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLSGenProcesses: `quarry tls gen --process NAME:ROLE` writes one
// certificate per process (process/NAME/, CN NAME, the role's OU) and no
// role certificate unless --roles names one; a complete folder is kept,
// a bad process is refused naming it.
func TestTLSGenProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "localhost", "--process", "m1:manager,p1:peer", "--process", "sh1:searchhead"); err != nil {
		t.Fatal(err)
	}
	for name, role := range map[string]string{"m1": tlsconfig.RoleManager, "p1": tlsconfig.RolePeer, "sh1": tlsconfig.RoleSearchHead} {
		leaf := mustLeaf(t, tlsconfig.ProcessFiles(dir, name))
		if leaf.Subject.CommonName != name || len(tlsconfig.Roles(leaf)) != 1 || tlsconfig.Roles(leaf)[0] != role {
			t.Fatalf("%s: CN %q roles %q", name, leaf.Subject.CommonName, tlsconfig.Roles(leaf))
		}
	}
	if _, err := os.Stat(tlsconfig.FilesIn(dir, tlsconfig.RolePeer).Cert); err == nil {
		t.Fatal("a role certificate without --roles")
	}
	ca, _ := os.ReadFile(filepath.Join(dir, tlsconfig.CAFile))
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "localhost", "--process", "m1:manager,p1:peer,sh1:searchhead"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, tlsconfig.CAFile)); !bytes.Equal(ca, again) {
		t.Fatal("a complete folder was not kept")
	}
	if err := runQuarry("tls", "gen", "--dir", dir, "--hosts", "localhost", "--process", "m1:manager,p2:peer"); err == nil || !strings.Contains(err.Error(), "some files but not all") {
		t.Fatalf("a process added to an existing CA: %v", err)
	}
	if err := runQuarry("tls", "gen", "--dir", t.TempDir(), "--hosts", "localhost", "--process", "p1:admin"); err == nil || !strings.Contains(err.Error(), `"admin"`) {
		t.Fatalf("unknown role: %v", err)
	}
}
