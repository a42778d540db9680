package manager

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
)

// APIError is the JSON body of every error the manager's HTTP API answers
// (SPEC §7): what failed, with the input, and a stable code.
type APIError struct {
	Status  int    `json:"-"`
	Message string `json:"error"`
	Code    string `json:"code"`
}

func (e *APIError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (HTTP %d, %s)", e.Message, e.Status, e.Code)
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}

// errBadRequest marks a request the manager refuses as malformed.
var errBadRequest = errors.New("bad request")

// maxBody bounds a request body.
const maxBody = 1 << 20

// writeTimeout bounds the Raft proposal of one HTTP write.
const writeTimeout = 10 * time.Second

// httpAPI serves the manager's HTTP API (SPEC §7) and the cluster page for
// the Manager it borrows (Consul's endpoint shape): the routes and their
// wrappers here, the handlers in handlers.go, clusterpage.go, detention.go,
// statehash.go and rebuild.go; configEditor (adminapi.go) serves the index
// and token endpoints beside it.
type httpAPI struct{ m *Manager }

// routes is the manager's HTTP API. Reads are answered by any manager from
// its committed state; writes need the admin token and run on the leader (a
// follower answers 307 to the leader's HTTP address).
func (a *httpAPI) routes() http.Handler {
	mux := http.NewServeMux()
	// SPEC §7.
	mux.HandleFunc("/v1/status", a.read(a.handleStatus))
	mux.HandleFunc("/v1/generation", a.read(a.handleGeneration))
	mux.HandleFunc("/v1/peers", a.read(a.handlePeers))
	mux.HandleFunc("GET /v1/buckets", a.read(a.handleBuckets))
	mux.HandleFunc("/v1/buckets", a.read(a.handleBuckets)) // other methods: 405 JSON
	mux.HandleFunc("/v1/peers/{id}/offline", a.write(a.handleOffline))
	mux.HandleFunc("/v1/peers/{id}/detention", a.write(a.handleDetention))
	mux.HandleFunc("/v1/maintenance", a.write(a.handleMaintenance))
	mux.HandleFunc("/v1/rebalance", a.write(a.handleRebalance))
	mux.HandleFunc("/v1/rebuild", a.write(a.handleRebuild)) // rebuild.go, after every manager's data was lost
	mux.Handle("/metrics", a.reader(a.metricsHandler().ServeHTTP))
	mux.HandleFunc("/healthz", a.open(a.handleHealthz))
	// Additions (named in DESIGN.md): fixup task records, the manager group,
	// joining it, and the peer-facing calls until the NATS transport lands.
	ed := &configEditor{m: a.m, h: a} // adminapi.go: indexes and tokens
	mux.HandleFunc("GET /v1/config", a.read(a.admin(a.handleGetConfig)))
	mux.HandleFunc("POST /v1/config", a.write(ed.serialised(a.handleSetConfig)))
	mux.HandleFunc("GET /v1/indexes", a.read(ed.handleListIndexes))
	mux.HandleFunc("POST /v1/indexes", a.write(ed.handleAddIndex))
	mux.HandleFunc("DELETE /v1/indexes/{name}", a.writeAs(http.MethodDelete, ed.handleRemoveIndex))
	mux.HandleFunc("GET /v1/tokens", a.read(a.admin(ed.handleListTokens)))
	mux.HandleFunc("POST /v1/tokens", a.write(ed.handleAddToken))
	mux.HandleFunc("DELETE /v1/tokens/{id}", a.writeAs(http.MethodDelete, ed.handleRevokeToken))
	mux.HandleFunc("/v1/config", a.read(a.handleGetConfig)) // other methods: 405 JSON
	mux.HandleFunc("GET /v1/bundle", a.read(a.admin(a.handleGetBundle)))
	mux.HandleFunc("POST /v1/bundle", a.write(ed.serialised(a.handleSetBundle)))
	sv := &savedSearchAPI{m: a.m, h: a} // savedapi.go
	mux.HandleFunc("GET /v1/savedsearches", a.read(a.admin(sv.handleList)))
	mux.HandleFunc("POST /v1/savedsearches", a.write(sv.handleAdd))
	mux.HandleFunc("DELETE /v1/savedsearches/{name}", a.writeAs(http.MethodDelete, sv.handleRemove))
	mux.HandleFunc("POST /v1/savedsearches/{name}/run", a.write(sv.handleRun))
	mux.HandleFunc("/v1/fixups", a.read(a.handleFixups))
	mux.HandleFunc("/v1/fixups/{id}", a.read(a.handleFixup))
	mux.HandleFunc("/v1/managers", a.read(a.handleManagers))
	mux.HandleFunc("GET /v1/state/hash", a.read(a.handleStateHash))
	mux.HandleFunc("/v1/managers/join", a.write(a.handleJoin))
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &APIError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	mux.HandleFunc("/v1/generations", a.read(a.handleGenerations))
	mux.HandleFunc("/{$}", a.open(a.handlePage))
	mux.HandleFunc("/ui/{name}", a.open(a.handleAsset))
	notHEC := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &APIError{Status: http.StatusNotFound, Code: "not_a_peer", Message: fmt.Sprintf("%s is manager %s: HEC (%s) goes to a peer (indexer), which stores and replicates events", r.Host, a.m.cfg.ID, r.URL.Path)})
	}
	mux.HandleFunc("/services/collector", notHEC)
	mux.HandleFunc("/services/collector/", notHEC)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &APIError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no such page: %s", r.URL.Path)})
	})
	return mux
}

