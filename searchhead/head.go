package searchhead

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/localonly"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/searchhead/ui"
)

// Defaults of a search head's limits (SPEC §11).
const (
	DefaultPeerTimeout   = 3 * time.Second  // search_peer_timeout (SPEC §5 step 4)
	DefaultSearchTimeout = 2 * time.Minute  // a search's time limit
	DefaultMaxResults    = 50000            // Splunk's maxresultrows
	DefaultMaxSearches   = 16               // concurrent searches per head
	maxRequestBytes      = 4 << 20          // a search request body
	suspectFor           = 10 * time.Second // how long a failed peer is not waited for in the default plan
	publishBatchBytes    = 256 << 10        // one published NDJSON batch
	configRefresh        = 30 * time.Second // backstop for search-token changes
)

// Config configures a search head.
type Config struct {
	ID       string
	Site     string // siteN, or site0 (no affinity)
	HTTPAddr string
	NATS     string
	// NATSUser/NATSPassword: this head's bus credentials.
	NATSUser, NATSPassword string
	SubjectPrefix          string
	// AdminToken, when set, searches every index (as the managers' admin
	// token does on peers).
	AdminToken    string
	PeerTimeout   time.Duration
	SearchTimeout time.Duration
	MaxResults    int
	MaxSearches   int
	// SearchMemory is one search's memory budget on this head, in bytes
	// (query.DefaultSearchMemory when 0): the partials it holds for the
	// merge at the end. Past it the search ends with 400 limit_exceeded.
	SearchMemory int64
	// MaxSearchesPerToken caps one token's concurrent searches (default
	// three quarters of MaxSearches; admit).
	MaxSearchesPerToken int
	// Jobs bounds the search jobs of Splunk's REST API (splunk.go); a
	// zero field takes its default.
	Jobs   JobLimits
	Logger *slog.Logger
	// KnowledgeDir is the search-time knowledge bundle's folder
	// (--knowledge; knowledge.go); "": none.
	KnowledgeDir string
	// Conn, when set, is used instead of dialling NATS (tests, quarry dev).
	Conn *nats.Conn
	// OnMessage, when set, sees every peer message before the head acts
	// on it (fault-injection tests kill a peer between its batches).
	OnMessage func(peer, kind, bucket string)
	// HoldTable, when set and true, makes the table loop skip its notices
	// and polls (a head whose notices are lost and whose poll has not come
	// yet); a search's own catch-up still fetches. A test hook; never set
	// by the CLI.
	HoldTable func() bool
	// TLS: with a certificate the head serves HTTPS; with the CA it
	// verifies the bus against it.
	TLS tlsconfig.Files
	// BodyReadTimeout bounds how long a request body may take to arrive
	// (default DefaultBodyReadTimeout; bodydeadline.go).
	BodyReadTimeout time.Duration
	// SavedSearchRefresh and SavedSearchGrace tune the saved-search
	// scheduler (scheduler.go; defaults DefaultSavedSearchRefresh and
	// DefaultSavedSearchGrace).
	SavedSearchRefresh time.Duration
	SavedSearchGrace   time.Duration
}

// Head is a running search head.
type Head struct {
	cfg     Config
	log     *slog.Logger
	nc      *nats.Conn
	ownConn bool
	subj    bus.Subjects
	mc      *mgrclient.ManagerClient
	know    *knowledgeStore // --knowledge (knowledge.go); nil: none
	tables  *tables

	adaptive *adaptive
	splunk   *splunkAPI // Splunk's search REST API and its jobs
	rr       atomic.Uint64
	sem      chan struct{}
	quota    quotas // running searches per caller (admit)
	metrics  *metrics
	reg      *prometheus.Registry

	tokMu      sync.RWMutex
	tokens     []fsm.SearchToken
	tokenKey   []byte   // the cluster's token key the tokens' digests are keyed under (nil: unkeyed)
	indexes    []string // every index the cluster knows (config), sorted
	tokensSeen bool
	configID   string

	susMu    sync.Mutex
	suspects map[string]time.Time

	closeOnce sync.Once
	ln        net.Listener
	srv       *http.Server
	stop      chan struct{}
	wg        sync.WaitGroup

	// Page serves GET / and /ui/ (the search page, searchhead/ui).
	Page http.Handler
}

