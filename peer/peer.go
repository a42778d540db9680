// Package peer owns the indexer role: a peer's identity (its GUID), its
// bucket store (peer/store), its HEC ingest (peer/hec) and its HTTP API —
// GET /v1/buckets (the per-copy inventory), POST /v1/search (single-peer
// search through the query package), /metrics and /healthz (SPEC §7).
// Started without a bus it runs standalone (RF=1) with its HEC tokens from
// the command line; with one (Config.NATS) it is a cluster member
// (cluster.go, replicator.go, fixups.go; see CLUSTER.md): it registers with
// the managers, takes its tokens from the cluster config, replicates its
// hot buckets and runs fixup tasks.
package peer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/idem"
	"github.com/quarry-dev/quarry/peer/store"
	"github.com/quarry-dev/quarry/query"
)

// Config is a standalone peer's configuration.
type Config struct {
	ID       string
	Site     string
	DataDir  string
	HTTPAddr string
	Attrs    map[string]string
	Tokens   []hec.Token
	// SearchTokens guard GET /v1/buckets and POST /v1/search on a
	// standalone peer; AdminToken those and roll, searchable and pprof (a
	// cluster peer takes search tokens from the managers and checks its
	// admin token against the managers' digest). See auth.go: without them
	// a standalone peer serves those requests only on a loopback address
	// (said at start); on any other address Start refuses without an
	// admin token.
	SearchTokens []fsm.SearchToken
	AdminToken   string
	// Bundle is a standalone peer's configuration bundle (--bundle DIR):
	// the index-time rules its HEC applies. A cluster peer takes the
	// managers' instead (Start refuses both).
	Bundle *knowledge.IndexRules
	// Knowledge is a standalone peer's search-time knowledge bundle
	// (--knowledge DIR) for its own POST /v1/search; a cluster peer runs
	// each search with the bundle its search head names.
	Knowledge *query.Knowledge
	// Pprof serves /debug/pprof/* (behind the admin token); off by default.
	Pprof bool
	// Limits of single-peer search, POST /v1/search (httpsearch.go): its
	// time limit (default 2 min), most result rows (50,000) and searches
	// running at once (4; more get 429 with Retry-After).
	SearchTimeout time.Duration
	MaxResults    int
	MaxSearches   int
	// SearchMemory is one search's memory budget on this peer, in bytes
	// (query.DefaultSearchMemory when 0), for searches from search heads
	// and POST /v1/search alike (query/memory.go).
	SearchMemory int64
	// Searchable: whether the copies this peer creates are searchable
	// (default true); false keeps journal-only copies (--searchable=false).
	Searchable    bool
	MaxHotBytes   int64
	MaxHotSpan    time.Duration
	MaxHotBuckets int
	// Peer-wide limits (store/hotcap.go; review M3), the peer's own in a
	// cluster too: hot buckets over all indexes (--max-hot-buckets-total,
	// default 256; past it the least recently written one rolls), the
	// idle time after which a hot bucket rolls (--max-hot-idle, default
	// 1 h; negative: never) and the indexes the peer holds unless declared
	// (--max-indexes, default 1,000; negative: no cap).
	MaxHotBucketsTotal int
	MaxHotIdle         time.Duration
	MaxIndexes         int
	// QuarantinePast/QuarantineFuture: events further than this before or
	// after the peer's clock go to the index's quarantine bucket (store
	// defaults 900 and 30 days; negative: off). MaxOpenFiles caps the
	// descriptors kept for reading copies (0: half RLIMIT_NOFILE, 16–4,096).
	QuarantinePast   time.Duration
	QuarantineFuture time.Duration
	MaxOpenFiles     int
	BlockBytes       int
	BlockInterval    time.Duration
	Logger           *slog.Logger

	// Cluster mode (cluster.go): with NATS set the peer joins the cluster —
	// registers with the managers, takes its HEC tokens from the cluster
	// config and replicates its hot buckets.
	NATS                   string
	NATSUser, NATSPassword string
	SubjectPrefix          string
	// ManagerToken (--token) is optional: a cluster member checks the
	// admin token against the digest the managers send; when set, it is
	// checked directly instead.
	ManagerToken    string
	ControlPlane    ControlPlane  // tests: a scripted control plane instead of NATSControlPlane
	TargetTimeout   time.Duration // SPEC §4 target_timeout (default 2 s)
	JoinTimeout     time.Duration // how long Start waits for the managers (default 60 s)
	FixupRetry      time.Duration // how soon a pushed fixup task that could not run yet is tried again (default 500 ms)
	ReplicationRate int64         // fixup replication throttle, bytes/s (0: DefaultReplicationRate, < 0: none)
	// BeforeReplicaAppend, when set, is called by the replication receiver
	// before it appends an origin's blocks: a test hook (a slow target
	// that stays Up); never set by the CLI.
	BeforeReplicaAppend func(bucket string)
	// KeyDenialHold, when set, replaces idem.DefaultDenialHold (how long a
	// key answered unknown to another peer keeps a replica append of it
	// out): a test hook (a test that holds blocks in flight longer than
	// the production second); never set by the CLI.
	KeyDenialHold time.Duration
	// BeforeSearchBucket, when set, is called by the bus search service
	// before it scans a bucket for a search head (ctx is that search's):
	// a test hook (a peer still scanning when the head gives up); never
	// set by the CLI.
	BeforeSearchBucket func(ctx context.Context, bucket string)
	// SearchBeats, when set, is asked before each progress beat of a bus
	// search; false withholds the beat: a test hook (a peer whose search
	// is wedged while its connection stays up); never set by the CLI.
	SearchBeats func() bool
	// DiskSpace, when set, is what heartbeats report as the data
	// directory's free and total bytes (default: the file system's), and
	// WriteFault, when set, fails the store's journal writes with the error
	// it returns: test hooks (a disk that fills and is freed, detention.go);
	// never set by the CLI.
	DiskSpace  func() (free, total int64)
	WriteFault func() error
	// IdempotencyWindow: how long a HEC token's Idempotency-Key is
	// remembered (--idempotency-window, default 24 h; DESIGN.md
	// "Idempotent retries").
	IdempotencyWindow time.Duration
	// AfterHECDurable, when set, is called for a HEC request of a token
	// without acks once its events are durable by the ack rule (replicated)
	// and before it is answered: a test hook (a peer that dies after
	// replicating and before answering); never set by the CLI.
	AfterHECDurable func(r *http.Request)
	// BeforeReplicate, when set, is called by the replicator before it
	// sends blocks of a hot bucket (from block first on) to a target; ctx
	// ends when the replicator stops: a test hook (a peer that dies after
	// journaling a request and before replicating it); never set by the
	// CLI.
	BeforeReplicate func(ctx context.Context, bucket string, first uint32)
	// TLS: with a certificate the HTTP API (HEC included) serves HTTPS;
	// with the CA the peer verifies the bus and the managers' HTTPS
	// against it (tls.go).
	TLS tlsconfig.Files
}

