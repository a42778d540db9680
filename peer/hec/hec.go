// Package hec is quarry's HTTP Event Collector: Splunk's HEC protocol
// (SPEC §4) in front of a peer's store — /services/collector/event
// (concatenated JSON envelopes), /raw (line breaking), /health and /ack,
// tokens with allowed indexes, a default index and an ack switch (Splunk's
// useACK), channels with ack ids from 0 that belong to the token that made
// them (each token with its own caps), Splunk's replies and codes for every
// bad input, all or nothing per request, and back-pressure answered with 503
// code 9 rather than buffered without bound.
//
// A token without acks needs no channel; its 200 is sent only once the
// request's events are durable by the ack rule (store.Store.Wait), so the
// answer itself is the acknowledgement.
//
// A request with an Idempotency-Key header whose key its token used within
// the key window is answered as a success and not stored again, here or on
// any peer that hears of the key (idempotency.go; peer/DESIGN.md
// "Idempotent retries"); without the header nothing of that runs.
//
// # Limits (SPEC §11: memory a request costs is bounded by its size)
//
// Defaults, each a Config field:
//
//   - MaxBodyBytes, 16 MiB: a body larger than this — after inflating a
//     gzip body — gets 413 code 6 "Content too large", the inflating
//     stopped at the limit.
//   - MaxInFlightBytes, 64 MiB (or 4 × MaxBodyBytes if larger): one budget
//     shared by every request's body buffers (reserved before they are
//     allocated, as the body arrives — never from its declared length
//     alone: by size class up to 1 MiB, then 1 MiB at a time), its gzip reader (64 KiB) and its event decoder (the
//     decoder's copy of the body, its events and fields, its JSON values),
//     held until the store has indexed the request's events. A request that
//     finds no room waits up to BusyWait (500 ms) and then gets 503 code 9
//     "Server is busy", Splunk's back-pressure answer. One token's requests
//     hold at most TokenShare (0.75) of it together, so one token cannot
//     take it all; a request that alone needs more than that share gets 413. So 100 concurrent gzip bombs hold
//     at most the budget between them (TestGzipBombsStayWithinBudget).
//   - Pools never keep large buffers: body buffers are pooled only in their
//     size classes (4 KiB to 1 MiB), a larger body gets a buffer of its
//     exact length that is not pooled, and a decoder holding more than
//     4 MiB is dropped rather than pooled; a pool holds at most what was in
//     flight at once, which the budget bounds.
//   - MaxEventBytes, 1 MiB: the whole event — _raw, host, source,
//     sourcetype, index and every indexed field's name and value — larger
//     is 400 code 6 "Invalid data format" with its invalid-event-number,
//     and nothing of the request is stored. MaxEventValues, 65,536: an
//     envelope of more JSON values is refused the same way before it is
//     parsed (the JSON parser spends ~190 bytes on each).
//   - /ack: a body of at most MaxAckBodyBytes (256 KiB) naming at most
//     MaxAckIDs (10,000) ids; beyond either, 413 code 6 "Content too large"
//     and no ack is read (none is forgotten).
//   - Tokens are looked up by their SHA-256 and then compared in constant
//     time.
//   - A request the store refuses for a peer-wide limit (--max-indexes, or
//     a request alone needing more than --max-hot-buckets-total hot
//     buckets; store/hotcap.go) gets 400 code 7 "Incorrect index" with
//     the invalid-event-number of the event at fault; nothing is stored.
package hec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/peer/idem"
	"github.com/quarry-dev/quarry/peer/store"
)

// Token is a HEC token as the cluster config (or --hec-token) defines it.
type Token struct {
	// Value is the secret, or its digest (fsm.KeyedDigest) as a cluster
	// peer gets it: the managers never send secrets (SPEC §7).
	Value string
	// Key is the cluster's token key a keyed digest Value is checked under
	// (api.PeerConfig.TokenKey); nil for a secret or an unkeyed digest.
	Key []byte
	// Indexes the token may write to; empty means any index. The first is
	// the default index when DefaultIndex is empty.
	Indexes      []string
	DefaultIndex string
	// Ack: requests get ack ids and /ack answers; Splunk's useACK. Without
	// it a request needs no channel and is answered once durable.
	Ack bool
	// AllowQueryStringAuth: the token may come as ?token= (Splunk's
	// allowQueryStringAuth; off by default).
	AllowQueryStringAuth bool
	Disabled             bool
	// Host, Source and Sourcetype default the events that name none,
	// before the request's query parameters (fsm.HECToken).
	Host, Source, Sourcetype string
}