// New connects to the bus and starts following the generation table; Start
// serves HTTP.
func New(ctx context.Context, cfg Config) (*Head, error) {
	if cfg.ID == "" {
		return nil, errors.New("search head: --id is required")
	}
	if cfg.Site == "" {
		return nil, errors.New("search head: --site is required (siteN, or site0 for no affinity)")
	}
	if err := bus.ValidToken("site", cfg.Site); err != nil {
		return nil, fmt.Errorf("search head: %w", err)
	}
	// The id is the sender token of its manager operations
	// (quarry.mgr.<op>.<id>, SPEC §6).
	if err := bus.ValidToken("search head", cfg.ID); err != nil {
		return nil, fmt.Errorf("search head: --id: %w", err)
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = DefaultPeerTimeout
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.SearchTimeout <= 0 {
		cfg.SearchTimeout = DefaultSearchTimeout
	}
	if cfg.MaxResults <= 0 {
		cfg.MaxResults = DefaultMaxResults
	}
	if cfg.MaxSearches <= 0 {
		cfg.MaxSearches = DefaultMaxSearches
	}
	if cfg.MaxSearchesPerToken <= 0 || cfg.MaxSearchesPerToken > cfg.MaxSearches {
		cfg.MaxSearchesPerToken = max(1, cfg.MaxSearches*3/4)
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8089"
	}
	if cfg.SavedSearchRefresh <= 0 {
		cfg.SavedSearchRefresh = DefaultSavedSearchRefresh
	}
	if cfg.SavedSearchGrace <= 0 {
		cfg.SavedSearchGrace = DefaultSavedSearchGrace
	}
	cfg.Jobs = cfg.Jobs.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("searchhead", cfg.ID)
	if w := fsm.ShortTokenWarning("admin token", cfg.AdminToken); w != "" {
		log.Warn(w) // review L1: warned, never refused, never printed
	}
	subj, err := bus.NewSubjects(cfg.SubjectPrefix)
	if err != nil {
		return nil, err
	}
	h := &Head{cfg: cfg, log: log, subj: subj, adaptive: newAdaptive(), sem: make(chan struct{}, cfg.MaxSearches),
		suspects: map[string]time.Time{}, stop: make(chan struct{}), Page: ui.Handler()}
	h.nc = cfg.Conn
	if h.nc == nil {
		if cfg.NATS == "" {
			return nil, errors.New("search head: --nats is required")
		}
		h.nc, err = bus.Connect(ctx, cfg.NATS, bus.ConnectOptions{Name: "searchhead " + cfg.ID, User: cfg.NATSUser, Password: cfg.NATSPassword, Logger: log, TLSCA: cfg.TLS.CA})
		if err != nil {
			return nil, fmt.Errorf("search head: connect to the bus: %w", err)
		}
		h.ownConn = true
	}
	h.mc = mgrclient.NewManagerClient(h.nc, subj)
	h.mc.Sender = cfg.ID // quarry.mgr.<op>.<head>: generation and config only
	h.reg = prometheus.NewRegistry()
	h.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h.metrics = newMetrics(h.reg)
	if err := bus.RegisterMetrics(h.reg); err != nil {
		h.closeConn()
		return nil, err
	}
	h.splunk = newSplunkAPI(h)
	h.tables = newTables(h.mc, cfg.Site, log)
	h.tables.hold = cfg.HoldTable
	h.tables.onNotice = func(n api.Notice) {
		h.tokMu.RLock()
		changed := n.ConfigID != "" && n.ConfigID != h.configID
		h.tokMu.RUnlock()
		if changed {
			go h.refreshConfig()
		}
	}
	if err := h.tables.start(h.nc, subj); err != nil {
		h.closeConn()
		return nil, err
	}
	h.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "quarry_searchhead_generation", Help: "Generation of the head's table."},
		func() float64 {
			h.tables.mu.RLock()
			defer h.tables.mu.RUnlock()
			return float64(h.tables.own().Generation())
		}))
	h.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "quarry_searchhead_table_buckets", Help: "Buckets in the head's table."},
		func() float64 {
			h.tables.mu.RLock()
			defer h.tables.mu.RUnlock()
			return float64(h.tables.own().BucketCount())
		}))
	if err := h.startKnowledge(); err != nil {
		h.tables.close()
		h.closeConn()
		return nil, err
	}
	// Wait (bounded by ctx) for a first table and config so the first
	// searches are not refused; a head with no manager keeps trying.
	h.waitReady(ctx)
	h.wg.Add(2)
	go h.configLoop()
	go newScheduler(h).loop() // scheduler.go
	return h, nil
}

