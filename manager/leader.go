package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/fsm"
)

// watchLeadership owns the leader loops: it starts them when Raft says this
// manager gained leadership and stops them when it lost it or the manager
// closes. It reads the buffered NotifyCh (not LeaderCh, which drops
// transitions).
func (m *Manager) watchLeadership() {
	defer m.wg.Done()
	var stop func()
	for {
		select {
		case <-m.closing:
			if stop != nil {
				stop()
			}
			return
		case leader := <-m.node.notify:
			m.metrics.leaderChanges.Inc()
			switch {
			case leader && stop == nil:
				m.log.Info("gained raft leadership")
				stop = m.startLeading()
			case !leader && stop != nil:
				m.log.Info("lost raft leadership")
				stop()
				stop = nil
			}
		}
	}
}

// startLeading runs lead in a goroutine and returns the function that stops
// it and waits for it.
func (m *Manager) startLeading() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.lead(ctx)
	}()
	return func() {
		cancel()
		<-done
		m.leadMu.Lock()
		m.term = leaderInfo{}
		m.leadMu.Unlock()
	}
}

// busHeard restarts the grace period of a leadership term at the moment
// the leader can hear the peers again: when its manager subscriptions are
// in place (the term's start on the bus, which may come long after the
// Barrier when its bus node is cut off) and when its bus connection comes
// back after a disconnection. The grace rule is thus "no peer is declared
// Down before this leader has been able to hear it for heartbeat_timeout",
// not merely "since leadership": a leader that won the election while its
// NATS node was cut off used to declare every peer Down at the end of a
// grace it spent deaf (the e2e site2 cut with the witness on site2's node).
func (m *Manager) busHeard() { m.extendGrace(true) }

// extendGrace restarts the term's grace now (the grace then ends one
// heartbeat_timeout from now), saying so in the log when loud.
func (m *Manager) extendGrace(loud bool) {
	var hbTimeout time.Duration
	m.state.Read(func(s *fsm.State) { hbTimeout = s.Config().HeartbeatTimeout })
	now := m.cfg.Now()
	m.leadMu.Lock()
	defer m.leadMu.Unlock()
	if !m.term.active || !now.After(m.term.graceFrom) {
		return
	}
	m.term.graceFrom = now
	if loud {
		m.log.Info("grace restarted: the leader hears the bus again", "grace_until", now.Add(hbTimeout).UTC().Format(time.RFC3339Nano))
	}
}

