package bus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/quarry-dev/quarry/bus/wire"
)

// Stream defaults (see DESIGN.md, "Flow control").
const (
	DefaultChunkSize   = 128 << 10
	DefaultWindow      = 16
	DefaultHeartbeat   = time.Second
	DefaultIdleTimeout = 5 * time.Second

	// StreamVersion is the version of the stream protocol (frames and
	// Invite). A peer refuses an Invite of another version.
	StreamVersion = 1

	frameHeaderLen = 15
)

// Stream errors. Every failure of a stream wraps exactly one of these.
var (
	// ErrStreamStalled: the other end went silent for the idle timeout
	// (it died, its connection or the path between us broke).
	ErrStreamStalled = errors.New("stream stalled")
	// ErrStreamGap: a chunk is missing or out of order (a message was lost).
	ErrStreamGap = errors.New("stream chunk missing or out of order")
	// ErrStreamCorrupt: a chunk failed its checksum or a frame is malformed.
	ErrStreamCorrupt = errors.New("stream chunk corrupt")
	// ErrStreamAborted: the other end aborted the stream; the message
	// carries its reason.
	ErrStreamAborted = errors.New("stream aborted by the other end")
	// ErrStreamProtocol: the other end broke the protocol (more chunks than
	// credits, data before hello, unknown version).
	ErrStreamProtocol = errors.New("stream protocol violation")
	// ErrMessageTooLarge: a message passed the receiver's MaxMessage.
	ErrMessageTooLarge = errors.New("stream message too large")
	// ErrStreamClosed: the stream was closed locally.
	ErrStreamClosed = errors.New("stream closed")
)

type frameKind byte

const (
	kindHello  frameKind = iota + 1 // sender → receiver: payload = control inbox
	kindData                        // sender → receiver: seq, crc, flags, payload
	kindPing                        // sender → receiver: seq = next seq to send
	kindEnd                         // sender → receiver: seq = number of chunks
	kindAbort                       // either way: payload = reason
	kindCredit                      // receiver → sender: seq = credit limit
	kindDone                        // receiver → sender: seq = chunks received
)

const flagEOM = 1 // last chunk of a message

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame is one stream message:
//
//	[0] version  [1] kind  [2] flags  [3:11] seq (big endian)  [11:15] crc32c(payload)  [15:] payload
type frame struct {
	kind    frameKind
	flags   byte
	seq     uint64
	payload []byte
}

func (f frame) encode() []byte {
	b := make([]byte, frameHeaderLen+len(f.payload))
	b[0] = StreamVersion
	b[1] = byte(f.kind)
	b[2] = f.flags
	binary.BigEndian.PutUint64(b[3:11], f.seq)
	binary.BigEndian.PutUint32(b[11:15], crc32.Checksum(f.payload, castagnoli))
	copy(b[frameHeaderLen:], f.payload)
	return b
}

// decodeFrame parses and verifies a frame; the payload aliases b.
func decodeFrame(b []byte) (frame, error) {
	if len(b) < frameHeaderLen {
		return frame{}, fmt.Errorf("%w: frame of %d bytes, header needs %d", ErrStreamCorrupt, len(b), frameHeaderLen)
	}
	if b[0] != StreamVersion {
		return frame{}, fmt.Errorf("%w: frame version %d, want %d", ErrStreamProtocol, b[0], StreamVersion)
	}
	f := frame{kind: frameKind(b[1]), flags: b[2], seq: binary.BigEndian.Uint64(b[3:11]), payload: b[frameHeaderLen:]}
	if f.kind < kindHello || f.kind > kindDone {
		return frame{}, fmt.Errorf("%w: unknown frame kind %d", ErrStreamProtocol, f.kind)
	}
	if got, want := crc32.Checksum(f.payload, castagnoli), binary.BigEndian.Uint32(b[11:15]); got != want {
		return frame{}, fmt.Errorf("%w: %s frame seq %d: crc32c %08x, header says %08x", ErrStreamCorrupt, f.kind, f.seq, got, want)
	}
	return f, nil
}

