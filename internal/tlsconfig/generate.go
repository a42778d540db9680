package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Names of the files Generate writes.
const (
	CAFile   = "ca.pem"
	CertFile = "cert.pem"
	KeyFile  = "key.pem"
)

// DefaultValidity is how long a generated certificate is valid.
const DefaultValidity = 365 * 24 * time.Hour

// ErrPartial: a certificate folder holds some of Generate's files but not
// all of them.
var ErrPartial = errors.New("certificate folder holds some files but not all")

// Existing returns the Files of a folder Generate wrote, ok true when all
// three are there; ErrPartial when only some are.
func Existing(dir string) (Files, bool, error) {
	f := FilesIn(dir)
	n := 0
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if _, err := os.Stat(p); err == nil {
			n++
		} else if !errors.Is(err, os.ErrNotExist) {
			return f, false, err
		}
	}
	switch n {
	case 0:
		return f, false, nil
	case 3:
		return f, true, nil
	}
	return f, false, fmt.Errorf("%s: %w (%s, %s, %s)", dir, ErrPartial, CAFile, CertFile, KeyFile)
}

// FilesIn names Generate's files in dir.
func FilesIn(dir string) Files {
	return Files{Cert: filepath.Join(dir, CertFile), Key: filepath.Join(dir, KeyFile), CA: filepath.Join(dir, CAFile)}
}

// Generate writes a new CA certificate (ca.pem) and one certificate signed
// by it (cert.pem, its key in key.pem) for hosts — DNS names and IP
// addresses — usable by servers and as a client certificate (mutual TLS),
// valid for validFor (DefaultValidity when 0), into dir, replacing what is
// there. The CA's own key is not kept: nothing more can be signed by it,
// which is what a demo or a test wants. Keys are ECDSA P-256; key.pem is
// readable by its owner only.
func Generate(dir string, hosts []string, validFor time.Duration) (Files, error) {
	if validFor <= 0 {
		validFor = DefaultValidity
	}
	var dns []string
	var ips []net.IP
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
		case net.ParseIP(h) != nil:
			ips = append(ips, net.ParseIP(h))
		default:
			dns = append(dns, h)
		}
	}
	if len(dns)+len(ips) == 0 {
		return Files{}, errors.New("tls gen: name at least one host (DNS name or IP address)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, fmt.Errorf("tls gen: %w", err)
	}
	now := time.Now().Add(-5 * time.Minute) // a little clock skew between containers
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("tls gen: CA key: %w", err)
	}
	caSerial := serial()
	caTmpl := &x509.Certificate{
		SerialNumber: caSerial,
		// A name of its own, so two generated CAs never look alike.
		Subject:               pkix.Name{Organization: []string{"quarry"}, CommonName: "quarry CA " + caSerial.Text(36)},
		NotBefore:             now,
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, fmt.Errorf("tls gen: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, fmt.Errorf("tls gen: CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("tls gen: key: %w", err)
	}
	cn := "quarry"
	if len(dns) > 0 {
		cn = dns[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"quarry"}, CommonName: cn},
		NotBefore:    now,
		NotAfter:     now.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return Files{}, fmt.Errorf("tls gen: certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Files{}, fmt.Errorf("tls gen: key: %w", err)
	}
	f := FilesIn(dir)
	for _, w := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{
		{f.Key, "PRIVATE KEY", kder, 0o600},
		{f.Cert, "CERTIFICATE", der, 0o644},
		{f.CA, "CERTIFICATE", caDER, 0o644},
	} {
		if err := writeFile(w.path, pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der}), w.mode); err != nil {
			return Files{}, fmt.Errorf("tls gen: %w", err)
		}
	}
	return f, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// writeFile writes through a temporary file and a rename, so a reader
// never sees half a file.
func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
