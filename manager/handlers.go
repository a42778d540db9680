package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/fsm"
)

// handleStatus is GET /v1/status: the FSM's status with the leader filled in.
func (a *httpAPI) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.m.statusView())
}

// Status is /v1/status as this manager sees it: the committed cluster status
// with the leader's id filled in ("" while none is known).
func (m *Manager) Status() fsm.Status {
	var st fsm.Status
	m.state.Read(func(s *fsm.State) { st = s.Status() })
	st.Leader, _, _ = m.Leader()
	return st
}

// handleGeneration is GET /v1/generation?site=&since=.
func (a *httpAPI) handleGeneration(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	site := q.Get("site")
	if site == "" {
		site = fsm.Site0
	}
	var since uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf("since=%q: want a table version (unsigned integer)", v)})
			return
		}
		since = n
	}
	var (
		view fsm.GenerationView
		err  error
	)
	a.m.state.Read(func(s *fsm.State) { view, err = s.Generation(site, since) })
	if err != nil {
		writeError(w, toAPIError(fmt.Errorf("generation for site %q: %w", site, err)))
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// handlePeers is GET /v1/peers.
func (a *httpAPI) handlePeers(w http.ResponseWriter, r *http.Request) {
	var peers []fsm.PeerView
	a.m.state.Read(func(s *fsm.State) { peers = s.PeerList() })
	if peers == nil {
		peers = []fsm.PeerView{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"peers": peers})
}

// handleBuckets is GET /v1/buckets[?index=&peer=].
func (a *httpAPI) handleBuckets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var buckets []fsm.BucketView
	a.m.state.Read(func(s *fsm.State) { buckets = s.BucketList(q.Get("index"), q.Get("peer")) })
	if buckets == nil {
		buckets = []fsm.BucketView{}
	}
	a.m.liveHotEvents(buckets)
	writeJSON(w, http.StatusOK, map[string]any{"buckets": buckets})
}

// handleHealthz answers 200 while Raft runs and a leader is known, 503
// otherwise (a manager without quorum is not healthy).
func (a *httpAPI) handleHealthz(w http.ResponseWriter, r *http.Request) {
	m := a.m
	state := m.node.raft.State()
	leader, _, err := m.Leader()
	body := map[string]any{"id": m.cfg.ID, "raft_state": state.String(), "leader": leader}
	if state == raft.Shutdown || err != nil {
		body["error"] = "no raft leader known"
		body["code"] = "no_leader"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	body["status"] = "ok"
	writeJSON(w, http.StatusOK, body)
}

// handleOffline is POST /v1/peers/{id}/offline[?enforce_counts=true].
func (a *httpAPI) handleOffline(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	enforce := false
	if v := r.URL.Query().Get("enforce_counts"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf("enforce_counts=%q: want true or false", v)})
			return
		}
		enforce = b
	}
	res, ok := a.applyHTTP(w, r, &fsm.PeerOffline{ReqID: requestID(r), ID: id, EnforceCounts: enforce, At: a.m.cfg.Now().UTC()})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"peer": id, "enforce_counts": enforce, "result": res})
}

// MaintenanceRequest is the body of POST /v1/maintenance.
type MaintenanceRequest struct {
	Enabled *bool `json:"enabled"`
}

// handleMaintenance is POST /v1/maintenance {"enabled": true}.
func (a *httpAPI) handleMaintenance(w http.ResponseWriter, r *http.Request) {
	var req MaintenanceRequest
	if err := decodeBody(r, &req, false); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if req.Enabled == nil {
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: `POST /v1/maintenance: body needs "enabled": true or false`})
		return
	}
	res, ok := a.applyHTTP(w, r, &fsm.SetMaintenance{ReqID: requestID(r), Enabled: *req.Enabled})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"maintenance": *req.Enabled, "result": res})
}

// handleRebalance is POST /v1/rebalance.
func (a *httpAPI) handleRebalance(w http.ResponseWriter, r *http.Request) {
	res, ok := a.applyHTTP(w, r, &fsm.RebalancePrimaries{ReqID: requestID(r)})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"rebalanced": true, "result": res})
}