func (k frameKind) String() string {
	switch k {
	case kindHello:
		return "hello"
	case kindData:
		return "data"
	case kindPing:
		return "ping"
	case kindEnd:
		return "end"
	case kindAbort:
		return "abort"
	case kindCredit:
		return "credit"
	case kindDone:
		return "done"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// StreamOptions configure a receiver (which dictates them to its sender
// through the Invite). Zero fields take the defaults.
type StreamOptions struct {
	// ChunkSize is the most data bytes per chunk (default 128 KiB, capped
	// to the connection's max payload less the frame header).
	ChunkSize int
	// Window is the number of chunks the sender may have in flight beyond
	// what the consumer has taken (default 16).
	Window int
	// Heartbeat is how often each end proves it is alive (default 1 s).
	Heartbeat time.Duration
	// IdleTimeout ends the stream with ErrStreamStalled when nothing came
	// from the other end for that long (default 5 s).
	IdleTimeout time.Duration
	// MaxMessage caps one whole message Receiver.Next assembles, in bytes
	// (0: no cap): past it the stream ends with ErrMessageTooLarge and is
	// aborted, so a sender cannot make its receiver hold an unbounded
	// message (review M1).
	MaxMessage int
	// InviteOnSameConn: the caller publishes the invite on the receiver's
	// own connection, after NewReceiver returns (a search head's request
	// to its peer). The server reads a connection in order, so the
	// subscription is in place before the invite leaves, and NewReceiver
	// skips the flush (a round trip to the server) it otherwise makes
	// so that an invite sent any other way finds the subscription.
	InviteOnSameConn bool
}

func (o StreamOptions) withDefaults(nc *nats.Conn) StreamOptions {
	if o.ChunkSize <= 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if max := int(nc.MaxPayload()) - frameHeaderLen - 1024; max > 0 && o.ChunkSize > max {
		o.ChunkSize = max
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.IdleTimeout < 2*o.Heartbeat {
		o.IdleTimeout = 2 * o.Heartbeat
	}
	return o
}

// Invite tells a sender where and how to send a stream (wire.Invite).
type Invite = wire.Invite

func validateInvite(inv Invite) error {
	if inv.Version != StreamVersion {
		return fmt.Errorf("%w: invite version %d, want %d", ErrStreamProtocol, inv.Version, StreamVersion)
	}
	if inv.Inbox == "" || inv.Window <= 0 || inv.ChunkSize <= 0 || inv.HeartbeatMs <= 0 || inv.IdleMs <= 0 {
		return fmt.Errorf("%w: incomplete invite %+v", ErrStreamProtocol, inv)
	}
	return nil
}

// Chunk is one piece of a stream as the consumer receives it.
type Chunk struct {
	Seq  uint64
	Data []byte
	EOM  bool // last chunk of a message
}

// Receiver is the receiving end of a stream: it verifies and orders chunks,
// buffers at most Window of them, and grants the sender a new credit as its
// consumer takes chunks. One goroutine consumes it.
type Receiver struct {
	nc   *nats.Conn
	opts StreamOptions
	sub  *nats.Subscription
	inv  Invite

	mu        sync.Mutex
	queue     []Chunk
	next      uint64 // next seq expected from the sender
	consumed  uint64 // next seq handed to the consumer
	sentGrant uint64 // last credit limit sent
	ctrl      string // the sender's control inbox, known after hello
	ended     bool
	err       error
	lastHeard time.Time
	maxQueued int
	closed    bool
	partial   []byte // message reassembly for Next

	notify chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
}

// NewReceiver opens a receiving end whose sender starts at chunk resume
// (0 for a fresh stream). Hand Invite() to the sender.
func NewReceiver(nc *nats.Conn, resume uint64, o StreamOptions) (*Receiver, error) {
	o = o.withDefaults(nc)
	r := &Receiver{
		nc: nc, opts: o,
		next: resume, consumed: resume, sentGrant: resume + uint64(o.Window),
		lastHeard: time.Now(),
		notify:    make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	inbox := nc.NewInbox()
	sub, err := nc.Subscribe(inbox, r.onFrame)
	if err != nil {
		return nil, fmt.Errorf("stream receiver: subscribe: %w", err)
	}
	// Credits bound what is pending; lift the client's own pending limits
	// so they can never drop a chunk before the credit check sees it.
	_ = sub.SetPendingLimits(-1, -1)
	if !o.InviteOnSameConn {
		if err := nc.Flush(); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("stream receiver: flush: %w", err)
		}
	}
	r.sub = sub
	r.inv = Invite{
		Version: StreamVersion, Inbox: inbox, Resume: resume, Window: o.Window, ChunkSize: o.ChunkSize,
		HeartbeatMs: o.Heartbeat.Milliseconds(), IdleMs: o.IdleTimeout.Milliseconds(),
	}
	r.wg.Add(1)
	go r.heartbeat()
	return r, nil
}

// Invite is what the sender needs to send to this receiver.
func (r *Receiver) Invite() Invite { return r.inv }

// MaxBuffered is the most chunks the receiver ever held for its consumer
// (never more than the window; for tests and metrics).
func (r *Receiver) MaxBuffered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxQueued
}

func (r *Receiver) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// failLocked records the first error; local failures tell the sender.
func (r *Receiver) failLocked(err error, tellSender bool) {
	if r.err != nil {
		return
	}
	r.err = err
	streamFailure("receiver", err)
	if tellSender && r.ctrl != "" {
		_ = r.nc.Publish(r.ctrl, frame{kind: kindAbort, payload: []byte(err.Error())}.encode())
	}
	r.signal()
}

func (r *Receiver) onFrame(m *nats.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || r.closed {
		return
	}
	r.lastHeard = time.Now()
	f, err := decodeFrame(m.Data)
	if err != nil {
		r.failLocked(fmt.Errorf("stream %s: %w", r.inv.Inbox, err), true)
		return
	}
	if f.kind != kindHello && f.kind != kindAbort && r.ctrl == "" {
		r.failLocked(fmt.Errorf("stream %s: %w: %s frame before hello", r.inv.Inbox, ErrStreamProtocol, f.kind), false)
		return
	}
	switch f.kind {
	case kindHello:
		// The sender repeats its hello until it hears from us (see
		// NewSender); a repeat is answered again, another sender refused.
		if r.ctrl != "" && r.ctrl != string(f.payload) {
			r.failLocked(fmt.Errorf("stream %s: %w: hello from a second sender", r.inv.Inbox, ErrStreamProtocol), true)
			return
		}
		r.ctrl = string(f.payload)
		_ = r.nc.Publish(r.ctrl, frame{kind: kindCredit, seq: r.sentGrant}.encode())
	case kindData:
		switch {
		case r.ended:
			r.failLocked(fmt.Errorf("stream %s: %w: data after end", r.inv.Inbox, ErrStreamProtocol), true)
		case f.seq != r.next:
			r.failLocked(fmt.Errorf("stream %s: %w: expected chunk %d, got %d", r.inv.Inbox, ErrStreamGap, r.next, f.seq), true)
		case f.seq >= r.consumed+uint64(r.opts.Window):
			r.failLocked(fmt.Errorf("stream %s: %w: chunk %d beyond credit limit %d", r.inv.Inbox, ErrStreamProtocol, f.seq, r.consumed+uint64(r.opts.Window)), true)
		default:
			r.next++
			metricStreamBytes.WithLabelValues("received").Add(float64(len(f.payload)))
			r.queue = append(r.queue, Chunk{Seq: f.seq, Data: f.payload, EOM: f.flags&flagEOM != 0})
			r.maxQueued = max(r.maxQueued, len(r.queue))
			r.signal()
		}
	case kindPing:
		if f.seq != r.next {
			r.failLocked(fmt.Errorf("stream %s: %w: sender is at chunk %d, received up to %d", r.inv.Inbox, ErrStreamGap, f.seq, r.next), true)
		}
	case kindEnd:
		if f.seq != r.next {
			r.failLocked(fmt.Errorf("stream %s: %w: sender ended at chunk %d, received up to %d", r.inv.Inbox, ErrStreamGap, f.seq, r.next), true)
			return
		}
		r.ended = true
		r.signal()
	case kindAbort:
		r.failLocked(fmt.Errorf("stream %s: %w: %s", r.inv.Inbox, ErrStreamAborted, f.payload), false)
	default:
		r.failLocked(fmt.Errorf("stream %s: %w: unexpected %s frame", r.inv.Inbox, ErrStreamProtocol, f.kind), true)
	}
}

func (r *Receiver) heartbeat() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		if r.err == nil {
			if silent := time.Since(r.lastHeard); silent > r.opts.IdleTimeout {
				r.failLocked(fmt.Errorf("stream %s: %w: nothing from the sender for %s", r.inv.Inbox, ErrStreamStalled, silent.Round(time.Millisecond)), true)
			} else if r.ctrl != "" {
				_ = r.nc.Publish(r.ctrl, frame{kind: kindCredit, seq: r.sentGrant}.encode())
			}
		}
		r.mu.Unlock()
	}
}