// Peer is a running peer.
type Peer struct {
	cfg   Config
	guid  string
	born  int64 // when DATA/peer.json (the GUID) was written, unix ns
	store *store.Store
	hec   *hec.Handler
	keys  *idem.Index // idempotency keys (idemkeys.go)
	srv   *http.Server
	ln    net.Listener
	log   *slog.Logger
	done  chan error
	cl    *cluster // nil when standalone
	// decommissioning is set by the heartbeat loop (cluster.go) only.
	decommissioning bool
	offlineCh       chan struct{}
	offlineOnce     sync.Once
	// draining is closed when a graceful stop begins draining the bus
	// searches (Draining).
	draining     chan struct{}
	drainingOnce sync.Once
	searchStats  SearchStats

	// loopback: cfg.HTTPAddr binds loopback addresses only (auth.go).
	loopback bool
	// detained: the managers hold the peer in detention (detention.go).
	detained atomic.Bool

	// Search metrics (serveSearch).
	searches        prometheus.Counter
	searchSeconds   prometheus.Histogram
	searchBuckets   *prometheus.CounterVec
	searchErrors    *prometheus.CounterVec
	searchCancelled prometheus.Counter
	// searchLimitHits: searches over the bus ended by a limit of this
	// peer, per limit (search_memory).
	searchLimitHits *prometheus.CounterVec
	httpSearchSem   chan struct{} // single-peer searches running (httpsearch.go)
	// sweepStop ends the HEC sweeper (idle channels, unread acks).
	sweepStop     chan struct{}
	sweepStopOnce sync.Once
	// droppedBlocks counts the unacknowledged blocks of retried requests
	// this peer dropped at restart (idemrestart.go).
	droppedBlocks atomic.Int64
	// deferredAppends counts replica appends refused because a key they
	// carry was just answered unknown to another peer (idem/arrive.go).
	deferredAppends atomic.Int64
}

