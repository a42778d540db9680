// Package integration is quarry's in-process cluster harness: three
// managers (site1, site2, witness) with real Raft and BoltDB, peers with real
// bucket files, one NATS node per site joined by gateways — all under a
// test's temporary folder — with faults: kill a peer abruptly and restart it
// from its data dir, kill a manager, cut a site's gateway. The cluster
// acceptance tests (cluster_*_test.go) build on it. Its processes are
// started, tracked and stopped by devcluster.Procs, the in-process cluster
// builder `quarry dev` uses too; the harness adds its layout, test configs
// and faults.
package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/devcluster"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/store"
	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/searchhead"
)

type queryEvent = query.Event

// Tokens of every harness cluster. NoAckHECToken is a HEC token without
// acks (useack=false): no channel, and its 200 is the acknowledgement.
const (
	AdminToken    = "admin-secret"
	HECToken      = "hec-secret"
	NoAckHECToken = "hec-noack"
)

// Options shape a harness cluster.
type Options struct {
	Sites        []string // default site1, site2
	PeersPerSite int      // default 3
	RF, SF       string   // site policies, default origin:2,total:3 / origin:1,total:2
	// HeartbeatTimeout of the cluster config (default 3 s).
	HeartbeatTimeout time.Duration
	TargetTimeout    time.Duration // default 2 s (SPEC §4)
	BlockInterval    time.Duration // default 50 ms
	MaxHotBytes      int64         // default 1 MiB, so tests see several buckets
	SearchTokens     []fsm.SearchToken
	Logger           *slog.Logger
	// PeerTweak, when set, adjusts each peer's config before its first
	// start (test hooks such as peer.Config.BeforeReplicaAppend).
	PeerTweak func(id string, cfg *peer.Config)
	// ManagerTweak, when set, adjusts each manager's config before its
	// first start (e.g. the detention thresholds).
	ManagerTweak func(id string, cfg *manager.Config)
	// TLS, when set, runs every server with it: HTTPS on managers, peers
	// and search heads, TLS on the bus (gateways mutual), Raft over
	// mutual TLS; every client of the harness verifies against its CA.
	// The bus is then not Cuttable (CutSite fails).
	TLS tlsconfig.Files
	// TLSRoles, when set, gives each server its role's certificate
	// instead of TLS's (tlsconfig.GenerateRoles): NATS nodes the bus one,
	// managers the manager one, peers the peer one, search heads the
	// search head one, as the demo does. TLS is still needed: its CA and
	// scheme are the harness clients'.
	TLSRoles map[string]tlsconfig.Files
	// RoleUsers runs the bus with one NATS user per process (SPEC §6):
	// a manager user per manager, a peer user narrowed to its site and id
	// per peer, a search head user narrowed to its name for each of
	// SearchHeads (default sh0…sh3), and an admin (AdminNATSUser).
	RoleUsers   bool
	SearchHeads []string
	// Routes gives every bus node a route listener too
	// (bus.SitesConfig.Routes): a node of the site could route in.
	Routes bool
}

// The harness bus's admin user when Options.RoleUsers is set.
const (
	AdminNATSUser     = "admin"
	AdminNATSPassword = "admin-nats-pw"
)

// NATSPassword is the bus password of a process's user (Options.RoleUsers).
func NATSPassword(id string) string { return id + "-nats-pw" }

// roleUsers are the bus users of Options.RoleUsers.
func roleUsers(o Options) []bus.User {
	users := []bus.User{}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("m%d", i)
		users = append(users, bus.User{Name: id, Password: NATSPassword(id), Role: bus.RoleManager})
	}
	for _, site := range o.Sites {
		for i := 1; i <= o.PeersPerSite; i++ {
			id := fmt.Sprintf("%s-p%d", site, i)
			users = append(users, bus.User{Name: id, Password: NATSPassword(id), Role: bus.RolePeer, Site: site, Peer: id})
		}
	}
	for _, id := range o.SearchHeads {
		users = append(users, bus.User{Name: id, Password: NATSPassword(id), Role: bus.RoleSearchHead, Head: id})
	}
	return users
}

// Cluster is a running harness cluster.
//
// Its running processes are a devcluster.Procs, the one in-process cluster
// builder it shares with `quarry dev`; Mu (Procs') also guards the configs
// kept for restarts.
type Cluster struct {
	*devcluster.Procs
	T        testing.TB
	Opts     Options
	Bus      *bus.Sites
	mgrCfgs  map[string]manager.Config
	peerCfgs map[string]peer.Config
	log      *slog.Logger
	seed     fsm.Config             // the managers' bootstrap config
	dataDir  func(id string) string // makes and names a node's data dir
}