// NextChunk returns the next chunk in order, io.EOF after the last one, or
// the stream's error once every verified chunk before it was taken.
func (r *Receiver) NextChunk(ctx context.Context) (Chunk, error) {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return Chunk{}, ErrStreamClosed
		}
		if len(r.queue) > 0 {
			c := r.queue[0]
			r.queue[0] = Chunk{}
			r.queue = r.queue[1:]
			r.consumed++
			// Grant more once a quarter of the window was drained, so
			// credits cost one small message per few chunks.
			limit := r.consumed + uint64(r.opts.Window)
			if r.ctrl != "" && r.err == nil && (limit-r.sentGrant) >= uint64(max(1, r.opts.Window/4)) {
				r.sentGrant = limit
				_ = r.nc.Publish(r.ctrl, frame{kind: kindCredit, seq: limit}.encode())
			}
			r.mu.Unlock()
			return c, nil
		}
		if r.err != nil {
			err := r.err
			r.mu.Unlock()
			return Chunk{}, err
		}
		if r.ended {
			r.mu.Unlock()
			return Chunk{}, io.EOF
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-ctx.Done():
			return Chunk{}, fmt.Errorf("stream %s: %w", r.inv.Inbox, ctx.Err())
		}
	}
}

// Next returns the next whole message (chunks up to one marked EOM).
func (r *Receiver) Next(ctx context.Context) ([]byte, error) {
	for {
		c, err := r.NextChunk(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) && len(r.partial) > 0 {
				return nil, fmt.Errorf("stream %s: %w: ended inside a message", r.inv.Inbox, ErrStreamProtocol)
			}
			return nil, err
		}
		if c.EOM && r.partial == nil {
			return c.Data, nil
		}
		if max := r.opts.MaxMessage; max > 0 && len(r.partial)+len(c.Data) > max {
			err := fmt.Errorf("stream %s: %w: a message of more than %d bytes", r.inv.Inbox, ErrMessageTooLarge, max)
			r.partial = nil
			r.Close(err)
			return nil, err
		}
		r.partial = append(r.partial, c.Data...)
		if c.EOM {
			msg := r.partial
			r.partial = nil
			return msg, nil
		}
	}
}

