package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// DefaultReadyTimeout bounds how long Start waits for the server to accept
// connections when the context carries no deadline.
const DefaultReadyTimeout = 10 * time.Second

// ServerConfig describes one embedded nats-server node (SPEC §8, `quarry bus`).
// The zero value of an optional field leaves the nats-server default.
type ServerConfig struct {
	// Name is the server name, unique in the whole deployment (required).
	Name string
	// Site is the site this node serves: it is the route cluster name and
	// the gateway name, so nodes of one site form one NATS cluster and
	// sites are joined by gateways (required).
	Site string
	// Listen is the client address host:port. Port 0 picks a free port.
	Listen string
	// ClusterListen is the route address host:port of this node ("" = no
	// routes). Port 0 picks a free port.
	ClusterListen string
	// Routes are the route URLs of the other nodes of this site
	// (nats-route://host:port or host:port).
	Routes []string
	// GatewayListen is the gateway address host:port ("" = no gateway).
	GatewayListen string
	// GatewayAdvertise is the host:port other sites are told to dial for
	// this node's gateway ("" = the listen address): behind NAT, in
	// containers, or through a proxy.
	GatewayAdvertise string
	// Gateways maps a remote site to its gateway URLs.
	Gateways map[string][]string
	// HTTPListen is the monitoring address host:port ("" = none); it serves
	// nats-server's /healthz, /varz, /connz, /routez, /gatewayz.
	HTTPListen string
	// User and Password, when set, turn on authentication: they name the
	// admin user (every permission), and routes and gateways of this
	// deployment authenticate with the same credentials.
	User, Password string
	// Users are per-role users (see Role). Setting any turns on
	// authentication.
	Users []User
	// Subjects is the subject scheme the role permissions are built for.
	Subjects Subjects
	// TLSCert and TLSKey (PEM files), when set, make every connection of
	// this node TLS-only (SPEC §11: optional TLS on NATS): client
	// connections (clients trust the node with ConnectOptions.TLSCA), the
	// monitoring endpoint (HTTPS), and routes and gateways, which are
	// mutual TLS — both ends present TLSCert and verify the other's
	// against TLSCA, which they then require.
	TLSCert, TLSKey string
	// TLSCA is the PEM file of the CA that signed the deployment's
	// certificates (needed with TLSCert when routes or gateways are on).
	TLSCA string
	// MaxPayload overrides the maximum message size (default 1 MiB).
	MaxPayload int32
	// Logger receives the server's log lines (default slog.Default()).
	Logger *slog.Logger
}

// Server is a running embedded nats-server node.
type Server struct {
	cfg ServerConfig

	mu sync.RWMutex
	ns *server.Server
	// The addresses the node bound at its first start; Restart binds them
	// again so clients and other nodes find it where it was.
	listen, clusterListen, gatewayListen, httpListen string
}

// parseListen splits host:port; port 0 becomes nats-server's random port.
func parseListen(what, addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s address %q: %w", what, addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("%s address %q: bad port", what, addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return host, port, nil
}

// parseURL accepts scheme://host:port or host:port (given scheme), and adds
// user credentials when the URL has none.
func parseURL(what, s, scheme, user, pass string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = scheme + "://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s URL %q: %w", what, s, err)
	}
	if u.Host == "" || u.Port() == "" {
		return nil, fmt.Errorf("%s URL %q: want host:port", what, s)
	}
	if u.User == nil && user != "" {
		u.User = url.UserPassword(user, pass)
	}
	return u, nil
}

// ParseGateways parses `--gateways` values "site=url[,url…]" into a site →
// URLs map. Repeated values for one site add URLs, and a value without
// "site=" adds a URL to the site before it (so "site2=nats://a:1,nats://b:1"
// works after a comma-splitting flag parser).
func ParseGateways(values []string) (map[string][]string, error) {
	out := map[string][]string{}
	prev := ""
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		site, urls, ok := strings.Cut(v, "=")
		if !ok && prev != "" && strings.Contains(v, "://") {
			out[prev] = append(out[prev], v)
			continue
		}
		if !ok || urls == "" {
			return nil, fmt.Errorf("gateway %q: want site=nats://host:port", v)
		}
		if err := ValidToken("site", site); err != nil {
			return nil, fmt.Errorf("gateway %q: %w", v, err)
		}
		for _, u := range strings.Split(urls, ",") {
			if u = strings.TrimSpace(u); u != "" {
				out[site] = append(out[site], u)
			}
		}
		prev = site
	}
	return out, nil
}