// identity is DATA/peer.json, written at first start.
type identity struct {
	Version int    `json:"version"`
	GUID    string `json:"guid"`
	ID      string `json:"id"`
}

// makeDataDir makes the data folder (store.DirPerm) and closes it to
// other users.
func makeDataDir(dir string) error {
	if err := os.MkdirAll(dir, store.DirPerm); err != nil {
		return err
	}
	return closeToOthers(dir)
}

// closeToOthers takes every permission of others off the data folder (one
// made by an older build was 0755): with it closed, nothing below it can be
// read by other local users, whatever the older files' own modes say. The
// owner's and the group's bits stay as the operator set them.
func closeToOthers(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if m := fi.Mode().Perm(); m&0o007 != 0 {
		if err := os.Chmod(dir, m&^0o007); err != nil {
			return fmt.Errorf("peer: close %s to other users: %w", dir, err)
		}
	}
	return nil
}

// loadOrCreateGUID returns the peer's GUID, generating and persisting it
// (atomically) at first start.
func loadOrCreateGUID(dir, id string) (string, error) {
	p := filepath.Join(dir, "peer.json")
	b, err := os.ReadFile(p)
	if err == nil {
		var idt identity
		if err := json.Unmarshal(b, &idt); err != nil || idt.GUID == "" {
			return "", fmt.Errorf("read peer identity %s: bad content", p)
		}
		return idt.GUID, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	r[6] = r[6]&0x0f | 0x40
	r[8] = r[8]&0x3f | 0x80
	h := strings.ToUpper(hex.EncodeToString(r[:]))
	guid := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	out, _ := json.MarshalIndent(identity{Version: 1, GUID: guid, ID: id}, "", "  ")
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, store.FilePerm)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(append(out, '\n')); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	f.Close()
	if err := os.Rename(tmp, p); err != nil {
		return "", err
	}
	d, err := os.Open(dir)
	if err != nil {
		return "", err
	}
	defer d.Close()
	return guid, d.Sync()
}

// identityBorn is when DATA/peer.json — written once, at the first start —
// was written (unix ns; 0 when unreadable): when this peer's identity and
// data directory began (idemrestart.go).
func identityBorn(dir string) int64 {
	st, err := os.Stat(filepath.Join(dir, "peer.json"))
	if err != nil {
		return 0
	}
	return st.ModTime().UnixNano()
}

// checkStartConfig refuses a config Start cannot run with: no id, no data
// folder, unreadable TLS files, or an auth setup checkAuthConfig refuses.
func checkStartConfig(cfg Config) error {
	if cfg.ID == "" {
		return errors.New("peer: --id is required")
	}
	if cfg.DataDir == "" {
		return errors.New("peer: --data-dir is required")
	}
	if err := cfg.TLS.Check(); err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	return checkAuthConfig(cfg)
}

