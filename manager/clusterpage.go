package manager

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
)

// The cluster page (GET /) is a static page embedded in the binary: HTML,
// CSS and one script, no build step and nothing fetched from elsewhere. The
// script reads the public JSON endpoints (/v1/status, /v1/managers,
// /v1/fixups, /v1/buckets) and the page's two additions (/v1/generations and
// the peer_stats of /v1/status) every second, and posts maintenance and
// rebalance with the admin token the operator types in (kept in the tab's
// sessionStorage only). The HTML carries the first /v1/status inline so the
// page renders before any fetch returns.
//
//go:embed ui
var clusterUI embed.FS

var clusterPage = template.Must(template.ParseFS(clusterUI, "ui/index.html"))

// handlePage is GET /: the cluster page with the status inlined.
func (a *httpAPI) handlePage(w http.ResponseWriter, r *http.Request) {
	initial, err := json.Marshal(a.m.statusView())
	if err != nil {
		writeError(w, toAPIError(fmt.Errorf("encode status for the cluster page: %w", err)))
		return
	}
	var buf bytes.Buffer
	if err := clusterPage.Execute(&buf, map[string]any{"Self": a.m.cfg.ID, "Initial": template.JS(initial)}); err != nil {
		writeError(w, toAPIError(fmt.Errorf("render cluster page: %w", err)))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

// handleAsset is GET /ui/{name}: the page's script and style sheet.
func (a *httpAPI) handleAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	types := map[string]string{"cluster.js": "text/javascript; charset=utf-8", "cluster.css": "text/css; charset=utf-8"}
	ct, ok := types[name]
	if !ok {
		writeError(w, &APIError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no such asset: %s", name)})
		return
	}
	b, err := clusterUI.ReadFile("ui/" + name)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

// StatusView is GET /v1/status: SPEC §7's status plus, on the leader (the
// only manager peers heartbeat to), each peer's last reported statistics
// (disk, replication lag) under peer_stats — an addition to the contract.
type StatusView struct {
	fsm.Status
	PeerStats map[string]PeerStatsView `json:"peer_stats,omitempty"`
	// SearchHeads (leader only, an addition to the contract) are the
	// search heads that named their URL in a generation request within
	// the last 10 minutes, by id (heads.go): the page's links to them.
	SearchHeads map[string]SearchHeadView `json:"search_heads,omitempty"`
}

// PeerStatsView is a peer's last heartbeat statistics and when they came.
type PeerStatsView struct {
	api.PeerStats
	HeardAt time.Time `json:"heard_at"`
	// BundleSince is when this manager first heard the peer run the
	// configuration bundle it runs now (a beat after it took it).
	BundleSince time.Time `json:"bundle_since,omitzero"`
}

func (m *Manager) statusView() StatusView {
	v := StatusView{Status: m.Status(), SearchHeads: m.heads.view(time.Now())}
	m.hbMu.Lock()
	if len(m.peerStats) > 0 {
		v.PeerStats = make(map[string]PeerStatsView, len(m.peerStats))
		for id, s := range m.peerStats {
			v.PeerStats[id] = s
		}
	}
	m.hbMu.Unlock()
	return v
}

// recordPeerStats keeps a peer's heartbeat statistics (memory only, like the
// heartbeat times: they are observations, not cluster state).
func (m *Manager) recordPeerStats(peer string, s api.PeerStats, at time.Time) {
	m.hbMu.Lock()
	since := at
	if old, ok := m.peerStats[peer]; ok && old.Bundle == s.Bundle {
		since = old.BundleSince
	}
	m.peerStats[peer] = PeerStatsView{PeerStats: s, HeardAt: at, BundleSince: since}
	m.hbMu.Unlock()
}

// liveHotEvents sets each hot bucket's event count from its origin's last
// heartbeat (api.PeerStats.HotEvents): the FSM learns a bucket's count only
// when it rolls. Only the leader hears heartbeats; a follower's hot buckets
// keep the FSM's count (0).
func (m *Manager) liveHotEvents(buckets []fsm.BucketView) {
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	for i := range buckets {
		b := &buckets[i]
		if !b.Hot {
			continue
		}
		if n, ok := m.peerStats[b.Origin].HotEvents[b.ID]; ok && n > b.Events {
			b.Events = n
		}
	}
}

// generationLogSize is how many generation changes a manager remembers for
// GET /v1/generations.
const generationLogSize = 32

// GenerationChange is one generation this manager saw start: when (its own
// clock), at which Raft index, the serving peers, and what changed in the
// peers' states against the generation before.
type GenerationChange struct {
	Generation uint64    `json:"generation"`
	Version    uint64    `json:"version"`
	SeenAt     time.Time `json:"seen_at"`
	Serving    []string  `json:"serving"`
	Changes    []string  `json:"changes"`
}

// GenerationsView is GET /v1/generations (an addition): the current
// generation and the changes this manager saw since it started, newest
// first. A manager that replays its log at start sees them again then, with
// the replay's time.
type GenerationsView struct {
	Generation uint64             `json:"generation"`
	History    []GenerationChange `json:"history"`
}

// generationLog remembers recent generation changes.
type generationLog struct {
	mu      sync.Mutex
	current uint64
	states  map[string]fsm.PeerState
	entries []GenerationChange // oldest first, at most generationLogSize
}

// observe is called after every applied entry (it must not block): when
// the generation moved it records the change.
func (g *generationLog) observe(st *fsm.FSM, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var (
		gen, version uint64
		peers        []fsm.PeerView
	)
	st.Read(func(s *fsm.State) {
		gen = s.CurrentGeneration()
		if gen != g.current {
			version, peers = s.AppliedIndex(), s.PeerList()
		}
	})
	if gen == g.current {
		return
	}
	e := GenerationChange{Generation: gen, Version: version, SeenAt: now.UTC(), Serving: []string{}, Changes: []string{}}
	states := make(map[string]fsm.PeerState, len(peers))
	for _, p := range peers {
		states[p.ID] = p.State
		if p.State.Serving() {
			e.Serving = append(e.Serving, p.ID)
		}
		if old, ok := g.states[p.ID]; !ok {
			e.Changes = append(e.Changes, fmt.Sprintf("%s joined (%s)", p.ID, p.State))
		} else if old != p.State {
			e.Changes = append(e.Changes, fmt.Sprintf("%s %s → %s", p.ID, old, p.State))
		}
	}
	for id := range g.states {
		if _, ok := states[id]; !ok {
			e.Changes = append(e.Changes, id+" gone")
		}
	}
	sort.Strings(e.Changes)
	if len(e.Changes) == 0 {
		e.Changes = append(e.Changes, "primaries moved")
	}
	g.current, g.states = gen, states
	g.entries = append(g.entries, e)
	if len(g.entries) > generationLogSize {
		g.entries = slices.Clone(g.entries[len(g.entries)-generationLogSize:])
	}
}

func (g *generationLog) view() GenerationsView {
	g.mu.Lock()
	defer g.mu.Unlock()
	v := GenerationsView{Generation: g.current, History: make([]GenerationChange, 0, len(g.entries))}
	for i := len(g.entries) - 1; i >= 0; i-- {
		v.History = append(v.History, g.entries[i])
	}
	return v
}

// handleGenerations is GET /v1/generations.
func (a *httpAPI) handleGenerations(w http.ResponseWriter, r *http.Request) {
	v := a.m.gens.view()
	a.m.state.Read(func(s *fsm.State) { v.Generation = s.CurrentGeneration() })
	writeJSON(w, http.StatusOK, v)
}
