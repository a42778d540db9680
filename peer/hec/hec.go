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
package hec

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer/store"
)

// Token is a HEC token as the cluster config (or --hec-token) defines it.
type Token struct {
	Value string
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
		AllowQueryStringAuth: t.AllowQueryStringAuth, Disabled: t.Disabled}
}

// Appender is what HEC needs of the store.
type Appender interface {
	AppendRelease(evs []store.Event, release func()) (*store.Ack, error)
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
	Store  Appender
	// DefaultHost is the host of events that name none (the peer's host).
	DefaultHost string
	// MaxBodyBytes bounds a request body (default 64 MiB); larger bodies get
	// 413. MaxEventBytes bounds one event's _raw (default 1 MiB); a larger
	// event gets 400 code 6 with its invalid-event-number.
	MaxBodyBytes  int64
	MaxEventBytes int
	// MaxChannels per token (default 10,000), MaxPendingAcks per channel
	// (default 100,000) and MaxTotalPendingAcks over all channels of a token
	// (default 1,000,000) bound the ack bookkeeping; beyond them that
	// token's requests get code 9. Every bound is per token, so one token
	// cannot use up what another needs.
	MaxChannels         int
	MaxPendingAcks      int
	MaxTotalPendingAcks int64
	// ChannelIdle: a channel with no request for this long is forgotten
	// (default 10 minutes), as Splunk forgets idle channels.
	ChannelIdle time.Duration
	// BusyWait: a data request that finds the store busy waits up to this
	// long (default 500 ms, before its body is read) for the queues to
	// drain, then answers 503 code 9. Memory stays bounded: a waiting
	// request holds no body.
	BusyWait   time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Handler serves the HEC endpoints.
type Handler struct {
	cfg    Config
	tokens atomic.Pointer[map[string]*tokenState] // replaced whole by SetTokens
	tmu    sync.Mutex                             // serialises SetTokens
	pool   sync.Pool                              // *decoder
	bodies sync.Pool                              // *[]byte

	requests *prometheus.CounterVec
	// byEndpoint and latency: every HEC request by endpoint (event, raw,
	// ack, health) and HTTP status — labels that never name a token.
	byEndpoint *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	events     prometheus.Counter
	rawBytes   prometheus.Counter
	busyWait   prometheus.Counter
}

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
}

type channel struct {
	mu       sync.Mutex
	next     int64
	pending  map[int64]*store.Ack
	lastUsed time.Time
}

// New builds a handler.
func New(cfg Config) *Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = 1 << 20
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
	h := &Handler{cfg: cfg}
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
		Name: "quarry_peer_hec_busy_wait_seconds_total", Help: "Time HEC requests waited for a busy store.",
	})
	h.byEndpoint = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quarry_peer_hec_http_requests_total", Help: "HEC requests by endpoint (event, raw, ack, health) and HTTP status.",
	}, []string{"endpoint", "status"})
	h.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "quarry_peer_hec_request_duration_seconds",
		Help:    "Time from a HEC request's arrival to its answer, by endpoint (a token without acks waits for durability).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"endpoint"})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(h.requests, h.events, h.rawBytes, h.busyWait, h.byEndpoint, h.latency)
	}
	return h
}

// SetTokens replaces the tokens (a cluster peer gets new ones from the
// managers' config). A token that stays keeps its channels and unread acks;
// a removed token's are forgotten.
func (h *Handler) SetTokens(tokens []Token) {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	old := map[string]*tokenState{}
	if p := h.tokens.Load(); p != nil {
		old = *p
	}
	next := make(map[string]*tokenState, len(tokens))
	for _, t := range tokens {
		st := &tokenState{Token: t}
		if o := old[t.Value]; o != nil {
			st.tokenChannels = o.tokenChannels
		} else {
			st.tokenChannels = &tokenChannels{channels: map[string]*channel{}}
		}
		next[t.Value] = st
	}
	h.tokens.Store(&next)
}