// Start opens the store (recovering it), and serves HTTP on cfg.HTTPAddr.
func Start(cfg Config) (*Peer, error) {
	if err := checkStartConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("peer", cfg.ID, "site", cfg.Site)
	warnShortTokens(log, cfg)
	if err := makeDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	guid, err := loadOrCreateGUID(cfg.DataDir, cfg.ID)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	keys := newKeyIndex(cfg, guid)
	st, err := store.Open(store.Options{
		Dir: cfg.DataDir, GUID: guid, Searchable: cfg.Searchable,
		MaxHotBytes: cfg.MaxHotBytes, MaxHotSpan: cfg.MaxHotSpan, MaxHotBuckets: cfg.MaxHotBuckets,
		MaxHotBucketsTotal: cfg.MaxHotBucketsTotal, MaxHotIdle: cfg.MaxHotIdle, MaxIndexes: cfg.MaxIndexes,
		QuarantinePast: cfg.QuarantinePast, QuarantineFuture: cfg.QuarantineFuture, MaxOpenFiles: cfg.MaxOpenFiles,
		BlockBytes: cfg.BlockBytes, BlockInterval: cfg.BlockInterval, Logger: log, WriteFault: cfg.WriteFault,
		// A cluster member keeps a journal damaged in the middle, corrupt,
		// for the managers to repair from another copy (store.Options).
		KeepDamaged: cfg.NATS != "",
		KeysLearned: keys.Learn,
	})
	if err != nil {
		return nil, err
	}
	nkeys := loadKeys(st, keys)
	rep := st.LastRecovery()
	log.Info("store opened", "guid", guid, "took", time.Since(started).Round(time.Millisecond),
		"opened", rep.Opened, "rolled", rep.Rolled, "torn_tails", rep.TornTails, "rebuilt", rep.Rebuilt, "corrupt", len(rep.Corrupt),
		"idempotency_key_records", nkeys, "idempotency_keys", keys.Len())
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerStoreMetrics(reg, st)
	host, _ := os.Hostname()
	p := &Peer{cfg: cfg, guid: guid, born: identityBorn(cfg.DataDir), store: st, keys: keys, log: log, done: make(chan error, 1), offlineCh: make(chan struct{}), draining: make(chan struct{}),
		loopback: loopbackOnly(cfg.HTTPAddr)}
	p.httpSearchLimits()
	registerSearchMetrics(reg, &p.searchStats)
	p.registerSearchMetrics(reg)
	reg.MustRegister(&replLagCollector{p: p}, droppedBlocksCounter(p), deferredAppendsCounter(p))
	if cfg.NATS != "" {
		if p.cfg.JoinTimeout <= 0 {
			p.cfg.JoinTimeout = time.Minute
		}
		toks, err := p.joinCluster()
		if err != nil {
			st.Close()
			return nil, err
		}
		if p.cl != nil && p.cl.fix != nil {
			registerClusterMetrics(reg, p.cl)
		}
		cfg.Tokens = toks
		p.declareIndexes(p.cl.cfg)
		if err := bus.RegisterMetrics(reg); err != nil {
			p.closeCluster(false)
			st.Close()
			return nil, err
		}
		registerReplicationMetrics(reg, p.cl.repl)
	}
	if p.cl == nil {
		p.store.Limits().SetDeclaredIndexes(tokenIndexes(cfg.Tokens))
	}
	hc := hec.Config{Tokens: cfg.Tokens, Store: hecStore{st, p}, DefaultHost: host, Logger: log, Registerer: reg,
		Keys: keys, AfterDurable: cfg.AfterHECDurable}
	hc.Rules = cfg.Bundle
	if p.cl != nil {
		hc.KeyPeers = p.cl.keyPeers
		hc.Rules = p.cl.rules
	}
	p.hec = hec.New(hc)
	mux := http.NewServeMux()
	p.hec.Register(mux)
	mux.HandleFunc("GET /v1/buckets", p.serveBuckets)
	mux.HandleFunc("POST /v1/buckets/{id}/roll", p.adminOnly(p.serveRoll))
	mux.HandleFunc("POST /v1/buckets/{id}/searchable", p.adminOnly(p.serveMakeSearchable))
	mux.HandleFunc("POST /v1/search", p.serveSearch)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", p.serveHealthz)
	p.registerPprof(mux)
	p.logAuth()
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		p.closeCluster(false)
		st.Close()
		return nil, fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	if ln, err = cfg.TLS.WrapListener(ln); err != nil { // HTTPS with a certificate
		ln.Close()
		p.closeCluster(false)
		st.Close()
		return nil, fmt.Errorf("peer: %w", err)
	}
	p.ln = ln
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Minute, IdleTimeout: 2 * time.Minute}
	go func() { p.done <- p.srv.Serve(ln) }()
	p.sweepStop = make(chan struct{})
	go p.hec.RunSweeper(p.sweepStop)
	if p.cl != nil {
		p.cl.wg.Add(1)
		go p.heartbeats() // after p.srv exists: a heartbeat may stop it
	}
	return p, nil
}

