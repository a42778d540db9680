package manager

import (
	"net/url"
	"sort"
	"sync"
	"time"
)

// Search heads the cluster page links to. A search head names its own URL
// in its generation requests (api.GenerationRequest.URL); the leader, the
// only manager that serves them, keeps the ones it heard in memory (an
// observation like the peers' heartbeat statistics, not cluster state:
// nothing goes through Raft) and lists them under search_heads in
// GET /v1/status. Who may announce: the sender is the last token of the
// request's subject, which the bus's permissions bind to the sender's NATS
// user (a search head's user publishes only under its own name); a request
// sent under a registered peer's id is a peer's and is never listed. The
// URL must be http or https with a host and no user info, at most
// maxHeadURL bytes; anything else is ignored (the generation is still
// answered). At most maxHeadsKept heads are kept: a new one past that
// replaces the one heard longest ago, and a head not heard for headForget
// is dropped.
const (
	maxHeadURL   = 512
	maxHeadsKept = 256
	headForget   = 10 * time.Minute
)

// SearchHeadView is one search head as GET /v1/status lists it.
type SearchHeadView struct {
	Site    string    `json:"site"`
	URL     string    `json:"url"`
	HeardAt time.Time `json:"heard_at"`
}

// headBook is the search heads this manager heard from.
type headBook struct {
	mu    sync.Mutex
	heads map[string]SearchHeadView
}

// validHeadURL reports whether s may be shown as a link to a search head.
func validHeadURL(s string) bool {
	if s == "" || len(s) > maxHeadURL {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil &&
		u.RawQuery == "" && u.Fragment == ""
}

// record keeps that head id (site, url) was heard at at; an invalid URL is
// ignored.
func (b *headBook) record(id, site, rawURL string, at time.Time) {
	if !validHeadURL(rawURL) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.heads == nil {
		b.heads = map[string]SearchHeadView{}
	}
	b.forgetLocked(at)
	if _, ok := b.heads[id]; !ok && len(b.heads) >= maxHeadsKept {
		oldest := ""
		for k, v := range b.heads {
			if oldest == "" || v.HeardAt.Before(b.heads[oldest].HeardAt) {
				oldest = k
			}
		}
		delete(b.heads, oldest)
	}
	b.heads[id] = SearchHeadView{Site: site, URL: rawURL, HeardAt: at}
}

func (b *headBook) forgetLocked(now time.Time) {
	for k, v := range b.heads {
		if now.Sub(v.HeardAt) > headForget {
			delete(b.heads, k)
		}
	}
}

// view is the heads heard within headForget of now (nil for none).
func (b *headBook) view(now time.Time) map[string]SearchHeadView {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgetLocked(now)
	if len(b.heads) == 0 {
		return nil
	}
	out := make(map[string]SearchHeadView, len(b.heads))
	for k, v := range b.heads {
		out[k] = v
	}
	return out
}

// ids is the heads' ids, sorted (for logs and tests).
func (b *headBook) ids(now time.Time) []string {
	var out []string
	for k := range b.view(now) {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
