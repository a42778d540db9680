package bus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// selfSigned writes a CA-less self-signed certificate for 127.0.0.1 and
// returns the cert and key paths (the cert is its own CA).
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "quarry bus test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// mustGenerateTLS is a new CA's certificate of every role
// (tlsconfig.GenerateRoles), for 127.0.0.1 and localhost.
func mustGenerateTLS(t *testing.T) map[string]tlsconfig.Files {
	t.Helper()
	f, err := tlsconfig.GenerateRoles(t.TempDir(), []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestTLSClientConnections(t *testing.T) {
	cert, key := selfSigned(t)
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", TLSCert: cert, TLSKey: key})
	srv := mustConnect(t, s.ClientURL(), ConnectOptions{TLSCA: cert})
	cli := mustConnect(t, s.ClientURL(), ConnectOptions{TLSCA: cert})
	if !cli.TLSRequired() {
		t.Fatal("server does not require TLS")
	}
	mustServe(t, srv, "quarry.mgr.echo", ServeOptions{}, echo("tls"))
	if r, err := Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), cli, "quarry.mgr.echo", echoReq{Text: "x"}); err != nil || r.Server != "tls" {
		t.Fatalf("request over TLS: %+v, %v", r, err)
	}
	// A client that does not trust the certificate is refused, at once.
	start := time.Now()
	_, err := Connect(ctxTimeout(t, 5*time.Second), s.ClientURL(), ConnectOptions{Logger: quiet, TLSCA: writeOtherCA(t)})
	if err == nil {
		t.Fatal("untrusted certificate accepted")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("untrusted certificate took %s to fail: %v", took, err)
	}
	// Bad key material is refused at start-up with one clear message.
	_, err = StartServer(ctxTimeout(t, time.Second), ServerConfig{Name: "n2", Site: "site1", Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: cert})
	if err == nil || !containsAll(err.Error(), "load TLS certificate", cert) {
		t.Fatalf("bad key: %v", err)
	}
}

func writeOtherCA(t *testing.T) string {
	cert, _ := selfSigned(t)
	return cert
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// logLines records the messages a server logs, for tests that wait on one.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.lines = append(l.lines, r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) has(sub string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return nil
		}
	}
	return fmt.Errorf("no log line with %q in %d lines", sub, len(l.lines))
}