// token is the current state of a token value, nil when unknown.
func (h *Handler) token(v string) *tokenState { return (*h.tokens.Load())[v] }

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
		if qt := r.URL.Query().Get("token"); qt != "" {
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
	var tok string
	scheme, rest, _ := strings.Cut(a, " ")
	rest = strings.TrimSpace(rest)
	switch strings.ToLower(scheme) {
	case "splunk":
		tok = rest
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			rp := plain(replyInvalidAuth)
			return nil, &rp
		}
		_, pw, ok := strings.Cut(string(raw), ":")
		if !ok {
			rp := plain(replyInvalidAuth)
			return nil, &rp
		}
		tok = pw
	default:
		rp := plain(replyInvalidAuth)
		return nil, &rp
	}
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

// readBody reads a bounded body into a pooled buffer; a gzip body
// (Content-Encoding: gzip, as Splunk's HEC accepts) is inflated, and the
// bound applies to the inflated bytes.
func (h *Handler) readBody(r *http.Request) (*[]byte, *Reply) {
	if r.ContentLength > h.cfg.MaxBodyBytes {
		rp := plain(replyTooLarge)
		return nil, &rp
	}
	bp, _ := h.bodies.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, 1<<20)
		bp = &b
	}
	var body io.Reader = r.Body
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			h.bodies.Put(bp)
			rp := plain(replyInvalidFormat)
			return nil, &rp
		}
		defer zr.Close()
		body = zr
	}
	buf := bytes.NewBuffer((*bp)[:0])
	n, err := buf.ReadFrom(io.LimitReader(body, h.cfg.MaxBodyBytes+1))
	*bp = buf.Bytes()
	if err != nil {
		h.bodies.Put(bp)
		rp := plain(replyInvalidFormat)
		return nil, &rp
	}
	if n > h.cfg.MaxBodyBytes {
		h.bodies.Put(bp)
		rp := plain(replyTooLarge)
		return nil, &rp
	}
	return bp, nil
}