// Addr is the address the peer's HTTP server listens on.
func (p *Peer) Addr() string { return p.ln.Addr().String() }

// GUID is the peer's GUID.
func (p *Peer) GUID() string { return p.guid }

// Store is the peer's store.
func (p *Peer) Store() *store.Store { return p.store }

// Draining is closed once a graceful stop (Close) has stopped taking bus
// searches and lets the running ones finish (peer/search.go searchDrain).
func (p *Peer) Draining() <-chan struct{} { return p.draining }

// Done is closed-over errors of the HTTP server.
func (p *Peer) Done() <-chan error { return p.done }

// Close stops serving, then closes the store (flushing open blocks).
func (p *Peer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	herr := p.srv.Shutdown(ctx)
	p.stopSweeper()
	p.closeCluster(false)
	serr := p.store.Close()
	return errors.Join(herr, serr)
}

// stopSweeper ends the HEC sweeper (Close and Kill).
func (p *Peer) stopSweeper() { p.sweepStopOnce.Do(func() { close(p.sweepStop) }) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "code": code})
}

// BucketsResponse is GET /v1/buckets on a peer.
type BucketsResponse struct {
	Peer    string           `json:"peer"`
	GUID    string           `json:"guid"`
	Site    string           `json:"site"`
	Buckets []store.CopyInfo `json:"buckets"`
}

func (p *Peer) serveBuckets(w http.ResponseWriter, r *http.Request) {
	allowed, status, msg := p.searchScope(r)
	if status != 0 {
		writeAuthError(w, status, msg)
		return
	}
	inv := bucketsInScope(p.store.Inventory(), allowed)
	if idx := r.URL.Query().Get("index"); idx != "" {
		out := inv[:0]
		for _, c := range inv {
			if c.Index == idx {
				out = append(out, c)
			}
		}
		inv = out
	}
	if inv == nil {
		inv = []store.CopyInfo{}
	}
	writeJSON(w, 200, BucketsResponse{Peer: p.cfg.ID, GUID: p.guid, Site: p.cfg.Site, Buckets: inv})
}

func (p *Peer) serveRoll(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := p.store.Roll(id); err != nil {
		if errors.Is(err, store.ErrBucketState) {
			writeError(w, http.StatusConflict, "bucket_state", err.Error())
			return
		}
		writeError(w, http.StatusNotFound, "no_bucket", err.Error())
		return
	}
	writeJSON(w, 200, map[string]string{"bucket": id, "status": "rolling"})
}

func (p *Peer) serveMakeSearchable(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := p.store.Repairs().MakeSearchable(id); err != nil {
		status, code := http.StatusInternalServerError, "make_searchable_failed"
		switch {
		case errors.Is(err, store.ErrNoBucket):
			status, code = http.StatusNotFound, "no_bucket"
		case errors.Is(err, store.ErrBucketState):
			status, code = http.StatusConflict, "bucket_state"
		}
		writeError(w, status, code, err.Error())
		return
	}
	out := map[string]any{"bucket": id, "status": "searchable"}
	if p.cl != nil {
		// The managers learn of the searchable copy as they do of one a
		// fixup task made (auth.go reportSearchable).
		done := make(chan error, 1)
		go p.reportSearchable(id, done)
		t := time.NewTimer(searchableReportWait)
		defer t.Stop()
		select {
		case err := <-done:
			out["reported"] = err == nil
			if err != nil {
				out["report_error"] = err.Error()
			}
		case <-t.C:
			out["reported"] = false
			out["report_error"] = "the managers have not taken the report yet; the peer keeps retrying"
		}
	}
	writeJSON(w, 200, out)
}

// SearchError is a search's error reply: SPEC §7's {"error", "code"} and,
// for a syntax error, the 0-based byte offset in the query where the parser
// stopped (the message shows it as a 1-based column).
type SearchError struct {
	Error    string `json:"error"`
	Code     string `json:"code"`
	Position *int   `json:"position,omitempty"`
}

