// Package devcluster runs a whole multisite quarry cluster in one process on
// 127.0.0.1 — the cluster of `quarry dev`: three managers (one per site and
// a witness) with real Raft on BoltDB, peers with real bucket files, one
// embedded NATS node per site joined by gateways, and a search head per site
// plus one for site0. Everything lives under one data folder; the addresses
// chosen at the first start are kept in DATA/dev.json, so a second start on
// the same folder resumes the same cluster (Raft remembers its members'
// addresses) instead of bootstrapping a new one.
//
// It sits on the top floor with cmd/quarry and the integration harness: it
// imports the roles (manager, peer, searchhead) and never the other way.
package devcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/searchhead"
)

const (
	SampleIndex = "sample"
	// SubscriberUser is a bus user of role subscriber (bus.RoleSubscriber:
	// it may only subscribe to published results and the generation
	// notices), so `nats sub` works against quarry dev as printed (issue
	// 29); its password is Secrets.Subscriber.
	SubscriberUser = "dev-sub"
)

// Secrets are a dev cluster's tokens and the subscriber's bus password:
// random at a cluster's first start (review L6, issue 25: no secret of
// quarry dev can be derived from the repository), kept in dev.json (mode
// 0600) so a resumed cluster keeps the tokens its managers were seeded
// with, and printed at every start. A fresh data folder — the default, a
// temporary one — means new secrets.
type Secrets struct {
	Admin string `json:"admin"`
	HEC   string `json:"hec"`
	// HECNoAck is a useACK=false token: shippers that send no channel
	// (the OpenTelemetry collector, Docker's log driver, syslog-ng) work
	// against quarry dev out of the box (issue 29).
	HECNoAck   string `json:"hec_noack"`
	Subscriber string `json:"subscriber"`
}

// newSecrets draws a cluster's secrets.
func newSecrets() Secrets {
	return Secrets{Admin: "dev-admin-" + randomSecret(), HEC: "dev-hec-" + randomSecret(),
		HECNoAck: "dev-hec-noack-" + randomSecret(), Subscriber: randomSecret()}
}

// legacySecrets are the fixed secrets of a dev cluster made before they
// were random: its managers were seeded with them.
var legacySecrets = Secrets{Admin: "dev-admin", HEC: "dev-hec", HECNoAck: "dev-hec-noack", Subscriber: "dev-sub"}

// Options shape a dev cluster.
type Options struct {
	DataDir      string // required
	Sites        int    // default 2
	PeersPerSite int    // default 3
	// PortBase, when not 0, gives fixed ports at the first start: managers'
	// HTTP PortBase+1…, Raft PortBase+11…, peers PortBase+21…, search heads
	// PortBase+41… (sh0 first). 0: the OS chooses. Later starts reuse the
	// ports recorded in dev.json whatever PortBase says.
	PortBase int
	Logger   *slog.Logger
	// RaftLog is where hashicorp/raft writes (default: discarded).
	RaftLog io.Writer
}

// Member is one process of the layout, as kept in dev.json.
type Member struct {
	ID       string `json:"id"`
	Site     string `json:"site"`
	HTTPAddr string `json:"http_addr"`
	RaftAddr string `json:"raft_addr,omitempty"`
}

// Layout is DATA/dev.json: the cluster's shape and addresses, and the
// sample data loaded (so a resumed cluster does not load it twice).
type Layout struct {
	Version      int       `json:"version"`
	Sites        []string  `json:"sites"`
	PeersPerSite int       `json:"peers_per_site"`
	Managers     []Member  `json:"managers"`
	Peers        []Member  `json:"peers"`
	Heads        []Member  `json:"search_heads"`
	Sample       *Sample   `json:"sample,omitempty"`
	Created      time.Time `json:"created"`
	// Secrets is nil in a dev.json written before secrets were random.
	Secrets *Secrets `json:"secrets,omitempty"`
}

// Tokens is the cluster's secrets (Layout.Secrets, or the fixed ones of a
// cluster made before they were random).
func (c *Cluster) Tokens() Secrets {
	if c.Layout.Secrets == nil {
		return legacySecrets
	}
	return *c.Layout.Secrets
}

// Sample records a sample load: started, and acknowledged in full.
type Sample struct {
	Index     string    `json:"index"`
	Events    int       `json:"events"`
	Status5xx int       `json:"status_5xx"`
	Errors    int       `json:"errors"`
	Rare      int       `json:"rare"`
	Base      time.Time `json:"base"`
	Seed      uint64    `json:"seed"`
	Acked     bool      `json:"acked"`
}

