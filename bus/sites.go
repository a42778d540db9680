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
	Logger         *slog.Logger
}

// StartSites starts one node per site (named "<site>-nats") and waits until
// every node has a gateway to every other site. On failure nothing is left
// running. The returned servers are in the order of cfg.Sites.
func StartSites(ctx context.Context, cfg SitesConfig) ([]*Server, error) {
	if len(cfg.Sites) == 0 {
		return nil, errors.New("bus: no sites")
	}
	seen := map[string]bool{}
	for _, site := range cfg.Sites {
		if err := ValidToken("site", site); err != nil {
			return nil, fmt.Errorf("bus: %w", err)
		}
		if seen[site] {
			return nil, fmt.Errorf("bus: site %q listed twice", site)
		}
		seen[site] = true
	}
	var started []*Server
	fail := func(err error) ([]*Server, error) {
		for _, s := range started {
			s.Shutdown()
		}
		return nil, err
	}
	gateways := map[string][]string{}
	for _, site := range cfg.Sites {
		sc := ServerConfig{
			Name: site + "-nats", Site: site, Listen: "127.0.0.1:0",
			User: cfg.User, Password: cfg.Password, Users: cfg.Users, Subjects: cfg.Subjects,
			Logger: cfg.Logger,
		}
		if len(cfg.Sites) > 1 {
			sc.GatewayListen = "127.0.0.1:0"
			sc.Gateways = map[string][]string{}
			for s, u := range gateways { // the sites started before this one
				sc.Gateways[s] = u
			}
		}
		if cfg.Monitoring {
			sc.HTTPListen = "127.0.0.1:0"
		}
		s, err := StartServer(ctx, sc)
		if err != nil {
			return fail(err)
		}
		started = append(started, s)
		if u := s.GatewayURL(); u != "" {
			gateways[site] = []string{u}
		}
	}
	for _, s := range started {
		if err := s.WaitGateways(ctx, len(cfg.Sites)-1); err != nil {
			return fail(err)
		}
	}
	return started, nil
}
