package manager

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/knowledge"
)

// The configuration bundle's admin API (SPEC §7, issue 28): POST /v1/bundle
// puts a folder's props.conf and transforms.conf in force on every peer,
// GET /v1/bundle shows the bundle and the hash each peer runs. Both need
// the admin token; the state holds the bundle (fsm/bundle.go), the peers
// fetch it over NATS (mgr.bundle.<peer>).

// BundleRequest is the body of POST /v1/bundle: the files by base name
// (props.conf, transforms.conf), as text.
type BundleRequest struct {
	Files map[string]string `json:"files"`
}

// BundleStatus is GET /v1/bundle (and the answer of a POST): the bundle in
// force and, on the leader (which hears the heartbeats), the hash each
// peer runs and whether every Up peer runs it.
type BundleStatus struct {
	Hash  string            `json:"hash"`
	Index uint64            `json:"index,omitempty"`
	Files map[string]string `json:"files,omitempty"`
	// Unchanged: a POST whose files are the bundle already in force.
	Unchanged bool         `json:"unchanged,omitempty"`
	Peers     []BundlePeer `json:"peers"`
	// InSync: every peer in state Up reported the bundle's hash.
	InSync bool `json:"in_sync"`
}

// BundlePeer is one peer's bundle as its last heartbeat reported it.
type BundlePeer struct {
	ID      string    `json:"id"`
	Site    string    `json:"site,omitempty"`
	State   string    `json:"state"`
	Bundle  string    `json:"bundle"`
	HeardAt time.Time `json:"heard_at,omitzero"`
	// Since is when the leader first heard the peer run Bundle (the
	// leader's clock; reset when leadership moves).
	Since time.Time `json:"since,omitzero"`
}

// handleSetBundle is POST /v1/bundle: the files are parsed as the peers
// will parse them (knowledge.ParseIndexRules) and refused with the first
// error, line-numbered, before anything is proposed; the same files again
// change nothing.
func (a *httpAPI) handleSetBundle(w http.ResponseWriter, r *http.Request) {
	var req BundleRequest
	if err := decodeBody(r, &req, false); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	files := knowledge.FilesFromText(req.Files)
	check := &fsm.SetBundle{Hash: files.Hash(), Files: req.Files}
	if len(req.Files) == 0 {
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_bundle", Message: "POST /v1/bundle: no files: a bundle holds props.conf and/or transforms.conf"})
		return
	}
	if err := fsm.CheckBundle(check); err != nil {
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_bundle", Message: err.Error()})
		return
	}
	if _, err := knowledge.ParseIndexRules(files); err != nil {
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_bundle", Message: err.Error()})
		return
	}
	var cur string
	a.m.state.Read(func(s *fsm.State) { cur = fsm.BundleHashOf(s) })
	if cur == check.Hash {
		st := a.m.bundleStatus()
		st.Unchanged = true
		writeJSON(w, http.StatusOK, st)
		return
	}
	check.ReqID = requestID(r)
	if _, ok := a.applyHTTP(w, r, check); !ok {
		return
	}
	writeJSON(w, http.StatusOK, a.m.bundleStatus())
}

// handleGetBundle is GET /v1/bundle, answered by the leader (a follower
// redirects: only the leader hears the peers' heartbeats).
func (a *httpAPI) handleGetBundle(w http.ResponseWriter, r *http.Request) {
	if !a.m.IsLeader() {
		a.redirectToLeader(w, r)
		return
	}
	st := a.m.bundleStatus()
	var b *fsm.ConfigBundle
	a.m.state.Read(func(s *fsm.State) { b = fsm.BundleOf(s) })
	if b != nil {
		st.Files = b.Files
	}
	writeJSON(w, http.StatusOK, st)
}

// bundleStatus is the bundle in force and each peer's, by peer id.
func (m *Manager) bundleStatus() BundleStatus {
	var st BundleStatus
	var peers []fsm.PeerView
	m.state.Read(func(s *fsm.State) {
		if b := fsm.BundleOf(s); b != nil {
			st.Hash, st.Index = b.Hash, b.Index
		}
		peers = s.PeerList()
	})
	m.hbMu.Lock()
	stats := make(map[string]PeerStatsView, len(m.peerStats))
	for id, v := range m.peerStats {
		stats[id] = v
	}
	m.hbMu.Unlock()
	st.InSync = true
	st.Peers = make([]BundlePeer, 0, len(peers))
	for _, p := range peers {
		v := stats[p.ID]
		st.Peers = append(st.Peers, BundlePeer{ID: p.ID, Site: p.Site, State: string(p.State), Bundle: v.Bundle, HeardAt: v.HeardAt, Since: v.BundleSince})
		if p.State == fsm.StateUp && v.Bundle != st.Hash {
			st.InSync = false
		}
	}
	sort.Slice(st.Peers, func(i, j int) bool { return st.Peers[i].ID < st.Peers[j].ID })
	return st
}

// ApplyBundle is POST /v1/bundle.
func (c *Client) ApplyBundle(ctx context.Context, files map[string]string) (BundleStatus, error) {
	var st BundleStatus
	err := c.do(ctx, http.MethodPost, "/v1/bundle", BundleRequest{Files: files}, &st)
	return st, err
}

// Bundle is GET /v1/bundle.
func (c *Client) Bundle(ctx context.Context) (BundleStatus, error) {
	var st BundleStatus
	err := c.do(ctx, http.MethodGet, "/v1/bundle", nil, &st)
	return st, err
}
