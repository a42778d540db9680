// Package tlsconfig owns quarry's TLS material: it turns the three PEM files
// every server role takes (--tls-cert, --tls-key, --tls-ca) into
// *tls.Config values for the three kinds of connection quarry makes, names
// the role a certificate is for (Roles), and generates a small CA with one
// certificate per role for demos and tests (GenerateRoles, `quarry tls
// gen`). It imports only the standard library, so every floor of the house
// (bus, the roles, the binary, the harness) may use it.
//
// The three kinds of connection (SPEC §11, README "TLS"):
//   - Server: a process's HTTP API or NATS client port. TLS 1.2 or later
//     with the process's certificate; clients are not asked for one (they
//     authenticate with tokens and NATS users).
//   - Client: a client of such a server. It verifies the server against
//     the CA file, or the system roots when none is given.
//   - Mutual: the links between the deployment's own servers — the Raft
//     transport between managers, NATS routes and gateways. Both ends
//     present a certificate and verify the other's against the CA file;
//     a CA is required (a public root would let anyone holding any public
//     certificate in).
//
// Roles (review M6). One CA signs every process's certificate, because
// peers and search heads need one to serve HTTPS; the chain alone
// therefore says nothing about who is at the other end. Each certificate
// names its role(s) in its Subject's OrganizationalUnit — quarry-manager,
// quarry-bus, quarry-peer, quarry-searchhead — and a mutual link accepts
// only the roles it is given: Raft a manager (RaftRoles), routes and
// gateways a bus node or a manager with an embedded NATS node
// (LinkRoles). A certificate with no quarry role is refused on them.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
)

// MinVersion is the oldest TLS version quarry speaks.
const MinVersion = tls.VersionTLS12

// ErrNoCA: a mutual-TLS link was asked for without a CA file.
var ErrNoCA = errors.New("mutual TLS needs --tls-ca")

// Files names the PEM files of one process's TLS setup. The zero value is
// "no TLS": servers speak plain text, clients use Go's defaults.
type Files struct {
	// Cert is this process's certificate (chain); with Key, its servers
	// speak TLS.
	Cert string
	// Key is the private key of Cert.
	Key string
	// CA is the certificate of the CA that signed the deployment's
	// certificates: clients verify servers against it, and the ends of a
	// mutual link verify each other.
	CA string
}

// Serving reports whether the process serves TLS (a certificate is set).
func (f Files) Serving() bool { return f.Cert != "" || f.Key != "" }

// Zero reports whether no file is set at all.
func (f Files) Zero() bool { return f == Files{} }

// Check loads every file that is set and refuses an incomplete or
// unreadable setup with one message naming the file.
func (f Files) Check() error {
	if f.Serving() {
		if _, err := f.keyPair(); err != nil {
			return err
		}
	}
	if f.CA != "" {
		if _, err := f.pool(); err != nil {
			return err
		}
	}
	return nil
}

func (f Files) keyPair() (tls.Certificate, error) {
	if f.Cert == "" || f.Key == "" {
		return tls.Certificate{}, errors.New("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load TLS certificate %s (key %s): %w", f.Cert, f.Key, err)
	}
	return cert, nil
}

func (f Files) pool() (*x509.CertPool, error) {
	b, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("read TLS CA %s: %w", f.CA, err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("read TLS CA %s: no PEM certificate in it", f.CA)
	}
	return p, nil
}

// Server is the config of a server that clients reach with tokens or
// passwords: the process's certificate, no client certificate asked for.
// It is nil (and no error) when no certificate is set.
func (f Files) Server() (*tls.Config, error) {
	if !f.Serving() {
		return nil, nil
	}
	cert, err := f.keyPair()
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: MinVersion}, nil
}

// Client is the config of a client that verifies servers against the CA.
// It is nil (and no error) when no CA is set: Go's defaults then verify
// against the system roots.
func (f Files) Client() (*tls.Config, error) {
	if f.CA == "" {
		return nil, nil
	}
	p, err := f.pool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: p, MinVersion: MinVersion}, nil
}

// Mutual is the config of both ends of a link between the deployment's
// servers: the process's certificate is presented, the other end's is
// required, verified against the CA and refused unless it carries one of
// the allowed roles (ErrWrongRole; Roles), whichever end dials. It needs
// all three files and at least one role.
func (f Files) Mutual(allowed ...string) (*tls.Config, error) {
	if err := checkRoles(allowed); err != nil {
		return nil, err
	}
	cert, err := f.keyPair()
	if err != nil {
		return nil, err
	}
	if f.CA == "" {
		return nil, ErrNoCA
	}
	p, err := f.pool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates:     []tls.Certificate{cert},
		RootCAs:          p,
		ClientCAs:        p,
		ClientAuth:       tls.RequireAndVerifyClientCert,
		VerifyConnection: verifyRole(allowed),
		MinVersion:       MinVersion,
	}, nil
}

// Leaf is the certificate of Cert (the first of its chain), parsed.
func (f Files) Leaf() (*x509.Certificate, error) {
	kp, err := f.keyPair()
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(kp.Certificate[0])
}

// WrapListener returns ln serving TLS with the Server config, or ln itself
// when no certificate is set.
func (f Files) WrapListener(ln net.Listener) (net.Listener, error) {
	cfg, err := f.Server()
	if err != nil || cfg == nil {
		return ln, err
	}
	return tls.NewListener(ln, cfg), nil
}

// Scheme is "https" when the process serves TLS, else "http".
func (f Files) Scheme() string {
	if f.Serving() {
		return "https"
	}
	return "http"
}

// Transport is a clone of http.DefaultTransport that verifies servers with
// the Client config (Go's defaults without a CA).
func (f Files) Transport() (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	cfg, err := f.Client()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		tr.TLSClientConfig = cfg
	}
	return tr, nil
}
