package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/quarry-dev/quarry/fsm"
)

// Detention (SPEC §3; fsm/detention.go). The leader feeds the free-disk rule
// each peer's last heartbeat disk report (memory only, like liveness) and
// the thresholds of its Config; the operator sets and lifts a manual
// detention with POST /v1/peers/{id}/detention.

// Defaults of the free-disk rule: Splunk's minFreeSpace (5000 MB) and a
// tenth of it as hysteresis, so a peer at the edge does not flap.
const (
	DefaultDetentionFreeBytes       = 5000 << 20
	DefaultDetentionHysteresisBytes = 500 << 20
)

// detentionRule is the planner's rule from the config (off when negative).
func (m *Manager) detentionRule() fsm.DetentionRule {
	if m.cfg.DetentionFreeBytes < 0 {
		return fsm.DetentionRule{}
	}
	return fsm.DetentionRule{FreeBytes: m.cfg.DetentionFreeBytes, HysteresisBytes: max(m.cfg.DetentionHysteresisBytes, 0)}
}

// diskReports are the peers' last reported disk space (peers that report a
// total only: a total of 0 is "could not read").
func (m *Manager) diskReports() map[string]fsm.DiskReport {
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	out := make(map[string]fsm.DiskReport, len(m.peerStats))
	for id, s := range m.peerStats {
		if s.DiskTotal > 0 {
			out[id] = fsm.DiskReport{Free: s.DiskFree, Total: s.DiskTotal}
		}
	}
	return out
}

// logDetention says so when a planned command put a peer in detention or
// took it out.
func (m *Manager) logDetention(c fsm.Command) {
	if d, ok := c.(*fsm.SetDetention); ok {
		if d.Enabled {
			m.log.Warn("peer in detention: its disk is short", "peer", d.ID, "reason", d.Reason)
		} else {
			m.log.Info("peer out of detention: disk space is back", "peer", d.ID, "reason", d.Reason)
		}
	}
}

// DetentionRequest is the body of POST /v1/peers/{id}/detention.
type DetentionRequest struct {
	Enabled *bool `json:"enabled"`
}

// handleDetention is POST /v1/peers/{id}/detention {"enabled": true}: a
// manual detention (kept until the operator lifts it, whatever the disk), or
// lifting any detention (the free-disk rule puts the peer back if its disk
// is still short).
func (a *httpAPI) handleDetention(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req DetentionRequest
	if err := decodeBody(r, &req, false); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if req.Enabled == nil {
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf(`POST /v1/peers/%s/detention: body needs "enabled": true or false`, id)})
		return
	}
	res, ok := a.applyHTTP(w, r, &fsm.SetDetention{ReqID: requestID(r), ID: id, Enabled: *req.Enabled, By: fsm.DetentionManual,
		Reason: "operator", At: a.m.cfg.Now().UTC()})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"peer": id, "detention": *req.Enabled, "result": res})
}

// SetDetention is POST /v1/peers/{id}/detention {"enabled": on}.
func (c *Client) SetDetention(ctx context.Context, id string, on bool) error {
	return c.do(ctx, http.MethodPost, "/v1/peers/"+url.PathEscape(id)+"/detention", map[string]bool{"enabled": on}, nil)
}