// writeNDJSON writes a finished answer as SPEC §7's stream: result lines,
// then the summary line, flushing as it goes.
func writeNDJSON(w http.ResponseWriter, resp *query.Response) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	fl, _ := w.(http.Flusher)
	var line bytes.Buffer
	for i, row := range resp.Results {
		line.Reset()
		if query.AppendRowJSON(&line, row, resp.Fields) != nil {
			return
		}
		if _, err := w.Write(line.Bytes()); err != nil {
			return
		}
		if fl != nil && i%256 == 255 {
			fl.Flush()
		}
	}
	enc.Encode(map[string]any{"summary": resp.Summary})
}

func (p *Peer) serveHealthz(w http.ResponseWriter, r *http.Request) {
	if err := p.store.Err(); err != nil {
		writeError(w, http.StatusServiceUnavailable, "store_failed", err.Error())
		return
	}
	writeJSON(w, 200, map[string]any{"status": "ok", "peer": p.cfg.ID, "guid": p.guid})
}

// registerClusterMetrics registers the series of a cluster peer's fixup
// runner and control-plane fetches.
func registerClusterMetrics(reg prometheus.Registerer, cl *cluster) {
	fix := cl.fix
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "quarry_peer_fixup_sent_bytes_total",
		Help: "Block bytes this peer sent to other peers for the managers' fixup tasks (none in maintenance mode)."},
		func() float64 { return float64(fix.sentBytes.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "quarry_peer_restart_catchup_bytes_total",
		Help: "Block bytes this peer sent, after a restart, to bring its hot buckets' replicas to its length."},
		func() float64 { return float64(fix.catchupBytes.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "quarry_peer_control_fetches_total",
		Help: "Fetches from the managers of the peer list (what=peers) and the cluster config (what=config): on a change the heartbeat reply names, or every 60th heartbeat as a backstop.", ConstLabels: prometheus.Labels{"what": "peers"}},
		func() float64 { return float64(cl.peersFetches.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "quarry_peer_control_fetches_total",
		Help: "Fetches from the managers of the peer list (what=peers) and the cluster config (what=config): on a change the heartbeat reply names, or every 60th heartbeat as a backstop.", ConstLabels: prometheus.Labels{"what": "config"}},
		func() float64 { return float64(cl.configFetches.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "quarry_peer_seal_divergent_copies_total",
		Help: "Copies longer than their bucket's sealed length whose block at the sealed length did not carry the sealed checksum, truncated instead of extending the seal."},
		func() float64 { return float64(fix.divergent.Load()) }))
}

func registerStoreMetrics(reg prometheus.Registerer, st *store.Store) {
	s := &st.Stats
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	counter("quarry_peer_events_appended_total", "Events appended to hot buckets.", func() float64 { return float64(s.EventsAppended.Load()) })
	counter("quarry_peer_blocks_written_total", "Journal blocks written and fsynced.", func() float64 { return float64(s.BlocksWritten.Load()) })
	counter("quarry_peer_journal_written_bytes_total", "Journal bytes written.", func() float64 { return float64(s.BytesWritten.Load()) })
	counter("quarry_peer_fsyncs_total", "Journal fsyncs (group commits).", func() float64 { return float64(s.Fsyncs.Load()) })
	counter("quarry_peer_fsync_seconds_total", "Time spent in journal fsyncs.", func() float64 { return float64(s.FsyncNanos.Load()) / 1e9 })
	counter("quarry_peer_rolls_total", "Hot buckets rolled to warm.", func() float64 { return float64(s.Rolls.Load()) })
	counter("quarry_peer_repairs_total", "Torn journal tails cut at open.", func() float64 { return float64(s.Repairs.Load()) })
	gauge("quarry_peer_pending_bytes", "Sealed block bytes waiting for the disk.", func() float64 { return float64(s.PendingBytes.Load()) })
	gauge("quarry_peer_unindexed_events", "Appended events waiting for the indexer.", func() float64 { return float64(s.Unindexed.Load()) })
	gauge("quarry_peer_rolls_in_progress", "Rolls waiting for their index to be written.", func() float64 { return float64(s.RollsInProgress.Load()) })
	gauge("quarry_peer_buckets", "Bucket copies on this peer.", func() float64 { return float64(len(st.Inventory())) })
	gauge("quarry_peer_open_files", "Descriptors the file cache holds for reading copies (journals, index and column files).", func() float64 { return float64(s.Files.Open.Load()) })
	gauge("quarry_peer_open_files_limit", "The file cache's cap (--max-open-files).", func() float64 { return float64(st.Options().MaxOpenFiles) })
	counter("quarry_peer_file_opens_total", "Descriptors the file cache opened.", func() float64 { return float64(s.Files.Opens.Load()) })
	counter("quarry_peer_file_evictions_total", "Idle descriptors the file cache closed to stay under its cap.", func() float64 { return float64(s.Files.Evictions.Load()) })
	counter("quarry_peer_file_exhausted_total", "Reads and writes refused because the process had no file descriptor left.", func() float64 { return float64(s.Files.Exhausted.Load()) })
	registerLimitMetrics(reg, st)
}

func registerSearchMetrics(reg prometheus.Registerer, s *SearchStats) {
	counter := func(name, help string, v *atomic.Int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) }))
	}
	counter("quarry_peer_search_requests_total", "Distributed search requests this peer answered.", &s.Requests)
	counter("quarry_peer_search_buckets_searched_total", "Buckets searched for search heads.", &s.Buckets)
	counter("quarry_peer_search_buckets_skipped_total", "Buckets skipped by time range for search heads.", &s.Skipped)
	counter("quarry_peer_search_events_scanned_total", "Events decoded for search heads.", &s.Scanned)
	counter("quarry_peer_search_refused_total", "Search requests refused (unresolvable generation, bad request).", &s.Refused)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "quarry_peer_searches_running", Help: "Distributed searches running now."},
		func() float64 { return float64(s.Running.Load()) }))
}