func (t *Token) defaultIndex() string {
	if t.DefaultIndex != "" {
		return t.DefaultIndex
	}
	if len(t.Indexes) > 0 {
		return t.Indexes[0]
	}
	return "main"
}

func (t *Token) allows(index string) bool {
	if len(t.Indexes) == 0 {
		return true
	}
	for _, i := range t.Indexes {
		if i == index {
			return true
		}
	}
	return false
}

// ParseTokenFlag parses a standalone peer's --hec-token
// T[=index,index…][:useack=false] with the cluster's own syntax
// (fsm.ParseHECToken: the first index is the default; acknowledging unless
// useack=false), and refuses an index name the store cannot hold.
func ParseTokenFlag(s string) (Token, error) {
	ft, err := fsm.ParseHECToken(s)
	if err != nil {
		return Token{}, err
	}
	for _, i := range ft.Indexes {
		if !store.ValidIndexName(i) {
			return Token{}, fmt.Errorf("hec token %q: invalid index name %q", s, i)
		}
	}
	return TokenFromConfig(ft), nil
}

// TokenFromConfig is the HEC token of a cluster-config token.
func TokenFromConfig(t fsm.HECToken) Token {
	return Token{Value: t.Token, Indexes: t.Indexes, DefaultIndex: t.DefaultIndex, Ack: t.Ack,
		AllowQueryStringAuth: t.AllowQueryStringAuth, Disabled: t.Disabled, Host: t.Host, Source: t.Source, Sourcetype: t.Sourcetype}
}

// Appender is what HEC needs of the store.
type Appender interface {
	AppendRelease(evs []store.Event, release func()) (*store.Ack, error)
	// AppendKeyed records a request's idempotency key with its events.
	AppendKeyed(evs []store.Event, release func(), key *store.RequestKey) (*store.Ack, error)
	// SealOpen and Wait serve tokens without acks: seal the request's open
	// blocks, then wait until they are durable by the ack rule.
	SealOpen(a *store.Ack)
	Wait(ctx context.Context, a *store.Ack) error
	Busy() bool
	Err() error
}

