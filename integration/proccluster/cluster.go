// Package proccluster runs a quarry cluster as real `quarry` processes on
// loopback — a NATS node per site (`quarry bus`) joined by gateways,
// managers (`quarry manager`), peers (`quarry peer`) and search heads
// (`quarry searchhead`) — each with its own data dir and log file under one
// folder and ports the OS chose. Any process can be killed, paused, resumed
// and restarted from its data dir with the same flags, and the gateways
// between the sites can run through Links that cut the sites apart.
//
// It is the one launcher of real processes: `make bench` (cluster part)
// and `make chaos` use it. The in-process harness is package integration.
package proccluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/manager"
)

// Head is a search head to start: its id and site (site0: no affinity).
type Head struct{ ID, Site string }

// Options shape a cluster.
type Options struct {
	Bin string // the quarry binary
	Dir string // folder for data dirs and logs (created)
	// Sites, default site1, site2; PeersPerSite default 3 (ids
	// <site>-p<n>).
	Sites        []string
	PeersPerSite int
	// Managers: 1 (m1 on the first site) or 3 (m1, m2 on the first two
	// sites, m3 a witness on every site's node); default 1.
	Managers int
	Heads    []Head
	// Tokens: the managers' admin token (default "proc-admin") and a HEC
	// token seeded at bootstrap (default "proc-hec").
	AdminToken, HECToken string
	// RF and SF, Splunk syntax; default origin:2,total:3 and
	// origin:1,total:2.
	RF, SF string
	// Extra flags per role.
	ManagerArgs, PeerArgs, HeadArgs []string
	// CuttableGateways routes each site's inbound gateway traffic
	// through a Link (Cluster.Links) so the sites can be cut apart.
	CuttableGateways bool
	// PrepareDataDir, when set, is called with each manager's and peer's
	// data dir before its first start (e.g. to mount a file system there).
	PrepareDataDir func(name, dir string) error
	// StartTimeout bounds each wait for a process to become healthy
	// (default 90 s).
	StartTimeout time.Duration
	Logger       *slog.Logger
}