func (h *Head) waitReady(ctx context.Context) {
	h.refreshConfig()
	for {
		if loaded, _, _, _ := h.tables.status(); loaded {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (h *Head) configLoop() {
	defer h.wg.Done()
	t := time.NewTicker(configRefresh)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.refreshConfig()
		}
	}
}

// refreshConfig reads the search tokens of the cluster config.
func (h *Head) refreshConfig() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	pc, err := h.mc.Config(ctx, "")
	if err != nil {
		h.log.Debug("cluster config", "err", err)
		return
	}
	h.tokMu.Lock()
	if len(h.tokenKey) == 0 && len(pc.TokenKey) > 0 {
		h.log.Info("the cluster's token key arrived: search tokens are checked against keyed digests")
	}
	h.tokens, h.tokenKey, h.tokensSeen, h.configID = pc.SearchTokens, pc.TokenKey, true, pc.ID
	h.indexes = pc.KnownIndexes
	h.tokMu.Unlock()
}

// unknownIndexes warns about the indexes a search names (index=foo) that
// the cluster does not know (issue 29: such a search answered 0 in
// silence). Only indexes the caller may read are named, so a warning never
// tells a scoped token about indexes outside its scope.
func (h *Head) unknownIndexes(plan *query.Plan, allowed []string) []string {
	h.tokMu.RLock()
	known := h.indexes
	h.tokMu.RUnlock()
	if known == nil {
		return nil
	}
	var out []string
	for _, ix := range plan.IndexNames() {
		if !slices.Contains(known, ix) && (allowed == nil || slices.Contains(allowed, ix)) {
			out = append(out, fmt.Sprintf("index %q does not exist in this cluster: nothing to search there", ix))
		}
	}
	return out
}

// Close stops HTTP (running searches are cancelled), the table loop and
// the bus connection it opened.
func (h *Head) Close() error {
	h.closeOnce.Do(h.close)
	return nil
}

func (h *Head) close() {
	if h.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = h.srv.Shutdown(ctx)
		cancel()
		_ = h.srv.Close()
	}
	h.splunk.jobs.close() // running jobs stop before the table and the bus go
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	h.tables.close()
	h.wg.Wait()
	h.closeConn()
}

func (h *Head) closeConn() {
	if h.ownConn {
		h.nc.Close()
	}
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func (h *Head) hasTokens() bool {
	h.tokMu.RLock()
	defer h.tokMu.RUnlock()
	return len(h.tokens) > 0
}

// suspect reports whether a peer failed a recent search.
func (h *Head) suspect(p string) bool {
	h.susMu.Lock()
	defer h.susMu.Unlock()
	until, ok := h.suspects[p]
	if ok && time.Now().After(until) {
		delete(h.suspects, p)
		return false
	}
	return ok
}

func (h *Head) markSuspect(p string) {
	h.susMu.Lock()
	h.suspects[p] = time.Now().Add(suspectFor)
	h.susMu.Unlock()
}

// caller is who sent a request: the key that owns its jobs (the digest of
// its token, never the secret; "" in token-less loopback mode), a label
// for it (the token's id) and the indexes it may search (nil: all).
type caller struct {
	owner, label string
	indexes      []string
	// publish: the result names the caller may publish to (nil: any;
	// fsm.SearchToken.Publish), the token itself holding the rule.
	publish *fsm.SearchToken
}

// mayPublish reports whether the caller may publish results under name:
// the admin token and token-less loopback may; a search token as its
// publish list says (review L2).
func (c caller) mayPublish(name string) bool { return c.publish == nil || c.publish.MayPublish(name) }

// identify checks the request's token (requestToken): the admin token, a
// search token of the cluster config, or none while the head serves
// token-less on loopback. A HEC token is no search token: 403.
func (h *Head) identify(r *http.Request) (caller, error) {
	c, err := h.identifyToken(requestToken(r))
	if err == nil && c.owner == "" {
		// Token-less on loopback: only for this machine's own clients
		// (localonly: no DNS rebinding, no cross-origin page; review M7).
		if lerr := localonly.Check(r); lerr != nil {
			return caller{}, &RequestError{Status: 403, Code: "not_local", Msg: lerr.Error()}
		}
	}
	return c, err
}

func (h *Head) identifyToken(tok string) (caller, error) {
	h.tokMu.RLock()
	toks, key := h.tokens, h.tokenKey
	h.tokMu.RUnlock()
	if h.cfg.AdminToken != "" && tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.AdminToken)) == 1 {
		return tokenCaller(key, tok, nil), nil
	}
	if len(toks) == 0 && h.cfg.AdminToken == "" && h.ln != nil && isLoopback(h.ln.Addr()) {
		return caller{label: "nobody"}, nil // loopback only, said at start (identify checks the client is local)
	}
	if tok == "" {
		return caller{}, &RequestError{Status: 401, Code: "token_required", Msg: "a search token is required: Authorization: Bearer <token>"}
	}
	for _, t := range toks {
		if fsm.TokenMatches(key, t.Token, tok) {
			var ix []string
			if len(t.Indexes) > 0 {
				ix = append([]string{}, t.Indexes...)
			}
			c := tokenCaller(key, tok, ix)
			c.publish = &t
			return c, nil
		}
	}
	return caller{}, &RequestError{Status: 403, Code: "invalid_token", Msg: "invalid search token"}
}