// Config configures a Handler.
type Config struct {
	Tokens []Token
	// Rules are the index-time rules in force at start (SetIndexRules
	// replaces them); nil: the built-in sourcetypes only.
	Rules *knowledge.IndexRules
	Store Appender
	// DefaultHost is the host of events that name none (the peer's host).
	DefaultHost string
	// MaxBodyBytes bounds a request body, inflated when gzip (default
	// 16 MiB); larger bodies get 413. MaxEventBytes bounds one whole event
	// — _raw, host, source, sourcetype, index and every field's name and
	// value — (default 1 MiB); a larger event gets 400 code 6 with its
	// invalid-event-number, and so does an envelope of more than
	// MaxEventValues JSON values (default 65,536).
	MaxBodyBytes   int64
	MaxEventBytes  int
	MaxEventValues int
	// MaxInFlightBytes is the byte budget every request's body buffers,
	// gzip readers and event decoders share (default 64 MiB, or
	// 4 × MaxBodyBytes if larger); see the package comment.
	MaxInFlightBytes int64
	// MaxAckBodyBytes (default 256 KiB) and MaxAckIDs (default 10,000)
	// bound an /ack request; beyond them it gets 413 code 6 and no ack is
	// read (none is forgotten).
	MaxAckBodyBytes int64
	MaxAckIDs       int
	// MaxChannels per token (default 10,000), MaxPendingAcks per channel
	// (default 100,000) and MaxTotalPendingAcks over all channels of a token
	// (default 1,000,000) bound the ack bookkeeping; beyond them that
	// token's requests get code 9. Every bound is per token, so one token
	// cannot use up what another needs.
	MaxChannels         int
	MaxPendingAcks      int
	MaxTotalPendingAcks int64
	// ChannelIdle: a channel with no request for this long is forgotten
	// (default 10 minutes), as Splunk forgets idle channels. AckIdle: an
	// ack id nobody read for this long is forgotten (default 10 minutes;
	// a later /ack reads it as false), so a shipper that never reads acks
	// on a fixed channel does not get 503 for ever once MaxPendingAcks are
	// unread. Sweep does both; the peer runs it on a timer (Splunk's
	// maxIdleTime and ackIdleCleanup).
	ChannelIdle time.Duration
	AckIdle     time.Duration
	// TokenShare is the part of MaxInFlightBytes one token's requests may
	// hold together (default 0.75): past it that token's requests wait and
	// get 503 code 9 while other tokens still find room, and a request
	// that alone needs more than the share gets 413.
	TokenShare float64
	// BodyReadPerMiB: a body has this long (default 30 s) for each next
	// size class or MiB of it to arrive — a minimum rate of about 35 KB/s
	// — else the connection is closed and its share of the in-flight
	// budget given back (review M2's silent connections).
	BodyReadPerMiB time.Duration
	// BusyWait: a data request that finds the store busy waits up to this
	// long (default 500 ms, before its body is read) for the queues to
	// drain, then answers 503 code 9. Memory stays bounded: a waiting
	// request holds no body. A request that finds the in-flight budget
	// spent waits up to as long again for room, then answers 503 code 9.
	BusyWait time.Duration
	// Keys is the idempotency key index (a fresh one when nil), KeyPeers
	// asks the cluster's other peers about a key (nil: standalone); see
	// idempotency.go.
	Keys     *idem.Index
	KeyPeers KeyPeers
	// AfterDurable, when set, is called for a request of a token without
	// acks once its events are durable by the ack rule, before it is
	// answered: a test hook (a peer that dies after replicating and before
	// answering); never set by the CLI.
	AfterDurable func(r *http.Request)
	Now          func() time.Time
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

// Handler serves the HEC endpoints.
type Handler struct {
	cfg    Config
	tokens atomic.Pointer[tokenSet]             // replaced whole by SetTokens
	rules  atomic.Pointer[knowledge.IndexRules] // SetIndexRules; nil: built-ins only
	tmu    sync.Mutex                           // serialises SetTokens
	pool   sync.Pool                            // *decoder
	bufs   [len(sizeClasses)]sync.Pool          // *pooledBuf by size class
	gzips  sync.Pool                            // *gzip.Reader
	budget *budget                              // MaxInFlightBytes

	requests *prometheus.CounterVec
	// byEndpoint and latency: every HEC request by endpoint (event, raw,
	// ack, health) and HTTP status — labels that never name a token.
	byEndpoint *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	events     prometheus.Counter
	rawBytes   prometheus.Counter
	busyWait   prometheus.Counter
	budgetBusy prometheus.Counter
	duplicates prometheus.Counter
	expired    *prometheus.CounterVec // Sweep: channels and acks forgotten
}

// tokenKey is a token's SHA-256: tokens are found by it, then compared in
// constant time, so a request's timing tells nothing of how much of a
// token it guessed.
type tokenKey [sha256.Size]byte

// tokenState is a token and the channels it created: a channel id names a
// channel only within its token, so another token can neither read its acks
// nor fill its table.
type tokenState struct {
	Token
	*tokenChannels // kept when the token's settings change (SetTokens)
}

type tokenChannels struct {
	mu       sync.Mutex
	channels map[string]*channel
	pending  atomic.Int64 // unread acks over the token's channels
	inflight atomic.Int64 // bytes of the in-flight budget the token's requests hold
}

type channel struct {
	mu       sync.Mutex
	next     int64
	pending  map[int64]pendingAck
	lastUsed time.Time
	owner    *tokenChannels // counts its unread acks
	gone     bool           // forgotten by a sweep: acks given on it are not kept
}

// pendingAck is an ack id not read yet and when it was given.
type pendingAck struct {
	ack *store.Ack
	at  time.Time
}

// New builds a handler.
func New(cfg Config) *Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = 1 << 20
	}
	if cfg.MaxEventValues <= 0 {
		cfg.MaxEventValues = DefaultMaxEventValues
	}
	if cfg.MaxInFlightBytes <= 0 {
		cfg.MaxInFlightBytes = max(64<<20, 4*cfg.MaxBodyBytes)
	}
	if cfg.MaxAckBodyBytes <= 0 {
		cfg.MaxAckBodyBytes = 256 << 10
	}
	if cfg.MaxAckIDs <= 0 {
		cfg.MaxAckIDs = 10000
	}
	if cfg.MaxChannels <= 0 {
		cfg.MaxChannels = 10000
	}
	if cfg.MaxPendingAcks <= 0 {
		cfg.MaxPendingAcks = 100000
	}
	if cfg.MaxTotalPendingAcks <= 0 {
		cfg.MaxTotalPendingAcks = 1000000
	}
	if cfg.ChannelIdle <= 0 {
		cfg.ChannelIdle = 10 * time.Minute
	}
	if cfg.AckIdle <= 0 {
		cfg.AckIdle = 10 * time.Minute
	}
	if cfg.TokenShare <= 0 || cfg.TokenShare > 1 {
		cfg.TokenShare = 0.75
	}
	if cfg.BodyReadPerMiB <= 0 {
		cfg.BodyReadPerMiB = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BusyWait == 0 {
		cfg.BusyWait = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultHost == "" {
		cfg.DefaultHost = "localhost"
	}
	if cfg.Keys == nil {
		cfg.Keys = idem.New(idem.Config{Now: cfg.Now})
	}
	h := &Handler{cfg: cfg, budget: newBudget(cfg.MaxInFlightBytes)}
	h.rules.Store(cfg.Rules)
	h.SetTokens(cfg.Tokens)
	h.pool.New = func() any { return &decoder{} }
	h.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quarry_peer_hec_requests_total", Help: "HEC requests by reply code (Splunk's HEC code, not the HTTP status).",
	}, []string{"code"})
	h.events = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quarry_peer_hec_events_total", Help: "Events accepted over HEC.",
	})
	h.rawBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quarry_peer_hec_event_bytes_total", Help: "Bytes of _raw in the events accepted over HEC.",
	})
	h.busyWait = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quarry_peer_hec_busy_wait_seconds_total", Help: "Time HEC requests waited for a busy store or for room in the in-flight byte budget.",
	})
	h.budgetBusy = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quarry_peer_hec_budget_busy_total", Help: "HEC requests answered 503 code 9 because the in-flight byte budget had no room within the busy wait.",
	})
	h.duplicates = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quarry_peer_hec_idempotent_duplicates_total", Help: "HEC requests whose Idempotency-Key was already used by their token within the key window: answered, not stored again.",
	})
	keys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "quarry_peer_hec_idempotency_keys", Help: "Idempotency keys this peer remembers (the key index).",
	}, func() float64 { return float64(cfg.Keys.Len()) })
	forgotten := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "quarry_peer_hec_idempotency_keys_evicted_total", Help: "Idempotency keys forgotten within the window because a cap (per token or in all) was reached.",
	}, func() float64 { return float64(cfg.Keys.Evicted.Load()) })
	h.expired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quarry_peer_hec_expired_total", Help: "HEC ack channels idle past ChannelIdle and ack ids unread past AckIdle that the sweep forgot, by what (channel, ack).",
	}, []string{"what"})
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "quarry_peer_hec_inflight_bytes", Help: "Bytes of the HEC in-flight budget held by requests (bodies, gzip readers, decoders).",
	}, func() float64 { return float64(h.InFlightBytes()) })
	h.byEndpoint = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quarry_peer_hec_http_requests_total", Help: "HEC requests by endpoint (event, raw, ack, health) and HTTP status.",
	}, []string{"endpoint", "status"})
	h.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "quarry_peer_hec_request_duration_seconds",
		Help:    "Time from a HEC request's arrival to its answer, by endpoint (a token without acks waits for durability).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"endpoint"})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(h.requests, h.events, h.rawBytes, h.busyWait, h.budgetBusy, h.expired, inflight, h.byEndpoint, h.latency,
			h.duplicates, keys, forgotten)
	}
	return h
}

