package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// SitesConfig describes a multisite bus on one host: one node per site,
// every pair of sites joined by gateways, all on loopback with free ports.
// It is the bus of `quarry dev` and of the in-process integration harness.
type SitesConfig struct {
	Sites          []string
	User, Password string // admin / route / gateway credentials (optional)
	Users          []User
	Subjects       Subjects
	Monitoring     bool // also serve /healthz etc. on a free port per node
	// Routes also gives every node a route listener on a free loopback
	// port (Server.ClusterURL), as a site's bus that may take more nodes
	// has; no node routes to another (one node per site).
	Routes bool
	// Cuttable puts a proxy in front of every site's gateway so that Cut
	// can partition a site from the others while its own clients stay
	// connected (tests and fault injection).
	Cuttable bool
	// TLSCert, TLSKey and TLSCA turn on TLS on every node: client
	// connections, and gateways with mutual TLS (see ServerConfig). Not
	// with Cuttable: the cut proxy reads the dialling site from the
	// CONNECT line, which TLS hides.
	TLSCert, TLSKey, TLSCA string
	Logger                 *slog.Logger
}

// Sites is a running multisite bus.
type Sites struct {
	Servers []*Server // in the order of SitesConfig.Sites
	bySite  map[string]*Server
	proxies map[string]*gatewayProxy
}

// StartSites starts one node per site (named "<site>-nats") and waits until
// every node has a gateway to every other site. On failure nothing is left
// running.
func StartSites(ctx context.Context, cfg SitesConfig) (*Sites, error) {
	if len(cfg.Sites) == 0 {
		return nil, errors.New("bus: no sites")
	}
	for i, site := range cfg.Sites {
		if err := ValidToken("site", site); err != nil {
			return nil, fmt.Errorf("bus: %w", err)
		}
		for _, other := range cfg.Sites[:i] {
			if other == site {
				return nil, fmt.Errorf("bus: site %q listed twice", site)
			}
		}
	}
	if cfg.Cuttable && cfg.TLSCert != "" {
		return nil, errors.New("bus: Cuttable sites cannot run TLS (the cut proxy reads the gateway's CONNECT line)")
	}
	ss := &Sites{bySite: map[string]*Server{}, proxies: map[string]*gatewayProxy{}}
	fail := func(err error) (*Sites, error) {
		ss.Shutdown()
		return nil, err
	}
	gateways := map[string][]string{}
	for _, site := range cfg.Sites {
		sc := ServerConfig{
			Name: site + "-nats", Site: site, Listen: "127.0.0.1:0",
			User: cfg.User, Password: cfg.Password, Users: cfg.Users, Subjects: cfg.Subjects,
			TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, TLSCA: cfg.TLSCA,
			Logger: cfg.Logger,
		}
		if cfg.Routes {
			sc.ClusterListen = "127.0.0.1:0"
		}
		var proxy *gatewayProxy
		if len(cfg.Sites) > 1 {
			sc.GatewayListen = "127.0.0.1:0"
			sc.Gateways = map[string][]string{}
			for s, u := range gateways { // the sites started before this one
				sc.Gateways[s] = u
			}
			if cfg.Cuttable {
				var err error
				if proxy, err = startGatewayProxy(site); err != nil {
					return fail(err)
				}
				ss.proxies[site] = proxy
				sc.GatewayAdvertise = proxy.addr()
			}
		}
		if cfg.Monitoring {
			sc.HTTPListen = "127.0.0.1:0"
		}
		s, err := StartServer(ctx, sc)
		if err != nil {
			return fail(err)
		}
		ss.Servers = append(ss.Servers, s)
		ss.bySite[site] = s
		switch {
		case proxy != nil:
			proxy.mu.Lock()
			proxy.target = s.nats().GatewayAddr().String()
			proxy.mu.Unlock()
			gateways[site] = []string{"nats://" + proxy.addr()}
		case s.GatewayURL() != "":
			gateways[site] = []string{s.GatewayURL()}
		}
	}
	if err := ss.WaitConnected(ctx); err != nil {
		return fail(err)
	}
	return ss, nil
}

// Server returns the node of site (nil if there is none).
func (ss *Sites) Server(site string) *Server { return ss.bySite[site] }

// WaitConnected waits until every node has a gateway to every other site.
func (ss *Sites) WaitConnected(ctx context.Context) error {
	for _, s := range ss.Servers {
		if err := s.WaitGateways(ctx, len(ss.Servers)-1); err != nil {
			return err
		}
	}
	return nil
}

// Cut partitions site from every other site: its gateway connections are
// dropped and refused, both ways, while its own clients stay connected to
// it (needs SitesConfig.Cuttable).
func (ss *Sites) Cut(site string) error {
	if err := ss.cuttable(site); err != nil {
		return err
	}
	for s, p := range ss.proxies {
		if s == site {
			p.block("")
		} else {
			p.block(site)
		}
	}
	return nil
}

// Heal undoes Cut; the servers reconnect their gateways by themselves
// (WaitConnected waits for it).
func (ss *Sites) Heal(site string) error {
	if err := ss.cuttable(site); err != nil {
		return err
	}
	for s, p := range ss.proxies {
		if s == site {
			p.unblock("")
		} else {
			p.unblock(site)
		}
	}
	return nil
}

func (ss *Sites) cuttable(site string) error {
	if ss.bySite[site] == nil {
		return fmt.Errorf("bus: no site %q", site)
	}
	if len(ss.proxies) == 0 {
		return errors.New("bus: sites were not started Cuttable")
	}
	return nil
}

// Shutdown stops every node and proxy.
func (ss *Sites) Shutdown() {
	for _, s := range ss.Servers {
		s.Shutdown()
	}
	for _, p := range ss.proxies {
		p.close()
	}
}