// tokenCaller names a caller by its token's digest (owner: unkeyed, kept
// in this process only, so a job keeps its owner when the cluster's token
// key arrives); its label is the token's id (the first 16 hex digits of
// its digest under the cluster's token key, as quarry token list shows
// it), which the Splunk API shows the token's own holder.
func tokenCaller(key []byte, tok string, indexes []string) caller {
	sum, _ := fsm.DigestSum(fsm.KeyedDigest(key, tok))
	return caller{owner: fsm.TokenDigest(tok), label: hex.EncodeToString(sum[:8]), indexes: indexes}
}

// requestToken is the token a request carries: Authorization: Bearer T,
// Splunk T (Splunk's session form), or Basic with T as the password (any
// user name), as Splunk's REST clients send it.
func requestToken(r *http.Request) string {
	a := r.Header.Get("Authorization")
	for _, p := range []string{"Bearer ", "Splunk "} {
		if strings.HasPrefix(a, p) {
			return strings.TrimSpace(a[len(p):])
		}
	}
	if _, pw, ok := r.BasicAuth(); ok {
		return pw
	}
	return ""
}

func (h *Head) serveHealthz(w http.ResponseWriter, r *http.Request) {
	loaded, stale, lastOK, lastErr := h.tables.status()
	h.tables.mu.RLock()
	gen := h.tables.own().Generation()
	h.tables.mu.RUnlock()
	body := map[string]any{"status": "ok", "searchhead": h.cfg.ID, "site": h.cfg.Site, "generation": gen, "table_stale": stale}
	if !lastOK.IsZero() {
		body["table_refreshed"] = lastOK.UTC().Format(time.RFC3339Nano)
	}
	if !loaded {
		msg := "no generation table yet"
		if lastErr != nil {
			msg += ": " + lastErr.Error()
		}
		writeError(w, 503, "no_generation_table", msg)
		return
	}
	writeJSON(w, 200, body)
}

// Search runs one search (the API's core; HTTP adds auth and output).
// emit, when set, receives result rows as they are released (streaming
// event searches) — otherwise rows come back in the response.
func (h *Head) Search(ctx context.Context, req Request, indexes []string, emit func(rows []map[string]any, fields []string) error) (*query.Response, error) {
	return h.search(ctx, req, indexes, emit, nil)
}

// search is Search; a job (splunkjobs.go) passes queued, which makes it
// wait for a search slot instead of answering 429, and calls queued.started
// once it has one.
func (h *Head) search(ctx context.Context, req Request, indexes []string, emit func(rows []map[string]any, fields []string) error, queued *queuedSearch) (*query.Response, error) {
	start := time.Now()
	now := time.Now()
	pref, plan, err := h.check(req, now)
	if err != nil {
		return nil, err
	}
	plan.SetMemoryLimit(h.cfg.SearchMemory)
	release, err := h.admit(ctx, queued)
	if err != nil {
		return nil, err
	}
	defer release()
	h.metrics.running.Inc()
	defer h.metrics.running.Dec()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.SearchTimeout)
	defer cancel()
	countsTop := query.CountsTopFor(plan.TopLimit())
	resp, err := h.searchOnce(ctx, cancel, plan, req, pref, now, start, indexes, emit, countsTop, true)
	topUndecided := countsTop > 0 && errors.Is(err, query.ErrCountsUndecided)
	if topUndecided || errors.Is(err, query.ErrSoleUndecided) {
		// The peers' bounded top partials did not prove the top (query/
		// topcounts.go), or a sole partial's final count or value met
		// another part of its aggregate (query/sole.go): the same search
		// again, every key, set and value sent. Nothing was emitted or
		// published: a top or stats is merged at the end.
		if topUndecided {
			h.metrics.topReruns.Inc()
			h.log.Info("top not decided by bounded partials; searching again with every key", "query", req.Query)
		} else {
			h.metrics.soleReruns.Inc()
			h.log.Info("a final count or value met another part of its aggregate; searching again with sets and values", "query", req.Query)
		}
		if _, plan, err = h.check(req, now); err != nil {
			return nil, err
		}
		plan.SetMemoryLimit(h.cfg.SearchMemory)
		resp, err = h.searchOnce(ctx, cancel, plan, req, pref, now, start, indexes, emit, 0, false)
	}
	return resp, err
}