// Register mounts the HEC endpoints on mux.
func (h *Handler) Register(mux *http.ServeMux) {
	for _, p := range []string{"/services/collector", "/services/collector/event", "/services/collector/event/1.0"} {
		mux.HandleFunc("POST "+p, h.measured("event", h.serveEvent))
	}
	for _, p := range []string{"/services/collector/raw", "/services/collector/raw/1.0"} {
		mux.HandleFunc("POST "+p, h.measured("raw", h.serveRaw))
	}
	for _, p := range []string{"/services/collector/ack", "/services/collector/ack/1.0"} {
		mux.HandleFunc("POST "+p, h.measured("ack", h.serveAck))
	}
	for _, p := range []string{"/services/collector/health", "/services/collector/health/1.0"} {
		mux.HandleFunc("GET "+p, h.measured("health", h.serveHealth))
	}
	// OPTIONS on any HEC path answers 200 with what it allows: Docker's
	// Splunk log driver checks its URL so before it starts (it got 405
	// and refused to start, issue 29). Nothing is read or stored.
	mux.HandleFunc("OPTIONS /services/collector/{rest...}", serveOptions)
	mux.HandleFunc("OPTIONS /services/collector", serveOptions)
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (a body's
// read deadline, BodyReadPerMiB).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// measured counts a handler's requests by endpoint and status and times
// them. A request whose client left before an answer counts as status 0.
func (h *Handler) measured(endpoint string, fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		fn(sw, r)
		h.byEndpoint.WithLabelValues(endpoint, strconv.Itoa(sw.status)).Inc()
		h.latency.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	}
}

func (h *Handler) reply(w http.ResponseWriter, r Reply) {
	h.requests.WithLabelValues(strconv.Itoa(r.Code)).Inc()
	var buf [128]byte
	b := r.appendJSON(buf[:0])
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(r.Status)
	w.Write(b)
}

func plain(r Reply) Reply {
	r.InvalidEvent = -1
	r.AckID = -1
	return r
}

// auth finds the request's token: "Authorization: Splunk <token>", basic
// auth with the token as password, or — only for a token that allows it,
// as Splunk's allowQueryStringAuth — ?token=<token>. A query token that
// does not allow it counts as no token at all.
func (h *Handler) auth(r *http.Request) (*tokenState, *Reply) {
	a := r.Header.Get("Authorization")
	if a == "" {
		if qt := queryToken(r); qt != "" {
			if t := h.token(qt); t != nil && t.AllowQueryStringAuth {
				if t.Disabled {
					rp := plain(replyTokenDisabled)
					return nil, &rp
				}
				return t, nil
			}
		}
		rp := plain(replyTokenRequired)
		return nil, &rp
	}
	tok := headerToken(a)
	if tok == "" {
		rp := plain(replyInvalidAuth)
		return nil, &rp
	}
	t := h.token(tok)
	if t == nil {
		rp := plain(replyInvalidToken)
		return nil, &rp
	}
	if t.Disabled {
		rp := plain(replyTokenDisabled)
		return nil, &rp
	}
	return t, nil
}

// headerToken is the token an Authorization header presents ("Splunk
// <token>", or basic auth with the token as password); "" when it
// presents none in a form HEC takes.
func headerToken(a string) string {
	scheme, rest, _ := strings.Cut(a, " ")
	rest = strings.TrimSpace(rest)
	switch strings.ToLower(scheme) {
	case "splunk":
		return rest
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return ""
		}
		_, pw, _ := strings.Cut(string(raw), ":")
		return pw
	}
	return ""
}

