package bus

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// startTLSNode starts a node presenting files' certificate whose log
// lines go to the returned recorder.
func startTLSNode(t *testing.T, files tlsconfig.Files, cfg ServerConfig) (*Server, *logLines) {
	t.Helper()
	lines := &logLines{}
	cfg.TLSCert, cfg.TLSKey, cfg.TLSCA, cfg.Logger = files.Cert, files.Key, files.CA, slog.New(lines)
	return mustStartServer(t, cfg), lines
}

// TestTLSRoutesCheckRoles (review M6): every node below holds a
// certificate of the same CA, but routes accept a bus or manager
// certificate only. A bus node and a manager (embedded NATS node) route
// in; a node presenting a peer certificate cannot route in, and a bus
// node cannot route out to one (each refusal logged with the role it
// saw); no route is made with either.
func TestTLSRoutesCheckRoles(t *testing.T) {
	certs := mustGenerateTLS(t)
	a, aLog := startTLSNode(t, certs[tlsconfig.RoleBus], ServerConfig{Name: "a", Site: "site1", ClusterListen: "127.0.0.1:0"})
	startTLSNode(t, certs[tlsconfig.RoleBus], ServerConfig{Name: "b", Site: "site1", ClusterListen: "127.0.0.1:0", Routes: []string{a.ClusterURL()}})
	startTLSNode(t, certs[tlsconfig.RoleManager], ServerConfig{Name: "m", Site: "site1", ClusterListen: "127.0.0.1:0", Routes: []string{a.ClusterURL()}})
	if err := a.WaitRoutes(ctxTimeout(t, 10*time.Second), 2); err != nil {
		t.Fatalf("a bus node and a manager with certificates of their roles: %v", err)
	}

	// In: a peer's certificate dials a.
	rogue, _ := startTLSNode(t, certs[tlsconfig.RolePeer], ServerConfig{Name: "rogue", Site: "site1", ClusterListen: "127.0.0.1:0", Routes: []string{a.ClusterURL()}})
	testutil.WaitFor(t, 10*time.Second, func() error { return aLog.has("carries role peer, this link wants role bus or manager") })
	if err := aLog.has("TLS route handshake error"); err != nil {
		t.Fatal(err)
	}
	// Out: a bus node dials a node with a search head's certificate.
	sh, _ := startTLSNode(t, certs[tlsconfig.RoleSearchHead], ServerConfig{Name: "sh", Site: "site2", ClusterListen: "127.0.0.1:0"})
	c, cLog := startTLSNode(t, certs[tlsconfig.RoleBus], ServerConfig{Name: "c", Site: "site2", ClusterListen: "127.0.0.1:0", Routes: []string{sh.ClusterURL()}})
	testutil.WaitFor(t, 10*time.Second, func() error { return cLog.has("carries role searchhead, this link wants role bus or manager") })

	for _, s := range []*Server{rogue, sh, c} {
		if n := s.RoutedServers(); n != 0 {
			t.Errorf("%s has routes to %d nodes, want 0", s.Name(), n)
		}
	}
	if n := a.RoutedServers(); n != 2 {
		t.Errorf("a has routes to %d nodes, want 2 (b and m)", n)
	}
}

// TestTLSGatewaysCheckRoles (review M6): gateways, like routes, accept a
// bus or manager certificate only, whichever end dials: a manager's site
// joins by gateway; a site whose node presents a peer certificate cannot
// gateway in, and a bus node cannot gateway out to one.
func TestTLSGatewaysCheckRoles(t *testing.T) {
	certs := mustGenerateTLS(t)
	g1, g1Log := startTLSNode(t, certs[tlsconfig.RoleBus], ServerConfig{Name: "g1", Site: "gw1", GatewayListen: "127.0.0.1:0"})
	g2, _ := startTLSNode(t, certs[tlsconfig.RoleManager], ServerConfig{Name: "g2", Site: "gw2", GatewayListen: "127.0.0.1:0",
		Gateways: map[string][]string{"gw1": {g1.GatewayURL()}}})
	for _, s := range []*Server{g1, g2} {
		if err := s.WaitGateways(ctxTimeout(t, 10*time.Second), 1); err != nil {
			t.Fatalf("bus and manager certificates: %v", err)
		}
	}

	// In: a peer's certificate dials g1's gateway.
	rogue, _ := startTLSNode(t, certs[tlsconfig.RolePeer], ServerConfig{Name: "rogue", Site: "gw3", GatewayListen: "127.0.0.1:0",
		Gateways: map[string][]string{"gw1": {g1.GatewayURL()}}})
	testutil.WaitFor(t, 10*time.Second, func() error { return g1Log.has("carries role peer, this link wants role bus or manager") })
	if err := g1Log.has("TLS gateway handshake error"); err != nil {
		t.Fatal(err)
	}
	// Out: a bus node dials a gateway with a peer's certificate.
	pg, _ := startTLSNode(t, certs[tlsconfig.RolePeer], ServerConfig{Name: "pg", Site: "gw4", GatewayListen: "127.0.0.1:0"})
	g5, g5Log := startTLSNode(t, certs[tlsconfig.RoleBus], ServerConfig{Name: "g5", Site: "gw5", GatewayListen: "127.0.0.1:0",
		Gateways: map[string][]string{"gw4": {pg.GatewayURL()}}})
	testutil.WaitFor(t, 10*time.Second, func() error { return g5Log.has("carries role peer, this link wants role bus or manager") })

	for _, s := range []*Server{rogue, pg, g5} {
		if n := s.NATS().NumOutboundGateways(); n != 0 {
			t.Errorf("%s has %d outbound gateways, want 0", s.Name(), n)
		}
		if gz, err := s.NATS().Gatewayz(&server.GatewayzOptions{}); err != nil || len(gz.InboundGateways) != 0 {
			t.Errorf("%s has inbound gateways %v (%v), want none", s.Name(), gz.InboundGateways, err)
		}
	}
	gz, err := g1.NATS().Gatewayz(&server.GatewayzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gz.InboundGateways["gw3"]; ok || len(gz.OutboundGateways) != 1 {
		t.Errorf("g1's gateways: outbound %v, inbound %v; want gw2 only", keys(gz.OutboundGateways), keys(gz.InboundGateways))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
