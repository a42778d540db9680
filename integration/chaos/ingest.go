package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/integration/proccluster"
)

// A request is one HEC request of the run: Events events whose _raw all
// hold the run's marker and `req=<ID>`, sent with an Idempotency-Key.
type request struct {
	ID      string
	Key     string // Idempotency-Key
	Events  int
	SentAt  time.Time // the first send began
	AckedAt time.Time // zero until acknowledged
	Peer    string    // the peer that acknowledged it (or was last tried)
	Retried bool      // sent again with the same key after its first peer was killed
	Err     string    // why it was not acknowledged
}

// ledger is every request of the run, in the order they were begun.
type ledger struct {
	mu   sync.Mutex
	reqs []*request
	byID map[string]*request
	seq  int
	run  string
}

func newLedger(run string) *ledger { return &ledger{byID: map[string]*request{}, run: run} }

// begin registers a new request of n events and returns it.
func (l *ledger) begin(n int) *request {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	var k [8]byte
	crand.Read(k[:])
	r := &request{ID: fmt.Sprintf("r%06d", l.seq), Key: l.run + "-" + hex.EncodeToString(k[:]), Events: n, SentAt: time.Now()}
	l.reqs = append(l.reqs, r)
	l.byID[r.ID] = r
	return r
}

func (l *ledger) acked(r *request, peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.AckedAt, r.Peer, r.Err = time.Now(), peer, ""
}

func (l *ledger) failed(r *request, peer string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Peer, r.Err = peer, err.Error()
}

// bounds are what a search begun at t0 and answered at t1 must count: at
// least the events acknowledged before t0-grace, at most those of every
// request begun before t1 (each request counted once, retried or not).
func (l *ledger) bounds(t0, t1 time.Time, grace time.Duration) (min, max int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cut := t0.Add(-grace)
	for _, r := range l.reqs {
		if !r.AckedAt.IsZero() && r.AckedAt.Before(cut) {
			min += r.Events
		}
		if r.SentAt.Before(t1) {
			max += r.Events
		}
	}
	return min, max
}

// snapshot copies every request.
func (l *ledger) snapshot() []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]request, len(l.reqs))
	for i, r := range l.reqs {
		out[i] = *r
	}
	return out
}

func (l *ledger) ackedCount() (reqs, events int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.reqs {
		if !r.AckedAt.IsZero() {
			reqs++
			events += r.Events
		}
	}
	return
}

// hecClient speaks HEC with acks to the peers: one channel per peer.
type hecClient struct {
	token    string
	run      string
	http     *http.Client
	channels map[string]string // peer URL → channel
}

func newHECClient(token, run string) *hecClient {
	return &hecClient{token: token, run: run, http: &http.Client{Timeout: 15 * time.Second}, channels: map[string]string{}}
}

func newChannel() string {
	var r [16]byte
	crand.Read(r[:])
	h := hex.EncodeToString(r[:])
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
}

func (h *hecClient) channel(url string) string {
	ch, ok := h.channels[url]
	if !ok {
		ch = newChannel()
		h.channels[url] = ch
	}
	return ch
}

// body is the request's envelopes; the same bytes on every retry.
func (h *hecClient) body(r *request) []byte {
	var b bytes.Buffer
	ts := float64(r.SentAt.UnixMicro()) / 1e6
	for i := 0; i < r.Events; i++ {
		ev := map[string]any{"time": ts, "index": "main", "sourcetype": "chaos",
			"event": fmt.Sprintf("chaos %s req=%s i=%d %s", h.run, r.ID, i, strings.Repeat("x", 40))}
		e, _ := json.Marshal(ev)
		b.Write(e)
	}
	return b.Bytes()
}

// send posts r to the peer at url and returns its ack id.
func (h *hecClient) send(ctx context.Context, url string, r *request) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/services/collector/event", bytes.NewReader(h.body(r)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Splunk "+h.token)
	req.Header.Set("X-Splunk-Request-Channel", h.channel(url))
	req.Header.Set("Idempotency-Key", r.Key)
	res, err := h.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var ans struct {
		Text  string `json:"text"`
		Code  int    `json:"code"`
		AckID *int64 `json:"ackId"`
	}
	if err := json.NewDecoder(res.Body).Decode(&ans); err != nil {
		return 0, fmt.Errorf("HEC answer (HTTP %d): %w", res.StatusCode, err)
	}
	if res.StatusCode == http.StatusServiceUnavailable {
		return 0, fmt.Errorf("%w: code %d %q", errBusy, ans.Code, ans.Text)
	}
	if res.StatusCode != http.StatusOK || ans.AckID == nil {
		return 0, fmt.Errorf("HEC answered HTTP %d code %d %q", res.StatusCode, ans.Code, ans.Text)
	}
	return *ans.AckID, nil
}

// errBusy is a HEC 503: the server asks the client to send again (code 9,
// e.g. a key another peer is storing or holding).
var errBusy = errors.New("HEC answered 503")