// Cluster is a running dev cluster: its processes (Procs, whose Mu also
// guards Layout's sample record) and its layout.
type Cluster struct {
	*Procs
	opts    Options
	log     *slog.Logger
	Layout  Layout
	Resumed bool
	Bus     *bus.Sites
	// natsPass are the bus passwords of this start, by process id.
	natsPass map[string]string
}

func layoutPath(dir string) string { return filepath.Join(dir, "dev.json") }

func (c *Cluster) saveLayout() error {
	b, err := json.MarshalIndent(c.Layout, "", "  ")
	if err != nil {
		return err
	}
	tmp := layoutPath(c.opts.DataDir) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, layoutPath(c.opts.DataDir))
}

// SaveSample records a sample load in dev.json.
func (c *Cluster) SaveSample(s Sample) error {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	c.Layout.Sample = &s
	return c.saveLayout()
}

func port(base, off int) string {
	if base == 0 {
		return "127.0.0.1:0"
	}
	return "127.0.0.1:" + strconv.Itoa(base+off)
}

// newLayout plans a first start.
func newLayout(o Options) Layout {
	sec := newSecrets()
	l := Layout{Version: 1, PeersPerSite: o.PeersPerSite, Created: time.Now().UTC(), Secrets: &sec}
	for i := 1; i <= o.Sites; i++ {
		l.Sites = append(l.Sites, "site"+strconv.Itoa(i))
	}
	mgrSites := []string{l.Sites[0], "witness", "witness"}
	if len(l.Sites) > 1 {
		mgrSites = []string{l.Sites[0], l.Sites[1], "witness"}
	}
	for i, s := range mgrSites {
		l.Managers = append(l.Managers, Member{ID: fmt.Sprintf("m%d", i+1), Site: s,
			HTTPAddr: port(o.PortBase, 1+i), RaftAddr: port(o.PortBase, 11+i)})
	}
	n := 0
	for _, s := range l.Sites {
		for i := 1; i <= o.PeersPerSite; i++ {
			n++
			l.Peers = append(l.Peers, Member{ID: fmt.Sprintf("p%d", n), Site: s, HTTPAddr: port(o.PortBase, 20+n)})
		}
	}
	l.Heads = append(l.Heads, Member{ID: "sh0", Site: "site0", HTTPAddr: port(o.PortBase, 41)})
	for i, s := range l.Sites {
		l.Heads = append(l.Heads, Member{ID: fmt.Sprintf("sh%d", i+1), Site: s, HTTPAddr: port(o.PortBase, 42+i)})
	}
	return l
}

// portsFree says whether every fixed address of the layout can be bound now.
func (l Layout) portsFree() bool {
	var all []Member
	all = append(append(append(all, l.Managers...), l.Peers...), l.Heads...)
	for _, m := range all {
		for _, a := range []string{m.HTTPAddr, m.RaftAddr} {
			if a == "" {
				continue
			}
			ln, err := net.Listen("tcp", a)
			if err != nil {
				return false
			}
			ln.Close()
		}
	}
	return true
}

// Start starts (or resumes, when DataDir holds a dev.json) the cluster and
// returns once every peer is Up and every search head serves. On failure
// everything started is stopped.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.DataDir == "" {
		return nil, errors.New("dev: a data folder is required")
	}
	if o.Sites == 0 {
		o.Sites = 2
	}
	if o.PeersPerSite == 0 {
		o.PeersPerSite = 3
	}
	if o.Sites < 1 || o.Sites > 9 || o.PeersPerSite < 1 || o.PeersPerSite > 9 {
		return nil, fmt.Errorf("dev: %d sites × %d peers: want 1–9 of each", o.Sites, o.PeersPerSite)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.RaftLog == nil {
		o.RaftLog = io.Discard
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("dev: data folder: %w", err)
	}
	c := &Cluster{Procs: NewProcs(), opts: o, log: o.Logger}
	b, err := os.ReadFile(layoutPath(o.DataDir))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &c.Layout); err != nil {
			return nil, fmt.Errorf("dev: %s: %w", layoutPath(o.DataDir), err)
		}
		if len(c.Layout.Sites) != o.Sites || c.Layout.PeersPerSite != o.PeersPerSite {
			return nil, fmt.Errorf("dev: %s holds a cluster of %d sites × %d peers, not %d × %d; use another --data-dir",
				o.DataDir, len(c.Layout.Sites), c.Layout.PeersPerSite, o.Sites, o.PeersPerSite)
		}
		c.Resumed = true
	case errors.Is(err, os.ErrNotExist):
		c.Layout = newLayout(o)
		if o.PortBase != 0 && !c.Layout.portsFree() {
			c.log.Warn("some of the fixed ports are taken; the OS chooses them instead", "port_base", o.PortBase)
			o.PortBase = 0
			c.Layout = newLayout(o)
		}
	default:
		return nil, fmt.Errorf("dev: %w", err)
	}
	if err := c.start(ctx); err != nil {
		c.Stop()
		if c.Resumed && errors.Is(err, syscall.EADDRINUSE) {
			// A resumed cluster keeps the addresses of dev.json (the managers'
			// Raft addresses are in their Raft configuration); one taken since
			// is the operator's to free. Ports the OS chose (--port-base 0) lie
			// in the ephemeral range, where any outgoing connection may take them.
			return nil, fmt.Errorf("%w (a port recorded in %s is taken now: free it, or start a new cluster in another --data-dir)", err, layoutPath(c.opts.DataDir))
		}
		return nil, err
	}
	return c, nil
}

