package manager

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
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

// lead is one leadership term: a Barrier (so the FSM holds every entry
// committed by earlier leaders), the grace start, this manager's own
// member-table entry and the bootstrap config, then the loop.
func (m *Manager) lead(ctx context.Context) {
	for {
		err := m.node.raft.Barrier(5 * time.Second).Error()
		if err == nil {
			break
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
	m.term = leaderInfo{active: true, since: now, graceUntil: now.Add(hbTimeout)}
	m.leadMu.Unlock()
	m.log.Info("leader loops started", "grace_until", now.Add(hbTimeout).UTC().Format(time.RFC3339Nano))

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

// tick is one pass of the leader loop: liveness, then the fixup planner.
// Every decision is a command committed through Raft; a business error from
// the FSM (the state moved on) is logged and the next tick plans again.
func (m *Manager) tick(ctx context.Context) {
	now := m.cfg.Now()
	m.leadMu.Lock()
	m.term.ticks++
	lead := m.term
	m.leadMu.Unlock()
	m.metrics.ticks.Inc()

	hbs := m.heartbeatsCopy()
	var (
		downs []fsm.Command
		plan  []fsm.Command
	)
	m.state.Read(func(s *fsm.State) {
		downs = livenessDecisions(s, hbs, now, lead.since, lead.graceUntil)
		plan = fsm.Plan(s, fsm.PlanInput{Now: now, LastHeartbeat: hbs, GraceUntil: lead.graceUntil})
	})
	for _, c := range downs {
		if ctx.Err() != nil {
			return
		}
		d := c.(*fsm.PeerDown)
		if _, err := m.Apply(ctx, c); err != nil {
			m.log.Warn("declaring peer down failed", "peer", d.ID, "err", err)
			continue
		}
		m.metrics.peersDown.Inc()
		m.log.Warn("peer declared down", "peer", d.ID, "reason", d.Reason)
	}
	if len(downs) > 0 {
		return // plan again on the state after the downs
	}
	for _, c := range plan {
		if ctx.Err() != nil {
			return
		}
		if isPeerDown(c) {
			// Liveness is decided above, with the grace rule; the planner's
			// own PeerDown proposals are not applied twice.
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
	}
}

// livenessDecisions is the liveness rule of SPEC §3 as the leader applies
// it: no peer is declared Down before graceUntil (a new leader treats every
// Up peer as alive for one heartbeat_timeout); after it, a peer expected to
// heartbeat (Up, Pending, Detention) whose last heartbeat — or the start of
// this leadership, when it is later — is more than heartbeat_timeout old is
// declared Down. Sorted by peer id.
func livenessDecisions(s *fsm.State, hbs map[string]time.Time, now, since, graceUntil time.Time) []fsm.Command {
	if now.Before(graceUntil) {
		return nil
	}
	timeout := s.Config().HeartbeatTimeout
	var out []fsm.Command
	var ids []string
	for _, pv := range s.PeerList() {
		switch pv.State {
		case fsm.StateUp, fsm.StatePending, fsm.StateDetention:
		default:
			continue
		}
		last := hbs[pv.ID]
		if last.Before(since) {
			last = since
		}
		if now.Sub(last) > timeout {
			ids = append(ids, pv.ID)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		out = append(out, &fsm.PeerDown{ID: id, Reason: "no heartbeat for " + timeout.String(), At: now.UTC()})
	}
	return out
}

// isPeerDown reports whether c is a PeerDown command (value or pointer).
func isPeerDown(c fsm.Command) bool {
	switch c.(type) {
	case fsm.PeerDown, *fsm.PeerDown:
		return true
	}
	return false
}
