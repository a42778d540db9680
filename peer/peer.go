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
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/quarry-dev/quarry/peer/hec"
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
	// Searchable: whether the copies this peer creates are searchable
	// (default true); false keeps journal-only copies (--searchable=false).
	Searchable    bool
	MaxHotBytes   int64
	MaxHotSpan    time.Duration
	MaxHotBuckets int
	BlockBytes    int
	BlockInterval time.Duration
	Logger        *slog.Logger

	// Cluster mode (cluster.go): with NATS set the peer joins the cluster —
	// registers with the managers, takes its HEC tokens from the cluster
	// config and replicates its hot buckets.
	NATS                   string
	NATSUser, NATSPassword string
	SubjectPrefix          string
	Managers               []string // manager URLs (HTTP control plane)
	ManagerToken           string
	ControlPlane           ControlPlane  // overrides Managers (tests, NATS transport)
	TargetTimeout          time.Duration // SPEC §4 target_timeout (default 2 s)
	JoinTimeout            time.Duration // how long Start waits for the managers (default 60 s)
	FixupPoll              time.Duration // how often fixup tasks are polled (default 500 ms)
	ReplicationRate        int64         // fixup replication throttle, bytes/s (0: DefaultReplicationRate, < 0: none)
}

// Peer is a running peer.
type Peer struct {
	cfg   Config
	guid  string
	store *store.Store
	hec   *hec.Handler
	srv   *http.Server
	ln    net.Listener
	log   *slog.Logger
	done  chan error
	cl    *cluster // nil when standalone
	// decommissioning is set by the heartbeat loop (cluster.go) only.
	decommissioning bool
	offlineCh       chan struct{}
	offlineOnce     sync.Once
}

// identity is DATA/peer.json, written at first start.
type identity struct {
	Version int    `json:"version"`
	GUID    string `json:"guid"`
	ID      string `json:"id"`
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
	f, err := os.Create(tmp)
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

// Start opens the store (recovering it), and serves HTTP on cfg.HTTPAddr.
func Start(cfg Config) (*Peer, error) {
	if cfg.ID == "" {
		return nil, errors.New("peer: --id is required")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("peer: --data-dir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("peer", cfg.ID, "site", cfg.Site)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	guid, err := loadOrCreateGUID(cfg.DataDir, cfg.ID)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	st, err := store.Open(store.Options{
		Dir: cfg.DataDir, GUID: guid, Searchable: cfg.Searchable,
		MaxHotBytes: cfg.MaxHotBytes, MaxHotSpan: cfg.MaxHotSpan, MaxHotBuckets: cfg.MaxHotBuckets,
		BlockBytes: cfg.BlockBytes, BlockInterval: cfg.BlockInterval, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	rep := st.LastRecovery()
	log.Info("store opened", "guid", guid, "took", time.Since(started).Round(time.Millisecond),
		"opened", rep.Opened, "rolled", rep.Rolled, "torn_tails", rep.TornTails, "rebuilt", rep.Rebuilt, "corrupt", len(rep.Corrupt))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerStoreMetrics(reg, st)
	host, _ := os.Hostname()
	p := &Peer{cfg: cfg, guid: guid, store: st, log: log, done: make(chan error, 1), offlineCh: make(chan struct{})}
	if cfg.NATS != "" {
		if p.cfg.JoinTimeout <= 0 {
			p.cfg.JoinTimeout = time.Minute
		}
		toks, err := p.joinCluster()
		if err != nil {
			st.Close()
			return nil, err
		}
		cfg.Tokens = toks
	}
	p.hec = hec.New(hec.Config{Tokens: cfg.Tokens, Store: st, DefaultHost: host, Logger: log, Registerer: reg})
	mux := http.NewServeMux()
	p.hec.Register(mux)
	mux.HandleFunc("GET /v1/buckets", p.serveBuckets)
	mux.HandleFunc("POST /v1/buckets/{id}/roll", p.serveRoll)
	mux.HandleFunc("POST /v1/buckets/{id}/searchable", p.serveMakeSearchable)
	mux.HandleFunc("POST /v1/search", p.serveSearch)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", p.serveHealthz)
	// Profiling (pprof) for operators chasing a slow or fat peer.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		p.closeCluster(false)
		st.Close()
		return nil, fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	p.ln = ln
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Minute, IdleTimeout: 2 * time.Minute}
	go func() { p.done <- p.srv.Serve(ln) }()
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

// Done is closed-over errors of the HTTP server.
func (p *Peer) Done() <-chan error { return p.done }

// Close stops serving, then closes the store (flushing open blocks).
func (p *Peer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	herr := p.srv.Shutdown(ctx)
	p.closeCluster(false)
	serr := p.store.Close()
	return errors.Join(herr, serr)
}

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
	inv := p.store.Inventory()
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
		writeError(w, http.StatusNotFound, "no_bucket", err.Error())
		return
	}
	writeJSON(w, 200, map[string]string{"bucket": id, "status": "rolling"})
}

func (p *Peer) serveMakeSearchable(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := p.store.MakeSearchable(id); err != nil {
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
	writeJSON(w, 200, map[string]string{"bucket": id, "status": "searchable"})
}

// serveSearch is single-peer search: every searchable copy here, through
// query.Search. It stays thin on purpose: the language lives in query.
func (p *Peer) serveSearch(w http.ResponseWriter, r *http.Request) {
	var req query.Request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("decode search request: %v", err))
		return
	}
	req.Server = p.cfg.ID
	resp, err := query.Search(r.Context(), req, p.store.Segments())
	switch {
	case err == nil:
		writeJSON(w, 200, resp)
	case errors.Is(err, query.ErrNotBuilt):
		writeError(w, http.StatusNotImplemented, "not_built", err.Error())
	case query.IsRequestError(err):
		writeError(w, http.StatusBadRequest, "bad_query", err.Error())
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		writeError(w, http.StatusGatewayTimeout, "search_timeout", err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "search_failed", err.Error())
	}
}

func (p *Peer) serveHealthz(w http.ResponseWriter, r *http.Request) {
	if err := p.store.Err(); err != nil {
		writeError(w, http.StatusServiceUnavailable, "store_failed", err.Error())
		return
	}
	writeJSON(w, 200, map[string]any{"status": "ok", "peer": p.cfg.ID, "guid": p.guid})
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
}
