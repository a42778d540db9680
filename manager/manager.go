package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// Sentinel errors of the manager.
var (
	// ErrNotLeader: the call needs the Raft leader and this manager is not it.
	ErrNotLeader = errors.New("not the raft leader")
	// ErrNoLeader: no leader is known right now (an election is under way or
	// quorum is lost).
	ErrNoLeader = errors.New("no raft leader known")
	// ErrClosed: the manager is shutting down.
	ErrClosed = errors.New("manager closed")
)

// defaultApplyTimeout bounds a proposal whose context has no deadline.
const defaultApplyTimeout = 10 * time.Second

// Manager is one member of the Raft group of managers: it applies the
// cluster FSM, serves the admin HTTP API, and, while it is the leader, runs
// the leader loops (peer liveness, fixup planner). Close stops everything it
// started.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	state *fsm.FSM
	mux   *muxFSM
	node  *raftNode

	httpLn  net.Listener
	httpSrv *http.Server
	// tlsClient verifies other managers' HTTPS (join, registerSelf); nil:
	// Go's defaults.
	tlsClient *tls.Config
	metrics   *metrics

	// NATS service (natsvc.go); nc is nil without Config.NATS.
	nc       *nats.Conn
	subjects bus.Subjects
	applied  chan struct{} // signalled after every applied entry

	statusMu     sync.Mutex
	statusAt     uint64     // applied index of statusCached
	statusCached api.Status // what replies to peers carry

	hbMu       sync.Mutex
	heartbeats map[string]time.Time     // peer id → last heartbeat (in memory only)
	peerStats  map[string]PeerStatsView // peer id → its last heartbeat's statistics

	gens generationLog // recent generation changes, for the cluster page

	heads headBook // search heads heard from, for the cluster page (heads.go)

	uploads registerUploads // multi-part Register inventories being received (regupload.go)

	leadMu sync.Mutex
	term   leaderInfo // zero unless this manager's leader loops run

	// versionMu serialises raising the cluster version with adding a
	// member: a join of an older build checked against the old version
	// must not pass while a raise computed without it commits.
	versionMu sync.Mutex

	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

// leaderInfo describes the current leadership term of this manager.
type leaderInfo struct {
	active bool      // the leader loops run (after the Barrier)
	since  time.Time // when the Barrier completed
	// graceFrom is when the grace began: the Barrier, moved later each
	// time the leader starts hearing the bus again. The grace ends one
	// heartbeat_timeout after it, that timeout read from the committed
	// config whenever it is needed (graceUntil), never frozen at the
	// start: a fresh cluster's first leader starts its grace before the
	// bootstrap config is committed, under the default timeout (10 s), and
	// a frozen end held a peer killed in its first 10 s Up for up to
	// 10 s — the 7.86 s tail of issue 9 item 8 with a 3 s timeout.
	graceFrom time.Time
	ticks     uint64 // leader loop iterations in this term
}

// graceUntil is the end of the term's grace under heartbeat_timeout
// hbTimeout (zero when no term runs).
func (l leaderInfo) graceUntil(hbTimeout time.Duration) time.Time {
	if !l.active {
		return time.Time{}
	}
	return l.graceFrom.Add(hbTimeout)
}

