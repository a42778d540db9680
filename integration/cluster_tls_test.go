package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// TestClusterTLSIngestReplicates is TestClusterIngestReplicates on a
// cluster that runs TLS everywhere it can (SPEC §11, issue 12 item 5):
// HTTPS on the managers, the peers (HEC included) and the search head,
// TLS on every NATS client connection and mutual TLS on the gateways, Raft
// over mutual TLS — certificates generated for 127.0.0.1 into the test's
// folder, one per role (tlsconfig.GenerateRoles, as the demo), each
// server presenting its role's. Events acknowledged through HTTPS HEC on both sites are on RF
// copies placed by the policy, each exactly once, and a search head
// answers their exact count over HTTPS. Then the refusals: an HTTPS
// client without the CA (x509 error; the peer's store unchanged), a NATS
// client without the CA, a plain TCP connection to the Raft port (closed
// during the handshake), a peer's certificate of the same CA on the Raft
// port (refused by role, review M6) — the managers' state unchanged.
func TestClusterTLSIngestReplicates(t *testing.T) {
	certs, err := tlsconfig.GenerateRoles(t.TempDir(), []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	files := certs[tlsconfig.RolePeer] // the harness's clients: the CA and https
	c := Start(t, Options{TLS: files, TLSRoles: certs})
	n := 4_000
	origins := []string{"site1-p1", "site2-p2"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, o := range origins {
		if h := c.NewHECClient(o); !strings.HasPrefix(h.URL, "https://") {
			t.Fatalf("HEC client of %s on %s", o, h.URL)
		}
	}
	ingestExactlyOnce(ctx, t, c, origins, "tls", n, 500)

	// A search head over HTTPS counts every event once.
	sh := c.StartSearchHead("sh0", "site0")
	if !strings.HasPrefix(sh.URL(), "https://") {
		t.Fatalf("search head URL %s", sh.URL())
	}
	a, err := SearchHTTPWith(ctx, c.HTTPClient(60*time.Second), sh.URL(), "", map[string]any{"query": "* | stats count", "allow_partial": false})
	if err != nil || a.Status != 200 || len(a.Resp.Results) != 1 {
		t.Fatalf("search over HTTPS: %v %d %s %v", err, a.Status, a.Error, a.Resp.Results)
	}
	if got := fmt.Sprint(a.Resp.Results[0]["count"]); got != fmt.Sprint(n) || a.Resp.Summary.Partial {
		t.Fatalf("search over HTTPS counts %s (partial %v), want %d", got, a.Resp.Summary.Partial, n)
	}

	// What is encrypted on the bus: every client connection and every
	// gateway of every node.
	for _, s := range c.Bus.Servers {
		cz, err := s.NATS().Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cz.NumConns == 0 {
			t.Fatalf("%s has no clients", s.Name())
		}
		for _, ci := range cz.Conns {
			if ci.TLSVersion == "" {
				t.Fatalf("%s: client %q is not TLS", s.Name(), ci.Name)
			}
		}
		gz, err := s.NATS().Gatewayz(&server.GatewayzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, rg := range gz.OutboundGateways {
			if rg.Connection == nil || rg.Connection.TLSVersion == "" {
				t.Fatalf("%s: gateway to %s is not TLS", s.Name(), name)
			}
		}
	}

	// Refusals; nothing changes.
	before, err := c.Leader().StateHash()
	if err != nil {
		t.Fatal(err)
	}
	eventsBefore := c.peerEvents("site1-p1")
	// HTTPS HEC without the CA: an x509 error, the peer's store unchanged.
	h := c.NewHECClient("site1-p1")
	h.Client = &http.Client{Timeout: 5 * time.Second}
	_, err = h.Send(ctx, []string{"never stored"})
	var uerr x509.UnknownAuthorityError
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &uerr) && !errors.As(err, &verr) {
		t.Fatalf("HEC over HTTPS without the CA: want an x509 error, got %v", err)
	}
	// Plain HTTP to the HTTPS port: refused by the server, nothing stored.
	if res, err := (&http.Client{Timeout: 5 * time.Second}).Post("http://"+c.Peer("site1-p1").Addr()+"/services/collector/event",
		"application/json", strings.NewReader(`{"event": "never stored"}`)); err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "Success") {
			t.Fatalf("plain HTTP to the HEC's HTTPS port: %d %s", res.StatusCode, b)
		}
	}
	// NATS without the CA: refused at once.
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = bus.Connect(cctx, c.Bus.Server("site1").ClientURL(), bus.ConnectOptions{Logger: quietLogger()})
	ccancel()
	if !errors.As(err, &verr) {
		t.Fatalf("NATS client without the CA: want a certificate error, got %v", err)
	}
	// Plain TCP to the leader's Raft port: closed during the handshake.
	conn, err := net.DialTimeout("tcp", c.Leader().RaftAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte{0, 0x81, 0xa4, 'T', 'e', 'r', 'm', 0x05}) // AppendEntries, msgpack {"Term": 5}
	b, err := io.ReadAll(conn)
	conn.Close()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("plain connection to the Raft port left open")
	}
	if len(b) > 0 && b[0] != 0x15 { // at most a TLS alert record
		t.Fatalf("plain connection to the Raft port got %q", b)
	}
	// A peer's certificate of the same CA on the Raft port (review M6).
	raftRefusesCertificate(t, c.Leader().RaftAddr(), certs[tlsconfig.RolePeer])
	after, err := c.Leader().StateHash()
	if err != nil {
		t.Fatal(err)
	}
	if after.Hash != before.Hash {
		t.Fatalf("the managers' state changed during the refusals: %+v → %+v", before, after)
	}
	if got := c.peerEvents("site1-p1"); got != eventsBefore {
		t.Fatalf("site1-p1 holds %d events after the refusals, %d before", got, eventsBefore)
	}
}

// raftRefusesCertificate: a TLS client presenting files' certificate (and
// trusting the managers) is refused by the Raft port at addr during the
// handshake: a bad-certificate alert on its first read.
func raftRefusesCertificate(t *testing.T, addr string, files tlsconfig.Files) {
	t.Helper()
	cfg, err := files.Mutual(tlsconfig.RaftRoles...)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.TLSProbe(addr, cfg); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("certificate %s on the Raft port: %v, want a bad-certificate alert", files.Cert, err)
	}
}

// peerEvents sums the events of every copy on peer id.
func (c *Cluster) peerEvents(id string) int64 {
	var n int64
	for _, ci := range c.Inventory(id) {
		n += int64(ci.Events)
	}
	return n
}