// Reader returns an io.Reader over the stream's bytes (message boundaries
// ignored). Reads end with io.EOF or the stream's error; they never hang
// longer than the idle timeout, and end when ctx does.
func (r *Receiver) Reader(ctx context.Context) io.Reader { return &streamReader{r: r, ctx: ctx} }

type streamReader struct {
	r   *Receiver
	ctx context.Context
	buf []byte
}

func (sr *streamReader) Read(p []byte) (int, error) {
	for len(sr.buf) == 0 {
		c, err := sr.r.NextChunk(sr.ctx)
		if err != nil {
			return 0, err
		}
		sr.buf = c.Data
	}
	n := copy(p, sr.buf)
	sr.buf = sr.buf[n:]
	return n, nil
}

// Close ends the receiving end. With err == nil after io.EOF it confirms
// the stream to the sender (Done: every chunk was taken); otherwise it
// aborts the stream with err (or "receiver closed") as the reason. Close is
// idempotent; it stops the heartbeat and unsubscribes.
func (r *Receiver) Close(err error) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	var out []byte
	if r.ctrl != "" && r.err == nil {
		if err == nil && r.ended && len(r.queue) == 0 {
			out = frame{kind: kindDone, seq: r.next}.encode()
		} else {
			if err == nil {
				err = errors.New("receiver closed before the end")
			}
			out = frame{kind: kindAbort, payload: []byte(err.Error())}.encode()
		}
	}
	r.mu.Unlock()
	close(r.stop)
	r.wg.Wait()
	var perr error
	if out != nil {
		if perr = r.nc.Publish(r.ctrl, out); perr == nil {
			perr = r.nc.Flush()
		}
	}
	_ = r.sub.Unsubscribe()
	if perr != nil {
		return fmt.Errorf("stream %s: close: %w", r.inv.Inbox, perr)
	}
	return nil
}

