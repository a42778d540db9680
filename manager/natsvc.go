package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// The manager's NATS service (DESIGN.md, "NATS service"): while this
// manager is the leader — after the Barrier of its term, until the term
// ends — it serves the peers' protocol of package api on
// <prefix>.mgr.<op> (peerops.go), publishes a Notice on <prefix>.gen after
// every change of the generation, the table version or the peer config
// (notices.go), and delivers open fixup tasks to
// <prefix>.fixup.<site>.<peer> (delivery.go). This file is the wiring: the
// connection, the term and its subscriptions, and what every reply carries.

// connectNATS makes the manager's bus connection (nil without cfg.NATS).
func (m *Manager) connectNATS(ctx context.Context) error {
	if m.cfg.NATS == "" {
		return nil
	}
	s, err := bus.NewSubjects(m.cfg.NATSPrefix)
	if err != nil {
		return err
	}
	m.subjects = s
	cctx, cancel := context.WithTimeout(ctx, m.cfg.NATSConnectTimeout)
	defer cancel()
	nc, err := bus.Connect(cctx, m.cfg.NATS, bus.ConnectOptions{
		Name: "manager " + m.cfg.ID, User: m.cfg.NATSUser, Password: m.cfg.NATSPassword, Logger: m.log, TLSCA: m.cfg.TLS.CA,
		OnReconnect: m.busHeard,
	})
	if err != nil {
		return fmt.Errorf("manager %s: %w", m.cfg.ID, err)
	}
	m.nc = nc
	return nil
}

// NATS is the manager's bus connection (nil without Config.NATS).
func (m *Manager) NATS() *nats.Conn { return m.nc }

// signalApplied wakes the notice publisher; called by the mux FSM after
// every applied entry.
func (m *Manager) signalApplied() {
	select {
	case m.applied <- struct{}{}:
	default:
	}
}

// natsTerm is the NATS side of one leadership term: it owns the term's
// peer service (peerops.go), notice publisher (notices.go) and fixup
// deliverer (delivery.go).
type natsTerm struct {
	m     *Manager
	wg    sync.WaitGroup
	peers *peerService
	fixes *deliverer

	// subscribed is closed once every manager operation is subscribed: the
	// term's first notice (kind leader) waits for it.
	subscribed chan struct{}
}

// serveNATS starts the NATS service for a leadership term that passed its
// Barrier: the mgr subscriptions, the notice publisher and the fixup
// deliverer. The returned function stops them and returns when the
// subscriptions are gone from the server (bus.Service.Stop flushes) and
// the goroutines ended. ctx is the term's context.
func (m *Manager) serveNATS(ctx context.Context) (stop func()) {
	if m.nc == nil {
		return func() {}
	}
	t := &natsTerm{m: m, peers: &peerService{m: m}, fixes: newDeliverer(m), subscribed: make(chan struct{})}
	t.wg.Add(3)
	go func() { defer t.wg.Done(); t.subscribe(ctx) }()
	go func() { defer t.wg.Done(); t.publishNotices(ctx) }()
	go func() { defer t.wg.Done(); t.fixes.loop(ctx) }()
	return func() {
		t.wg.Wait() // ctx is done: subscribe returned after stopping its services
	}
}

