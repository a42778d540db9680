package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

func mustGenerateTLS(t *testing.T) tlsconfig.Files {
	t.Helper()
	f, err := tlsconfig.Generate(t.TempDir(), []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tlsGroup is a group of n managers with HTTPS and Raft over mutual TLS.
func tlsGroup(t *testing.T, n int, files tlsconfig.Files) *group {
	return newGroup(t, n, func(c *Config) {
		c.TLS = files
		c.Join = strings.Replace(c.Join, "http://", "https://", 1)
	})
}

// TestTLSGroupReplicatesAndRedirects: three managers join each other over
// HTTPS and replicate over Raft on mutual TLS; a write sent to a follower
// is redirected to the leader's https:// URL and applied everywhere.
func TestTLSGroupReplicatesAndRedirects(t *testing.T) {
	files := mustGenerateTLS(t)
	g := tlsGroup(t, 3, files)
	l := g.leader()
	var follower *Manager
	for _, m := range g.ms {
		if m != l {
			follower = m
		}
	}
	cl, err := NewClient([]string{"https://" + follower.HTTPAddr()}, testToken, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := files.Client()
	cl.UseTLS(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.SetMaintenance(ctx, true); err != nil {
		t.Fatalf("maintenance through a follower over HTTPS: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		for id, m := range g.ms {
			on := false
			m.Read(func(s *fsm.State) { on = s.Maintenance() })
			if !on {
				return errors.New(id + " has not applied maintenance")
			}
		}
		return nil
	})
}

// TestTLSRefusals: an HTTPS client without the CA gets an x509 error; a
// plain connection to the Raft port is closed without an answer; a Raft
// transport whose certificate another CA signed cannot send an RPC; a
// manager of another CA cannot join; a certificate without a CA is refused
// at start. The group's membership does not change.
func TestTLSRefusals(t *testing.T) {
	files := mustGenerateTLS(t)
	g := tlsGroup(t, 1, files)
	m1 := g.ms["m1"]

	// HTTPS without the CA.
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get("https://" + m1.HTTPAddr() + "/v1/status")
	var uerr x509.UnknownAuthorityError
	var verr *tls.CertificateVerificationError
	if err == nil {
		res.Body.Close()
	}
	if !errors.As(err, &uerr) && !errors.As(err, &verr) {
		t.Fatalf("HTTPS client without the CA: want an x509 error, got %v", err)
	}
	// Plain HTTP to the HTTPS port: Go's server answers 400 and no data.
	if res, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + m1.HTTPAddr() + "/v1/status"); err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "leader") {
			t.Fatalf("plain HTTP to HTTPS port: %d %s", res.StatusCode, b)
		}
	}

	// Plain TCP to the Raft port: closed during the handshake.
	c, err := net.DialTimeout("tcp", m1.RaftAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// An AppendEntries RPC type byte and a msgpack map, as raft would send.
	if _, err := c.Write([]byte{0, 0x81, 0xa4, 'T', 'e', 'r', 'm', 0x05}); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	c.Close()
	if errors.Is(err, net.ErrClosed) || isTimeout(err) {
		t.Fatalf("plain connection to the Raft port not closed: %v", err)
	}
	if len(b) > 0 && b[0] != 0x15 { // a TLS alert record is all it may get
		t.Fatalf("plain connection to the Raft port got %q", b)
	}

	// A Raft transport with another CA's certificate (trusting ours, so
	// it is the manager that refuses it).
	other := mustGenerateTLS(t)
	om, err := other.Mutual()
	if err != nil {
		t.Fatal(err)
	}
	ours, _ := files.Client()
	om.RootCAs = ours.RootCAs
	stream, err := newTLSStreamLayer("127.0.0.1:0", nil, om)
	if err != nil {
		t.Fatal(err)
	}
	rogue := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: 1, Timeout: 5 * time.Second,
		Logger: hclog.NewNullLogger()})
	defer rogue.Close()
	var resp raft.RequestVoteResponse
	err = rogue.RequestVote("m1", raft.ServerAddress(m1.RaftAddr()), &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("rogue"), Addr: []byte(stream.Addr().String())}, Term: 1 << 40}, &resp)
	if err == nil {
		t.Fatalf("rogue RequestVote answered: %+v", resp)
	}
	if term := m1.Raft().CurrentTerm(); term >= 1<<40 {
		t.Fatalf("rogue vote request moved the term to %d", term)
	}

	// A manager of another CA cannot join (it does not trust m1's HTTPS).
	cfg := testConfig(t, "m9", t.TempDir())
	cfg.Seed, cfg.TLS, cfg.Join, cfg.JoinTimeout = nil, other, "https://"+m1.HTTPAddr(), 1500*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if m, err := New(ctx, cfg); err == nil {
		m.Close()
		t.Fatal("manager of another CA joined")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("join of another CA: %v", err)
	}
	if n := len(m1.Raft().GetConfiguration().Configuration().Servers); n != 1 {
		t.Fatalf("group has %d servers after the refusals, want 1", n)
	}

	// A certificate without a CA: refused with one clear line.
	cfg = testConfig(t, "m8", t.TempDir())
	cfg.TLS = tlsconfig.Files{Cert: files.Cert, Key: files.Key}
	if _, err := New(ctx, cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "--tls-ca") {
		t.Fatalf("certificate without CA: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