// start starts the bus, the managers (bootstrapping the first when the
// cluster is new), the peers and the search heads, each kind waited for
// before the next, and saves the layout with the addresses they got.
func (c *Cluster) start(ctx context.Context) error {
	l := &c.Layout
	var err error
	users := c.busUsers()
	c.Bus, err = bus.StartSites(ctx, bus.SitesConfig{Sites: l.Sites, User: "dev-admin", Password: randomSecret(),
		Users: users, Logger: c.log.With("role", "bus")})
	if err != nil {
		return fmt.Errorf("dev: start the bus: %w", err)
	}
	seed, err := seedConfig(l, c.Tokens())
	if err != nil {
		return err
	}
	if err := c.startManagers(ctx, &seed); err != nil {
		return err
	}
	if err := c.waitManagers(ctx); err != nil {
		return err
	}
	if err := c.saveLayout(); err != nil { // the managers' addresses are now fixed in Raft
		return fmt.Errorf("dev: %w", err)
	}
	if err := c.startPeers(); err != nil {
		return err
	}
	if err := c.WaitPeersUp(ctx); err != nil {
		return err
	}
	if err := c.startHeads(ctx); err != nil {
		return err
	}
	return c.saveLayout()
}

// seedConfig is the cluster config a new dev cluster bootstraps with:
// site policies for several sites (plain factors for one), small hot
// buckets, the dev HEC tokens and the sample index.
func seedConfig(l *Layout, sec Secrets) (fsm.Config, error) {
	seed := fsm.DefaultConfig()
	seed.Sites = l.Sites
	if len(l.Sites) > 1 {
		seed.SiteReplicationFactor, _ = fsm.ParsePolicy("origin:2,total:3")
		seed.SiteSearchFactor, _ = fsm.ParsePolicy("origin:1,total:2")
	} else {
		seed.Sites = nil
		seed.ReplicationFactor = min(3, l.PeersPerSite)
		seed.SearchFactor = min(2, l.PeersPerSite)
	}
	seed.HeartbeatTimeout = 5 * time.Second
	seed.MaxHotBytes = 4 << 20 // the peers' roll size comes from the cluster config
	seed.HECTokens = []fsm.HECToken{{Token: sec.HEC, Ack: true, DefaultIndex: "main", Indexes: []string{"main", SampleIndex}},
		{Token: sec.HECNoAck, Ack: false, DefaultIndex: "main", Indexes: []string{"main", SampleIndex}}}
	seed.Indexes = append(seed.Indexes, fsm.IndexConfig{Name: SampleIndex})
	if err := seed.Validate(); err != nil {
		return seed, fmt.Errorf("dev: cluster config: %w", err)
	}
	return seed, nil
}

// startManagers starts the managers in layout order: on a new cluster the
// first bootstraps with seed and is waited for as leader, the others join
// it; a resumed cluster's managers find each other through Raft.
func (c *Cluster) startManagers(ctx context.Context, seed *fsm.Config) error {
	l := &c.Layout
	for i := range l.Managers {
		mem := &l.Managers[i]
		busSite := mem.Site
		if c.Bus.Server(busSite) == nil {
			busSite = l.Sites[0] // the witness uses the first site's node
		}
		dir := filepath.Join(c.opts.DataDir, mem.ID)
		cfg := manager.Config{ID: mem.ID, Site: mem.Site, DataDir: dir, RaftAddr: mem.RaftAddr, HTTPAddr: mem.HTTPAddr,
			NATS: c.Bus.Server(busSite).ClientURL(), NATSUser: mem.ID, NATSPassword: c.natsPass[mem.ID],
			AdminToken: c.Tokens().Admin, RaftLogLevel: "error", LogOutput: c.opts.RaftLog,
			Logger: c.log.With("role", "manager"), JoinTimeout: 60 * time.Second}
		if !c.Resumed {
			if i == 0 {
				cfg.Bootstrap = []manager.Server{{ID: mem.ID, RaftAddr: mem.RaftAddr}}
				cfg.Seed = seed
			} else {
				cfg.Join = "http://" + l.Managers[0].HTTPAddr
			}
		}
		m, err := c.StartManager(ctx, cfg)
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		mem.HTTPAddr, mem.RaftAddr = m.HTTPAddr(), m.RaftAddr()
	}
	return nil
}