// SearchStats returns the peer's distributed-search counters.
func (p *Peer) SearchStats() *SearchStats { return &p.searchStats }

// registerSearchMetrics creates the single-peer search metrics.
func (p *Peer) registerSearchMetrics(reg prometheus.Registerer) {
	p.searches = prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_peer_searches_total",
		Help: "Searches received on POST /v1/search."})
	p.searchSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "quarry_peer_search_duration_seconds",
		Help:    "Time to answer a search on POST /v1/search, errors included.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})
	p.searchBuckets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_peer_search_buckets_total",
		Help: "Buckets of answered searches by outcome (searched, skipped by time range, failed, missing)."}, []string{"outcome"})
	p.searchErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_peer_search_errors_total",
		Help: "Searches answered with an error, by error code."}, []string{"code"})
	p.searchCancelled = prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_peer_searches_cancelled_total",
		Help: "Searches stopped because their client (a search head, or an HTTP client) went away or timed out."})
	p.searchLimitHits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_peer_search_limit_hits_total",
		Help: "Buckets of searches from search heads that this peer ended with limit_exceeded, per limit: search_memory (--search-memory), eval_value (an eval value over 1 MiB); and searches of its own POST /v1/search refused at compile time, 400 bad_query: query_size, nesting, expression_height, regex."}, []string{"limit"})
	for _, o := range []string{"searched", "skipped", "failed", "missing"} {
		p.searchBuckets.WithLabelValues(o)
	}
	reg.MustRegister(p.searches, p.searchSeconds, p.searchBuckets, p.searchErrors, p.searchCancelled, p.searchLimitHits)
}

var descReplLag = prometheus.NewDesc("quarry_peer_replication_lag_blocks",
	"Blocks of this peer's hot buckets durable here and not yet acknowledged, per replication target.", []string{"target"}, nil)

// replLagCollector reads the replicator's lag at scrape time (nothing on a
// standalone peer).
type replLagCollector struct{ p *Peer }

func (c *replLagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descReplLag }

func (c *replLagCollector) Collect(ch chan<- prometheus.Metric) {
	cl := c.p.cl
	if cl == nil || cl.repl == nil {
		return
	}
	for target, n := range cl.repl.lagBlocks() {
		ch <- prometheus.MustNewConstMetric(descReplLag, prometheus.GaugeValue, float64(n), target)
	}
}