// searchOnce runs a search's plan over the cluster once: plan the buckets,
// collect every bucket's outcome, merge and summarise. countsTop bounds a
// top's partials (run.countsTop); with it, the merge may answer
// query.ErrCountsUndecided, and the caller searches again without.
// sole lets a stats search that one peer serves take each dc's count and
// perc's value instead of its set or values (run.sole); the merge may then answer
// query.ErrSoleUndecided, and the caller searches again without.
func (h *Head) searchOnce(ctx context.Context, cancel context.CancelFunc, plan *query.Plan, req Request, pref *Preference,
	now, start time.Time, indexes []string, emit func(rows []map[string]any, fields []string) error, countsTop int, sole bool) (*query.Response, error) {
	var err error
	rn := h.newRun(ctx, plan, req, pref, now, indexes)
	rn.countsTop = countsTop
	if w := h.staleTableWarning(); w != "" {
		rn.warn(w)
	}
	if err := rn.planBuckets(); err != nil {
		return nil, err
	}
	if sole && plan.TakesSole() && rn.servedByOne() {
		rn.sole = true
		plan.SetSolePartial(true)
		h.metrics.solePartials.Inc()
	}
	if rn.readsHotReplica() {
		if err := rn.settleBarrier(); err != nil { // coverage.go
			return nil, err
		}
	}
	if len(rn.warnings) > 0 {
		rn.warnings[0] += fmt.Sprintf(" (generation %d)", rn.generation)
	}
	for _, w := range h.unknownIndexes(plan, indexes) {
		rn.warn(w)
	}
	// Streaming output: a pure event search releases each bucket's events
	// once its marker arrived; anything else is merged at the end.
	out := &outcome{h: h, plan: plan, emit: emit, cancel: cancel, pub: h.publisher(req.Publish, req.slot),
		streamable: emit != nil && plan.Streamable()}
	out.keep, _ = plan.SortKeep(h.cfg.MaxResults)
	rn.onBucket = out.take
	err = rn.dispatchFirst()
	if err == nil {
		err = rn.collect()
	}
	rn.closeStreams(errors.New("search finished"))
	h.metrics.observeScanned(rn.scanned)
	if out.err != nil {
		h.metrics.cancelled.Inc()
		return nil, out.err
	}
	if err != nil && !out.limitHit {
		h.metrics.cancelled.Inc()
		return nil, h.runError(ctx, err)
	}
	rn.confirmHotReplicas()
	sum := rn.summary()
	h.log.Debug("search finished", "search", rn.id, "generation", rn.generation, "table_version", rn.version,
		"buckets_expected", sum.Buckets.Total, "buckets_marked", sum.Buckets.Successful, "partial", sum.Partial)
	if err := allowPartialError(req, sum); err != nil {
		h.metrics.observeSummary(sum)
		return nil, err
	}
	resp := &query.Response{Results: []map[string]any{}, Fields: []string{}}
	if out.streamable && out.streamCols != nil {
		resp.Fields, resp.StreamedColumns = out.streamCols, true
	}
	pub := out.pub
	if !out.streamable {
		cut, err := h.mergeAtEnd(plan, out.parts, resp, &sum, emit, pub)
		if err != nil {
			if !errors.Is(err, query.ErrCountsUndecided) && !errors.Is(err, query.ErrSoleUndecided) { // searched again: counted then
				h.metrics.observeSummary(sum)
			}
			return nil, err
		}
		out.limitHit = out.limitHit || cut
	}
	h.metrics.observeSummary(sum)
	if out.limitHit {
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("result limit of %d rows reached: results are truncated; narrow the search or add | head", h.cfg.MaxResults))
	}
	if w := pub.warning(); w != "" {
		sum.Warnings = append(sum.Warnings, w)
	}
	sum.TookMS = float64(time.Since(start).Microseconds()) / 1000
	resp.Summary = sum
	pub.summary(sum)
	h.metrics.latency.Observe(time.Since(start).Seconds())
	return resp, nil
}