func (o *Options) defaults() {
	if len(o.Sites) == 0 {
		o.Sites = []string{"site1", "site2"}
	}
	if o.PeersPerSite == 0 {
		o.PeersPerSite = 3
	}
	if o.Managers == 0 {
		o.Managers = 1
	}
	if o.AdminToken == "" {
		o.AdminToken = "proc-admin"
	}
	if o.HECToken == "" {
		o.HECToken = "proc-hec"
	}
	if o.RF == "" {
		o.RF = "origin:2,total:3"
	}
	if o.SF == "" {
		o.SF = "origin:1,total:2"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 90 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Cluster is a running set of processes.
type Cluster struct {
	Opts     Options
	Buses    []*Proc // one per site, in Sites order
	Managers []*Proc
	Peers    []*Proc // site by site
	Heads    []*Proc
	Links    []*Link // with CuttableGateways: one per site, into its node

	busHTTP  map[string]string // bus name → monitoring URL
	stopOnce sync.Once
}

// freePorts returns n distinct loopback addresses, each listener held
// until all are chosen.
func freePorts(n int) ([]string, error) {
	lns, err := listenN(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(lns))
	for i, ln := range lns {
		out[i] = ln.Addr().String()
		ln.Close()
	}
	return out, nil
}

// listenN opens n loopback listeners on ports the OS chooses. Whoever
// must listen in this process (a Link) keeps its listener; the addresses
// meant for child processes are closed only once every port is chosen,
// so no two of them, and no in-process listener, share a port.
func listenN(n int) ([]net.Listener, error) {
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// Start launches every process and waits until each is healthy. On an
// error everything already started is stopped.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	o.defaults()
	if o.Managers != 1 && o.Managers != 3 {
		return nil, fmt.Errorf("proccluster: %d managers: want 1 or 3", o.Managers)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{Opts: o, busHTTP: map[string]string{}}
	fail := func(err error) (*Cluster, error) { c.Stop(); return nil, err }
	if err := c.startBuses(ctx); err != nil {
		return fail(err)
	}
	if err := c.startManagers(ctx); err != nil {
		return fail(err)
	}
	if err := c.startPeers(ctx); err != nil {
		return fail(err)
	}
	if err := c.startHeads(ctx); err != nil {
		return fail(err)
	}
	return c, nil
}

func (c *Cluster) newProc(name, role, site, url, dataDir string, args []string) *Proc {
	return &Proc{Name: name, Role: role, Site: site, URL: url, DataDir: dataDir, bin: c.Opts.Bin,
		logPath: filepath.Join(c.Opts.Dir, name+".log"), args: args, log: c.Opts.Logger}
}

func (c *Cluster) busName(site string) string { return "nats-" + site }

func (c *Cluster) startBuses(ctx context.Context) error {
	n := len(c.Opts.Sites)
	// client, gateway, monitoring per node, and the link into each site:
	// a link listens here, in this process, on a port of the same batch
	// (a port chosen after the batch was freed could be one of the
	// nodes' and stop that node from starting).
	lns, err := listenN(4 * n)
	if err != nil {
		return err
	}
	addrs := make([]string, 3*n)
	for i := range addrs {
		addrs[i] = lns[i].Addr().String()
		lns[i].Close()
	}
	gw := map[string]string{} // site → the address other sites dial
	for i, site := range c.Opts.Sites {
		gw[site] = addrs[3*i+1]
		if !c.Opts.CuttableGateways {
			lns[3*n+i].Close()
			continue
		}
		l := newLink("gateway-into-"+site, lns[3*n+i], addrs[3*i+1], c.Opts.Logger)
		c.Links = append(c.Links, l)
		gw[site] = l.Addr()
	}
	for i, site := range c.Opts.Sites {
		name := c.busName(site)
		args := []string{"bus", "--name", name, "--site", site, "--listen", addrs[3*i], "--http-listen", addrs[3*i+2]}
		if n > 1 {
			args = append(args, "--gateway-listen", addrs[3*i+1], "--gateway-advertise", gw[site])
			for _, other := range c.Opts.Sites {
				if other != site {
					args = append(args, "--gateways", other+"=nats://"+gw[other])
				}
			}
		}
		p := c.newProc(name, "bus", site, "nats://"+addrs[3*i], "", args)
		c.busHTTP[name] = "http://" + addrs[3*i+2]
		c.Buses = append(c.Buses, p)
		if err := p.Start(); err != nil {
			return err
		}
	}
	for _, p := range c.Buses {
		if err := c.WaitHealthy(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) busURL(site string) string {
	for _, b := range c.Buses {
		if b.Site == site {
			return b.URL
		}
	}
	return c.Buses[0].URL
}

func (c *Cluster) allBusURLs() string {
	var us []string
	for _, b := range c.Buses {
		us = append(us, b.URL)
	}
	return strings.Join(us, ",")
}

func (c *Cluster) startManagers(ctx context.Context) error {
	o := c.Opts
	addrs, err := freePorts(2 * o.Managers) // raft, http
	if err != nil {
		return err
	}
	var boot []string
	for i := 0; i < o.Managers; i++ {
		boot = append(boot, fmt.Sprintf("m%d=%s", i+1, addrs[2*i]))
	}
	for i := 0; i < o.Managers; i++ {
		id := fmt.Sprintf("m%d", i+1)
		site, nats := "witness", c.allBusURLs()
		if i < len(o.Sites) && (o.Managers == 1 || i < 2) {
			site, nats = o.Sites[i], c.busURL(o.Sites[i])
		}
		dir := filepath.Join(o.Dir, id)
		args := []string{"manager", "--id", id, "--site", site, "--data-dir", dir, "--raft-addr", addrs[2*i],
			"--http-addr", addrs[2*i+1], "--nats", nats, "--admin-token", o.AdminToken, "--bootstrap", strings.Join(boot, ","),
			"--hec-token", o.HECToken}
		if len(o.Sites) > 1 {
			args = append(args, "--sites", strings.Join(o.Sites, ","), "--site-replication-factor", o.RF, "--site-search-factor", o.SF)
		}
		args = append(args, o.ManagerArgs...)
		p := c.newProc(id, "manager", site, "http://"+addrs[2*i+1], dir, args)
		c.Managers = append(c.Managers, p)
		if err := c.prepare(p); err != nil {
			return err
		}
		if err := p.Start(); err != nil {
			return err
		}
	}
	for _, p := range c.Managers {
		if err := c.WaitHealthy(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) prepare(p *Proc) error {
	if err := os.MkdirAll(p.DataDir, 0o755); err != nil {
		return err
	}
	if c.Opts.PrepareDataDir != nil {
		return c.Opts.PrepareDataDir(p.Name, p.DataDir)
	}
	return nil
}

func (c *Cluster) startPeers(ctx context.Context) error {
	o := c.Opts
	addrs, err := freePorts(len(o.Sites) * o.PeersPerSite)
	if err != nil {
		return err
	}
	for si, site := range o.Sites {
		for i := 1; i <= o.PeersPerSite; i++ {
			id := fmt.Sprintf("%s-p%d", site, i)
			addr := addrs[si*o.PeersPerSite+i-1]
			dir := filepath.Join(o.Dir, id)
			args := append([]string{"peer", "--id", id, "--site", site, "--data-dir", dir, "--http-addr", addr,
				"--nats", c.busURL(site), "--token", o.AdminToken}, o.PeerArgs...)
			p := c.newProc(id, "peer", site, "http://"+addr, dir, args)
			c.Peers = append(c.Peers, p)
			if err := c.prepare(p); err != nil {
				return err
			}
			if err := p.Start(); err != nil {
				return err
			}
		}
	}
	for _, p := range c.Peers {
		if err := c.WaitHealthy(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startHeads(ctx context.Context) error {
	addrs, err := freePorts(len(c.Opts.Heads))
	if err != nil {
		return err
	}
	for i, h := range c.Opts.Heads {
		nats := c.allBusURLs()
		for _, s := range c.Opts.Sites {
			if s == h.Site {
				nats = c.busURL(s)
			}
		}
		args := append([]string{"searchhead", "--id", h.ID, "--site", h.Site, "--http-addr", addrs[i], "--nats", nats},
			c.Opts.HeadArgs...)
		p := c.newProc(h.ID, "searchhead", h.Site, "http://"+addrs[i], "", args)
		c.Heads = append(c.Heads, p)
		if err := p.Start(); err != nil {
			return err
		}
	}
	for _, p := range c.Heads {
		if err := c.WaitHealthy(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// All is every process: buses, managers, peers, search heads.
func (c *Cluster) All() []*Proc {
	var out []*Proc
	for _, g := range [][]*Proc{c.Buses, c.Managers, c.Peers, c.Heads} {
		out = append(out, g...)
	}
	return out
}

// Proc is the process of that name, or nil.
func (c *Cluster) Proc(name string) *Proc {
	for _, p := range c.All() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// healthURL is where a process answers 200 when it is ready.
func (c *Cluster) healthURL(p *Proc) string {
	if p.Role == "bus" {
		return c.busHTTP[p.Name] + "/healthz"
	}
	return p.URL + "/healthz"
}

var healthClient = &http.Client{Timeout: 2 * time.Second}

// Healthy says whether p answers its health check now.
func (c *Cluster) Healthy(ctx context.Context, p *Proc) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.healthURL(p), nil)
	if err != nil {
		return err
	}
	res, err := healthClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: health %d", p.Name, res.StatusCode)
	}
	return nil
}

// WaitHealthy waits (up to Options.StartTimeout) until p answers its
// health check; it fails at once if p exits.
func (c *Cluster) WaitHealthy(ctx context.Context, p *Proc) error {
	err := WaitFor(ctx, c.Opts.StartTimeout, func() error {
		if !p.Running() {
			return fmt.Errorf("%w (see %s)", ErrNotRunning, p.LogPath())
		}
		return c.Healthy(ctx, p)
	})
	if err != nil {
		return fmt.Errorf("%s not healthy: %w", p.Name, err)
	}
	return nil
}

// WaitFor polls cond every 100 ms (testutil.Poll) until it returns nil, ctx
// ends or d passes; the error then says what cond said last. ErrNotRunning
// from cond ends the wait at once.
func WaitFor(ctx context.Context, d time.Duration, cond func() error) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last error
	err := testutil.Poll(wctx, 100*time.Millisecond, func() error {
		if last = cond(); errors.Is(last, ErrNotRunning) {
			cancel()
		}
		return last
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(last, ErrNotRunning):
		return last
	case ctx.Err() != nil:
		return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
	}
	return fmt.Errorf("not within %s: %w", d, last)
}

// ManagerClient is a client of the managers that are running and not
// paused (a paused one would hold every call until its timeout).
func (c *Cluster) ManagerClient(timeout time.Duration) (*manager.Client, error) {
	var urls []string
	for _, m := range c.Managers {
		if m.Running() && !m.Paused() {
			urls = append(urls, m.URL)
		}
	}
	if len(urls) == 0 {
		return nil, errors.New("no manager is running")
	}
	return manager.NewClient(urls, c.Opts.AdminToken, timeout)
}

// Stop ends every process (search heads first, buses last) and closes the
// links. It is safe to call more than once and from a signal handler.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		var wg sync.WaitGroup
		for _, g := range [][]*Proc{c.Heads, c.Peers, c.Managers, c.Buses} {
			for _, p := range g {
				wg.Add(1)
				go func() { defer wg.Done(); p.Stop(20 * time.Second) }()
			}
			wg.Wait()
		}
		for _, l := range c.Links {
			l.Close()
		}
	})
}
