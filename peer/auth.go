package peer

// Tokens on the peer's HTTP API (SPEC §7 "Peer", §11). HEC has its own
// tokens (peer/hec); /healthz and /metrics are open. Everything else needs
// Authorization: Bearer <token>:
//
//   - GET /v1/buckets and POST /v1/search: a search token (scoped to its
//     indexes), or the admin token (every index);
//   - POST /v1/buckets/{id}/roll, POST /v1/buckets/{id}/searchable and
//     /debug/pprof/* (only with Config.Pprof): the admin token.
//
// The admin token is Config.AdminToken on a standalone peer. On a cluster
// member it is the managers' admin token, checked against the digest the
// managers send in the peer config (api.PeerConfig.AdminTokenDigest): the
// peer never holds the secret, and until it has the digest its admin
// endpoints refuse every token (503). Config.ManagerToken (--token), when
// given, is checked directly instead (older deployments). A standalone peer
// with no admin token, or no search token, serves those requests without
// one only while it listens on loopback addresses (said at start); on any
// other address Start refuses without an admin token, before it listens.

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/localonly"
	"github.com/quarry-dev/quarry/peer/store"
)

// ErrTokenRequired: the peer would listen on a non-loopback address without
// an admin token, so its API would be open to the network.
var ErrTokenRequired = errors.New("an admin token is required on a non-loopback address")

// loopbackOnly reports whether a listen address (host:port, as configured)
// binds loopback addresses only. An empty host (every interface), a
// wildcard or a host name other than localhost is not loopback.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// adminMatch checks a presented token against the peer's admin token:
// configured is false when none guards the admin endpoints (a standalone
// peer without --admin-token, on loopback only), known false while a
// cluster member has not yet received the managers' digest.
func (p *Peer) adminMatch(tok string) (configured, known, ok bool) {
	switch {
	case p.cfg.NATS == "":
		return p.cfg.AdminToken != "", true, p.cfg.AdminToken != "" && equalToken(tok, p.cfg.AdminToken)
	case p.cfg.ManagerToken != "":
		return true, true, equalToken(tok, p.cfg.ManagerToken)
	}
	var a *clusterAuth
	if p.cl != nil {
		a = p.cl.auth.Load()
	}
	if a == nil || a.adminDigest == "" {
		return true, false, false
	}
	return true, true, fsm.TokenMatches(a.key, a.adminDigest, tok)
}

// searchTokens are the search tokens in force and the token key they are
// keyed under: the cluster config's on a cluster member (refreshed with
// every heartbeat), the flags' standalone (secrets, no key).
func (p *Peer) searchTokens() ([]fsm.SearchToken, []byte) {
	if p.cl != nil {
		if a := p.cl.auth.Load(); a != nil {
			return a.searchTokens, a.key
		}
		return nil, nil
	}
	return p.cfg.SearchTokens, nil
}

// checkAuthConfig refuses a non-loopback listen address without an admin
// token and says at start what is served without a token (loopback only).
// It runs before the peer listens or joins the cluster.
func checkAuthConfig(cfg Config) error {
	if cfg.NATS != "" {
		return nil // the managers' admin token guards a cluster member (its digest)
	}
	if cfg.AdminToken == "" && !loopbackOnly(cfg.HTTPAddr) {
		return fmt.Errorf("peer: --http-addr %s is not a loopback address: %w (--admin-token), or /v1/buckets, /v1/search, roll and searchable would be open to the network",
			cfg.HTTPAddr, ErrTokenRequired)
	}
	return nil
}

// logAuth says at start which endpoints answer without a token.
func (p *Peer) logAuth() {
	if configured, _, _ := p.adminMatch(""); !configured {
		p.log.Warn("no admin token configured: roll, searchable and pprof are served without a token because the peer listens on loopback only", "addr", p.cfg.HTTPAddr)
	}
	if _, status, _ := p.searchScope(&http.Request{Header: http.Header{}}); status == 0 {
		p.log.Warn("no search token configured: GET /v1/buckets and POST /v1/search are served without a token because the peer listens on loopback only", "addr", p.cfg.HTTPAddr)
	}
}

// bearer is the request's bearer token ("" when it has none).
func bearer(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(tok)
}

func equalToken(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// writeAuthError answers a refused request: 401 token_required without a
// token, 403 invalid_token with a wrong one.
func writeAuthError(w http.ResponseWriter, status int, msg string) {
	code := "invalid_token"
	if status == http.StatusUnauthorized {
		code = "token_required"
		w.Header().Set("WWW-Authenticate", `Bearer realm="quarry-peer"`)
	}
	writeError(w, status, code, msg)
}

// adminOnly wraps a handler that needs the admin token.
func (p *Peer) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		configured, known, ok := p.adminMatch(tok)
		if !configured {
			// loopback only, said at start; and only for this machine's own
			// clients (localonly: no DNS rebinding, no cross-origin page)
			if err := localonly.Check(r); err != nil {
				writeError(w, http.StatusForbidden, "not_local", err.Error())
				return
			}
			h(w, r)
			return
		}
		switch {
		case tok == "":
			writeAuthError(w, http.StatusUnauthorized, fmt.Sprintf("%s %s: the admin token is required: Authorization: Bearer <token>", r.Method, r.URL.Path))
		case !known:
			writeError(w, http.StatusServiceUnavailable, "not_ready", fmt.Sprintf("%s %s: the managers' admin token is not known here yet (it comes with the cluster config); retry", r.Method, r.URL.Path))
		case !ok:
			writeAuthError(w, http.StatusForbidden, fmt.Sprintf("%s %s: invalid admin token", r.Method, r.URL.Path))
		default:
			h(w, r)
		}
	}
}

