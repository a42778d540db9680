package manager

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/quarry-dev/quarry/fsm"
)

// RebuildView is the answer of POST /v1/rebuild: the buckets sealed at their
// longest copy (fsm.State.RebuildSeals) and what the table holds now.
type RebuildView struct {
	Sealed  []fsm.SealBucket `json:"sealed"`
	PeersUp int              `json:"peers_up"`
	Buckets int              `json:"buckets"`
}

// handleRebuild is POST /v1/rebuild[?expect_peers=N]: after every manager's
// data was lost, once the peers re-registered with their inventories, seal
// every rebuilt bucket at its longest copy (DESIGN.md, "Rebuild from
// inventories"). With expect_peers it refuses (409 peers_missing, nothing
// changed) while fewer than N peers are Up: a peer that comes back after the
// seal with a longer copy would see it truncated. Each seal is an ordinary
// SealBucket whose request id names the bucket, so a retried rebuild is
// harmless; buckets already sealed are left alone.
func (a *httpAPI) handleRebuild(w http.ResponseWriter, r *http.Request) {
	m := a.m
	expect := 0
	if v := r.URL.Query().Get("expect_peers"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf("expect_peers %q: want a count >= 0", v)})
			return
		}
		expect = n
	}
	if !m.IsLeader() {
		a.redirectToLeader(w, r)
		return
	}
	var (
		seals   []*fsm.SealBucket
		up, all int
	)
	m.state.Read(func(s *fsm.State) {
		seals = s.RebuildSeals()
		for _, p := range s.PeerList() {
			if p.State == fsm.StateUp {
				up++
			}
		}
		all = len(s.BucketList("", ""))
	})
	if up < expect {
		writeError(w, &APIError{Status: http.StatusConflict, Code: "peers_missing",
			Message: fmt.Sprintf("rebuild: %d peers Up, %d expected: wait until every peer re-registered", up, expect)})
		return
	}
	view := RebuildView{Sealed: []fsm.SealBucket{}, PeersUp: up, Buckets: all}
	rid := r.Header.Get("X-Request-Id")
	for _, seal := range seals {
		seal.RequestID = "rebuild-" + rid + "-" + seal.Bucket
		ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
		_, ok := a.applyHTTP(w, r.WithContext(ctx), seal)
		cancel()
		if !ok {
			return
		}
		view.Sealed = append(view.Sealed, *seal)
	}
	m.log.Warn("rebuilt the bucket table from the peers' inventories", "sealed", len(view.Sealed), "peers_up", up, "buckets", all)
	writeJSON(w, http.StatusOK, view)
}

// Rebuild is POST /v1/rebuild; expectPeers 0 skips the peer count check.
func (c *Client) Rebuild(ctx context.Context, expectPeers int) (RebuildView, error) {
	var v RebuildView
	path := "/v1/rebuild"
	if expectPeers > 0 {
		path += "?expect_peers=" + strconv.Itoa(expectPeers)
	}
	err := c.do(ctx, http.MethodPost, path, nil, &v)
	return v, err
}