// New starts a manager: opens (or creates) its Raft state under
// cfg.DataDir, bootstraps or joins when there is no state, and serves the
// HTTP API. ctx bounds the start-up (the join in particular).
func New(ctx context.Context, cfg Config) (*Manager, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:        cfg,
		log:        cfg.Logger.With("manager", cfg.ID),
		state:      cfg.newFSM(),
		heartbeats: map[string]time.Time{},
		peerStats:  map[string]PeerStatsView{},
		closing:    make(chan struct{}),
		applied:    make(chan struct{}, 1),
	}
	warnShortTokens(m.log, cfg)
	m.mux = newMuxFSM(m.state)
	m.mux.onApply = func() {
		m.gens.observe(m.state, time.Now())
		m.signalApplied()
	}
	m.metrics = newMetrics(m)
	if err := m.connectNATS(ctx); err != nil {
		return nil, err
	}
	closeNATS := func() {
		if m.nc != nil {
			m.nc.Close()
		}
	}

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		closeNATS()
		return nil, fmt.Errorf("listen for http on %s: %w", cfg.HTTPAddr, err)
	}
	m.cfg.HTTPAddr = ln.Addr().String()
	if m.httpLn, err = cfg.TLS.WrapListener(ln); err != nil { // HTTPS with a certificate
		ln.Close()
		closeNATS()
		return nil, err
	}
	if m.tlsClient, err = cfg.TLS.Client(); err != nil {
		ln.Close()
		closeNATS()
		return nil, err
	}

	node, err := openRaft(&m.cfg, m.mux, func() raft.FSM { return newMuxFSM(m.cfg.newFSM()) }, m.log)
	if err != nil {
		m.httpLn.Close()
		closeNATS()
		return nil, err
	}
	m.node = node
	m.cfg.RaftAddr = string(node.trans.LocalAddr())

	m.httpSrv = &http.Server{
		Handler:           (&httpAPI{m: m}).routes(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	m.wg.Add(3)
	go m.serveHTTP()
	go m.watchLeadership()
	go m.registerSelf()

	if cfg.Join != "" && m.node.raft.LastIndex() == 0 {
		if err := m.join(ctx); err != nil {
			m.Close()
			return nil, err
		}
	}
	m.log.Info("manager started", "raft_addr", m.cfg.RaftAddr, "http_addr", m.cfg.HTTPAddr, "site", cfg.Site)
	return m, nil
}

func (m *Manager) serveHTTP() {
	defer m.wg.Done()
	if err := m.httpSrv.Serve(m.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
		m.log.Error("http server stopped", "err", err)
	}
}

// Close stops the HTTP server, the leader loops and Raft, and releases the
// data directory. It is safe to call more than once.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		close(m.closing)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := m.httpSrv.Shutdown(ctx); err != nil {
			m.httpSrv.Close()
		}
		cancel()
		m.wg.Wait() // the leader loops and their NATS subscriptions are gone
		if m.nc != nil {
			m.nc.Close()
		}
		m.closeErr = m.node.shutdown()
		m.log.Info("manager stopped")
	})
	return m.closeErr
}

// ID is the manager's id.
func (m *Manager) ID() string { return m.cfg.ID }

// HTTPAddr is the address the HTTP API listens on.
func (m *Manager) HTTPAddr() string { return m.cfg.HTTPAddr }

// RaftAddr is the address of the Raft transport.
func (m *Manager) RaftAddr() string { return m.cfg.RaftAddr }

// IsLeader reports whether this manager is the Raft leader.
func (m *Manager) IsLeader() bool { return m.node.raft.State() == raft.Leader }

// Leader returns the id and HTTP address of the current leader, as far as
// this manager knows. httpAddr is empty when the leader has not yet
// published it in the member table.
func (m *Manager) Leader() (id, httpAddr string, err error) {
	_, lid := m.node.raft.LeaderWithID()
	if lid == "" {
		return "", "", ErrNoLeader
	}
	mem, _ := m.mux.member(string(lid))
	return string(lid), mem.HTTPAddr, nil
}

// Members returns the member table (every manager that published its
// addresses), sorted by id.
func (m *Manager) Members() []Member { return m.mux.memberList() }

// Read runs fn with the committed cluster state; fn must not keep s.
func (m *Manager) Read(fn func(s *fsm.State)) { m.state.Read(fn) }

// Raft exposes the Raft node for tests and tools (stats, snapshots).
func (m *Manager) Raft() *raft.Raft { return m.node.raft }

// Apply proposes cmd through Raft and waits until it is applied. The
// context's deadline is the Raft timeout. It returns the FSM's value, or the
// FSM's business error, or ErrNotLeader / ErrClosed / the context's error.
//
// A command whose type needs a cluster version above the one the group
// agreed is refused (fsm.ErrClusterVersion, HTTP 409 cluster_version):
// an older follower would not know it (SPEC §11). SetClusterVersion itself
// goes through raiseClusterVersion, which checks the members instead.
func (m *Manager) Apply(ctx context.Context, cmd fsm.Command) (any, error) {
	if err := m.allowedAt(cmd.Type(), fsm.NeedsClusterVersion(cmd)); err != nil {
		return nil, err
	}
	return m.propose(ctx, cmd)
}

// allowed reports whether the agreed cluster version carries type t. The
// cluster version only rises, so the applied state's answer is safe: what
// it allows, every member supports.
func (m *Manager) allowed(t fsm.CommandType) error { return m.allowedAt(t, fsm.MinClusterVersion(t)) }