// lead is one leadership term: a Barrier (so the FSM holds every entry
// committed by earlier leaders), the grace start, this manager's own
// member-table entry and the bootstrap config, then the loop.
func (m *Manager) lead(ctx context.Context) {
	for {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := waitFuture(bctx, m.node.raft.Barrier(5*time.Second))
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		m.log.Warn("leader barrier failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	var hbTimeout time.Duration
	m.state.Read(func(s *fsm.State) { hbTimeout = s.Config().HeartbeatTimeout })
	now := m.cfg.Now()
	m.leadMu.Lock()
	m.term = leaderInfo{active: true, since: now, graceFrom: now}
	m.leadMu.Unlock()
	m.log.Info("leader loops started", "grace_until", now.Add(hbTimeout).UTC().Format(time.RFC3339Nano), "heartbeat_timeout", hbTimeout)
	// The NATS service serves only after the Barrier and only in this term:
	// stopNATS unsubscribes (and flushes) before lead returns, so a deposed
	// leader's subscribers vanish from the bus.
	stopNATS := m.serveNATS(ctx)
	defer stopNATS()

	if err := m.setMember(ctx, m.self()); err != nil && ctx.Err() == nil {
		m.log.Warn("recording own address in the member table failed", "err", err)
	}
	if err := m.seedConfig(ctx); err != nil && ctx.Err() == nil {
		m.log.Error("committing the bootstrap config failed", "err", err)
	}

	t := time.NewTicker(m.cfg.LoopInterval)
	defer t.Stop()
	for {
		m.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// seedConfig commits the bootstrap config flags once per cluster: the first
// leader whose member table says "not seeded" and that was started with a
// seed commits it, then marks the table seeded. A crash between the two
// re-applies the same seed, which is harmless.
func (m *Manager) seedConfig(ctx context.Context) error {
	if m.mux.seeded() || m.cfg.Seed == nil {
		return nil
	}
	if _, err := m.Apply(ctx, &fsm.SetConfig{Config: *m.cfg.Seed}); err != nil {
		return err
	}
	data, _ := json.Marshal(memberCommand{Op: "seeded"})
	if _, err := m.applyLog(ctx, raft.Log{Data: data, Extensions: memberExtension}); err != nil {
		return err
	}
	m.log.Info("committed the bootstrap cluster config")
	return nil
}

// tick is one pass of the leader loop: the fixup planner (fsm.Plan), whose
// first decisions are liveness (PeerDown after heartbeat_timeout without a
// heartbeat, once the grace period is over), then Splunk's fixup levels.
// Every decision is a command committed through Raft, in the planner's
// order; a business error from the FSM (the state moved on) is logged and
// the next tick plans again from the committed state.
func (m *Manager) tick(ctx context.Context) {
	now := m.cfg.Now()
	if m.nc != nil && !m.nc.IsConnected() {
		// Deaf: no heartbeat can arrive, so none may be missed. The grace
		// restarts when the connection is back (busHeard).
		m.extendGrace(false)
	}
	m.leadMu.Lock()
	m.term.ticks++
	lead := m.term
	m.leadMu.Unlock()
	m.metrics.ticks.Inc()
	m.raiseClusterVersion(ctx)
	m.ensureTokenKey(ctx)

	// Plan under the FSM's read lock: the planner copies only what its
	// simulation changes and visits only the buckets that may need work
	// (fsm/DESIGN.md, "Incremental planning"), so the lock is held for
	// milliseconds in a settled cluster, where a full copy of the state
	// took seconds at a million buckets.
	in := fsm.PlanInput{
		Now: now, LastHeartbeat: m.heartbeatsCopy(), TaskTimeout: m.cfg.FixupTaskTimeout,
		Disk: m.diskReports(), Detention: m.detentionRule(),
	}
	var plan []fsm.Command
	var graceUntil time.Time
	m.state.Read(func(s *fsm.State) {
		m.pruneHeartbeats(s)
		// The grace ends one heartbeat_timeout of the state planned on
		// after it began (leaderInfo.graceFrom).
		graceUntil = lead.graceUntil(s.Config().HeartbeatTimeout)
		in.GraceUntil = graceUntil
		plan = fsm.Plan(s, in)
	})
	planned := m.cfg.Now()
	defer func() {
		end := m.cfg.Now()
		m.log.Debug("leader tick", "commands", len(plan), "plan", planned.Sub(now), "apply", end.Sub(planned), "total", end.Sub(now))
	}()
	for _, c := range plan {
		if ctx.Err() != nil {
			return
		}
		if id, down := peerDownID(c); down && now.Before(graceUntil) {
			// The grace rule is the manager's promise; never break it
			// whatever the planner says.
			m.log.Error("planner proposed a peer down inside the grace period; dropped", "peer", id, "grace_until", graceUntil)
			continue
		}
		if _, err := m.Apply(ctx, c); err != nil {
			if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrClosed) || ctx.Err() != nil {
				return
			}
			m.log.Debug("planned command refused", "type", c.Type(), "err", err)
			continue
		}
		m.metrics.planned.Inc()
		m.logDetention(c)
		if id, down := peerDownID(c); down {
			m.metrics.peersDown.Inc()
			m.log.Warn("peer declared down", "peer", id, "reason", peerDownReason(c), "planned", now.UTC().Format(time.RFC3339Nano),
				"committed_after", m.cfg.Now().Sub(now))
		}
	}
}

// raiseClusterVersion commits SetClusterVersion when every server of the
// Raft configuration (voters and non-voters: all of them apply the log)
// reported, in the member table, a build that supports more than the agreed
// version: the new version is the lowest of theirs. A server without an
// entry, or whose build predates cluster versions, counts as version 1, so
// one old manager holds the whole group at the commands it knows. It holds
// versionMu with addMember, so a join is either counted or refused.
func (m *Manager) raiseClusterVersion(ctx context.Context) {
	if !m.versionMu.TryLock() {
		return // a join is under way: the next pass counts it
	}
	defer m.versionMu.Unlock()
	cv := m.ClusterVersion()
	if cv >= m.cfg.buildVersion() {
		return
	}
	target, err := m.groupVersion()
	if err != nil || target <= cv {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := m.propose(rctx, &fsm.SetClusterVersion{ReqID: fsm.ReqID{RequestID: fmt.Sprintf("cluster-version-%d", target)}, Version: target}); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("raising the cluster version failed; will retry", "from", cv, "to", target, "err", err)
		}
		return
	}
	m.log.Info("cluster version raised: every manager supports it", "from", cv, "to", target)
}

// groupVersion is the lowest cluster version the servers of the Raft
// configuration support, as the member table says (this manager: its
// build).
func (m *Manager) groupVersion() (int, error) {
	cf := m.node.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return 0, err
	}
	low := m.cfg.buildVersion()
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == m.cfg.ID {
			continue
		}
		v := 1
		if mem, ok := m.mux.member(string(s.ID)); ok {
			v = mem.supports()
		}
		low = min(low, v)
	}
	return low, nil
}

// peerDownID reports whether c is a PeerDown command, and for which peer.
func peerDownID(c fsm.Command) (string, bool) {
	switch x := c.(type) {
	case fsm.PeerDown:
		return x.ID, true
	case *fsm.PeerDown:
		return x.ID, true
	}
	return "", false
}

// peerDownReason is a PeerDown command's reason.
func peerDownReason(c fsm.Command) string {
	switch x := c.(type) {
	case fsm.PeerDown:
		return x.Reason
	case *fsm.PeerDown:
		return x.Reason
	}
	return ""
}

// pruneHeartbeats forgets heartbeats of peers the state does not know (or
// knows as Removed), so the in-memory table does not grow without bound.
func (m *Manager) pruneHeartbeats(s *fsm.State) {
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	for id := range m.heartbeats {
		if p, ok := s.Peer(id); !ok || p.State == fsm.StateRemoved {
			delete(m.heartbeats, id)
		}
	}
	for id := range m.peerStats {
		if p, ok := s.Peer(id); !ok || p.State == fsm.StateRemoved {
			delete(m.peerStats, id)
		}
	}
}