// Sender is the sending end of a stream. It sends a chunk only while it
// holds a credit; one goroutine drives it.
type Sender struct {
	nc  *nats.Conn
	inv Invite
	sub *nats.Subscription

	sendMu sync.Mutex // orders every frame this end publishes

	mu        sync.Mutex
	granted   uint64 // may send chunks with seq < granted
	next      uint64
	err       error
	done      bool
	closed    bool
	lastHeard time.Time
	heard     bool   // the receiver answered the hello
	buf       []byte // Write's partial chunk
	limiter   *rate.Limiter

	notify chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
}

// NewSender starts sending to the receiver that made inv. It returns once
// the receiver has answered its hello — the handshake costs one round trip
// and is what makes a fresh stream safe across gateways: in interest-only
// mode a remote site learns of a new inbox asynchronously, so the first
// frames either way may be dropped. The hello is re-sent (10 ms doubling to
// 250 ms) until the receiver's first credit arrives, so both inboxes are
// known on both sides before any chunk is sent. It fails with
// ErrStreamStalled if that takes longer than the idle timeout.
func NewSender(ctx context.Context, nc *nats.Conn, inv Invite) (*Sender, error) {
	if err := validateInvite(inv); err != nil {
		return nil, err
	}
	if limit := int(nc.MaxPayload()) - frameHeaderLen; inv.ChunkSize > limit {
		return nil, fmt.Errorf("%w: chunk size %d exceeds this connection's max payload %d", ErrStreamProtocol, inv.ChunkSize, limit)
	}
	s := &Sender{
		nc: nc, inv: inv,
		granted: inv.Resume, next: inv.Resume,
		lastHeard: time.Now(),
		notify:    make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	ctrl := nc.NewInbox()
	sub, err := nc.Subscribe(ctrl, s.onFrame)
	if err != nil {
		return nil, fmt.Errorf("stream sender: subscribe: %w", err)
	}
	s.sub = sub
	// No flush before the hello (a round trip to the server): the
	// subscription goes out on nc before the hello does, and the server
	// reads a connection in order, so the credit answering the hello finds
	// it; across a gateway a lost hello or credit is re-sent below.
	hello := frame{kind: kindHello, payload: []byte(ctrl)}.encode()
	idle := time.NewTimer(time.Duration(inv.IdleMs) * time.Millisecond)
	defer idle.Stop()
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 250*time.Millisecond) {
		if err := nc.Publish(inv.Inbox, hello); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("stream %s: hello: %w", inv.Inbox, err)
		}
		retry := time.NewTimer(backoff)
		select {
		case <-s.notify:
		case <-retry.C:
		case <-idle.C:
			s.mu.Lock()
			s.failLocked(fmt.Errorf("stream %s: %w: no answer to hello within %dms", inv.Inbox, ErrStreamStalled, inv.IdleMs), true)
			s.mu.Unlock()
		case <-ctx.Done():
			s.mu.Lock()
			s.failLocked(fmt.Errorf("stream %s: hello: %w", inv.Inbox, ctx.Err()), true)
			s.mu.Unlock()
		}
		retry.Stop()
		s.mu.Lock()
		heard, err := s.heard, s.err
		s.mu.Unlock()
		if err != nil {
			_ = sub.Unsubscribe()
			return nil, err
		}
		if heard {
			break
		}
	}
	s.wg.Add(1)
	go s.heartbeat()
	return s, nil
}