// allowedAt is allowed for a command of type t whose body needs cluster
// version need (fsm.NeedsClusterVersion: a RollBucket naming its origin).
func (m *Manager) allowedAt(t fsm.CommandType, need int) error {
	if need == 1 {
		return nil
	}
	cv := m.ClusterVersion()
	if need > cv || need > m.cfg.buildVersion() {
		return fmt.Errorf("%w: command type %d needs cluster version %d, the group agreed %d (this manager supports %d): upgrade every manager first",
			fsm.ErrClusterVersion, t, need, cv, m.cfg.buildVersion())
	}
	return nil
}

// ClusterVersion is the cluster version the group agreed (committed).
func (m *Manager) ClusterVersion() int {
	var v int
	m.state.Read(func(s *fsm.State) { v = s.ClusterVersion() })
	return v
}

// propose encodes and proposes a command without the cluster-version gate.
func (m *Manager) propose(ctx context.Context, cmd fsm.Command) (any, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	return m.applyLog(ctx, raft.Log{Data: data})
}

func (m *Manager) applyLog(ctx context.Context, l raft.Log) (any, error) {
	timeout := defaultApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	start := time.Now()
	f := m.node.raft.ApplyLog(l, timeout)
	done := make(chan error, 1)
	// The future resolves when the entry is applied, leadership is lost or
	// Raft shuts down; this goroutine ends then.
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, raftError(err)
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.closing:
		return nil, ErrClosed
	}
	resp := f.Response()
	if err, ok := resp.(error); ok {
		return nil, err
	}
	m.metrics.applied.Inc()
	m.metrics.applySeconds.Observe(time.Since(start).Seconds())
	return resp, nil
}

// raftError maps hashicorp/raft's errors to the manager's sentinels.
func raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	}
	return err
}

// Heartbeat records that peer peerID was heard from at at. Heartbeats live
// in memory only (SPEC §3); the leader's liveness loop reads them. A
// heartbeat older than the one recorded is ignored.
func (m *Manager) Heartbeat(peerID string, at time.Time) {
	m.hbMu.Lock()
	if prev, ok := m.heartbeats[peerID]; !ok || at.After(prev) {
		m.heartbeats[peerID] = at
	}
	m.hbMu.Unlock()
	m.metrics.heartbeats.Inc()
}

// heartbeatsCopy returns a copy of the heartbeat table.
func (m *Manager) heartbeatsCopy() map[string]time.Time {
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	out := make(map[string]time.Time, len(m.heartbeats))
	for k, v := range m.heartbeats {
		out[k] = v
	}
	return out
}

// LastHeartbeat reports when this manager last heard peer id (in memory;
// only the leader's view drives liveness). Tests and tools use it.
func (m *Manager) LastHeartbeat(id string) (time.Time, bool) {
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	at, ok := m.heartbeats[id]
	return at, ok
}

// LeaderState reports this manager's leadership term: whether its leader
// loops run, since when, the end of the grace period, and how many loop
// iterations ran. Tests use it to reason about the grace rule.
func (m *Manager) LeaderState() (active bool, since, graceUntil time.Time, ticks uint64) {
	var hbTimeout time.Duration
	m.state.Read(func(s *fsm.State) { hbTimeout = s.Config().HeartbeatTimeout })
	m.leadMu.Lock()
	defer m.leadMu.Unlock()
	return m.term.active, m.term.since, m.term.graceUntil(hbTimeout), m.term.ticks
}

// Snapshot asks Raft for a snapshot now (tools and tests).
func (m *Manager) Snapshot() error { return m.node.raft.Snapshot().Error() }

// warnShortTokens warns, once per kind, about the configured tokens shorter
// than fsm.ShortTokenLength (review L1; never refused, never printed).
func warnShortTokens(log *slog.Logger, cfg Config) {
	var hec, search []string
	if cfg.Seed != nil {
		for _, t := range cfg.Seed.HECTokens {
			hec = append(hec, t.Token)
		}
		for _, t := range cfg.Seed.SearchTokens {
			search = append(search, t.Token)
		}
	}
	for _, w := range []string{
		fsm.ShortTokenWarning("admin token", cfg.AdminToken), fsm.ShortTokenWarning("read token", cfg.ReadToken),
		fsm.ShortTokenWarning("HEC token", hec...), fsm.ShortTokenWarning("search token", search...),
	} {
		if w != "" {
			log.Warn(w)
		}
	}
}