func (a *httpAPI) metricsHandler() http.Handler {
	return promhttp.HandlerFor(a.m.metrics.reg, promhttp.HandlerOpts{ErrorLog: nil})
}

// read wraps a read handler: GET or HEAD only, answered locally, with the
// read token when one is configured (reader).
func (a *httpAPI) read(h http.HandlerFunc) http.HandlerFunc { return a.open(a.reader(h)) }

// open wraps a read that needs no token even with a read token configured
// (/healthz, the cluster page's files): GET or HEAD only, answered locally.
func (a *httpAPI) open(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, &APIError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: fmt.Sprintf("%s %s: only GET", r.Method, r.URL.Path)})
			return
		}
		h(w, r)
	}
}

// reader checks the read token (Config.ReadToken, review L8): with one
// configured, a read needs it or the admin token; without, reads are open.
func (a *httpAPI) reader(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if rt := a.m.cfg.ReadToken; rt != "" && !a.authorized(r) && !bearerIs(r, rt) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="quarry-manager"`)
			writeError(w, &APIError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: fmt.Sprintf("%s %s: missing or wrong read token (Authorization: Bearer <token>; the read token or the admin token)", r.Method, r.URL.Path)})
			return
		}
		h(w, r)
	}
}

// write wraps a write handler: POST only, admin token checked here (every
// manager knows it), then run on the leader or redirected to it.
func (a *httpAPI) write(h http.HandlerFunc) http.HandlerFunc { return a.writeAs(http.MethodPost, h) }

// writeAs is write for another method (DELETE /v1/indexes/{name}).
func (a *httpAPI) writeAs(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, &APIError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: fmt.Sprintf("%s %s: only %s", r.Method, r.URL.Path, method)})
			return
		}
		if !a.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="quarry-manager"`)
			writeError(w, &APIError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: fmt.Sprintf("%s %s: missing or wrong admin token (Authorization: Bearer <token>)", r.Method, r.URL.Path)})
			return
		}
		if !a.m.IsLeader() {
			a.redirectToLeader(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		h(w, r)
	}
}