// searchScope checks a search request's token (POST /v1/search, GET
// /v1/buckets): the indexes it may read (nil: every index), or an HTTP
// status and message. Without search tokens a standalone peer without an
// admin token, or a cluster member on loopback, is open (said at start);
// otherwise the admin token reads every index.
func (p *Peer) searchScope(r *http.Request) ([]string, int, string) {
	toks, key := p.searchTokens()
	tok := bearer(r)
	configured, _, isAdmin := p.adminMatch(tok)
	if len(toks) == 0 && (!configured || p.cfg.NATS != "" && p.loopback) {
		if err := localonly.Check(r); err != nil {
			return nil, http.StatusForbidden, err.Error()
		}
		return nil, 0, ""
	}
	if tok == "" {
		return nil, http.StatusUnauthorized, "a search token is required: Authorization: Bearer <token>"
	}
	if isAdmin {
		return nil, 0, ""
	}
	for _, t := range toks {
		if fsm.TokenMatches(key, t.Token, tok) {
			if len(t.Indexes) == 0 {
				return nil, 0, ""
			}
			return t.Indexes, 0, ""
		}
	}
	return nil, http.StatusForbidden, "invalid search token"
}

// registerPprof serves /debug/pprof behind the admin token when
// Config.Pprof is set; otherwise it answers 404 with how to turn it on.
func (p *Peer) registerPprof(mux *http.ServeMux) {
	if !p.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, "not_found", "profiling is off: start the peer with --pprof (then it needs the admin token)")
		})
		return
	}
	// Profiling for operators chasing a slow or fat peer.
	mux.HandleFunc("GET /debug/pprof/", p.adminOnly(pprof.Index))
	mux.HandleFunc("GET /debug/pprof/profile", p.adminOnly(pprof.Profile))
}

// bucketsInScope keeps the copies of the indexes a token may read.
func bucketsInScope(inv []store.CopyInfo, allowed []string) []store.CopyInfo {
	if allowed == nil {
		return inv
	}
	out := inv[:0]
	for _, c := range inv {
		if slices.Contains(allowed, c.Index) {
			out = append(out, c)
		}
	}
	return out
}

// searchableReportWait bounds how long POST /v1/buckets/{id}/searchable
// waits for the managers to take the report before it answers; the report
// is retried past it until they do, refuse it, or the peer stops.
const searchableReportWait = 10 * time.Second

// reportSearchable tells the managers that this peer's copy of bucket is
// searchable now, as an api.EventSearchable bucket event (fsm.CopySearchable
// — what a make-searchable fixup task's result records, for a copy no task
// asked for). Retried (its request id makes a retry apply once) until the
// managers take it or refuse it with a reason no retry changes, or the peer
// stops. done receives the outcome once.
func (p *Peer) reportSearchable(bucket string, done chan<- error) {
	cl := p.cl
	ev := api.BucketEvent{V: api.WireVersion, Kind: api.EventSearchable, Bucket: bucket, Peer: p.cfg.ID, Searchable: true}
	if n, _, ok := p.store.Replicas().Blocks(bucket); ok {
		ev.Blocks = int64(n)
	}
	backoff := 250 * time.Millisecond
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cl.cp.BucketEvent(ctx, ev)
		cancel()
		var remote *bus.RemoteError
		switch {
		case err == nil:
			if attempt > 0 {
				p.log.Info("searchable copy reported", "bucket", bucket, "attempts", attempt+1)
			}
			done <- nil
			return
		case errors.As(err, &remote) && remote.Code != api.CodeNotLeader:
			p.log.Warn("the managers refused a searchable report", "bucket", bucket, "err", err)
			done <- err
			return
		}
		if attempt == 0 {
			p.log.Warn("could not report a searchable copy; retrying until the managers take it", "bucket", bucket, "err", err)
		}
		select {
		case <-cl.stop:
			p.log.Warn("stopping with a searchable copy not reported", "bucket", bucket, "err", err)
			done <- err
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// warnShortTokens warns, once per kind, about the tokens given by flags
// that are shorter than fsm.ShortTokenLength (review L1; never refused,
// never printed). A cluster member's tokens come as digests.
func warnShortTokens(log *slog.Logger, cfg Config) {
	var hec, search []string
	for _, t := range cfg.Tokens {
		hec = append(hec, t.Value)
	}
	for _, t := range cfg.SearchTokens {
		search = append(search, t.Token)
	}
	for _, w := range []string{
		fsm.ShortTokenWarning("admin token", cfg.AdminToken), fsm.ShortTokenWarning("manager token (--token)", cfg.ManagerToken),
		fsm.ShortTokenWarning("HEC token", hec...), fsm.ShortTokenWarning("search token", search...),
	} {
		if w != "" {
			log.Warn(w)
		}
	}
}