// defaults are the request's metadata defaults: the token's default index,
// then Splunk's query parameters host, source, sourcetype, index and time
// (epoch seconds, decimals allowed; a bad one is code 6).
func (h *Handler) defaults(r *http.Request, t *tokenState, now int64) (Defaults, *Reply) {
	q := r.URL.Query()
	d := Defaults{Index: t.defaultIndex(), Host: h.cfg.DefaultHost, Source: "http:hec", Sourcetype: "httpevent", Now: now}
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

func (h *Handler) serveEvent(w http.ResponseWriter, r *http.Request) {
	t, ch, rp := h.precheck(r)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	bp, rp := h.readBody(r)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	if len(bytes.TrimSpace(*bp)) == 0 {
		h.bodies.Put(bp)
		h.reply(w, plain(replyNoData))
		return
	}
	def, rp := h.defaults(r, t, h.cfg.Now().UnixNano())
	if rp != nil {
		h.bodies.Put(bp)
		h.reply(w, *rp)
		return
	}
	d := h.pool.Get().(*decoder)
	evs, res := d.decodeEnvelopes(*bp, def, t.allows, h.cfg.MaxEventBytes)
	h.bodies.Put(bp) // the scanner holds its own copy
	if res.Code != 0 {
		h.pool.Put(d)
		res.AckID = -1
		if res.Code == replyNoData.Code {
			res.InvalidEvent = -1
		}
		h.reply(w, res)
		return
	}
	h.commit(w, r, t, ch, evs, func() { h.pool.Put(d) })
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
	n, raw := len(evs), 0
	for i := range evs {
		raw += len(evs[i].Raw)
	}
	ack, err := h.cfg.Store.AppendRelease(evs, release)
	if err != nil {
		h.cfg.Logger.Error("hec append failed", "err", err)
		h.reply(w, plain(replyInternal))
		return
	}
	h.events.Add(float64(n))
	h.rawBytes.Add(float64(raw))
	res := plain(replySuccess)
	if c == nil {
		h.cfg.Store.SealOpen(ack)
		if err := h.cfg.Store.Wait(r.Context(), ack); err != nil {
			if r.Context().Err() != nil {
				return // the client left: nothing was acknowledged to it
			}
			h.cfg.Logger.Error("hec events not durable", "err", err)
			h.reply(w, plain(replyInternal))
			return
		}
		h.reply(w, res)
		return
	}
	c.mu.Lock()
	res.AckID = c.next
	c.next++
	c.pending[res.AckID] = ack
	t.pending.Add(1)
	c.lastUsed = h.cfg.Now()
	c.mu.Unlock()
	h.reply(w, res)
}

// channel returns (creating) one of a token's ack channels, enforcing the
// token's bounds.
func (h *Handler) channel(t *tokenState, id string) (*channel, *Reply) {
	now := h.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending.Load() >= h.cfg.MaxTotalPendingAcks {
		rp := plain(replyBusy)
		return nil, &rp
	}
	c := t.channels[id]
	if c == nil {
		if len(t.channels) >= h.cfg.MaxChannels || len(t.channels)%1024 == 1023 {
			// forget idle channels (and their unread acks), as Splunk does
			for k, old := range t.channels {
				old.mu.Lock()
				idle := now.Sub(old.lastUsed) > h.cfg.ChannelIdle
				n := len(old.pending)
				old.mu.Unlock()
				if idle {
					delete(t.channels, k)
					t.pending.Add(-int64(n))
				}
			}
			if len(t.channels) >= h.cfg.MaxChannels {
				rp := plain(replyBusy)
				return nil, &rp
			}
		}
		c = &channel{pending: map[int64]*store.Ack{}, lastUsed: now}
		t.channels[id] = c
	}
	c.mu.Lock()
	full := len(c.pending) >= h.cfg.MaxPendingAcks
	c.mu.Unlock()
	if full {
		rp := plain(replyBusy)
		return nil, &rp
	}
	return c, nil
}

func (h *Handler) serveRaw(w http.ResponseWriter, r *http.Request) {
	t, ch, rp := h.precheck(r)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	bp, rp := h.readBody(r)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	def, rp := h.defaults(r, t, h.cfg.Now().UnixNano())
	if rp != nil {
		h.bodies.Put(bp)
		h.reply(w, *rp)
		return
	}
	if !store.ValidIndexName(def.Index) || !t.allows(def.Index) {
		h.bodies.Put(bp)
		h.reply(w, plain(replyIncorrectIdx))
		return
	}
	// The body buffer is owned by the request until the store lets go.
	body := *bp
	var evs []store.Event
	host, src, st := []byte(def.Host), []byte(def.Source), []byte(def.Sourcetype)
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(line) > h.cfg.MaxEventBytes {
			h.bodies.Put(bp)
			h.reply(w, replyInvalidFormat.at(len(evs)))
			return
		}
		evs = append(evs, store.Event{Index: def.Index, Time: def.Now, Raw: line, Host: host, Source: src, Sourcetype: st})
	}
	if len(evs) == 0 {
		h.bodies.Put(bp)
		h.reply(w, plain(replyNoData))
		return
	}
	h.commit(w, r, t, ch, evs, func() { h.bodies.Put(bp) })
}

func (h *Handler) serveAck(w http.ResponseWriter, r *http.Request) {
	t, rp := h.auth(r)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	if !t.Ack {
		h.reply(w, plain(replyAckDisabled))
		return
	}
	chID, rp := channelOf(r, true)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	var req struct {
		Acks []int64 `json:"acks"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil || json.Unmarshal(body, &req) != nil || req.Acks == nil {
		h.reply(w, plain(replyInvalidFormat))
		return
	}
	t.mu.Lock()
	c := t.channels[chID] // only this token's channels: another's are invisible
	t.mu.Unlock()
	out := make(map[string]bool, len(req.Acks))
	for _, id := range req.Acks {
		done := false
		if c != nil {
			c.mu.Lock()
			if a := c.pending[id]; a != nil && a.Durable() {
				done = true
				delete(c.pending, id) // read as true once, then forgotten
				t.pending.Add(-1)
			}
			c.lastUsed = h.cfg.Now()
			c.mu.Unlock()
		}
		out[strconv.FormatInt(id, 10)] = done
	}
	h.requests.WithLabelValues("0").Inc()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"acks": out})
}

func (h *Handler) serveHealth(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Store.Busy() || h.cfg.Store.Err() != nil {
		h.reply(w, plain(replyUnhealthy))
		return
	}
	h.reply(w, plain(replyHealthy))
}
