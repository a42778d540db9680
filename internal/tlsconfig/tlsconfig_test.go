package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// mustGenerate is one certificate that carries every role (GenerateAllRoles).
func mustGenerate(t *testing.T, hosts ...string) Files {
	t.Helper()
	f, err := GenerateAllRoles(t.TempDir(), hosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// serve accepts TLS connections on 127.0.0.1 with cfg and completes each
// handshake; the handshake errors arrive on the channel.
func serve(t *testing.T, cfg *tls.Config) (string, <-chan error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	errs := make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			errs <- c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return ln.Addr().String(), errs
}

func TestTLSServerAndClient(t *testing.T) {
	f := mustGenerate(t, "127.0.0.1", "localhost")
	srv, err := f.Server()
	if err != nil || srv == nil {
		t.Fatalf("server config: %v %v", srv, err)
	}
	addr, _ := serve(t, srv)
	cli, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(addr, cli); err != nil {
		t.Fatalf("client with the CA refused: %v", err)
	}
	// Without the CA (system roots) and with another CA: x509 refusals.
	other, _ := mustGenerate(t, "127.0.0.1").Client()
	for name, cfg := range map[string]*tls.Config{"no CA": nil, "another CA": other} {
		err := dial(addr, cfg)
		var uerr x509.UnknownAuthorityError
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &uerr) && !errors.As(err, &verr) {
			t.Errorf("%s: want an x509 verification error, got %v", name, err)
		}
	}
	// The certificate names its hosts only.
	cfg := cli.Clone()
	cfg.ServerName = "elsewhere.example"
	var herr x509.HostnameError
	if err := dial(addr, cfg); !errors.As(err, &herr) {
		t.Errorf("wrong host name: want x509.HostnameError, got %v", err)
	}
}

func TestTLSMutual(t *testing.T) {
	f := mustGenerate(t, "127.0.0.1")
	m, err := f.Mutual(RoleManager)
	if err != nil {
		t.Fatal(err)
	}
	addr, errs := serve(t, m)
	if err := dial(addr, m); err != nil {
		t.Fatalf("mutual: %v", err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("mutual, server side: %v", err)
	}
	// A client that trusts the server but has no certificate: the server
	// refuses it.
	cli, _ := f.Client()
	dial(addr, cli)
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client without a certificate: server said %v", err)
	}
	// A client certificate of another CA: refused too.
	om, _ := mustGenerate(t, "127.0.0.1").Mutual(RoleManager)
	om.RootCAs = m.RootCAs // it trusts the server, the server does not trust it
	dial(addr, om)
	if err := <-errs; err == nil {
		t.Fatal("client certificate of another CA accepted")
	}
	if _, err := (Files{Cert: f.Cert, Key: f.Key}).Mutual(RoleManager); !errors.Is(err, ErrNoCA) {
		t.Fatalf("mutual without CA: %v", err)
	}
	// A link must say which roles it accepts, and name real ones.
	for _, roles := range [][]string{nil, {"admin"}} {
		if _, err := f.Mutual(roles...); err == nil || !strings.Contains(err.Error(), "role") {
			t.Fatalf("mutual with roles %q: %v", roles, err)
		}
	}
}

func TestTLSCheckRefusesBadFiles(t *testing.T) {
	f := mustGenerate(t, "localhost")
	for name, c := range map[string]struct {
		files Files
		want  string
	}{
		"cert without key": {Files{Cert: f.Cert}, "go together"},
		"key as cert":      {Files{Cert: f.Key, Key: f.Key}, f.Key},
		"missing CA":       {Files{CA: filepath.Join(t.TempDir(), "nope.pem")}, "nope.pem"},
		"CA not PEM":       {Files{CA: f.Key}, "no PEM certificate"},
	} {
		if err := c.files.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	if cfg, err := (Files{}).Server(); cfg != nil || err != nil {
		t.Fatalf("zero files serve TLS: %v %v", cfg, err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	if got, _ := (Files{}).WrapListener(ln); got != ln {
		t.Fatal("zero files wrapped the listener")
	}
}

func TestTLSGenerateExisting(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := Existing(dir); ok || err != nil {
		t.Fatalf("empty dir: %v %v", ok, err)
	}
	files, err := GenerateRoles(dir, []string{"a", "10.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(AllRoles) {
		t.Fatalf("GenerateRoles without roles wrote %d certificates, want %d", len(files), len(AllRoles))
	}
	got, ok, err := Existing(dir)
	if !ok || err != nil {
		t.Fatalf("after GenerateRoles: %v %v", ok, err)
	}
	for _, r := range AllRoles {
		if got[r] != FilesIn(dir, r) || files[r] != FilesIn(dir, r) {
			t.Fatalf("role %s: files %+v / %+v, want %+v", r, files[r], got[r], FilesIn(dir, r))
		}
		if c := leafOf(t, files[r]); !slices.Equal(Roles(c), []string{r}) || c.Subject.OrganizationalUnit[0] != "quarry-"+r {
			t.Fatalf("%s certificate carries %q (OU %q)", r, Roles(c), c.Subject.OrganizationalUnit)
		}
		st, err := os.Stat(files[r].Key)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s key mode: %v %v", r, st.Mode(), err)
		}
		if err := files[r].Check(); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(files[RolePeer].Key)
	if _, _, err := Existing(dir); !errors.Is(err, ErrPartial) || !strings.Contains(err.Error(), files[RolePeer].Key) {
		t.Fatalf("partial dir: %v", err)
	}
	// A subset: the folder is complete for the roles asked for.
	if _, ok, err := Existing(dir, RoleManager, RoleBus); !ok || err != nil {
		t.Fatalf("manager and bus of a folder without the peer key: %v %v", ok, err)
	}
	if _, err := GenerateRoles(dir, []string{"a"}, 0, RoleBus, "admin"); err == nil || !strings.Contains(err.Error(), `"admin"`) {
		t.Fatalf("unknown role: %v", err)
	}
	// Replacing the folder with fewer roles removes the others (signed by
	// the CA it replaces), and an older quarry's single cert.pem.
	os.WriteFile(filepath.Join(dir, CertFile), []byte("old"), 0o644)
	if _, _, err := Existing(dir, RoleManager); !errors.Is(err, ErrPartial) || !strings.Contains(err.Error(), "older quarry") {
		t.Fatalf("old layout: %v", err)
	}
	if _, err := GenerateRoles(dir, []string{"a"}, 0, RoleManager); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Existing(dir, RoleManager); !ok || err != nil {
		t.Fatalf("after replacing with the manager only: %v %v", ok, err)
	}
	for _, p := range []string{filepath.Join(dir, CertFile), files[RoleBus].Cert, files[RoleSearchHead].Key} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left behind: %v", p, err)
		}
	}
	if _, err := GenerateRoles(dir, []string{" "}, 0); err == nil {
		t.Fatal("no hosts accepted")
	}
	all := mustGenerate(t, "a")
	if got := Roles(leafOf(t, all)); !slices.Equal(got, AllRoles) {
		t.Fatalf("GenerateAllRoles' certificate carries %q", got)
	}
}

func dial(addr string, cfg *tls.Config) error { return testutil.TLSProbe(addr, cfg) }

func leafOf(t *testing.T, f Files) *x509.Certificate {
	t.Helper()
	c, err := f.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