// waitManagers waits until every manager knows all the others and one of
// them leads.
func (c *Cluster) waitManagers(ctx context.Context) error {
	if err := c.WaitManagers(ctx, len(c.Layout.Managers)); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	return nil
}

// startPeers starts the peers, each on its site's bus node.
func (c *Cluster) startPeers() error {
	l := &c.Layout
	for i := range l.Peers {
		mem := &l.Peers[i]
		p, err := c.StartPeer(peer.Config{ID: mem.ID, Site: mem.Site, DataDir: filepath.Join(c.opts.DataDir, mem.ID),
			HTTPAddr: mem.HTTPAddr, Searchable: true, Logger: c.log.With("role", "peer"),
			NATS: c.Bus.Server(mem.Site).ClientURL(), NATSUser: mem.ID, NATSPassword: c.natsPass[mem.ID],
			MaxHotBytes: 4 << 20, JoinTimeout: 60 * time.Second})
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		mem.HTTPAddr = p.Addr()
	}
	return nil
}

// startHeads starts the search heads, each on its site's bus node (one
// whose site has none, sh0, on the first site's).
func (c *Cluster) startHeads(ctx context.Context) error {
	l := &c.Layout
	for i := range l.Heads {
		mem := &l.Heads[i]
		busSite := mem.Site
		if c.Bus.Server(busSite) == nil {
			busSite = l.Sites[0]
		}
		h, err := c.StartHead(ctx, searchhead.Config{ID: mem.ID, Site: mem.Site, HTTPAddr: mem.HTTPAddr,
			NATS: c.Bus.Server(busSite).ClientURL(), NATSUser: mem.ID, NATSPassword: c.natsPass[mem.ID],
			Logger: c.log.With("role", "searchhead")})
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		mem.HTTPAddr = h.Addr()
	}
	return nil
}

// busUsers are the bus's users, one per process (SPEC §6, bus/DESIGN.md
// "Permissions"): each manager a manager user, each peer a peer user
// narrowed to its site and id, each search head a search head user
// narrowed to its name, all with passwords made afresh at every start
// (kept in c.natsPass for the processes).
func (c *Cluster) busUsers() []bus.User {
	l := &c.Layout
	c.natsPass = map[string]string{}
	var users []bus.User
	add := func(u bus.User) {
		u.Password = randomSecret()
		c.natsPass[u.Name] = u.Password
		users = append(users, u)
	}
	for _, m := range l.Managers {
		add(bus.User{Name: m.ID, Role: bus.RoleManager})
	}
	for _, p := range l.Peers {
		add(bus.User{Name: p.ID, Role: bus.RolePeer, Site: p.Site, Peer: p.ID})
	}
	for _, h := range l.Heads {
		add(bus.User{Name: h.ID, Role: bus.RoleSearchHead, Head: h.ID})
	}
	users = append(users, bus.User{Name: SubscriberUser, Password: c.Tokens().Subscriber, Role: bus.RoleSubscriber})
	return users
}

// BusURL is the client URL of a site's bus node (nats://127.0.0.1:port).
func (c *Cluster) BusURL(site string) string {
	if s := c.Bus.Server(site); s != nil {
		return s.ClientURL()
	}
	return ""
}

// randomSecret is 16 random bytes, hex.
func randomSecret() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b[:])
}

// WaitPeersUp waits (bounded by ctx) until the leader counts every peer Up.
func (c *Cluster) WaitPeersUp(ctx context.Context) error {
	return testutil.Poll(ctx, pollEvery, func() error {
		l := c.Leader()
		if l == nil {
			return errors.New("no manager leader")
		}
		var err error
		l.Read(func(s *fsm.State) {
			for _, mem := range c.Layout.Peers {
				p, ok := s.Peer(mem.ID)
				if !ok || p.State != fsm.StateUp {
					err = fmt.Errorf("peer %s is not Up yet", mem.ID)
					return
				}
			}
		})
		return err
	})
}

// Stop stops the search heads, peers, managers and the bus, in that order,
// each cleanly. It is safe to call more than once.
func (c *Cluster) Stop() {
	c.Procs.Stop(c.Bus)
	c.Bus = nil
}

// HeadURLs are the search heads' URLs by id.
func (c *Cluster) HeadURLs() map[string]string {
	out := map[string]string{}
	for _, m := range c.Layout.Heads {
		out[m.ID] = "http://" + m.HTTPAddr
	}
	return out
}

// DataDir is the cluster's data folder.
func (c *Cluster) DataDir() string { return c.opts.DataDir }