// admin wraps a read that shows secrets (GET /v1/config holds the tokens):
// answered locally, like every read, but only with the admin token.
func (a *httpAPI) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="quarry-manager"`)
			writeError(w, &APIError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: fmt.Sprintf("%s %s: missing or wrong admin token (Authorization: Bearer <token>)", r.Method, r.URL.Path)})
			return
		}
		h(w, r)
	}
}

// authorized reports whether r carries the admin token.
func (a *httpAPI) authorized(r *http.Request) bool { return bearerIs(r, a.m.cfg.AdminToken) }

// bearerIs reports whether r's bearer token is want (constant time).
func bearerIs(r *http.Request, want string) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || want == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(want)) == 1
}

// redirectToLeader answers 307 to the same path on the leader, or 503 when
// no leader (or its HTTP address) is known yet.
func (a *httpAPI) redirectToLeader(w http.ResponseWriter, r *http.Request) {
	m := a.m
	id, addr, err := m.Leader()
	if err != nil || addr == "" || id == m.cfg.ID {
		w.Header().Set("Retry-After", "1")
		writeError(w, &APIError{Status: http.StatusServiceUnavailable, Code: "no_leader", Message: fmt.Sprintf("%s %s: no leader known to manager %s; retry shortly", r.Method, r.URL.Path, m.cfg.ID)})
		return
	}
	m.metrics.redirects.Inc()
	scheme := "http"
	if r.TLS != nil { // the managers of a group all serve HTTPS, or none does
		scheme = "https"
	}
	http.Redirect(w, r, scheme+"://"+addr+r.URL.RequestURI(), http.StatusTemporaryRedirect)
}

// applyHTTP proposes cmd for an HTTP write and writes the answer. A lost
// leadership becomes a redirect, business errors a 4xx.
func (a *httpAPI) applyHTTP(w http.ResponseWriter, r *http.Request, cmd fsm.Command) (any, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
	defer cancel()
	resp, err := a.m.Apply(ctx, cmd)
	if err != nil {
		if errors.Is(err, ErrNotLeader) {
			a.redirectToLeader(w, r)
			return nil, false
		}
		writeError(w, toAPIError(err))
		return nil, false
	}
	return resp, true
}

// requestID takes a client's idempotency key (X-Request-Id), so a retried
// write is applied once.
func requestID(r *http.Request) fsm.ReqID {
	return fsm.ReqID{RequestID: r.Header.Get("X-Request-Id")}
}

// toAPIError maps an error to its HTTP status and stable code.
func toAPIError(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	type rule struct {
		target error
		status int
		code   string
	}
	rules := []rule{
		{errBadRequest, http.StatusBadRequest, "bad_request"},
		{fsm.ErrBadConfig, http.StatusBadRequest, "bad_config"},
		{fsm.ErrBadSite, http.StatusBadRequest, "bad_site"},
		{fsm.ErrBadBucketID, http.StatusBadRequest, "bad_bucket_id"},
		{fsm.ErrUnknownIndex, http.StatusBadRequest, "unknown_index"},
		{fsm.ErrUnknownPeer, http.StatusNotFound, "unknown_peer"},
		{fsm.ErrUnknownBucket, http.StatusNotFound, "unknown_bucket"},
		{fsm.ErrUnknownCopy, http.StatusNotFound, "unknown_copy"},
		{fsm.ErrUnknownTask, http.StatusNotFound, "unknown_task"},
		{fsm.ErrBucketExists, http.StatusConflict, "bucket_exists"},
		{fsm.ErrCopyExists, http.StatusConflict, "copy_exists"},
		{fsm.ErrPeerNotUp, http.StatusConflict, "peer_not_up"},
		{fsm.ErrGUIDInUse, http.StatusConflict, "guid_in_use"},
		{fsm.ErrBadState, http.StatusConflict, "bad_state"},
		{fsm.ErrBucketNotHot, http.StatusConflict, api.CodeBucketNotHot},
		{fsm.ErrNotOrigin, http.StatusForbidden, "not_origin"},
		{fsm.ErrNotSealed, http.StatusConflict, "bucket_not_sealed"},
		{fsm.ErrSealFinal, http.StatusConflict, api.CodeSealFinal},
		{fsm.ErrHotOrigin, http.StatusConflict, "hot_origin"},
		{fsm.ErrTaskExists, http.StatusConflict, "task_exists"},
		{fsm.ErrBadTask, http.StatusConflict, "bad_task"},
		{fsm.ErrClusterVersion, http.StatusConflict, "cluster_version"},
		{fsm.ErrBadBundle, http.StatusBadRequest, "bad_bundle"},
		{fsm.ErrBadSavedSearch, http.StatusBadRequest, "bad_saved_search"},
		{fsm.ErrSavedSearchExists, http.StatusConflict, "saved_search_exists"},
		{fsm.ErrUnknownSavedSearch, http.StatusNotFound, "unknown_saved_search"},
		{fsm.ErrSlotNotHeld, http.StatusConflict, "slot_not_held"},
		{ErrNoLeader, http.StatusServiceUnavailable, "no_leader"},
		{ErrNotLeader, http.StatusServiceUnavailable, "not_leader"},
		{ErrClosed, http.StatusServiceUnavailable, "shutting_down"},
		{context.DeadlineExceeded, http.StatusGatewayTimeout, "timeout"},
		{context.Canceled, http.StatusServiceUnavailable, "canceled"},
	}
	for _, rl := range rules {
		if errors.Is(err, rl.target) {
			return &APIError{Status: rl.status, Code: rl.code, Message: err.Error()}
		}
	}
	return &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
}

func writeError(w http.ResponseWriter, e *APIError) {
	if e.Status == 0 {
		e.Status = http.StatusInternalServerError
	}
	writeJSON(w, e.Status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// decodeBody reads a JSON body into v; an empty body leaves v as it is
// when allowEmpty.
func decodeBody(r *http.Request, v any, allowEmpty bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("%w: read body: %v", errBadRequest, err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if allowEmpty {
			return nil
		}
		return fmt.Errorf("%w: %s %s needs a JSON body", errBadRequest, r.Method, r.URL.Path)
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body of %s %s: %v", errBadRequest, r.Method, r.URL.Path, err)
	}
	return nil
}

// decodeAPIError reads an error answer into an *APIError.
func decodeAPIError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	ae := &APIError{Status: resp.StatusCode}
	if err := json.Unmarshal(body, ae); err != nil || ae.Message == "" {
		ae.Message = strings.TrimSpace(string(body))
		if ae.Message == "" {
			ae.Message = resp.Status
		}
		ae.Code = "http_" + strconv.Itoa(resp.StatusCode)
	}
	return ae
}
