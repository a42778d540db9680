package devcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/searchhead"
)

// Procs is the running processes of an in-process cluster, by id, with the
// one way to start each kind, find the leader and stop them all. It is the
// cluster builder that both `quarry dev` (Cluster) and the integration
// harness (integration.Cluster, which adds faults: kill, restart, cut) are
// built on; each decides its own layout, configs and waits.
//
// Mu guards the maps; a caller that reads them takes it. The methods take
// it themselves, so they are never called with it held.
type Procs struct {
	Mu       sync.Mutex
	Managers map[string]*manager.Manager
	Peers    map[string]*peer.Peer
	Heads    map[string]*searchhead.Head
}

// NewProcs is an empty set.
func NewProcs() *Procs {
	return &Procs{Managers: map[string]*manager.Manager{}, Peers: map[string]*peer.Peer{}, Heads: map[string]*searchhead.Head{}}
}

// StartManager starts a manager and records it; one that bootstraps
// (cfg.Bootstrap set) is waited for, bounded by ctx, until it leads.
func (ps *Procs) StartManager(ctx context.Context, cfg manager.Config) (*manager.Manager, error) {
	m, err := manager.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start manager %s: %w", cfg.ID, err)
	}
	ps.Mu.Lock()
	ps.Managers[cfg.ID] = m
	ps.Mu.Unlock()
	if len(cfg.Bootstrap) > 0 {
		if err := testutil.Poll(ctx, pollEvery, func() error {
			if !m.IsLeader() {
				return fmt.Errorf("%s is not the leader yet", cfg.ID)
			}
			return nil
		}); err != nil {
			return m, fmt.Errorf("bootstrap manager %s: %w", cfg.ID, err)
		}
	}
	return m, nil
}

// WaitManagers waits, bounded by ctx, until every running manager knows n
// managers and one of them leads.
func (ps *Procs) WaitManagers(ctx context.Context, n int) error {
	return testutil.Poll(ctx, pollEvery, func() error {
		ps.Mu.Lock()
		defer ps.Mu.Unlock()
		for _, id := range slices.Sorted(maps.Keys(ps.Managers)) {
			if k := len(ps.Managers[id].Members()); k != n {
				return fmt.Errorf("manager %s knows %d managers, want %d", id, k, n)
			}
		}
		if ps.leaderLocked() == nil {
			return errors.New("no manager leader")
		}
		return nil
	})
}

// StartPeer starts (or restarts, from its data dir) a peer and records it.
func (ps *Procs) StartPeer(cfg peer.Config) (*peer.Peer, error) {
	p, err := peer.Start(cfg)
	if err != nil {
		return nil, fmt.Errorf("start peer %s: %w", cfg.ID, err)
	}
	ps.Mu.Lock()
	ps.Peers[cfg.ID] = p
	ps.Mu.Unlock()
	return p, nil
}

// StartHead starts a search head, serving, and records it.
func (ps *Procs) StartHead(ctx context.Context, cfg searchhead.Config) (*searchhead.Head, error) {
	h, err := searchhead.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start search head %s: %w", cfg.ID, err)
	}
	if err := h.Start(); err != nil {
		h.Close()
		return nil, fmt.Errorf("start search head %s: %w", cfg.ID, err)
	}
	ps.Mu.Lock()
	ps.Heads[cfg.ID] = h
	ps.Mu.Unlock()
	return h, nil
}

// TakePeer removes running peer id from the set and returns it (nil when
// it is not running); the caller stops it.
func (ps *Procs) TakePeer(id string) *peer.Peer { return take(&ps.Mu, ps.Peers, id) }

// TakeManager is TakePeer for a manager.
func (ps *Procs) TakeManager(id string) *manager.Manager { return take(&ps.Mu, ps.Managers, id) }

func take[T any](mu *sync.Mutex, m map[string]T, id string) T {
	mu.Lock()
	defer mu.Unlock()
	v := m[id]
	delete(m, id)
	return v
}

// Leader is the running manager that leads, or nil.
func (ps *Procs) Leader() *manager.Manager {
	ps.Mu.Lock()
	defer ps.Mu.Unlock()
	return ps.leaderLocked()
}

func (ps *Procs) leaderLocked() *manager.Manager {
	for _, id := range slices.Sorted(maps.Keys(ps.Managers)) {
		if ps.Managers[id].IsLeader() {
			return ps.Managers[id]
		}
	}
	return nil
}

// Stop stops the search heads, the peers (at once: each drains its own
// searches and flushes), the managers and then the bus (nil: none), each
// cleanly. The set is empty afterwards; it is safe to call more than once.
func (ps *Procs) Stop(b *bus.Sites) {
	ps.Mu.Lock()
	heads, peers, mgrs := ps.Heads, ps.Peers, ps.Managers
	ps.Heads, ps.Peers, ps.Managers = map[string]*searchhead.Head{}, map[string]*peer.Peer{}, map[string]*manager.Manager{}
	ps.Mu.Unlock()
	for _, h := range heads {
		h.Close()
	}
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() { defer wg.Done(); p.Close() }()
	}
	wg.Wait()
	for _, m := range mgrs {
		m.Close()
	}
	if b != nil {
		b.Shutdown()
	}
}

// pollEvery is how often the start waits re-check the cluster.
const pollEvery = 50 * time.Millisecond