// Resume is the first chunk seq the receiver wants: a resumable source
// starts reading at Resume()*ChunkSize().
func (s *Sender) Resume() uint64 { return s.inv.Resume }

// ChunkSize is the most data bytes per chunk.
func (s *Sender) ChunkSize() int { return s.inv.ChunkSize }

// Sent is the seq of the next chunk (chunks sent, counting from 0).
func (s *Sender) Sent() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

func (s *Sender) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Sender) failLocked(err error, tellReceiver bool) {
	if s.err != nil {
		return
	}
	s.err = err
	streamFailure("sender", err)
	if tellReceiver {
		_ = s.nc.Publish(s.inv.Inbox, frame{kind: kindAbort, payload: []byte(err.Error())}.encode())
	}
	s.signal()
}

func (s *Sender) onFrame(m *nats.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.lastHeard = time.Now()
	f, err := decodeFrame(m.Data)
	if err != nil {
		s.failLocked(fmt.Errorf("stream %s: %w", s.inv.Inbox, err), true)
		return
	}
	if !s.heard {
		s.heard = true
		s.signal()
	}
	switch f.kind {
	case kindCredit:
		if f.seq > s.granted {
			s.granted = f.seq
			s.signal()
		}
	case kindDone:
		if f.seq != s.next {
			s.failLocked(fmt.Errorf("stream %s: %w: receiver confirmed %d chunks, sent %d", s.inv.Inbox, ErrStreamGap, f.seq, s.next), false)
			return
		}
		s.done = true
		s.signal()
	case kindAbort:
		s.failLocked(fmt.Errorf("stream %s: %w: %s", s.inv.Inbox, ErrStreamAborted, f.payload), false)
	default:
		s.failLocked(fmt.Errorf("stream %s: %w: unexpected %s frame", s.inv.Inbox, ErrStreamProtocol, f.kind), true)
	}
}

func (s *Sender) heartbeat() {
	defer s.wg.Done()
	idle := time.Duration(s.inv.IdleMs) * time.Millisecond
	t := time.NewTicker(time.Duration(s.inv.HeartbeatMs) * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.sendMu.Lock()
		s.mu.Lock()
		if s.err == nil {
			if silent := time.Since(s.lastHeard); silent > idle {
				s.failLocked(fmt.Errorf("stream %s: %w: nothing from the receiver for %s", s.inv.Inbox, ErrStreamStalled, silent.Round(time.Millisecond)), true)
			} else {
				_ = s.nc.Publish(s.inv.Inbox, frame{kind: kindPing, seq: s.next}.encode())
			}
		}
		s.mu.Unlock()
		s.sendMu.Unlock()
	}
}

// Throttle limits this sender to bytesPerSecond of payload (0: no limit),
// so that a warm-bucket copy leaves ingest and search their share of disk
// and network (SPEC §4). Call it before sending.
func (s *Sender) Throttle(bytesPerSecond int) {
	if bytesPerSecond <= 0 {
		s.limiter = nil
		return
	}
	s.limiter = rate.NewLimiter(rate.Limit(bytesPerSecond), max(bytesPerSecond/10, s.inv.ChunkSize))
}

// SendChunk sends one chunk (at most ChunkSize bytes), waiting for a credit
// (and for the throttle, if any).
func (s *Sender) SendChunk(ctx context.Context, data []byte, eom bool) error {
	if len(data) > s.inv.ChunkSize {
		return fmt.Errorf("stream %s: chunk of %d bytes exceeds chunk size %d", s.inv.Inbox, len(data), s.inv.ChunkSize)
	}
	if s.limiter != nil && len(data) > 0 {
		if err := s.limiter.WaitN(ctx, len(data)); err != nil {
			return fmt.Errorf("stream %s: throttle: %w", s.inv.Inbox, err)
		}
	}
	var flags byte
	if eom {
		flags = flagEOM
	}
	for {
		s.mu.Lock()
		switch {
		case s.err != nil:
			err := s.err
			s.mu.Unlock()
			return err
		case s.closed:
			s.mu.Unlock()
			return ErrStreamClosed
		case s.next < s.granted:
			s.mu.Unlock()
			s.sendMu.Lock()
			s.mu.Lock()
			seq := s.next
			s.next++
			s.mu.Unlock()
			err := s.nc.Publish(s.inv.Inbox, frame{kind: kindData, flags: flags, seq: seq, payload: data}.encode())
			s.sendMu.Unlock()
			if err != nil {
				s.mu.Lock()
				s.failLocked(fmt.Errorf("stream %s: send chunk %d: %w", s.inv.Inbox, seq, err), false)
				s.mu.Unlock()
				return err
			}
			metricStreamBytes.WithLabelValues("sent").Add(float64(len(data)))
			return nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return fmt.Errorf("stream %s: waiting for credit: %w", s.inv.Inbox, ctx.Err())
		}
	}
}