// outcome collects a search's bucket results as they arrive (run
// onBucket): a streamable search's rows are emitted at once, up to
// MaxResults; any other search's partials are held for the merge at the
// end, charged to the search's memory budget.
type outcome struct {
	h          *Head
	plan       *query.Plan
	emit       func(rows []map[string]any, fields []string) error
	cancel     context.CancelFunc
	pub        *publisher
	streamable bool

	parts   []*query.Partial
	charged int64 // what parts hold, as charged to the search's memory budget
	// keep > 0: the search is a sort whose answer is its first keep rows
	// (query.Plan.SortKeep); held counts the rows in parts, cut back to
	// keep (PruneSorted) whenever they pass twice that — --max-results
	// applied while merging, not after.
	keep, held int
	streamCols []string // a streamed | table's columns, for the summary line
	emitted    int
	err        error // ends the search (a limit, or the client gone)
	limitHit   bool  // MaxResults cut the rows
}

func (o *outcome) take(ps []*query.Partial) {
	if !o.streamable {
		// Held until the merge at the end: charged to the search's
		// memory budget (query/memory.go), which ends the search with
		// 400 limit_exceeded rather than the head out of memory.
		booked := o.charged
		for _, pt := range ps {
			o.charged += pt.MemoryEstimate()
			o.held += len(pt.Events)
		}
		o.parts = append(o.parts, ps...)
		if o.keep > 0 && o.held > 2*o.keep {
			kept := o.plan.PruneSorted(o.parts, o.keep)
			o.parts, o.held, o.charged = []*query.Partial{kept}, len(kept.Events), kept.MemoryEstimate()
		}
		if o.charged < booked {
			o.plan.Release(booked - o.charged)
		} else if err := o.plan.Charge(o.charged-booked, "the partial results held on search head "+o.h.cfg.ID); err != nil && o.err == nil {
			o.err = o.h.limitRefusal(err)
			o.cancel()
		}
		return
	}
	rows, cols, err := o.plan.Merge(ps)
	if err != nil {
		o.err = o.h.limitRefusal(err)
		o.cancel()
		return
	}
	lineFields := eventFields
	if cols != nil { // | table, | fields: the columns asked for
		o.streamCols, lineFields = cols, cols
	}
	res := query.Results(rows)
	if room := o.h.cfg.MaxResults - o.emitted; len(res) > room {
		res, o.limitHit = res[:room], true
	}
	o.emitted += len(res)
	if len(res) > 0 && o.err == nil {
		if err := o.emit(res, lineFields); err != nil {
			o.err = err
			o.cancel()
			return
		}
		o.pub.rows(res)
	}
	if o.limitHit {
		o.cancel()
	}
}

// queuedSearch is a search that waits for a slot (a job) and says when it
// has one.
type queuedSearch struct{ started func() }

// runError is what a search that did not complete answers: 504 past its
// time limit, else the error itself.
func (h *Head) runError(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return &RequestError{Status: 504, Code: "search_timeout",
			Msg: fmt.Sprintf("search exceeded its time limit of %s and was stopped on every peer", h.cfg.SearchTimeout)}
	}
	return err
}

// allowPartialError turns a missing bucket into 503 and a failed one into
// 502 when the request says allow_partial=false (SPEC §5).
func allowPartialError(req Request, sum query.Summary) error {
	if req.AllowPartial == nil || *req.AllowPartial {
		return nil
	}
	if sum.Buckets.Missing > 0 {
		return &RequestError{Status: 503, Code: "buckets_missing",
			Msg: fmt.Sprintf("%d bucket(s) missing and allow_partial=false: %s", sum.Buckets.Missing, firstReason(sum))}
	}
	if sum.Buckets.Failed > 0 {
		return &RequestError{Status: 502, Code: "buckets_failed",
			Msg: fmt.Sprintf("%d bucket(s) failed and allow_partial=false: %s", sum.Buckets.Failed, firstReason(sum))}
	}
	return nil
}