// quietLogger drops records below warn, so -v output stays readable.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// tlsFor is the TLS files of a server of role: TLSRoles' when it names
// the role, else TLS.
func (o Options) tlsFor(role string) tlsconfig.Files {
	if f, ok := o.TLSRoles[role]; ok {
		return f
	}
	return o.TLS
}

// Start starts managers, bus and peers, and waits until every peer is Up.
// Everything stops at the end of the test.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if len(o.Sites) == 0 {
		o.Sites = []string{"site1", "site2"}
	}
	if o.PeersPerSite == 0 {
		o.PeersPerSite = 3
	}
	if o.RF == "" {
		o.RF = "origin:2,total:3"
	}
	if o.SF == "" {
		o.SF = "origin:1,total:2"
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = 3 * time.Second
	}
	if o.TargetTimeout == 0 {
		o.TargetTimeout = 2 * time.Second
	}
	if o.BlockInterval == 0 {
		o.BlockInterval = 50 * time.Millisecond
	}
	if o.MaxHotBytes == 0 {
		o.MaxHotBytes = 1 << 20
	}
	log := o.Logger
	if log == nil {
		log = quietLogger()
		if v := os.Getenv("QUARRY_TEST_LOG"); v != "" {
			level := slog.LevelInfo
			if v == "debug" {
				level = slog.LevelDebug
			}
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		}
	}
	c := &Cluster{Procs: devcluster.NewProcs(), T: t, Opts: o, mgrCfgs: map[string]manager.Config{},
		peerCfgs: map[string]peer.Config{}, log: log}
	// The data dirs' root is made before Stop is registered: cleanups run
	// last-in first-out, so every node stops before its files are removed
	// (a t.TempDir made later would be removed under running peers).
	root := t.TempDir()
	dir := func(id string) string {
		d := filepath.Join(root, id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	busTLS := o.tlsFor(tlsconfig.RoleBus)
	sc := bus.SitesConfig{Sites: o.Sites, Cuttable: o.TLS.Zero(), Routes: o.Routes, Logger: log,
		TLSCert: busTLS.Cert, TLSKey: busTLS.Key, TLSCA: busTLS.CA}
	if o.RoleUsers {
		if o.SearchHeads == nil {
			o.SearchHeads = []string{"sh0", "sh1", "sh2", "sh3"}
			c.Opts.SearchHeads = o.SearchHeads
		}
		sc.User, sc.Password, sc.Users = AdminNATSUser, AdminNATSPassword, roleUsers(o)
	}
	c.Bus, err = bus.StartSites(ctx, sc)
	if err != nil {
		t.Fatalf("start bus: %v", err)
	}
	// Managers: one per site and a witness.
	seed := fsm.DefaultConfig()
	seed.Sites = o.Sites
	if seed.SiteReplicationFactor, err = fsm.ParsePolicy(o.RF); err != nil {
		t.Fatal(err)
	}
	if seed.SiteSearchFactor, err = fsm.ParsePolicy(o.SF); err != nil {
		t.Fatal(err)
	}
	seed.HeartbeatTimeout = o.HeartbeatTimeout
	// Roll limits: in a cluster the peers take them from this config
	// (their own flags are the standalone defaults); the span stays the
	// peers' default (90 days) rather than the config's (24 h).
	seed.MaxHotBytes = o.MaxHotBytes
	seed.MaxHotSpan = 90 * 24 * time.Hour
	seed.HECTokens = []fsm.HECToken{{Token: HECToken, Ack: true, DefaultIndex: "main"}, {Token: NoAckHECToken}}
	seed.SearchTokens = o.SearchTokens
	seed.Indexes = append(seed.Indexes, fsm.IndexConfig{Name: "web"})
	if err := seed.Validate(); err != nil {
		t.Fatalf("seed config: %v", err)
	}
	c.seed, c.dataDir = seed, dir
	c.startManagers(ctx)
	for _, site := range o.Sites {
		for i := 1; i <= o.PeersPerSite; i++ {
			id := fmt.Sprintf("%s-p%d", site, i)
			c.peerCfgs[id] = peer.Config{
				ID: id, Site: site, DataDir: dir(id), HTTPAddr: "127.0.0.1:0", Searchable: true,
				MaxHotBytes: o.MaxHotBytes, BlockInterval: o.BlockInterval, Logger: log,
				NATS:          c.Bus.Server(site).ClientURL(),
				TargetTimeout: o.TargetTimeout, JoinTimeout: 30 * time.Second, TLS: o.tlsFor(tlsconfig.RolePeer),
			}
			if o.RoleUsers {
				cfg := c.peerCfgs[id]
				cfg.NATSUser, cfg.NATSPassword = id, NATSPassword(id)
				c.peerCfgs[id] = cfg
			}
			if o.PeerTweak != nil {
				cfg := c.peerCfgs[id]
				o.PeerTweak(id, &cfg)
				c.peerCfgs[id] = cfg
			}
			c.StartPeer(id)
		}
	}
	c.WaitPeersUp(c.PeerIDs()...)
	return c
}

// startManagers starts the three managers (one per site and a witness) on
// empty data directories: m1 bootstraps with the seed config, the others
// join it; it waits until each knows all three.
func (c *Cluster) startManagers(ctx context.Context) {
	t, o, dir, seed := c.T, c.Opts, c.dataDir, c.seed
	mgrSites := append(append([]string(nil), o.Sites...), "witness")
	for i, site := range mgrSites[:3] {
		id := fmt.Sprintf("m%d", i+1)
		busSite := site
		if c.Bus.Server(site) == nil {
			busSite = o.Sites[0] // the witness uses the first site's bus node
		}
		cfg := manager.Config{
			ID: id, Site: site, DataDir: dir(id), RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
			NATS: c.Bus.Server(busSite).ClientURL(), TargetTimeout: o.TargetTimeout,
			AdminToken: AdminToken, RaftLogLevel: "error", LogOutput: io.Discard, Logger: c.log,
			JoinTimeout: 30 * time.Second, LoopInterval: 100 * time.Millisecond,
			RaftHeartbeatTimeout: time.Second, RaftElectionTimeout: time.Second, RaftLeaderLeaseTimeout: time.Second,
			TLS: o.tlsFor(tlsconfig.RoleManager),
		}
		if o.RoleUsers {
			cfg.NATSUser, cfg.NATSPassword = id, NATSPassword(id)
		}
		if o.ManagerTweak != nil {
			o.ManagerTweak(id, &cfg)
		}
		if i == 0 {
			cfg.Bootstrap = []manager.Server{{ID: id, RaftAddr: "127.0.0.1:0"}}
			cfg.Seed = &seed
		} else {
			cfg.Join = o.TLS.Scheme() + "://" + c.Managers["m1"].HTTPAddr()
		}
		m, err := c.StartManager(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RaftAddr, cfg.HTTPAddr = m.RaftAddr(), m.HTTPAddr()
		cfg.Bootstrap, cfg.Join = nil, ""
		c.Mu.Lock()
		c.mgrCfgs[id] = cfg
		c.Mu.Unlock()
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitManagers(wctx, 3); err != nil {
		t.Fatal(err)
	}
}

// ManagerDataDir is manager id's data directory.
func (c *Cluster) ManagerDataDir(id string) string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.mgrCfgs[id].DataDir
}

// ManagerRaftAddr is manager id's Raft address (the port it bound first).
func (c *Cluster) ManagerRaftAddr(id string) string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.mgrCfgs[id].RaftAddr
}

// RestartManager starts stopped manager id again from its data directory,
// with the config of its first start (no bootstrap, no join).
func (c *Cluster) RestartManager(id string) *manager.Manager {
	c.T.Helper()
	c.Mu.Lock()
	cfg := c.mgrCfgs[id]
	c.Mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := c.StartManager(ctx, cfg)
	if err != nil {
		c.T.Fatalf("restart: %v", err)
	}
	return m
}

// ReplaceManagers simulates the loss of every manager's data: it stops the
// running managers, deletes their data directories and starts three fresh
// managers as Start does (m1 bootstraps with the same seed config). The
// peers keep running and re-register when the new leader asks them to.
func (c *Cluster) ReplaceManagers() {
	c.T.Helper()
	c.Mu.Lock()
	ids := slices.Sorted(maps.Keys(c.mgrCfgs))
	c.Mu.Unlock()
	for _, id := range ids {
		c.KillManager(id)
		if err := os.RemoveAll(c.ManagerDataDir(id)); err != nil {
			c.T.Fatalf("remove manager %s's data: %v", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.startManagers(ctx)
}

// HTTPClient is an HTTP client that verifies the harness's servers (with
// Options.TLS, against its CA).
func (c *Cluster) HTTPClient(timeout time.Duration) *http.Client {
	tr, err := c.Opts.TLS.Transport()
	if err != nil {
		c.T.Fatalf("harness TLS: %v", err)
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// ManagerURLs are the running managers' HTTP URLs.
func (c *Cluster) ManagerURLs() []string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	var out []string
	for _, id := range slices.Sorted(maps.Keys(c.Managers)) {
		out = append(out, c.Opts.TLS.Scheme()+"://"+c.Managers[id].HTTPAddr())
	}
	return out
}

// PeerDataDir is peer id's data directory.
func (c *Cluster) PeerDataDir(id string) string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.peerCfgs[id].DataDir
}

// PeerIDs lists every peer of the harness (running or not), sorted.
func (c *Cluster) PeerIDs() []string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return slices.Sorted(maps.Keys(c.peerCfgs))
}

// StartPeer starts (or restarts, from its data dir) peer id.
func (c *Cluster) StartPeer(id string) *peer.Peer {
	c.T.Helper()
	c.Mu.Lock()
	cfg := c.peerCfgs[id]
	c.Mu.Unlock()
	p, err := c.Procs.StartPeer(cfg)
	if err != nil {
		c.T.Fatal(err)
	}
	return p
}

// KillPeer stops peer id abruptly (no goodbye; its files stay).
func (c *Cluster) KillPeer(id string) {
	if p := c.TakePeer(id); p != nil {
		p.Kill()
	}
}

// StopPeer stops peer id gracefully, as SIGTERM does (peer.Close: HTTP
// shut down, running searches drained, blocks flushed; its files stay).
func (c *Cluster) StopPeer(id string) {
	if p := c.TakePeer(id); p != nil {
		p.Close()
	}
}

// KillManager stops manager id (its files stay).
func (c *Cluster) KillManager(id string) {
	if m := c.TakeManager(id); m != nil {
		m.Close()
	}
}

// CutSite partitions a site's bus node from the others; HealSite ends it.
func (c *Cluster) CutSite(site string) error  { return c.Bus.Cut(site) }
func (c *Cluster) HealSite(site string) error { return c.Bus.Heal(site) }

// Stop stops everything (search heads, peers, managers, bus).
func (c *Cluster) Stop() { c.Procs.Stop(c.Bus) }

// WaitFor polls cond until it returns nil or d passes (then the test fails
// with cond's last error).
func (c *Cluster) WaitFor(d time.Duration, cond func() error) {
	c.T.Helper()
	testutil.WaitFor(c.T, d, cond)
}

// Leader returns a running manager that is the Raft leader.
func (c *Cluster) Leader() *manager.Manager {
	c.T.Helper()
	var l *manager.Manager
	c.WaitFor(20*time.Second, func() error {
		if l = c.Procs.Leader(); l == nil {
			return errors.New("no leader")
		}
		return nil
	})
	return l
}

// State reads the leader's committed state.
func (c *Cluster) State(fn func(s *fsm.State)) { c.Leader().Read(fn) }

// WaitPeersUp waits until the managers count every given peer Up.
func (c *Cluster) WaitPeersUp(ids ...string) {
	c.T.Helper()
	c.WaitFor(30*time.Second, func() error {
		var err error
		c.State(func(s *fsm.State) {
			for _, id := range ids {
				p, ok := s.Peer(id)
				if !ok || p.State != fsm.StateUp {
					err = fmt.Errorf("peer %s is %v (known %v)", id, p.State, ok)
					return
				}
			}
		})
		return err
	})
}

// Inventory is one peer's per-copy inventory, by bucket id.
func (c *Cluster) Inventory(id string) map[string]store.CopyInfo {
	c.Mu.Lock()
	p := c.Peers[id]
	c.Mu.Unlock()
	out := map[string]store.CopyInfo{}
	if p == nil {
		return out
	}
	for _, ci := range p.Store().Inventory() {
		out[ci.ID] = ci
	}
	return out
}

// Peer returns running peer id (nil when stopped).
func (c *Cluster) Peer(id string) *peer.Peer {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.Peers[id]
}

// HECClient sends events to one peer with acknowledgements.
type HECClient struct {
	URL     string
	Channel string
	Token   string
	Client  *http.Client
	Index   string // default main
	// Key, when set, is sent as the Idempotency-Key header.
	Key string
}

// NewHECClient returns a client of peer id's HEC with a fresh channel.
func (c *Cluster) NewHECClient(id string) *HECClient {
	var r [16]byte
	rand.Read(r[:])
	h := hex.EncodeToString(r[:])
	ch := h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
	return &HECClient{URL: c.Opts.TLS.Scheme() + "://" + c.Peer(id).Addr(), Channel: ch, Token: HECToken, Client: c.HTTPClient(10 * time.Second)}
}

// HECAnswer is a HEC reply: the HTTP status and Splunk's body.
type HECAnswer struct {
	Status int    `json:"-"`
	Text   string `json:"text"`
	Code   int    `json:"code"`
	AckID  *int64 `json:"ackId"`
}

// Send posts raw events (one envelope each) and returns the ack id.
func (h *HECClient) Send(ctx context.Context, raws []string) (int64, error) {
	ans, err := h.Post(ctx, raws)
	if err != nil {
		return 0, err
	}
	if ans.Status != 200 || ans.AckID == nil {
		return 0, fmt.Errorf("HEC answered %d code %d %s", ans.Status, ans.Code, ans.Text)
	}
	return *ans.AckID, nil
}

// Post posts raw events (one envelope each) and returns the answer, whatever
// its status (a token without acks answers no ack id).
func (h *HECClient) Post(ctx context.Context, raws []string) (HECAnswer, error) {
	var body bytes.Buffer
	for _, r := range raws {
		ix := h.Index
		if ix == "" {
			ix = "main"
		}
		b, _ := json.Marshal(map[string]any{"event": r, "time": 1767225600, "index": ix})
		body.Write(b)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/services/collector/event", &body)
	req.Header.Set("Authorization", "Splunk "+h.Token)
	req.Header.Set("X-Splunk-Request-Channel", h.Channel)
	if h.Key != "" {
		req.Header.Set("Idempotency-Key", h.Key)
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return HECAnswer{}, err
	}
	defer resp.Body.Close()
	ans := HECAnswer{Status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return ans, fmt.Errorf("HEC answer: %w", err)
	}
	return ans, nil
}

// Acked asks which of ids are acknowledged (each true answer is forgotten
// by the peer, as Splunk does).
func (h *HECClient) Acked(ctx context.Context, ids []int64) (map[int64]bool, error) {
	b, _ := json.Marshal(map[string]any{"acks": ids})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/services/collector/ack", bytes.NewReader(b))
	req.Header.Set("Authorization", "Splunk "+h.Token)
	req.Header.Set("X-Splunk-Request-Channel", h.Channel)
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ans struct {
		Acks map[string]bool `json:"acks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return nil, err
	}
	out := map[int64]bool{}
	for k, v := range ans.Acks {
		var id int64
		fmt.Sscan(k, &id)
		out[id] = v
	}
	return out, nil
}

// AckedBatch is a batch the cluster acknowledged, and how long the ack took.
type AckedBatch struct {
	Peer   string
	Raws   []string
	Waited time.Duration
}

// IngestAcked sends batches of events to peer id one at a time, waiting
// for each ack (up to ackTimeout), and returns what was acknowledged. A
// batch not acknowledged in time is returned in unacked.
func (c *Cluster) IngestAcked(ctx context.Context, id string, batches [][]string, ackTimeout time.Duration) (acked []AckedBatch, unacked [][]string, err error) {
	h := c.NewHECClient(id)
	for _, b := range batches {
		start := time.Now()
		ackID, err := h.Send(ctx, b)
		if err != nil {
			return acked, unacked, err
		}
		ok := false
		for time.Since(start) < ackTimeout {
			st, err := h.Acked(ctx, []int64{ackID})
			if err != nil {
				return acked, unacked, err
			}
			if st[ackID] {
				ok = true
				break
			}
			select {
			case <-ctx.Done():
				return acked, unacked, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		if ok {
			acked = append(acked, AckedBatch{Peer: id, Raws: b, Waited: time.Since(start)})
		} else {
			unacked = append(unacked, b)
		}
	}
	return acked, unacked, nil
}

// Batches builds n events in batches of size, each raw unique:
// "<tag> ev<i>x …".
func Batches(tag string, n, size int) [][]string {
	var out [][]string
	for i := 0; i < n; i += size {
		var b []string
		for j := i; j < min(n, i+size); j++ {
			b = append(b, fmt.Sprintf("%s ev%dx GET /api/item/%d status=%d user=u%d", tag, j, j%13, 200+j%3, j%17))
		}
		out = append(out, b)
	}
	return out
}

// CopyEvents reads every event of a copy on peer id through its segment
// (searchable copies) — the raws, for set comparisons.
func (c *Cluster) CopyRaws(id, bucket string) (map[string]int, error) {
	p := c.Peer(id)
	if p == nil {
		return nil, fmt.Errorf("peer %s is not running", id)
	}
	seg := p.Store().Segment(bucket)
	if seg == nil {
		return nil, fmt.Errorf("%s on %s is not searchable", bucket, id)
	}
	out := map[string]int{}
	err := seg.Events(nil, func(_ uint32, ev *queryEvent) bool {
		out[strings.Clone(ev.Raw)]++
		return true
	})
	return out, err
}

// SetMaintenance posts POST /v1/maintenance to the leader.
func (c *Cluster) SetMaintenance(on bool) {
	c.T.Helper()
	l := c.Leader()
	body := fmt.Sprintf(`{"enabled": %v}`, on)
	req, _ := http.NewRequest(http.MethodPost, c.Opts.TLS.Scheme()+"://"+l.HTTPAddr()+"/v1/maintenance", bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err := c.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		c.T.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.T.Fatalf("POST /v1/maintenance: %d", resp.StatusCode)
	}
}

// AdminPost posts body to path on the leader with the admin token and
// fails the test on any answer but 200.
func (c *Cluster) AdminPost(path, body string) {
	c.T.Helper()
	l := c.Leader()
	req, _ := http.NewRequest(http.MethodPost, c.Opts.TLS.Scheme()+"://"+l.HTTPAddr()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err := c.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		c.T.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		c.T.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
}

// RawsOnSearchableCopies counts each raw event over the given buckets
// (bucket → holders), reading every bucket once, on its first searchable
// copy: an event acknowledged once must count exactly 1.
func (c *Cluster) RawsOnSearchableCopies(holders map[string][]string) map[string]int {
	seen := map[string]int{}
	for b, hs := range holders {
		for _, h := range hs {
			if !c.Inventory(h)[b].Searchable {
				continue
			}
			raws, err := c.CopyRaws(h, b)
			if err != nil {
				c.T.Fatal(err)
			}
			for r, k := range raws {
				seen[r] += k
			}
			break
		}
	}
	return seen
}

// StartSearchHead starts a search head of site (a site, or site0) on the
// site's bus node (site0 uses the first site's), waits for its first
// generation table, and serves HTTP on 127.0.0.1. tweak, if not nil,
// adjusts its config.
func (c *Cluster) StartSearchHead(id, site string, tweak ...func(*searchhead.Config)) *searchhead.Head {
	c.T.Helper()
	busSite := site
	if c.Bus.Server(site) == nil {
		busSite = c.Opts.Sites[0]
	}
	cfg := searchhead.Config{ID: id, Site: site, HTTPAddr: "127.0.0.1:0", NATS: c.Bus.Server(busSite).ClientURL(), Logger: c.log, TLS: c.Opts.tlsFor(tlsconfig.RoleSearchHead)}
	if c.Opts.RoleUsers {
		cfg.NATSUser, cfg.NATSPassword = id, NATSPassword(id)
	}
	for _, f := range tweak {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := c.StartHead(ctx, cfg)
	if err != nil {
		c.T.Fatal(err)
	}
	return h
}

// SearchAnswer is a search head's (or a peer's) answer to one search.
type SearchAnswer = searchhead.Answer

// SearchHTTP posts a search request body to a search head (or a peer) URL.
func SearchHTTP(ctx context.Context, url, token string, req any) (SearchAnswer, error) {
	return SearchHTTPWith(ctx, http.DefaultClient, url, token, req)
}

// SearchHTTPWith is SearchHTTP through client (Cluster.HTTPClient for a
// TLS harness).
func SearchHTTPWith(ctx context.Context, client *http.Client, url, token string, req any) (SearchAnswer, error) {
	return searchhead.Client{URL: url, Token: token, HTTP: client}.Search(ctx, req)
}
