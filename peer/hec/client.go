package hec

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/valyala/fastjson"
)

// ClientConfig configures the HEC client behind `quarry ingest`.
type ClientConfig struct {
	URL   string // the peer's base URL, e.g. http://127.0.0.1:8088
	Token string
	// Index, Sourcetype, Host, Source are defaults for events that do not
	// name their own (sent as query parameters; envelopes keep theirs).
	Index, Sourcetype, Host, Source string
	Streams                         int // concurrent streams, each with its own channel (default 1)
	Batch                           int // events per request (default 1,000)
	// MaxInFlight bounds unacknowledged requests per stream (default 64).
	MaxInFlight int
	// AckTimeout: a request not acknowledged for this long is sent again
	// on the same channel (default 2 minutes).
	AckTimeout time.Duration
	Timeout    time.Duration // per HTTP request (default 60 s)
	// GiveUpAfter: a request that keeps failing (network errors, 5xx) for
	// this long ends the ingest with an error (default 5 minutes).
	GiveUpAfter time.Duration
	Progress    io.Writer // where the progress bar goes; nil for none
	// TLS verifies an https:// URL's server (nil: Go's defaults).
	TLS *tls.Config
}

// Result sums up an ingest.
type Result struct {
	Events   int64
	Bytes    int64
	Requests int64
	Retries  int64
	Elapsed  time.Duration
}

type batch struct {
	body   []byte
	events int
	raw    bool
	sent   time.Time
}

// Ingest sends files to a HEC endpoint: envelope files (one JSON envelope
// per line, as gen_events.go -format hec writes them) go to /event, any
// other file goes to /raw line by line. It returns once every event is
// acknowledged (or, for a token without acks, accepted).
func Ingest(ctx context.Context, cfg ClientConfig, files []string) (Result, error) {
	if cfg.Streams <= 0 {
		cfg.Streams = 1
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 2 * time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.GiveUpAfter <= 0 {
		cfg.GiveUpAfter = 5 * time.Minute
	}
	var total int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return Result{}, err
		}
		total += st.Size()
	}
	var bar *progressbar.ProgressBar
	if cfg.Progress != nil {
		bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(cfg.Progress),
			progressbar.OptionSetDescription("ingest"), progressbar.OptionShowBytes(true),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionShowCount(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(cfg.Progress) }))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conns := cfg.Streams * (noAckInFlight + 1)
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: time.Minute,
		DisableCompression: true, TLSClientConfig: cfg.TLS}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: cfg.Timeout}
	start := time.Now()
	var res Result
	batches := make(chan *batch, cfg.Streams*2)
	var firstErr error
	var errOnce sync.Once
	setErr := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	var wg sync.WaitGroup
	var events, sentBytes, requests, retries atomic.Int64
	for i := 0; i < cfg.Streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &stream{cfg: cfg, client: client, channel: newChannelID(), pending: map[int64]*batch{}}
			err := s.run(ctx, batches, func(b *batch) {
				events.Add(int64(b.events))
				sentBytes.Add(int64(len(b.body)))
				if bar != nil {
					bar.Add64(int64(len(b.body)))
				}
			})
			requests.Add(s.requests.Load())
			retries.Add(s.retries.Load())
			if err != nil {
				setErr(err)
			}
		}()
	}
	rerr := readBatches(ctx, files, cfg.Batch, batches)
	close(batches)
	wg.Wait()
	if rerr != nil && firstErr == nil && !errors.Is(rerr, context.Canceled) {
		firstErr = rerr
	}
	if bar != nil && firstErr == nil {
		bar.Finish()
	}
	res.Events, res.Bytes, res.Requests, res.Retries = events.Load(), sentBytes.Load(), requests.Load(), retries.Load()
	res.Elapsed = time.Since(start)
	return res, firstErr
}

