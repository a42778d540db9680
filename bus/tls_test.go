package bus

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