// TestTLSRoutesAndGateways: with a certificate and a CA, a site's routes
// and the gateways between sites are mutual TLS, requests cross both,
// and a node whose certificate another CA signed cannot route in.
func TestTLSRoutesAndGateways(t *testing.T) {
	certs := mustGenerateTLS(t)
	files := certs[tlsconfig.RoleBus]
	ss, err := StartSites(ctxTimeout(t, 20*time.Second), SitesConfig{Sites: []string{"site1", "site2"}, Logger: quiet, Monitoring: true,
		TLSCert: files.Cert, TLSKey: files.Key, TLSCA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ss.Shutdown)
	// A second site1 node routed to a first one, each also a TLS node.
	a := mustStartServer(t, ServerConfig{Name: "a", Site: "site3", ClusterListen: "127.0.0.1:0", TLSCert: files.Cert, TLSKey: files.Key, TLSCA: files.CA})
	b := mustStartServer(t, ServerConfig{Name: "b", Site: "site3", ClusterListen: "127.0.0.1:0", Routes: []string{a.ClusterURL()},
		TLSCert: files.Cert, TLSKey: files.Key, TLSCA: files.CA})
	if err := b.WaitRoutes(ctxTimeout(t, 10*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	if v, err := b.NATS().Varz(nil); err != nil || !v.Cluster.TLSRequired || !v.Cluster.TLSVerify {
		t.Fatalf("routes not mutual TLS: %+v %v", v.Cluster, err)
	}
	for _, pair := range [][2]*Server{{a, b}, {ss.Server("site1"), ss.Server("site2")}} {
		srv := mustConnect(t, pair[0].ClientURL(), ConnectOptions{TLSCA: files.CA})
		cli := mustConnect(t, pair[1].ClientURL(), ConnectOptions{TLSCA: files.CA})
		mustServe(t, srv, "quarry.mgr.echo", ServeOptions{}, echo(pair[0].Name()))
		testutil.WaitFor(t, 10*time.Second, func() error {
			_, err := Request[echoReq, echoResp](ctxTimeout(t, time.Second), cli, "quarry.mgr.echo", echoReq{Text: "x"})
			return err
		})
	}
	// Gateways: every connection between the sites is TLS.
	for _, s := range ss.Servers {
		gz, err := s.NATS().Gatewayz(&server.GatewayzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, rg := range gz.OutboundGateways {
			if rg.Connection == nil || rg.Connection.TLSVersion == "" {
				t.Fatalf("%s: outbound gateway to %s is not TLS: %+v", s.Name(), name, rg.Connection)
			}
		}
		if !strings.HasPrefix(s.MonitorURL(), "https://") {
			t.Fatalf("monitoring of a TLS node is %s", s.MonitorURL())
		}
	}
	// A node with another CA's certificate cannot route in.
	other := mustGenerateTLS(t)[tlsconfig.RoleBus]
	lines := &logLines{}
	rogue := mustStartServer(t, ServerConfig{Name: "rogue", Site: "site3", ClusterListen: "127.0.0.1:0", Routes: []string{a.ClusterURL()},
		TLSCert: other.Cert, TLSKey: other.Key, TLSCA: other.CA, Logger: slog.New(lines)})
	testutil.WaitFor(t, 10*time.Second, func() error { return lines.has("TLS route handshake error") })
	if n := rogue.RoutedServers(); n != 0 {
		t.Fatalf("rogue node has routes to %d nodes", n)
	}
	if n := a.RoutedServers(); n != 1 {
		t.Fatalf("a has routes to %d nodes, want 1 (b only)", n)
	}
	// Routes or gateways with a certificate but no CA: refused at start.
	_, err = StartServer(ctxTimeout(t, time.Second), ServerConfig{Name: "n", Site: "site1", Listen: "127.0.0.1:0", GatewayListen: "127.0.0.1:0",
		TLSCert: files.Cert, TLSKey: files.Key})
	if err == nil || !strings.Contains(err.Error(), "need --tls-ca") {
		t.Fatalf("gateway TLS without CA: %v", err)
	}
	// Role users without an admin user: mutual TLS is the links' own
	// authentication, so the node starts (without it, ErrOpenLink:
	// TestServerConfigErrors).
	mustStartServer(t, ServerConfig{Name: "ru", Site: "site4", Listen: "127.0.0.1:0", GatewayListen: "127.0.0.1:0", ClusterListen: "127.0.0.1:0",
		Users: []User{{Name: "p1", Password: "pw", Role: RolePeer, Site: "site4", Peer: "p1"}}, TLSCert: files.Cert, TLSKey: files.Key, TLSCA: files.CA})
	if _, err := StartSites(ctxTimeout(t, time.Second), SitesConfig{Sites: []string{"s1", "s2"}, Cuttable: true, TLSCert: files.Cert, TLSKey: files.Key, TLSCA: files.CA}); err == nil {
		t.Fatal("cuttable TLS sites started")
	}
}

// TestTLSClientWithoutCA: a client of a TLS node without the CA (system
// roots) is refused at once, with a certificate error.
func TestTLSClientWithoutCA(t *testing.T) {
	files := mustGenerateTLS(t)[tlsconfig.RoleBus]
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", TLSCert: files.Cert, TLSKey: files.Key, TLSCA: files.CA})
	start := time.Now()
	_, err := Connect(ctxTimeout(t, 5*time.Second), s.ClientURL(), ConnectOptions{Logger: quiet})
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &verr) {
		t.Fatalf("client without CA: want a certificate verification error, got %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("refusal took %s", took)
	}
}