// subscribe serves every manager operation for the term: it retries the
// ones that could not subscribe (the connection is down: Serve's flush
// fails) every 250 ms, and when the term ends it stops them all; Stop
// unsubscribes and flushes, so the server forgets this manager's
// subscribers before the term is over.
func (t *natsTerm) subscribe(ctx context.Context) {
	m := t.m
	var services []*bus.Service
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		for _, s := range services {
			if err := s.Stop(sctx); err != nil {
				m.log.Warn("stopping a manager subscription failed", "err", err)
			}
		}
	}()
	missing := append([]string(nil), api.Ops...)
	for attempt := 0; ; attempt++ {
		var still []string
		for _, op := range missing {
			svc, err := t.peers.serve(op)
			if err != nil {
				if attempt == 0 {
					m.log.Warn("subscribing a manager operation failed; retrying", "op", op, "err", err)
				}
				still = append(still, op)
				continue
			}
			services = append(services, svc)
		}
		missing = still
		if len(missing) == 0 {
			m.log.Info("serving the manager protocol on NATS", "subjects", m.subjects.All("mgr"))
			m.busHeard()
			close(t.subscribed)
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	<-ctx.Done()
}

// leading reports whether this manager is the leader with its term's loops
// running.
func (m *Manager) leading() bool {
	m.leadMu.Lock()
	active := m.term.active
	m.leadMu.Unlock()
	return active && m.IsLeader()
}

// status is what every reply to a peer carries.
// It is cached per applied index (a heartbeat per peer per second would
// otherwise hash the config each time).
func (m *Manager) status() api.Status {
	var st api.Status
	m.state.Read(func(s *fsm.State) {
		idx := s.AppliedIndex()
		m.statusMu.Lock()
		defer m.statusMu.Unlock()
		if m.statusAt == idx && m.statusCached.ConfigID != "" {
			st = m.statusCached
			return
		}
		st = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: m.peerConfigFor(s, true).ID}
		m.statusAt, m.statusCached = idx, st
	})
	return st
}

// peerConfigFor is the peer config of a committed state. Secrets never
// leave the managers (SPEC §7): peers and search heads get each token's
// digest and check presented tokens against it (fsm.TokenMatches) — keyed
// under the cluster's token key, sent with it, when keyed is true and the
// cluster has one; the unkeyed digests an older build checks otherwise.
// Both forms carry the same id: the unkeyed config's and the key's hash,
// so the key's arrival changes the id once and an older build that
// fetched the unkeyed form finds its id current.
func (m *Manager) peerConfigFor(s *fsm.State, keyed bool) api.PeerConfig {
	key := fsm.TokenKeyOf(s)
	pc := unkeyedPeerConfig(s, &m.cfg)
	b, _ := json.Marshal(pc) // plain data: cannot fail
	sum := sha256.Sum256(append(b, key...))
	pc.ID = hex.EncodeToString(sum[:8])
	pc.Generation, pc.TableVersion = s.CurrentGeneration(), s.TableVersion()
	if keyed && key != nil {
		c := s.Config().Redacted(key)
		pc.HECTokens, pc.SearchTokens = c.HECTokens, c.SearchTokens
		pc.AdminTokenDigest, pc.TokenKey = fsm.KeyedDigest(key, m.cfg.AdminToken), key
	}
	return pc
}

// unkeyedPeerConfig is the peer config with unkeyed digests and no id.
func unkeyedPeerConfig(s *fsm.State, cfg *Config) api.PeerConfig {
	c := s.Config().Redacted(nil)
	targetTimeout := cfg.TargetTimeout
	if c.TargetTimeout > 0 {
		targetTimeout = c.TargetTimeout // set through the admin API
	}
	pc := api.PeerConfig{
		V: api.WireVersion, Indexes: c.Indexes, AutoCreateIndexes: c.AutoCreateIndexes, KnownIndexes: s.Indexes(),
		HECTokens: c.HECTokens, SearchTokens: c.SearchTokens, MaxHotBytes: c.MaxHotBytes, MaxHotSpan: c.MaxHotSpan, MaxHotBuckets: c.MaxHotBuckets,
		TargetTimeout: targetTimeout, HeartbeatPeriod: c.HeartbeatPeriod, Maintenance: s.Maintenance(),
		AdminTokenDigest:  fsm.TokenDigest(cfg.AdminToken),
		ReplicationFactor: c.ReplicationFactor, Multisite: c.Multisite(), BundleHash: fsm.BundleHashOf(s),
	}
	if c.Multisite() {
		// The copies a bucket gets: the site policy's total in multisite
		// mode, so a peer's ack rule min(2, RF) counts the policy (SPEC §4).
		pc.ReplicationFactor = c.SiteReplicationFactor.Total
	}
	return pc
}

// subjectSite is the site token of a peer's subjects: the site it
// registered with (the one it subscribes under), "default" if none.
func subjectSite(p fsm.Peer) string {
	if p.Site == "" {
		return fsm.DefaultSite
	}
	return p.Site
}