// queryToken is ?token=<token> (taken only for a token that allows it).
func queryToken(r *http.Request) string { return r.URL.Query().Get("token") }

// presentedToken is the secret a request that auth took presented.
func presentedToken(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		return headerToken(a)
	}
	return queryToken(r)
}

var guidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// channelOf returns the request's channel id ("" when none) or a reply.
func channelOf(r *http.Request, required bool) (string, *Reply) {
	c := r.Header.Get("X-Splunk-Request-Channel")
	if c == "" {
		c = r.URL.Query().Get("channel")
	}
	if c == "" {
		if required {
			rp := plain(replyNoChannel)
			return "", &rp
		}
		return "", nil
	}
	if !guidRE.MatchString(c) {
		rp := plain(replyBadChannel)
		return "", &rp
	}
	return c, nil
}

// defaults are the request's metadata defaults: the token's default index,
// host, source and sourcetype (else the peer's host, http:hec, httpevent),
// then Splunk's query parameters host, source, sourcetype, index and time
// (epoch seconds, decimals allowed; a bad one is code 6). An event's own
// values come before all of them.
func (h *Handler) defaults(r *http.Request, t *tokenState, now int64) (Defaults, *Reply) {
	q := r.URL.Query()
	d := Defaults{Index: t.defaultIndex(), Host: h.cfg.DefaultHost, Source: "http:hec", Sourcetype: "httpevent", Now: now}
	if t.Host != "" {
		d.Host = t.Host
	}
	if t.Source != "" {
		d.Source = t.Source
	}
	if t.Sourcetype != "" {
		d.Sourcetype = t.Sourcetype
	}
	if v := q.Get("index"); v != "" {
		d.Index = v
	}
	if v := q.Get("host"); v != "" {
		d.Host = v
	}
	if v := q.Get("source"); v != "" {
		d.Source = v
	}
	if v := q.Get("sourcetype"); v != "" {
		d.Sourcetype = v
	}
	if v := q.Get("time"); v != "" {
		ns, ok := parseEpoch([]byte(v))
		if !ok {
			rp := plain(replyInvalidFormat)
			return d, &rp
		}
		d.Now = ns
	}
	return d, nil
}