// sendRetrying sends r as a shipper with a key does: a 503 answer is sent
// again after 200 ms, until d passes.
func (h *hecClient) sendRetrying(ctx context.Context, url string, r *request, d time.Duration) (int64, error) {
	deadline := time.Now().Add(d)
	for {
		id, err := h.send(ctx, url, r)
		if !errors.Is(err, errBusy) || time.Now().After(deadline) {
			return id, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitAck polls the ack of id on url's channel until it is true, the
// peer fails, or d passes.
func (h *hecClient) waitAck(ctx context.Context, url string, id int64, d time.Duration) error {
	body, _ := json.Marshal(map[string]any{"acks": []int64{id}})
	return proccluster.WaitFor(ctx, d, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/services/collector/ack", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Splunk "+h.token)
		req.Header.Set("X-Splunk-Request-Channel", h.channel(url))
		res, err := h.http.Do(req)
		if err != nil {
			return fmt.Errorf("ack poll: %w", err)
		}
		defer res.Body.Close()
		var ans struct {
			Acks map[string]bool `json:"acks"`
		}
		if err := json.NewDecoder(res.Body).Decode(&ans); err != nil || res.StatusCode != http.StatusOK {
			return fmt.Errorf("ack poll: HTTP %d: %v", res.StatusCode, err)
		}
		if !ans.Acks[fmt.Sprint(id)] {
			return fmt.Errorf("ack %d not yet true", id)
		}
		return nil
	})
}

// ackTimeout is how long a client waits for an ack before it gives the
// request up (unknown: stored or not).
const ackTimeout = 30 * time.Second

// ingester runs the workers: each sends a request to a random peer, waits
// for its ack, and goes on. A request that fails is not retried (a retry
// could store it twice without Idempotency-Key); the hec-retry fault
// retries on purpose.
type ingester struct {
	// abort ends requests under way (an interrupt); the context given to
	// start only stops new ones.
	abort  context.Context
	cl     *proccluster.Cluster
	led    *ledger
	events int
	log    *slog.Logger
	wg     sync.WaitGroup
}

func (in *ingester) start(ctx context.Context, workers int, seed uint64) {
	for w := 0; w < workers; w++ {
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			h := newHECClient(in.cl.Opts.HECToken, in.led.run)
			for ctx.Err() == nil {
				p := in.cl.Peers[rng.IntN(len(in.cl.Peers))]
				in.one(ctx, h, p)
			}
		}()
	}
}

// one sends one request through peer p and waits for its ack. ctx only
// bounds the start: a request once sent is followed to its end (unless
// the run is aborted), so the run's end leaves no request half known.
func (in *ingester) one(ctx context.Context, h *hecClient, p *proccluster.Proc) {
	r := in.led.begin(in.events)
	wctx := in.abort
	id, err := h.send(wctx, p.URL, r)
	if err == nil {
		err = h.waitAck(wctx, p.URL, id, ackTimeout)
	}
	if err != nil {
		in.led.failed(r, p.Name, err)
		in.log.Debug("request not acknowledged", "req", r.ID, "peer", p.Name, "err", err)
		select { // pace: a refused peer answers at once
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		return
	}
	in.led.acked(r, p.Name)
}

func (in *ingester) wait() { in.wg.Wait() }

// hecRetry is a shipper's retry after its peer died: a request goes to
// peer A with an Idempotency-Key, A is SIGKILLed 0-300 ms after the send
// began (before, while or after it stores and replicates), and the same
// request with the same key goes to peer B until B acknowledges it. A is
// restarted. The request must be stored exactly once.
func (f *faulter) hecRetry(ctx context.Context, ft *fault) error {
	a := f.pick(f.cl.Peers)
	var others []*proccluster.Proc
	for _, p := range f.cl.Peers {
		if p != a {
			others = append(others, p)
		}
	}
	b := f.pick(others)
	delay := f.outage(0, 300*time.Millisecond)
	ft.Target = a.Name
	f.cover(ctx, ft, notOn(a.Name))
	r := f.led.begin(f.events)
	h := newHECClient(f.cl.Opts.HECToken, f.led.run)
	first := make(chan error, 1)
	ft.Start = time.Now()
	go func() {
		_, err := h.send(context.WithoutCancel(ctx), a.URL, r)
		first <- err
	}()
	hold(ctx, delay)
	if err := a.Kill(); err != nil {
		return err
	}
	ferr := <-first
	f.led.mu.Lock()
	r.Retried = true
	f.led.mu.Unlock()
	ft.Detail = fmt.Sprintf("%s killed %s after the send to it began (its answer: %v); retried to %s", r.ID, delay.Round(time.Millisecond), errOrOK(ferr), b.Name)
	id, err := h.sendRetrying(context.WithoutCancel(ctx), b.URL, r, ackTimeout)
	if err == nil {
		err = h.waitAck(context.WithoutCancel(ctx), b.URL, id, ackTimeout)
	}
	if err != nil {
		f.led.failed(r, b.Name, err)
		ft.Detail += fmt.Sprintf("; the retry was not acknowledged: %v", err)
	} else {
		f.led.acked(r, b.Name)
	}
	f.cover(ctx, ft, notOn(a.Name))
	return a.Start()
}

func errOrOK(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}
