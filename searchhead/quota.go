package searchhead

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"
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

// callerKey carries who asked (callerOf) in a search's context.
type callerKey struct{}

// withCaller tags ctx with the caller of an HTTP request: the token's
// digest (never the secret), or "" for a token-less loopback client.
func withCaller(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, callerKey{}, callerOf(r))
}

func callerOf(r *http.Request) string {
	tok := bearer(r)
	if tok == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:8])
}

// quotas counts running searches per caller.
type quotas struct {
	mu      sync.Mutex
	running map[string]int
}

// admit takes a search slot for ctx's caller, or refuses with 429. The
// returned release gives the slot back.
func (h *Head) admit(ctx context.Context) (release func(), err error) {
	caller, _ := ctx.Value(callerKey{}).(string)
	h.quota.mu.Lock()
	if h.quota.running == nil {
		h.quota.running = map[string]int{}
	}
	if n := h.quota.running[caller]; n >= h.cfg.MaxSearchesPerToken {
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
		t := time.NewTimer(searchQueueWait)
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
	return func() { <-h.sem; unCount() }, nil
}
