package searchhead

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// Search admission (issue 26 item 3): a head runs at most MaxSearches
// searches at once, and one caller — one token — at most
// MaxSearchesPerToken of them, so one user's script cannot take every
// slot. A search that finds the head full waits for a slot up to
// searchQueueWait (its own deadline permitting) before it is refused; a
// caller over its own share is refused at once (waiting would only queue
// it behind itself). Refusals are 429 with Retry-After and count in
// quarry_searchhead_searches_rejected_total.

// searchQueueWait is how long a search waits for a free slot on a full
// head before 429.
const searchQueueWait = 2 * time.Second

// retryAfterSeconds is the Retry-After a refused search gets.
const retryAfterSeconds = 1

// callerKey carries who asked (the token's digest, requestToken) in a
// search's context.
type callerKey struct{}

// withCaller tags ctx with the caller of an HTTP request: the digest of
// its token (never the secret), or "" for a token-less loopback client.
func withCaller(ctx context.Context, r *http.Request) context.Context {
	owner := ""
	if tok := requestToken(r); tok != "" {
		owner = fsm.TokenDigest(tok)
	}
	return context.WithValue(ctx, callerKey{}, owner)
}

// quotas counts running searches per caller.
type quotas struct {
	mu      sync.Mutex
	running map[string]int
}

// admit takes a search slot for ctx's caller, or refuses with 429. A
// queued search (a Splunk REST job, bounded per token by its own limits)
// skips the per-token share and waits for a slot as long as ctx lasts, and
// says when it has one. The returned release gives the slot back.
func (h *Head) admit(ctx context.Context, queued *queuedSearch) (release func(), err error) {
	caller, _ := ctx.Value(callerKey{}).(string)
	if queued != nil {
		caller = "\x00jobs" // never a digest
	}
	h.quota.mu.Lock()
	if h.quota.running == nil {
		h.quota.running = map[string]int{}
	}
	if n := h.quota.running[caller]; queued == nil && n >= h.cfg.MaxSearchesPerToken {
		h.quota.mu.Unlock()
		h.metrics.rejected.Inc()
		return nil, &RequestError{Status: 429, Code: "too_many_searches", RetryAfter: retryAfterSeconds,
			Msg: fmt.Sprintf("too many concurrent searches by this token on search head %s (limit %d per token, --max-searches-per-token); retry later", h.cfg.ID, h.cfg.MaxSearchesPerToken)}
	}
	h.quota.running[caller]++
	h.quota.mu.Unlock()
	unCount := func() {
		h.quota.mu.Lock()
		if h.quota.running[caller]--; h.quota.running[caller] <= 0 {
			delete(h.quota.running, caller)
		}
		h.quota.mu.Unlock()
	}
	select {
	case h.sem <- struct{}{}:
	default:
		wait := searchQueueWait
		if queued != nil {
			wait = time.Until(deadlineOf(ctx))
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case h.sem <- struct{}{}:
		case <-t.C:
			unCount()
			h.metrics.rejected.Inc()
			return nil, &RequestError{Status: 429, Code: "too_many_searches", RetryAfter: retryAfterSeconds,
				Msg: fmt.Sprintf("too many concurrent searches on search head %s (limit %d, --max-searches; waited %s for a slot); retry later", h.cfg.ID, h.cfg.MaxSearches, searchQueueWait)}
		case <-ctx.Done():
			unCount()
			return nil, ctx.Err()
		}
	}
	if queued != nil && queued.started != nil {
		queued.started()
	}
	return func() { <-h.sem; unCount() }, nil
}