// options translates the config into nats-server options, validating it.
func (c ServerConfig) options() (*server.Options, error) {
	if c.Name == "" {
		return nil, errors.New("bus: server name is required")
	}
	if err := ValidToken("site", c.Site); err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	if (c.User == "") != (c.Password == "") {
		return nil, errors.New("bus: --user and --password go together")
	}
	o := &server.Options{
		ServerName: c.Name,
		NoSigs:     true,
		MaxPayload: c.MaxPayload,
	}
	listen := c.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	var err error
	if o.Host, o.Port, err = parseListen("listen", listen); err != nil {
		return nil, err
	}
	if c.ClusterListen != "" {
		o.Cluster.Name = c.Site
		if o.Cluster.Host, o.Cluster.Port, err = parseListen("cluster", c.ClusterListen); err != nil {
			return nil, err
		}
		o.Cluster.Username, o.Cluster.Password = c.User, c.Password
		for _, r := range c.Routes {
			if r = strings.TrimSpace(r); r == "" {
				continue
			}
			u, err := parseURL("route", r, "nats-route", c.User, c.Password)
			if err != nil {
				return nil, err
			}
			o.Routes = append(o.Routes, u)
		}
	} else if len(c.Routes) > 0 {
		return nil, errors.New("bus: --routes needs --cluster-listen")
	}
	if c.GatewayListen != "" {
		o.Gateway.Name = c.Site
		if o.Gateway.Host, o.Gateway.Port, err = parseListen("gateway", c.GatewayListen); err != nil {
			return nil, err
		}
		o.Gateway.Username, o.Gateway.Password = c.User, c.Password
		o.Gateway.Advertise = c.GatewayAdvertise
		sites := make([]string, 0, len(c.Gateways))
		for s := range c.Gateways {
			sites = append(sites, s)
		}
		sort.Strings(sites)
		for _, site := range sites {
			if err := ValidToken("site", site); err != nil {
				return nil, fmt.Errorf("bus: gateway: %w", err)
			}
			if site == c.Site {
				continue // a site's own gateway URL is allowed and ignored
			}
			rg := &server.RemoteGatewayOpts{Name: site}
			for _, s := range c.Gateways[site] {
				u, err := parseURL("gateway "+site, s, "nats", c.User, c.Password)
				if err != nil {
					return nil, err
				}
				rg.URLs = append(rg.URLs, u)
			}
			o.Gateway.Gateways = append(o.Gateway.Gateways, rg)
		}
		// Gateways need a cluster name; a single node is a cluster of one.
		if o.Cluster.Name == "" {
			o.Cluster.Name = c.Site
		}
	} else if len(c.Gateways) > 0 {
		return nil, errors.New("bus: --gateways needs --gateway-listen")
	}
	if err := c.tlsOptions(o); err != nil {
		return nil, err
	}
	if c.HTTPListen != "" {
		if o.HTTPHost, o.HTTPPort, err = parseListen("http", c.HTTPListen); err != nil {
			return nil, err
		}
		if o.TLS { // monitoring over HTTPS, with the client port's certificate
			o.HTTPSPort, o.HTTPPort = o.HTTPPort, 0
		}
	}
	if c.User != "" || len(c.Users) > 0 {
		users, err := buildUsers(c.Subjects, c.User, c.Password, c.Users)
		if err != nil {
			return nil, fmt.Errorf("bus: %w", err)
		}
		o.Users = users
	}
	if err := c.checkLinkAuth(o); err != nil {
		return nil, err
	}
	if err := c.checkOpenBus(o); err != nil {
		return nil, err
	}
	return o, nil
}

// ErrOpenBus: a bus without users listening where other machines reach it
// (review M8): every process and anyone on the network could publish and
// subscribe to every subject, undoing SPEC §6's per-role permissions.
var ErrOpenBus = errors.New("a bus without users may listen on loopback addresses only")

// checkOpenBus refuses a bus without any user (no --user, no --role-user)
// whose client, route or gateway listener is not on a loopback address, as
// the HTTP roles refuse a non-loopback address without a token: before it
// listens, with the fix in the message.
func (c ServerConfig) checkOpenBus(o *server.Options) error {
	if c.User != "" || len(c.Users) > 0 {
		return nil
	}
	for _, l := range []struct{ flag, host string }{{"--listen", o.Host}, {"--cluster-listen", o.Cluster.Host}, {"--gateway-listen", o.Gateway.Host}} {
		if l.host == "" {
			continue
		}
		if ip := net.ParseIP(l.host); l.host == "localhost" || ip != nil && ip.IsLoopback() {
			continue
		}
		return fmt.Errorf("bus: %s on %s: %w; give --user and --password (and --role-user for each process), or listen on 127.0.0.1", l.flag, l.host, ErrOpenBus)
	}
	return nil
}