// newRun is one search's state, with a fresh search id.
func (h *Head) newRun(ctx context.Context, plan *query.Plan, req Request, pref *Preference, now time.Time, indexes []string) *run {
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	return &run{h: h, ctx: ctx, plan: plan, req: req, pref: pref, id: h.cfg.ID + "-" + hex.EncodeToString(idb[:]),
		nowNS: now.UnixNano(), indexes: indexes, site: h.tables.tableSite(), tsite: h.tables.tableSite(),
		buckets: map[string]*bucketRun{}, events: make(chan streamEvent, 256), failed: map[string]bool{},
		answered: map[string]bool{}, scanned: map[string]int64{}, retries: map[string][]string{}, begun: time.Now()}
}

// staleTableWarning says, when the head's generation table is stale, that
// the managers are unreachable and how old the table is; "" otherwise.
func (h *Head) staleTableWarning() string {
	_, stale, lastOK, lastErr := h.tables.status()
	if !stale {
		return ""
	}
	w := "the managers are unreachable"
	if lastErr != nil {
		w += " (" + lastErr.Error() + ")"
	}
	if !lastOK.IsZero() {
		w += fmt.Sprintf("; searching on the last known generation table, refreshed %s", lastOK.UTC().Format(time.RFC3339))
	}
	return w
}

// mergeAtEnd merges a non-streaming search's partials into resp once every
// bucket is in, cuts it to MaxResults (cut reports it), adds the merge's
// warnings to sum, and emits and publishes the rows.
func (h *Head) mergeAtEnd(plan *query.Plan, parts []*query.Partial, resp *query.Response, sum *query.Summary,
	emit func(rows []map[string]any, fields []string) error, pub *publisher) (cut bool, err error) {
	rows, cols, err := plan.Merge(parts)
	if err != nil {
		return false, h.limitRefusal(err)
	}
	resp.Results = query.Results(rows)
	if cols != nil {
		resp.Fields = cols
	}
	sum.Warnings = append(sum.Warnings, plan.Warnings()...)
	if len(resp.Results) > h.cfg.MaxResults {
		resp.Results, cut = resp.Results[:h.cfg.MaxResults], true
	}
	if emit != nil && len(resp.Results) > 0 {
		if err := emit(resp.Results, resp.Fields); err != nil {
			return cut, err
		}
	}
	pub.rows(resp.Results)
	return cut, nil
}

// check is checkRequest on this head; a query or preference refused for a
// compile-time limit counts in quarry_searchhead_limit_hits_total under that limit.
func (h *Head) check(req Request, now time.Time) (*Preference, *query.Plan, error) {
	pref, plan, err := checkRequest(h.cfg.ID, h.cfg.Site, h.subj, req, now, h.knowledge())
	if name := query.CompileLimit(err); name != "" {
		h.metrics.limitHit(name)
	}
	return pref, plan, err
}

// checkRequest checks a search request before anything is sent: the
// query compiles, the preference parses and fits this head's site, the
// publish name makes a subject, the site (if named) is this head's. Every
// refusal is a *RequestError (400) naming the input; FuzzCheckRequest
// feeds it arbitrary requests.
func checkRequest(head, site string, subj bus.Subjects, req Request, now time.Time, know *query.Knowledge) (*Preference, *query.Plan, error) {
	if strings.TrimSpace(req.Query) == "" {
		return nil, nil, &RequestError{Status: 400, Code: "bad_query", Msg: "query is required"}
	}
	pref, err := ParsePreference(req.Preference)
	if err != nil {
		return nil, nil, err
	}
	if pref.Kind == PrefOnlyLocal && site == fsm.Site0 {
		return nil, nil, &RequestError{Status: 400, Code: "bad_preference", Msg: "no local site for a site0 search head"}
	}
	if req.Publish != "" {
		if _, err := subj.Results(req.Publish); err != nil {
			return nil, nil, &RequestError{Status: 400, Code: "bad_publish", Msg: fmt.Sprintf("publish name %q: %v", req.Publish, err)}
		}
	}
	if req.Site != "" && req.Site != site {
		return nil, nil, &RequestError{Status: 400, Code: "wrong_site",
			Msg: fmt.Sprintf("search head %s serves site %q, not %q: use that site's search head", head, site, req.Site)}
	}
	plan, err := query.Compile(query.Request{Query: req.Query, Earliest: req.Earliest, Latest: req.Latest, Now: now, Knowledge: know})
	if err != nil {
		re := &RequestError{Status: 400, Code: "bad_query", Msg: err.Error(), Err: err}
		var se *query.SyntaxError
		if errors.As(err, &se) {
			pos := se.Pos
			re.Position = &pos
		}
		return nil, nil, re
	}
	return pref, plan, nil
}