// Send sends one message, split into chunks, the last marked EOM.
func (s *Sender) Send(ctx context.Context, msg []byte) error {
	for {
		n := min(len(msg), s.inv.ChunkSize)
		if err := s.SendChunk(ctx, msg[:n], n == len(msg)); err != nil {
			return err
		}
		msg = msg[n:]
		if len(msg) == 0 {
			return nil
		}
	}
}

// Write implements io.Writer for byte streams: it sends full chunks and
// keeps the rest for the next Write or Close. Waiting for credits ends with
// the stream's error (a silent receiver stalls it), never hangs.
func (s *Sender) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		take := min(len(p), s.inv.ChunkSize-len(s.buf))
		s.buf = append(s.buf, p[:take]...)
		p = p[take:]
		if len(s.buf) == s.inv.ChunkSize {
			if err := s.SendChunk(context.Background(), s.buf, true); err != nil {
				return 0, err
			}
			s.buf = s.buf[:0:0]
		}
	}
	return n, nil
}

// Close sends what Write kept, ends the stream and waits until the
// receiver confirms it took every chunk (or ctx ends, or the stream fails).
func (s *Sender) Close(ctx context.Context) error {
	defer s.shutdown()
	if len(s.buf) > 0 {
		if err := s.SendChunk(ctx, s.buf, true); err != nil {
			return err
		}
		s.buf = nil
	}
	s.sendMu.Lock()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		s.sendMu.Unlock()
		return err
	}
	end := frame{kind: kindEnd, seq: s.next}
	s.mu.Unlock()
	err := s.nc.Publish(s.inv.Inbox, end.encode())
	s.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("stream %s: end: %w", s.inv.Inbox, err)
	}
	for {
		s.mu.Lock()
		done, err := s.done, s.err
		s.mu.Unlock()
		switch {
		case done:
			return nil
		case err != nil:
			return err
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return fmt.Errorf("stream %s: waiting for the receiver to confirm: %w", s.inv.Inbox, ctx.Err())
		}
	}
}

// Abort ends the stream, telling the receiver why.
func (s *Sender) Abort(reason error) {
	if reason == nil {
		reason = errors.New("sender aborted")
	}
	s.sendMu.Lock()
	s.mu.Lock()
	s.failLocked(reason, true)
	s.mu.Unlock()
	s.sendMu.Unlock()
	s.shutdown()
}

func (s *Sender) shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	_ = s.sub.Unsubscribe()
}

// SendReaderAt streams size bytes of src in ChunkSize pieces, starting at
// the receiver's resume point, then closes the stream (resumable copies:
// the receiver asks for the first chunk it lacks).
func SendReaderAt(ctx context.Context, s *Sender, src io.ReaderAt, size int64) error {
	cs := int64(s.ChunkSize())
	buf := make([]byte, cs)
	for off := int64(s.Resume()) * cs; off < size; off += cs {
		n := min(cs, size-off)
		if got, err := src.ReadAt(buf[:n], off); int64(got) != n {
			s.Abort(fmt.Errorf("read source at %d: %w", off, err))
			return fmt.Errorf("stream %s: read source at %d: %w", s.inv.Inbox, off, err)
		}
		if err := s.SendChunk(ctx, buf[:n], true); err != nil {
			s.Abort(err)
			return err
		}
	}
	return s.Close(ctx)
}