// ErrOpenLink: a route or gateway listener of a bus whose clients need
// users, with neither credentials of its own nor mutual TLS (review N3).
var ErrOpenLink = errors.New("route or gateway listener without credentials or mutual TLS")

// checkLinkAuth refuses route and gateway listeners that would accept
// anyone while the client port needs a user: per-role permissions bind
// client connections only, so a rogue node joining an open route or
// gateway reads and publishes every subject (forged fixup tasks included).
// Routes and gateways authenticate with the admin user (User/Password) or
// mutual TLS (TLSCert, TLSKey and TLSCA). A bus with no user at all is open
// anyway (review M8).
func (c ServerConfig) checkLinkAuth(o *server.Options) error {
	if len(c.Users) == 0 || c.User != "" {
		return nil
	}
	for _, l := range []struct {
		flag, addr string
		tls        bool
	}{{"--cluster-listen", c.ClusterListen, o.Cluster.TLSConfig != nil}, {"--gateway-listen", c.GatewayListen, o.Gateway.TLSConfig != nil}} {
		if l.addr != "" && !l.tls {
			return fmt.Errorf("bus: %s %s with --role-user users: %w; give the bus --user and --password (routes and gateways authenticate with them) or mutual TLS (--tls-cert, --tls-key, --tls-ca), or anyone who reaches that port passes every role's permissions", l.flag, l.addr, ErrOpenLink)
		}
	}
	return nil
}

// tlsOptions turns TLSCert, TLSKey and TLSCA into nats-server's TLS
// options: TLS on the client port, and mutual TLS on routes and gateways.
func (c ServerConfig) tlsOptions(o *server.Options) error {
	files := tlsconfig.Files{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSCA}
	if !files.Serving() {
		if c.TLSCA != "" {
			return errors.New("bus: --tls-ca needs --tls-cert and --tls-key (a node with a CA but no certificate would serve plain text)")
		}
		return nil
	}
	srv, err := files.Server()
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	o.TLS, o.TLSTimeout, o.TLSConfig = true, tlsTimeout, srv
	if c.ClusterListen == "" && c.GatewayListen == "" {
		return nil
	}
	mutual, err := files.Mutual(tlsconfig.LinkRoles...)
	if errors.Is(err, tlsconfig.ErrNoCA) {
		return errors.New("bus: routes and gateways with --tls-cert need --tls-ca: they are mutual TLS between the deployment's servers")
	}
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	if c.ClusterListen != "" {
		o.Cluster.TLSConfig, o.Cluster.TLSTimeout = mutual.Clone(), tlsTimeout
	}
	if c.GatewayListen != "" {
		o.Gateway.TLSConfig, o.Gateway.TLSTimeout = mutual.Clone(), tlsTimeout
	}
	return nil
}

// tlsTimeout bounds a TLS handshake on every port, in seconds.
const tlsTimeout = 2

// StartServer starts an embedded nats-server node and waits until it accepts
// connections, up to ctx's deadline (DefaultReadyTimeout without one). On
// any failure nothing is left running.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	ns, err := startNATS(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, ns: ns, listen: ns.Addr().String()}
	if a := ns.ClusterAddr(); a != nil {
		s.clusterListen = a.String()
	}
	if a := ns.GatewayAddr(); a != nil {
		s.gatewayListen = a.String()
	}
	if a := ns.MonitorAddr(); a != nil {
		s.httpListen = a.String()
	}
	return s, nil
}