// precheck runs the checks every data request shares, in Splunk's order:
// authorization, back-pressure, channel.
func (h *Handler) precheck(r *http.Request) (*tokenState, string, *Reply) {
	t, rp := h.auth(r)
	if rp != nil {
		return nil, "", rp
	}
	if h.cfg.Store.Busy() && !h.waitNotBusy(r.Context()) {
		rp := plain(replyBusy)
		return nil, "", &rp
	}
	if err := h.cfg.Store.Err(); err != nil {
		rp := plain(replyInternal)
		return nil, "", &rp
	}
	ch, rp := channelOf(r, t.Ack)
	if rp != nil {
		return nil, "", rp
	}
	return t, ch, nil
}

// waitNotBusy waits up to BusyWait for the store to stop being busy.
func (h *Handler) waitNotBusy(ctx context.Context) bool {
	if h.cfg.BusyWait <= 0 {
		return false
	}
	start := time.Now()
	defer func() { h.busyWait.Add(time.Since(start).Seconds()) }()
	deadline := time.NewTimer(h.cfg.BusyWait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if !h.cfg.Store.Busy() {
				return true
			}
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// begin is the prelude every ingest endpoint shares: the token and channel
// checks, the Idempotency-Key, and the body read under the in-flight
// budget. On a refusal it has replied and ok is false.
func (h *Handler) begin(w http.ResponseWriter, r *http.Request) (t *tokenState, ch string, key *keyedRequest, b *body, ok bool) {
	t, ch, rp := h.precheck(r)
	if rp == nil {
		key, rp = requestKey(r)
	}
	if rp == nil {
		b, rp = h.readBody(w, r, t, h.cfg.MaxBodyBytes)
	}
	if rp != nil {
		h.reply(w, *rp)
		return nil, "", nil, nil, false
	}
	return t, ch, key, b, true
}

func (h *Handler) serveEvent(w http.ResponseWriter, r *http.Request) {
	t, ch, key, b, ok := h.begin(w, r)
	if !ok {
		return
	}
	if len(bytes.TrimSpace(b.data)) == 0 {
		b.release()
		h.reply(w, plain(replyNoData))
		return
	}
	def, rp := h.defaults(r, t, h.cfg.Now().UnixNano())
	if rp != nil {
		b.release()
		h.reply(w, *rp)
		return
	}
	if key != nil {
		key.hashBody("event", r.URL.Query(), b.data)
	}
	d := h.pool.Get().(*decoder)
	drv := b.rv.sibling() // the decoder's memory, held until the store lets go
	d.maxValues, d.charge = h.cfg.MaxEventValues, drv.take
	evs, res := d.decodeEnvelopes(b.data, def, t.allows, h.cfg.MaxEventBytes)
	d.charge = nil
	b.release() // the scanner holds its own copy
	if res.Code != 0 {
		h.putDecoder(d, drv)
		res.AckID = -1
		if res.Code == replyNoData.Code {
			res.InvalidEvent = -1
		}
		h.reply(w, res)
		return
	}
	if r.URL.Query().Get("auto_extract_timestamp") == "true" {
		h.extractTimes(evs, time.Unix(0, def.Now))
	}
	release := func() { h.putDecoder(d, drv) }
	if key != nil {
		h.commitKeyed(w, r, t, ch, evs, release, key)
		return
	}
	h.commit(w, r, t, ch, evs, release)
}

// maxPooledDecoder: a decoder holding more (it decoded a large body) is
// left to the garbage collector rather than pooled, so the pool never
// keeps large buffers alive.
const maxPooledDecoder = 4 << 20

// putDecoder gives a decoder's reservation back and pools it again.
func (h *Handler) putDecoder(d *decoder, rv *reservation) {
	rv.releaseAll()
	d.charged = 0
	if d.footprint() > maxPooledDecoder {
		return
	}
	h.pool.Put(d)
}

// commit appends a request's validated events and answers it: with an ack
// id on the token's channel, or — for a token without acks — with a plain
// Success once the events are durable by the ack rule. A request whose
// client goes away before then is not answered (it was never
// acknowledged); a store that fails or closes first answers code 8.
func (h *Handler) commit(w http.ResponseWriter, r *http.Request, t *tokenState, chID string, evs []store.Event, release func()) {
	var c *channel
	if t.Ack {
		var rp *Reply
		if c, rp = h.channel(t, chID); rp != nil {
			release()
			h.reply(w, *rp)
			return
		}
	}
	ack, ok := h.appendEvents(w, evs, release, nil)
	if !ok {
		return
	}
	h.answer(w, r, c, ack)
}

// appendEvents appends a request's events (with its idempotency key when
// key is not nil); on failure it answers the request and returns false.
func (h *Handler) appendEvents(w http.ResponseWriter, evs []store.Event, release func(), key *store.RequestKey) (*store.Ack, bool) {
	n, raw := len(evs), 0
	for i := range evs {
		raw += len(evs[i].Raw)
	}
	var ack *store.Ack
	var err error
	if key != nil {
		ack, err = h.cfg.Store.AppendKeyed(evs, release, key)
	} else {
		ack, err = h.cfg.Store.AppendRelease(evs, release)
	}
	if errors.Is(err, store.ErrDiskFull) {
		h.reply(w, plain(replyBusy)) // nothing taken; the client retries (back-pressure)
		return nil, false
	}
	var lim *store.LimitError
	if errors.As(err, &lim) {
		// A peer-wide limit (--max-indexes, --max-hot-buckets-total):
		// Splunk's answer for an index it will not write, at the event.
		ev := lim.Event
		if key != nil && key.Ords != nil && ev < len(key.Ords) {
			ev = int(key.Ords[ev])
		}
		h.cfg.Logger.Warn("hec request refused by a peer limit; nothing stored", "err", lim)
		h.reply(w, replyIncorrectIdx.at(ev))
		return nil, false
	}
	if err != nil {
		h.cfg.Logger.Error("hec append failed", "err", err)
		h.reply(w, plain(replyInternal))
		return nil, false
	}
	h.events.Add(float64(n))
	h.rawBytes.Add(float64(raw))
	return ack, true
}

// answer answers a request whose events ack covers: with an ack id on
// channel c, or — no channel: a token without acks — with Success once
// they are durable by the ack rule.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, c *channel, ack *store.Ack) {
	res := plain(replySuccess)
	if c == nil {
		h.cfg.Store.SealOpen(ack)
		if err := h.cfg.Store.Wait(r.Context(), ack); err != nil {
			if r.Context().Err() != nil {
				return // the client left: nothing was acknowledged to it
			}
			if errors.Is(err, store.ErrDiskFull) {
				h.reply(w, plain(replyBusy)) // not acknowledged: the client retries
				return
			}
			h.cfg.Logger.Error("hec events not durable", "err", err)
			h.reply(w, plain(replyInternal))
			return
		}
		if h.cfg.AfterDurable != nil {
			h.cfg.AfterDurable(r)
		}
		h.reply(w, res)
		return
	}
	c.mu.Lock()
	res.AckID = c.next
	c.next++
	now := h.cfg.Now()
	if !c.gone {
		c.pending[res.AckID] = pendingAck{ack: ack, at: now}
		c.owner.pending.Add(1)
	}
	c.lastUsed = now
	c.mu.Unlock()
	h.reply(w, res)
}
