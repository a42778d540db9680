package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/query"
)

// Limits of a peer's own POST /v1/search (single-peer search), as a search
// head has them (issue 26, review M1); docs/LIMITS.md.
const (
	DefaultSearchTimeout = 2 * time.Minute // a single-peer search's time limit
	DefaultMaxResults    = 50000           // result rows of one single-peer search (Splunk's maxresultrows)
	DefaultMaxSearches   = 4               // single-peer searches running at once; more get 429
	searchRetryAfter     = "1"             // seconds, the 429's Retry-After
)

// httpSearchLimits fills the single-peer search limits' defaults and makes
// the semaphore.
func (p *Peer) httpSearchLimits() {
	if p.cfg.SearchTimeout <= 0 {
		p.cfg.SearchTimeout = DefaultSearchTimeout
	}
	if p.cfg.MaxResults <= 0 {
		p.cfg.MaxResults = DefaultMaxResults
	}
	if p.cfg.MaxSearches <= 0 {
		p.cfg.MaxSearches = DefaultMaxSearches
	}
	p.httpSearchSem = make(chan struct{}, p.cfg.MaxSearches)
}

// serveSearch is single-peer search: every searchable copy here, through
// query.Search. It stays thin on purpose: the language lives in query.
// ?stream=true answers NDJSON like a search head (SPEC §7): one line per
// result, then one {"summary": …} line. A syntax error's reply carries its
// 0-based byte offset in the query as "position" (an addition). At most
// MaxSearches run at once (more get 429 too_many_searches with
// Retry-After), each for at most SearchTimeout (504 search_timeout), and
// an answer holds at most MaxResults rows (a warning in the summary says
// so when it cut).
func (p *Peer) serveSearch(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(api.RoleHeader, api.RolePeer)
	allowed, status, msg := p.searchScope(r)
	if status != 0 {
		writeAuthError(w, status, msg)
		return
	}
	var req query.Request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("decode search request: %v", err))
		return
	}
	req.Server = p.cfg.ID
	req.MaxResults, req.MemoryLimit = p.cfg.MaxResults, p.cfg.SearchMemory
	req.Knowledge = p.cfg.Knowledge
	if _, err := query.ParsePreference(req.Preference); err != nil {
		writeError(w, http.StatusBadRequest, "bad_preference", err.Error())
		return
	}
	select {
	case p.httpSearchSem <- struct{}{}:
		defer func() { <-p.httpSearchSem }()
	default:
		p.searchErrors.WithLabelValues("too_many_searches").Inc()
		w.Header().Set("Retry-After", searchRetryAfter)
		writeError(w, http.StatusTooManyRequests, "too_many_searches",
			fmt.Sprintf("too many concurrent searches on peer %s (limit %d, --max-searches); retry later", p.cfg.ID, p.cfg.MaxSearches))
		return
	}
	segs := p.store.Segments()
	if allowed != nil {
		kept := segs[:0]
		for _, s := range segs {
			if slices.Contains(allowed, s.Index()) {
				kept = append(kept, s)
			}
		}
		segs = kept
	}
	p.searches.Inc()
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.SearchTimeout)
	defer cancel()
	resp, err := query.Search(ctx, req, segs)
	p.searchSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		p.writeSearchError(w, r, err)
		return
	}
	p.searchBuckets.WithLabelValues("searched").Add(float64(resp.Summary.Buckets.Successful - resp.Summary.Buckets.Skipped))
	p.searchBuckets.WithLabelValues("skipped").Add(float64(resp.Summary.Buckets.Skipped))
	p.searchBuckets.WithLabelValues("failed").Add(float64(resp.Summary.Buckets.Failed))
	p.searchBuckets.WithLabelValues("missing").Add(float64(resp.Summary.Buckets.Missing))
	if r.URL.Query().Get("stream") == "true" {
		writeNDJSON(w, resp)
		return
	}
	writeJSON(w, 200, resp)
}

// writeSearchError answers a failed single-peer search.
func (p *Peer) writeSearchError(w http.ResponseWriter, r *http.Request, err error) {
	var se *query.SyntaxError
	switch {
	case errors.As(err, &se):
		p.searchErrors.WithLabelValues("bad_query").Inc()
		if name := query.CompileLimit(err); name != "" {
			p.searchLimitHits.WithLabelValues(name).Inc()
		}
		writeJSON(w, http.StatusBadRequest, SearchError{Error: err.Error(), Code: "bad_query", Position: &se.Pos})
	case errors.Is(err, query.ErrNotBuilt):
		p.searchErrors.WithLabelValues("not_built").Inc()
		writeError(w, http.StatusNotImplemented, "not_built", err.Error())
	case query.IsRequestError(err):
		p.searchErrors.WithLabelValues("bad_query").Inc()
		writeError(w, http.StatusBadRequest, "bad_query", err.Error())
	case query.IsLimitError(err):
		// A value or a group count passed a limit of the search: the error
		// names it (docs/LIMITS.md).
		p.searchErrors.WithLabelValues("limit_exceeded").Inc()
		writeError(w, http.StatusBadRequest, "limit_exceeded", err.Error())
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away (closed the page, pressed stop).
		p.searchCancelled.Inc()
		writeError(w, http.StatusGatewayTimeout, "search_cancelled", err.Error())
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		p.searchErrors.WithLabelValues("search_timeout").Inc()
		writeError(w, http.StatusGatewayTimeout, "search_timeout",
			fmt.Sprintf("search exceeded its time limit of %s (--search-timeout) and was stopped: %v", p.cfg.SearchTimeout, err))
	default:
		p.searchErrors.WithLabelValues("search_failed").Inc()
		writeError(w, http.StatusInternalServerError, "search_failed", err.Error())
	}
}