// limitRefusal answers a merge that reached a limit of the search (an
// eval value past 1 MiB in the head's commands) with 400 limit_exceeded.
func (h *Head) limitRefusal(err error) error {
	if query.IsLimitError(err) {
		h.metrics.limitHit(query.LimitName(err))
		return &RequestError{Status: 400, Code: "limit_exceeded", Msg: err.Error()}
	}
	return err
}

// firstReason names the first bucket a partial search lacks, and why.
func firstReason(sum query.Summary) string {
	if len(sum.Buckets.Failures) == 0 {
		return ""
	}
	f := sum.Buckets.Failures[0]
	return fmt.Sprintf("bucket %s: %s", f.Bucket, f.Reason)
}

func (h *Head) serveSearch(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(api.RoleHeader, api.RoleSearchHead)
	who, err := h.identify(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	indexes := who.indexes
	var req Request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err := dec.Decode(&req); err != nil {
		writeError(w, 400, "bad_request", fmt.Sprintf("decode search request: %v", err))
		return
	}
	if req.Publish != "" && !who.mayPublish(req.Publish) {
		writeError(w, 403, "publish_not_allowed", fmt.Sprintf("this search token may not publish results as %q (its publish names: %v); nothing was searched", req.Publish, who.publish.Publish))
		return
	}
	stream := r.URL.Query().Get("stream") == "true"
	if !stream {
		resp, err := h.Search(withCaller(r.Context(), r), req, indexes, nil)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, resp)
		return
	}
	// NDJSON: result lines as they are released (keys in the answer's
	// fields order, query.AppendRowJSON), then one {"summary": …} line.
	// Errors before the first line keep their HTTP status.
	bw := bufio.NewWriterSize(w, 64<<10)
	fl, _ := w.(http.Flusher)
	started := false
	var line bytes.Buffer
	emit := func(rows []map[string]any, fields []string) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(200)
			started = true
		}
		for _, row := range rows {
			line.Reset()
			if err := query.AppendRowJSON(&line, row, fields); err != nil {
				return err
			}
			if _, err := bw.Write(line.Bytes()); err != nil {
				return err
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	resp, err := h.Search(withCaller(r.Context(), r), req, indexes, emit)
	enc := json.NewEncoder(bw)
	if err != nil {
		if !started {
			writeErr(w, err)
			return
		}
		_ = enc.Encode(map[string]any{"error": err.Error(), "code": codeOf(err)})
		_ = bw.Flush()
		return
	}
	if !started {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(200)
	}
	last := map[string]any{"summary": resp.Summary}
	if resp.StreamedColumns && len(resp.Fields) > 0 {
		// Only a streamed | table or | fields names its columns here (the
		// CLI prints them in that order); every other summary line is
		// {"summary": …} alone, as SPEC §7 writes it.
		last["fields"] = resp.Fields
	}
	_ = enc.Encode(last)
	_ = bw.Flush()
}

func codeOf(err error) string {
	var re *RequestError
	if errors.As(err, &re) {
		return re.Code
	}
	return "search_failed"
}

func writeErr(w http.ResponseWriter, err error) {
	var re *RequestError
	if errors.As(err, &re) {
		if re.Position != nil {
			writeJSON(w, re.Status, map[string]any{"error": re.Msg, "code": re.Code, "position": *re.Position})
			return
		}
		if re.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(re.RetryAfter))
		}
		writeError(w, re.Status, re.Code, re.Msg)
		return
	}
	if errors.Is(err, context.Canceled) {
		writeError(w, 499, "cancelled", err.Error())
		return
	}
	writeError(w, 500, "search_failed", err.Error())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "code": code})
}

// eventFields orders an event's keys in a streamed line.
var eventFields = []string{"_time", "_raw", "host", "source", "sourcetype", "index", "splunk_server", "_bkt", "_cd"}

// searchMemory is one search's memory budget on this head: --search-memory,
// query.DefaultSearchMemory when unset. It also caps one stream message
// from a peer (bus.StreamOptions.MaxMessage).
func (h *Head) searchMemory() int64 {
	if h.cfg.SearchMemory > 0 {
		return h.cfg.SearchMemory
	}
	return query.DefaultSearchMemory
}