func newChannelID() string {
	var r [16]byte
	rand.Read(r[:])
	h := hex.EncodeToString(r[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// isEnvelopeLine reports whether a line is a HEC envelope.
func isEnvelopeLine(line []byte) bool {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return false
	}
	v, err := fastjson.ParseBytes(line)
	if err != nil {
		return false
	}
	return v.Type() == fastjson.TypeObject && v.Exists("event")
}

func readBatches(ctx context.Context, files []string, size int, out chan<- *batch) error {
	for _, name := range files {
		if err := readFile(ctx, name, size, out); err != nil {
			return err
		}
	}
	return nil
}

func readFile(ctx context.Context, name string, size int, out chan<- *batch) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	mode := 0 // 0 unknown, 1 envelopes, 2 raw lines
	b := &batch{}
	send := func() error {
		if b.events == 0 {
			return nil
		}
		b.raw = mode == 2
		select {
		case out <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
		b = &batch{body: make([]byte, 0, len(b.body)+len(b.body)/8)}
		return nil
	}
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if mode == 0 {
				mode = 2
				if isEnvelopeLine(line) {
					mode = 1
				}
			}
			// Raw lines are cut into requests only before a line that can
			// start an event, so the peer's line merging (a stack trace under
			// SHOULD_LINEMERGE) never sees one event split across requests.
			if mode == 2 && b.events >= size && (startsEvent(line) || len(b.body) >= maxRawBatchBytes) {
				if err := send(); err != nil {
					return err
				}
			}
			b.body = append(b.body, line...)
			if line[len(line)-1] != '\n' {
				b.body = append(b.body, '\n')
			}
			b.events++
			if mode == 1 && b.events >= size {
				if err := send(); err != nil {
					return err
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
	}
	return send()
}

// maxRawBatchBytes cuts a raw request even inside what looks like one
// long event (a request body must stay well under the peer's limit).
const maxRawBatchBytes = 4 << 20

// startsEvent reports whether a raw line may begin an event: it starts at
// column 0 and is not a stack trace's "Caused by:" or "... N more" line
// (continuation lines of multi-line events are indented).
func startsEvent(line []byte) bool {
	if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
		return false
	}
	return !bytes.HasPrefix(line, []byte("Caused by")) && !bytes.HasPrefix(line, []byte("..."))
}

// stream is one sequence of requests on one channel.
type stream struct {
	cfg      ClientConfig
	client   *http.Client
	channel  string
	pending  map[int64]*batch
	lastPoll time.Time
	requests atomic.Int64
	retries  atomic.Int64
	// noAck: the token answers without ack ids (useack=false), so a 200
	// is the acknowledgement; the stream then keeps up to noAckInFlight
	// requests in flight at once instead of pipelining through acks.
	noAck    bool
	inflight sync.WaitGroup
	sem      chan struct{}
	asyncErr atomic.Pointer[error]
}

// noAckInFlight bounds the concurrent requests of one stream on a token
// without acks (each waits for durability on the server).
const noAckInFlight = 4

type hecAnswer struct {
	Text  string `json:"text"`
	Code  int    `json:"code"`
	AckID *int64 `json:"ackId"`
}

func (s *stream) endpoint(raw bool) string {
	q := url.Values{}
	for k, v := range map[string]string{"index": s.cfg.Index, "sourcetype": s.cfg.Sourcetype, "host": s.cfg.Host, "source": s.cfg.Source} {
		if v != "" {
			q.Set(k, v)
		}
	}
	p := "/services/collector/event"
	if raw {
		p = "/services/collector/raw"
	}
	u := strings.TrimSuffix(s.cfg.URL, "/") + p
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (s *stream) do(ctx context.Context, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Splunk "+s.cfg.Token)
	req.Header.Set("X-Splunk-Request-Channel", s.channel)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// send posts a batch until the server takes it, retrying on the same
// channel after network errors and 5xx answers (busy included).
func (s *stream) send(ctx context.Context, b *batch) (*int64, error) {
	backoff := 20 * time.Millisecond
	first := time.Now()
	for {
		s.requests.Add(1)
		status, body, err := s.do(ctx, s.endpoint(b.raw), b.body)
		if err == nil && status == 200 {
			var a hecAnswer
			if err := json.Unmarshal(body, &a); err != nil {
				return nil, fmt.Errorf("hec answer %q: %w", body, err)
			}
			return a.AckID, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil && status < 500 {
			return nil, fmt.Errorf("hec refused a request: HTTP %d: %s", status, strings.TrimSpace(string(body)))
		}
		if time.Since(first) > s.cfg.GiveUpAfter {
			if err != nil {
				return nil, fmt.Errorf("hec unreachable for %v: %w", s.cfg.GiveUpAfter, err)
			}
			return nil, fmt.Errorf("hec kept answering HTTP %d for %v: %s", status, s.cfg.GiveUpAfter, strings.TrimSpace(string(body)))
		}
		s.retries.Add(1)
		wait := backoff
		if err == nil && status == http.StatusServiceUnavailable {
			// Server is busy (code 9): it is draining its queue, come back
			// soon rather than backing off as after a failure.
			wait = min(backoff, 50*time.Millisecond)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// poll asks for the status of every pending ack and calls done for those
// acknowledged; batches waiting longer than AckTimeout are sent again.
func (s *stream) poll(ctx context.Context, done func(*batch)) error {
	s.lastPoll = time.Now()
	if len(s.pending) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(s.pending))
	for id := range s.pending {
		ids = append(ids, id)
	}
	body, _ := json.Marshal(map[string]any{"acks": ids})
	u := strings.TrimSuffix(s.cfg.URL, "/") + "/services/collector/ack"
	status, rb, err := s.do(ctx, u, body)
	if err != nil || status != 200 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil && status < 500 {
			return fmt.Errorf("hec ack: HTTP %d: %s", status, strings.TrimSpace(string(rb)))
		}
		return nil // try again at the next poll
	}
	var a struct {
		Acks map[string]bool `json:"acks"`
	}
	if err := json.Unmarshal(rb, &a); err != nil {
		return fmt.Errorf("hec ack answer %q: %w", rb, err)
	}
	for _, id := range ids {
		b := s.pending[id]
		if a.Acks[fmt.Sprint(id)] {
			delete(s.pending, id)
			done(b)
		} else if time.Since(b.sent) > s.cfg.AckTimeout {
			delete(s.pending, id)
			if err := s.submit(ctx, b, done); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *stream) submit(ctx context.Context, b *batch, done func(*batch)) error {
	b.sent = time.Now()
	id, err := s.send(ctx, b)
	if err != nil {
		return err
	}
	if id == nil {
		s.noAck = true // a token without acks: the 200 is the acknowledgement
		done(b)
		return nil
	}
	s.pending[*id] = b
	return nil
}

// submitAsync sends a batch of a token without acks on its own goroutine,
// at most noAckInFlight at once.
func (s *stream) submitAsync(ctx context.Context, b *batch, done func(*batch)) error {
	if p := s.asyncErr.Load(); p != nil {
		return *p
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		defer func() { <-s.sem }()
		b.sent = time.Now()
		id, err := s.send(ctx, b)
		if err == nil && id != nil {
			err = fmt.Errorf("hec: the token answered with an ack id after answering without one")
		}
		if err != nil {
			s.asyncErr.CompareAndSwap(nil, &err)
			return
		}
		done(b)
	}()
	return nil
}

func (s *stream) run(ctx context.Context, in <-chan *batch, done func(*batch)) error {
	const pollEvery = 50 * time.Millisecond
	s.sem = make(chan struct{}, noAckInFlight)
	defer s.inflight.Wait()
	for b := range in {
		if s.noAck {
			if err := s.submitAsync(ctx, b, done); err != nil {
				return err
			}
			continue
		}
		if err := s.submit(ctx, b, done); err != nil {
			return err
		}
		if time.Since(s.lastPoll) >= pollEvery {
			if err := s.poll(ctx, done); err != nil {
				return err
			}
		}
		for len(s.pending) >= s.cfg.MaxInFlight {
			select {
			case <-time.After(pollEvery):
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := s.poll(ctx, done); err != nil {
				return err
			}
		}
	}
	for len(s.pending) > 0 {
		select {
		case <-time.After(pollEvery):
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.poll(ctx, done); err != nil {
			return err
		}
	}
	s.inflight.Wait()
	if p := s.asyncErr.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}
