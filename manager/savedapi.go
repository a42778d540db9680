package manager

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/schedule"
)

// Saved searches on the admin API (issue 28 item 3):
//
//	GET    /v1/savedsearches             every saved search, its last run and next run
//	POST   /v1/savedsearches             add one (409 saved_search_exists; 400 on a bad query, cron or condition)
//	DELETE /v1/savedsearches/{name}      remove one (404 unknown_saved_search)
//	POST   /v1/savedsearches/{name}/run  queue a manual slot that one search head runs once
//
// Every one needs the admin token; the writes run on the leader (a
// follower redirects) and need cluster version fsm.SavedSearchVersion
// (409 cluster_version before). The search heads schedule and run them
// (searchhead/scheduler.go) over <prefix>.mgr.savedsearch (savedops.go).

// SavedSearchRequest is the body of POST /v1/savedsearches.
type SavedSearchRequest struct {
	Name     string `json:"name"`
	Search   string `json:"search"`
	Cron     string `json:"cron"`
	Earliest string `json:"earliest,omitempty"`
	Latest   string `json:"latest,omitempty"`
	Publish  string `json:"publish,omitempty"`
	AlertIf  string `json:"alert_if,omitempty"`
}

// SavedSearchView is one saved search of GET /v1/savedsearches: its
// definition, its last finished (or skipped) slot, when its next slot is
// due, the open slots and the newest records.
type SavedSearchView struct {
	fsm.SavedSearch
	LastRun *fsm.SlotRecord  `json:"last_run,omitempty"`
	NextRun string           `json:"next_run,omitempty"`
	Open    []fsm.SlotClaim  `json:"open,omitempty"`
	Runs    []fsm.SlotRecord `json:"runs,omitempty"`
}

// savedSearchAPI serves the saved-search endpoints for the Manager it
// borrows.
type savedSearchAPI struct {
	m *Manager
	h *httpAPI
}

// checkSavedSearch validates a saved search before it is proposed: the
// name, the query (it compiles), the cron spec, the alert condition and
// the publish name (as `quarry search --publish` takes it).
func (a *savedSearchAPI) checkSavedSearch(r SavedSearchRequest) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: saved search %q: %s", errBadRequest, r.Name, fmt.Sprintf(format, args...))
	}
	if err := fsm.ValidSavedSearchName(r.Name); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	if strings.TrimSpace(r.Search) == "" {
		return bad("search is required")
	}
	if _, err := query.Compile(query.Request{Query: r.Search, Earliest: r.Earliest, Latest: r.Latest, Now: time.Now()}); err != nil {
		return bad("search: %v", err)
	}
	if _, err := schedule.Parse(r.Cron); err != nil {
		return bad("%v", err)
	}
	if r.AlertIf != "" {
		if _, err := schedule.ParseCondition(r.AlertIf); err != nil {
			return bad("alert_if: %v", err)
		}
	}
	if r.Publish != "" {
		subj, err := bus.NewSubjects(a.m.cfg.NATSPrefix)
		if err == nil {
			_, err = subj.Results(r.Publish)
		}
		if err != nil {
			return bad("publish name %q: %v", r.Publish, err)
		}
	}
	return nil
}

// handleAdd is POST /v1/savedsearches.
func (a *savedSearchAPI) handleAdd(w http.ResponseWriter, r *http.Request) {
	if err := a.m.allowed(fsm.CmdAddSavedSearch); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	var req SavedSearchRequest
	if err := decodeBody(r, &req, false); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if err := a.checkSavedSearch(req); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	cmd := &fsm.AddSavedSearch{ReqID: requestID(r), Now: time.Now().UnixNano(), Search: fsm.SavedSearch{
		Name: req.Name, Search: req.Search, Cron: req.Cron, Earliest: req.Earliest, Latest: req.Latest, Publish: req.Publish, AlertIf: req.AlertIf}}
	if _, ok := a.h.applyHTTP(w, r, cmd); !ok {
		return
	}
	var v SavedSearchView
	a.m.state.Read(func(s *fsm.State) {
		if ss, ok := fsm.SavedSearchNamed(s, req.Name); ok {
			v = savedSearchView(ss, time.Now())
		}
	})
	writeJSON(w, http.StatusOK, map[string]any{"savedsearch": v})
}

// handleList is GET /v1/savedsearches.
func (a *savedSearchAPI) handleList(w http.ResponseWriter, r *http.Request) {
	out := []SavedSearchView{}
	now := time.Now()
	a.m.state.Read(func(s *fsm.State) {
		for _, ss := range fsm.SavedSearches(s) {
			out = append(out, savedSearchView(ss, now))
		}
	})
	writeJSON(w, http.StatusOK, map[string]any{"savedsearches": out})
}

// handleRemove is DELETE /v1/savedsearches/{name}.
func (a *savedSearchAPI) handleRemove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, ok := a.h.applyHTTP(w, r, &fsm.RemoveSavedSearch{ReqID: requestID(r), Name: name}); ok {
		writeJSON(w, http.StatusOK, map[string]any{"removed": name})
	}
}

// handleRun is POST /v1/savedsearches/{name}/run.
func (a *savedSearchAPI) handleRun(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	res, ok := a.h.applyHTTP(w, r, &fsm.RunSavedSearch{ReqID: requestID(r), Name: name, Now: time.Now().UnixNano()})
	if !ok {
		return
	}
	body := map[string]any{"name": name, "queued": true}
	if q, isQ := res.(fsm.SlotQueued); isQ {
		body["slot"] = q.Slot
	}
	writeJSON(w, http.StatusOK, body)
}

// savedSearchView is the list entry of ss at now: the newest record is
// its last run, the next slot after now (and after its last scheduled
// slot) its next run.
func savedSearchView(ss fsm.SavedSearchState, now time.Time) SavedSearchView {
	v := SavedSearchView{SavedSearch: ss.SavedSearch, Open: ss.Open, Runs: ss.Runs}
	for i := len(ss.Runs) - 1; i >= 0; i-- {
		if ss.Runs[i].Status != fsm.SlotRetrying {
			last := ss.Runs[i]
			v.LastRun = &last
			break
		}
	}
	if sch, err := schedule.Parse(ss.Cron); err == nil {
		after := now
		if last := time.Unix(ss.LastSlot, 0); last.After(after) {
			after = last
		}
		if next := sch.Next(after); !next.IsZero() {
			v.NextRun = next.UTC().Format(time.RFC3339)
		}
	}
	return v
}
