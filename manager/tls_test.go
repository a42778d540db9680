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

// mustGenerateTLS is a new CA's certificate of every role (tlsconfig.GenerateRoles).
func mustGenerateTLS(t *testing.T) map[string]tlsconfig.Files {
	t.Helper()
	f, err := tlsconfig.GenerateRoles(t.TempDir(), []string{"127.0.0.1", "localhost"}, time.Hour)
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
	files := mustGenerateTLS(t)[tlsconfig.RoleManager]
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
	files := mustGenerateTLS(t)[tlsconfig.RoleManager]
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
	other := mustGenerateTLS(t)[tlsconfig.RoleManager]
	om, err := other.Mutual(tlsconfig.RaftRoles...)
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

// TestTLSRaftRefusesOtherRoles (review M6): one CA signs every process's
// certificate, but a manager's Raft transport accepts a manager
// certificate only. A real hashicorp/raft transport presenting a peer's
// or a search head's certificate of the same CA cannot send AppendEntries
// (its TLS handshake fails: the manager answers with a bad-certificate
// alert, and its term and leadership do not move); the same transport
// with a manager certificate is answered.
func TestTLSRaftRefusesOtherRoles(t *testing.T) {
	certs := mustGenerateTLS(t)
	g := tlsGroup(t, 1, certs[tlsconfig.RoleManager])
	m1 := g.ms["m1"]
	addr := raft.ServerAddress(m1.RaftAddr())
	term, last := m1.Raft().CurrentTerm(), m1.Raft().LastIndex()

	transport := func(role string) (*raft.NetworkTransport, string) {
		cfg, err := certs[role].Mutual(tlsconfig.RaftRoles...) // it trusts the manager
		if err != nil {
			t.Fatal(err)
		}
		stream, err := newTLSStreamLayer("127.0.0.1:0", nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: 1, Timeout: 5 * time.Second,
			Logger: hclog.NewNullLogger()})
		t.Cleanup(func() { tr.Close() })
		return tr, stream.Addr().String()
	}
	for _, role := range []string{tlsconfig.RolePeer, tlsconfig.RoleSearchHead} {
		// The handshake itself: refused by the manager.
		cfg, _ := certs[role].Mutual(tlsconfig.RaftRoles...)
		if err := testutil.TLSProbe(m1.RaftAddr(), cfg); err == nil || !strings.Contains(err.Error(), "bad certificate") {
			t.Fatalf("%s certificate: TLS handshake with the Raft port: %v, want a bad-certificate alert", role, err)
		}
		// A whole AppendEntries that would take over the log.
		tr, self := transport(role)
		var resp raft.AppendEntriesResponse
		err := tr.AppendEntries("m1", addr, &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue-" + role), Addr: []byte(self)}, Term: 1 << 40, PrevLogEntry: last, PrevLogTerm: term,
			Entries: []*raft.Log{{Index: last + 1, Term: 1 << 40, Type: raft.LogCommand, Data: []byte{0xff}}}, LeaderCommitIndex: last + 1,
		}, &resp)
		if err == nil {
			t.Fatalf("%s certificate: AppendEntries answered: %+v", role, resp)
		}
	}
	if got := m1.Raft().CurrentTerm(); got != term {
		t.Fatalf("refused transports moved the term from %d to %d", term, got)
	}
	if m1.Raft().State() != raft.Leader {
		t.Fatalf("m1 is %s after the refusals", m1.Raft().State())
	}

	// A manager certificate is answered (a stale RequestVote: no harm done).
	tr, self := transport(tlsconfig.RoleManager)
	var vote raft.RequestVoteResponse
	if err := tr.RequestVote("m1", addr, &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("m9"), Addr: []byte(self)}, Term: 0}, &vote); err != nil {
		t.Fatalf("manager certificate: RequestVote: %v", err)
	}
	if vote.Granted || vote.Term != term {
		t.Fatalf("stale RequestVote: %+v, want refused at term %d", vote, term)
	}
}