// Restart starts a shut-down node again on the addresses it had, with the
// same configuration: its clients (which reconnect forever) come back, and
// routes and gateways are re-established. Tests use Shutdown + Restart to
// cut a site off and heal it.
func (s *Server) Restart(ctx context.Context) error {
	cfg := s.cfg
	cfg.Listen = s.listen
	if s.clusterListen != "" {
		cfg.ClusterListen = s.clusterListen
	}
	if s.gatewayListen != "" {
		cfg.GatewayListen = s.gatewayListen
	}
	if s.httpListen != "" {
		cfg.HTTPListen = s.httpListen
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ns.Running() {
		return fmt.Errorf("bus: restart %s: still running", s.cfg.Name)
	}
	ns, err := startNATS(ctx, cfg)
	if err != nil {
		return err
	}
	s.ns = ns
	return nil
}

func startNATS(ctx context.Context, cfg ServerConfig) (*server.Server, error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: new nats server %s: %w", cfg.Name, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	nl := &natsLogger{log: log.With("nats", cfg.Name, "site", cfg.Site), fatal: make(chan string, 1)}
	ns.SetLoggerV2(nl, false, false, false)
	ns.Start()
	wait := DefaultReadyTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	deadline := time.Now().Add(wait)
	for !ns.ReadyForConnections(25 * time.Millisecond) {
		fail := ""
		select {
		case msg := <-nl.fatal: // e.g. a listen address in use: fail now, clearly
			fail = msg
		default:
			if time.Now().After(deadline) {
				fail = fmt.Sprintf("not ready within %s", wait.Round(time.Millisecond))
			}
		}
		if fail != "" {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("bus: nats server %s: %s", cfg.Name, fail)
		}
	}
	return ns, nil
}

func (s *Server) nats() *server.Server {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ns
}

// ClientURL is the URL clients connect to (without credentials).
func (s *Server) ClientURL() string { return s.nats().ClientURL() }

// ClusterURL is the route URL other nodes of this site list in Routes ("" if
// routes are off).
func (s *Server) ClusterURL() string {
	a := s.nats().ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats-route://" + a.String()
}

// GatewayURL is the URL other sites list in Gateways ("" if gateways are off).
func (s *Server) GatewayURL() string {
	a := s.nats().GatewayAddr()
	if a == nil {
		return ""
	}
	return "nats://" + a.String()
}

// MonitorURL is the base URL of the monitoring endpoint ("" if off);
// MonitorURL()+"/healthz" is the health check.
func (s *Server) MonitorURL() string {
	a := s.nats().MonitorAddr()
	if a == nil {
		return ""
	}
	if s.cfg.TLSCert != "" {
		return "https://" + a.String()
	}
	return "http://" + a.String()
}

// Name is the server name; Site its site.
func (s *Server) Name() string { return s.cfg.Name }

// Site is the site (cluster and gateway name) of this node.
func (s *Server) Site() string { return s.cfg.Site }

// NATS returns the underlying nats-server for monitoring and tests.
func (s *Server) NATS() *server.Server { return s.nats() }

// RoutedServers is the number of other nodes of this site this node has
// routes to (nats-server pools several route connections per node).
func (s *Server) RoutedServers() int {
	rz, err := s.nats().Routez(&server.RoutezOptions{})
	if err != nil || rz == nil {
		return 0
	}
	ids := map[string]bool{}
	for _, r := range rz.Routes {
		ids[r.RemoteID] = true
	}
	return len(ids)
}

// WaitRoutes waits until this node has routes to at least n other nodes.
func (s *Server) WaitRoutes(ctx context.Context, n int) error {
	return pollUntil(ctx, func() bool { return s.RoutedServers() >= n },
		func() error {
			return fmt.Errorf("bus: %s has routes to %d nodes, want %d", s.cfg.Name, s.RoutedServers(), n)
		})
}

// WaitGateways waits until this node has outbound gateways to at least n
// other sites.
func (s *Server) WaitGateways(ctx context.Context, n int) error {
	return pollUntil(ctx, func() bool { return s.nats().NumOutboundGateways() >= n },
		func() error {
			return fmt.Errorf("bus: %s has %d outbound gateways, want %d", s.cfg.Name, s.nats().NumOutboundGateways(), n)
		})
}

// Shutdown stops the server: clients are disconnected and every listener is
// closed when it returns. It is safe to call more than once.
func (s *Server) Shutdown() {
	ns := s.nats()
	ns.Shutdown()
	ns.WaitForShutdown()
}

func pollUntil(ctx context.Context, ok func() bool, fail func() error) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if ok() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", fail(), ctx.Err())
		case <-t.C:
		}
	}
}

// natsLogger sends nats-server's log lines to slog.
type natsLogger struct {
	log   *slog.Logger
	fatal chan string // the first fatal message, for StartServer
}

func (l *natsLogger) Noticef(f string, v ...any) { l.log.Info(fmt.Sprintf(f, v...)) }
func (l *natsLogger) Warnf(f string, v ...any)   { l.log.Warn(fmt.Sprintf(f, v...)) }
func (l *natsLogger) Fatalf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default:
	}
}
func (l *natsLogger) Errorf(f string, v ...any) { l.log.Error(fmt.Sprintf(f, v...)) }
func (l *natsLogger) Debugf(f string, v ...any) { l.log.Debug(fmt.Sprintf(f, v...)) }
func (l *natsLogger) Tracef(f string, v ...any) { l.log.Debug(fmt.Sprintf(f, v...)) }