// FixupView is one fixup task record in GET /v1/fixups and /v1/fixups/{id}.
type FixupView struct {
	fsm.Task
	Applied uint64 `json:"applied_index"`
}

// handleFixups is GET /v1/fixups: the open fixup task records.
func (a *httpAPI) handleFixups(w http.ResponseWriter, r *http.Request) {
	var (
		tasks   []fsm.Task
		applied uint64
	)
	a.m.state.Read(func(s *fsm.State) { tasks = s.Tasks(); applied = s.AppliedIndex() })
	out := make([]FixupView, 0, len(tasks))
	for _, t := range tasks {
		out = append(out, FixupView{Task: t, Applied: applied})
	}
	writeJSON(w, http.StatusOK, map[string]any{"fixups": out})
}

// handleFixup is GET /v1/fixups/{id}: one open task record from this
// manager's committed state (operators, the cluster page). A peer confirms
// a task over NATS (mgr.confirm, answered by a leader that verified its
// leadership with a quorum), not here: the HTTP form of the confirmation
// (?confirm=true) went with the HTTP control plane, and is refused (400)
// so a script that used it learns so instead of getting an unconfirmed
// record.
func (a *httpAPI) handleFixup(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf("fixup id %q: want the task's Raft index", r.PathValue("id"))})
		return
	}
	if r.URL.Query().Has("confirm") {
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: "?confirm is not served over HTTP: peers confirm tasks over NATS (quarry.mgr.confirm.<peer>)"})
		return
	}
	view, ok := a.m.Fixup(id)
	if !ok {
		writeError(w, &APIError{Status: http.StatusNotFound, Code: "unknown_task", Message: fmt.Sprintf("fixup task %d: not open (done, failed or never created)", id)})
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// Fixup returns the open fixup task id from this manager's committed state.
func (m *Manager) Fixup(id uint64) (FixupView, bool) {
	var (
		view  FixupView
		found bool
	)
	m.state.Read(func(s *fsm.State) {
		if t, ok := s.Task(id); ok {
			view, found = FixupView{Task: t, Applied: s.AppliedIndex()}, true
		}
	})
	return view, found
}

// verifyLeader checks with a quorum that this manager is still the leader.
func (m *Manager) verifyLeader(ctx context.Context) error {
	if err := waitFuture(ctx, m.node.raft.VerifyLeader()); err != nil {
		return raftError(err)
	}
	return nil
}

// waitFuture waits for a Raft future or the end of ctx. The goroutine ends
// when Raft resolves the future (at the latest when Raft shuts down).
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ManagersView is GET /v1/managers: the Raft configuration joined with the
// member table, and the leader.
type ManagersView struct {
	Leader   string        `json:"leader"`
	Self     string        `json:"self"`
	Term     uint64        `json:"term"`
	Managers []ManagerView `json:"managers"`
	// ClusterVersion is the command-set version the group agreed (the
	// leader raises it once every manager supports more); BuildVersion the
	// highest this manager's build supports.
	ClusterVersion int `json:"cluster_version"`
	BuildVersion   int `json:"build_version"`
}

// ManagerView is one manager of the group.
type ManagerView struct {
	ID       string `json:"id"`
	Site     string `json:"site,omitempty"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr,omitempty"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
	// Version is the cluster version the manager's build supports, as its
	// member-table entry says (1: a build before cluster versions, or not
	// reported yet).
	Version int `json:"version"`
}

// Managers returns the group as this manager knows it.
func (m *Manager) Managers() ManagersView {
	leader, _, _ := m.Leader()
	v := ManagersView{Leader: leader, Self: m.cfg.ID, Term: m.node.raft.CurrentTerm(),
		ClusterVersion: m.ClusterVersion(), BuildVersion: m.cfg.buildVersion()}
	cf := m.node.raft.GetConfiguration()
	if cf.Error() != nil {
		return v
	}
	for _, s := range cf.Configuration().Servers {
		mem, _ := m.mux.member(string(s.ID))
		v.Managers = append(v.Managers, ManagerView{
			ID: string(s.ID), Site: mem.Site, RaftAddr: string(s.Address), HTTPAddr: mem.HTTPAddr,
			Voter: s.Suffrage == raft.Voter, Leader: string(s.ID) == leader, Version: mem.supports(),
		})
	}
	return v
}

func (a *httpAPI) handleManagers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.m.Managers())
}

// handleJoin is POST /v1/managers/join (leader only; followers redirect).
func (a *httpAPI) handleJoin(w http.ResponseWriter, r *http.Request) {
	var req JoinRequest
	if err := decodeBody(r, &req, false); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
	defer cancel()
	if err := a.m.addMember(ctx, req); err != nil {
		if errors.Is(err, ErrNotLeader) {
			a.redirectToLeader(w, r)
			return
		}
		writeError(w, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, a.m.Managers())
}

// handleGetConfig is GET /v1/config: the committed cluster config, its
// tokens as digests under the cluster's token key (never the key).
func (a *httpAPI) handleGetConfig(w http.ResponseWriter, r *http.Request) {
	var cfg fsm.Config
	var key []byte
	a.m.state.Read(func(s *fsm.State) { cfg, key = s.Config(), fsm.TokenKeyOf(s) })
	writeJSON(w, http.StatusOK, cfg.Redacted(key))
}

// keepSecrets resolves the tokens of a POSTed config that are given by
// their digest (as GET /v1/config shows them: keyed under the cluster's
// token key, or the unkeyed form a config read before the key showed) to
// the secrets the cluster holds, so a config read, edited and posted back
// keeps its tokens. A digest that names no token of that kind is refused:
// a new token needs its secret.
func keepSecrets(cur fsm.Config, key []byte, cfg *fsm.Config) *APIError {
	hec := map[string]string{}
	for _, t := range cur.HECTokens {
		hec[fsm.TokenDigest(t.Token)] = t.Token
		hec[fsm.KeyedDigest(key, t.Token)] = t.Token
	}
	search := map[string]string{}
	for _, t := range cur.SearchTokens {
		search[fsm.TokenDigest(t.Token)] = t.Token
		search[fsm.KeyedDigest(key, t.Token)] = t.Token
	}
	cfg.HECTokens = slices.Clone(cfg.HECTokens)
	for i, t := range cfg.HECTokens {
		if !fsm.IsTokenDigest(t.Token) {
			continue
		}
		sec, ok := hec[t.Token]
		if !ok {
			return &APIError{Status: http.StatusBadRequest, Code: "bad_config", Message: fmt.Sprintf("hec token %s: no HEC token of the cluster has this digest; a new token needs its secret", t.Token)}
		}
		cfg.HECTokens[i].Token = sec
	}
	cfg.SearchTokens = slices.Clone(cfg.SearchTokens)
	for i, t := range cfg.SearchTokens {
		if !fsm.IsTokenDigest(t.Token) {
			continue
		}
		sec, ok := search[t.Token]
		if !ok {
			return &APIError{Status: http.StatusBadRequest, Code: "bad_config", Message: fmt.Sprintf("search token %s: no search token of the cluster has this digest; a new token needs its secret", t.Token)}
		}
		cfg.SearchTokens[i].Token = sec
	}
	return nil
}

// handleSetConfig is POST /v1/config: replaces the cluster config with the
// body (a whole config, as GET /v1/config returns it). A config that cannot
// be met is refused (400 bad_config) and changes nothing.
func (a *httpAPI) handleSetConfig(w http.ResponseWriter, r *http.Request) {
	var cfg fsm.Config
	if err := decodeBody(r, &cfg, false); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	var cur fsm.Config
	var key []byte
	a.m.state.Read(func(s *fsm.State) { cur, key = s.Config(), fsm.TokenKeyOf(s) })
	if err := keepSecrets(cur, key, &cfg); err != nil {
		writeError(w, err)
		return
	}
	if err := cfg.Validate(); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	res, ok := a.applyHTTP(w, r, &fsm.SetConfig{ReqID: requestID(r), Config: cfg})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"config": cfg.Redacted(key), "result": res})
}
