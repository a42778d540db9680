package bus

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/bus/wire"
)

// Wire envelope of typed messages (see DESIGN.md, "Codecs and versions").
const (
	// HeaderCodec names the codec and its version of a message body.
	HeaderCodec = "Quarry-Codec"
	// HeaderTimeout carries the requester's remaining deadline in
	// milliseconds; the handler's context gets the same deadline (relative,
	// so clock skew between hosts does not matter).
	HeaderTimeout = "Quarry-Timeout-Ms"
	// HeaderErrorCode marks a reply as a remote error; the body is the
	// error message.
	HeaderErrorCode = "Quarry-Error"

	// CodecJSON1 is version 1 of the JSON codec: the body is the JSON of
	// the typed value.
	CodecJSON1 = "json/1"
	// CodecBin1: the body is the value's MarshalBinary; the type owns its
	// layout and versions it (a version byte first, by convention).
	CodecBin1 = "bin/1"
	// CodecRaw1: the body is a []byte value itself.
	CodecRaw1 = "raw/1"
)

// DefaultRequestTimeout applies to a Request whose context has no deadline.
const DefaultRequestTimeout = 5 * time.Second

// Errors of request/reply.
var (
	// ErrNoResponders means nobody serves the subject right now (no
	// subscriber anywhere the message can reach). It is answered by the
	// server at once: retry elsewhere or later, do not wait.
	ErrNoResponders = errors.New("no responders")
	// ErrTimeout means a responder may exist but no answer came before the
	// deadline. (A refused publish is ErrPermissionDenied.)
	ErrTimeout = errors.New("request timed out")
	// ErrCodec means a message could not be encoded or decoded, or carries
	// a codec or version this build does not speak.
	ErrCodec = errors.New("codec error")
)

var errNoReply = errors.New("no reply: the requester's deadline passed")

// Remote error codes used by bus itself; roles define their own
// (bus/wire, re-exported).
const (
	CodeBadRequest = wire.CodeBadRequest
	CodeInternal   = wire.CodeInternal
	CodeShutdown   = wire.CodeShutdown
)

// RemoteError is an error returned by the handler on the other side of a
// request, carried back with its code (wire.RemoteError).
type RemoteError = wire.RemoteError

// Errorf builds a RemoteError a handler returns to give its error a code.
func Errorf(code, format string, args ...any) error { return wire.Errorf(code, format, args...) }

// IsRemote reports whether err is a remote error with the given code.
func IsRemote(err error, code string) bool { return wire.IsRemote(err, code) }

// BinaryMessage is a message type with its own binary layout, sent with
// codec bin/1 (hot-path messages such as replication blocks, which would
// cost a third more as base64 in JSON). BinaryCodec is only a marker: the
// opt-in is explicit, so a struct that merely embeds a type with a
// MarshalBinary method (time.Time) is not silently sent as that type. The
// receiving type implements encoding.BinaryUnmarshaler.
type BinaryMessage interface {
	encoding.BinaryMarshaler
	BinaryCodec()
}

// Encode encodes v into a message body and its codec header: []byte as
// raw/1 (the bytes themselves), a BinaryMessage (on the value or its
// pointer) as bin/1, anything else as json/1.
func Encode(subject string, v any) (*nats.Msg, error) {
	m := nats.NewMsg(subject)
	var (
		body  []byte
		codec string
		err   error
	)
	switch x := v.(type) {
	case []byte:
		body, codec = x, CodecRaw1
	case BinaryMessage:
		codec = CodecBin1
		body, err = x.MarshalBinary()
	default:
		if bm, ok := addressable(v).(BinaryMessage); ok {
			codec = CodecBin1
			body, err = bm.MarshalBinary()
		} else {
			codec = CodecJSON1
			body, err = json.Marshal(v)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("encode %T for %s: %w: %w", v, subject, ErrCodec, err)
	}
	m.Header.Set(HeaderCodec, codec)
	m.Data = body
	return m, nil
}

// addressable returns a pointer to a copy of v (so pointer-receiver
// methods are visible), or v itself for nil and pointers.
func addressable(v any) any {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() == reflect.Pointer {
		return v
	}
	p := reflect.New(rv.Type())
	p.Elem().Set(rv)
	return p.Interface()
}

// Decode decodes a message body into v (a pointer) by the codec its header
// names, refusing unknown codecs and codecs v cannot take.
func Decode(m *nats.Msg, v any) error {
	codec := m.Header.Get(HeaderCodec)
	var err error
	switch codec {
	case CodecJSON1:
		err = json.Unmarshal(m.Data, v)
	case CodecRaw1:
		p, ok := v.(*[]byte)
		if !ok {
			return fmt.Errorf("decode %s: %w: codec %s into %T, want *[]byte", m.Subject, ErrCodec, codec, v)
		}
		*p = m.Data
	case CodecBin1:
		u, ok := v.(encoding.BinaryUnmarshaler)
		if !ok {
			return fmt.Errorf("decode %s: %w: codec %s into %T, which has no UnmarshalBinary", m.Subject, ErrCodec, codec, v)
		}
		err = u.UnmarshalBinary(m.Data)
	default:
		return fmt.Errorf("decode %s: %w: codec %q, want %s, %s or %s", m.Subject, ErrCodec, codec, CodecJSON1, CodecBin1, CodecRaw1)
	}
	if err != nil {
		return fmt.Errorf("decode %T from %s: %w: %w", v, m.Subject, ErrCodec, err)
	}
	return nil
}

// Publish sends a typed message without waiting for anything.
func Publish[T any](nc *nats.Conn, subject string, v T) error {
	m, err := Encode(subject, v)
	if err != nil {
		return err
	}
	if err := nc.PublishMsg(m); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

// Request sends req on subject and waits for the typed answer until ctx's
// deadline (DefaultRequestTimeout without one). It returns ErrNoResponders
// at once when nobody serves the subject, ErrPermissionDenied at once when
// this connection's user may not publish there (connections made by
// Connect), ErrTimeout when the deadline passed, a *RemoteError when the
// handler failed, ErrCodec for a bad answer.
func Request[Req, Resp any](ctx context.Context, nc *nats.Conn, subject string, req Req) (resp Resp, err error) {
	start := time.Now()
	defer func() { observeRequest(subject, start, err) }()
	var zero Resp
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	m, err := Encode(subject, req)
	if err != nil {
		return zero, err
	}
	dl, _ := ctx.Deadline()
	m.Header.Set(HeaderTimeout, strconv.FormatInt(time.Until(dl).Milliseconds(), 10))
	// On a connection made by Connect, a permissions violation for this
	// subject ends the wait at once.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if w, ok := watches.Load(nc); ok {
		stop := w.(*violationWatch).watch(subject, cancel)
		defer stop()
	}
	reply, err := nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		if cause := context.Cause(rctx); errors.Is(cause, ErrPermissionDenied) {
			return zero, fmt.Errorf("request %s: %w", subject, cause)
		}
		return zero, requestError(ctx, subject, err)
	}
	if code := reply.Header.Get(HeaderErrorCode); code != "" {
		return zero, &RemoteError{Subject: subject, Code: code, Message: string(reply.Data)}
	}
	if err := Decode(reply, &resp); err != nil {
		return zero, fmt.Errorf("reply to %s: %w", subject, err)
	}
	return resp, nil
}

// requestError maps nats.go's request errors onto ours.
func requestError(ctx context.Context, subject string, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("request %s: %w", subject, ErrNoResponders)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("request %s: %w", subject, ErrTimeout)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("request %s: %w", subject, ctx.Err())
	}
	return fmt.Errorf("request %s: %w", subject, err)
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Queue, if set, makes the handlers of one queue group share the
	// subject's requests (each request is handled once).
	Queue string
	// MaxConcurrent bounds handlers running at once (default 64); when
	// reached, delivery waits, so back-pressure reaches the NATS buffers.
	MaxConcurrent int
	// MaxTimeout bounds a handler's time when the request carries no
	// deadline, or a longer one (default 30 s).
	MaxTimeout time.Duration
	// Logger gets handler failures on requests that expect no reply.
	Logger *slog.Logger
}

// Service is a running typed handler; Stop ends it.
type Service struct {
	nc     *nats.Conn
	sub    *nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu      sync.Mutex
	stopped bool // no handler starts once set
}

// subjectKey carries a request's subject in its handler's context.
type subjectKey struct{}

// RequestSubject is the subject the request a handler runs for arrived on
// ("" outside a handler): a service subscribed with a wildcard reads the
// sender from it (SubjectSender).
func RequestSubject(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}

// Handler answers one typed request.
type Handler[Req, Resp any] func(ctx context.Context, req Req) (Resp, error)

// Serve subscribes h to subject. Each request runs in its own goroutine (at
// most MaxConcurrent at once) with a context carrying the requester's
// deadline; a returned error travels back as a *RemoteError (its code kept
// when h returned one); a request that does not decode is answered with
// CodeBadRequest without calling h.
func Serve[Req, Resp any](nc *nats.Conn, subject string, o ServeOptions, h Handler[Req, Resp]) (*Service, error) {
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 64
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = 30 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return startService(nc, subject, "serve", o, func(ctx context.Context, m *nats.Msg) {
		resp, err := handleOne(ctx, m, o.MaxTimeout, h)
		metricHandled.WithLabelValues(family(subject), handledOutcome(err)).Inc()
		if errors.Is(err, errNoReply) {
			return
		}
		if m.Reply == "" {
			if err != nil {
				log.Warn("handler failed", "subject", subject, "err", err)
			}
			return
		}
		var out *nats.Msg
		if err == nil {
			out, err = Encode(m.Reply, resp)
		}
		if err != nil {
			out = errorReply(m.Reply, CodeInternal, err)
		}
		if perr := m.RespondMsg(out); perr != nil {
			log.Warn("reply failed", "subject", subject, "err", perr)
		}
	})
}

// errorReply is the reply carrying err to a requester: a *RemoteError in
// err keeps its own code, any other error gets code.
func errorReply(reply, code string, err error) *nats.Msg {
	out := nats.NewMsg(reply)
	re := &RemoteError{Code: code, Message: err.Error()}
	errors.As(err, &re)
	out.Header.Set(HeaderErrorCode, re.Code)
	out.Data = []byte(re.Message)
	return out
}

// startService subscribes run to subject (in o.Queue when set): each
// message runs in its own goroutine, at most o.MaxConcurrent at once, with a
// context that Stop cancels; Stop waits for the running ones. The
// subscription is flushed before it returns, so a request right after it
// does not see no-responders. what names the caller in errors.
func startService(nc *nats.Conn, subject, what string, o ServeOptions, run func(ctx context.Context, m *nats.Msg)) (*Service, error) {
	svc := &Service{nc: nc}
	svc.ctx, svc.cancel = context.WithCancel(context.Background())
	sem := make(chan struct{}, o.MaxConcurrent)
	cb := func(m *nats.Msg) {
		select {
		case sem <- struct{}{}:
		case <-svc.ctx.Done():
			return
		}
		svc.mu.Lock()
		if svc.stopped {
			svc.mu.Unlock()
			<-sem
			return
		}
		svc.wg.Add(1)
		svc.mu.Unlock()
		go func() {
			defer func() { <-sem; svc.wg.Done() }()
			run(svc.ctx, m)
		}()
	}
	var err error
	if o.Queue != "" {
		svc.sub, err = nc.QueueSubscribe(subject, o.Queue, cb)
	} else {
		svc.sub, err = nc.Subscribe(subject, cb)
	}
	if err != nil {
		svc.cancel()
		return nil, fmt.Errorf("%s %s: %w", what, subject, err)
	}
	if err := nc.Flush(); err != nil {
		_ = svc.sub.Unsubscribe()
		svc.cancel()
		return nil, fmt.Errorf("%s %s: flush: %w", what, subject, err)
	}
	return svc, nil
}

// handleOne decodes a request and runs h under the requester's deadline.
func handleOne[Req, Resp any](base context.Context, m *nats.Msg, maxTimeout time.Duration, h Handler[Req, Resp]) (any, error) {
	timeout := maxTimeout
	if ms, err := strconv.ParseInt(m.Header.Get(HeaderTimeout), 10, 64); err == nil && ms > 0 {
		timeout = min(time.Duration(ms)*time.Millisecond, maxTimeout)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(base, subjectKey{}, m.Subject), timeout)
	defer cancel()
	var req Req
	if err := Decode(m, &req); err != nil {
		return nil, &RemoteError{Code: CodeBadRequest, Message: err.Error()}
	}
	resp, err := h(ctx, req)
	if err != nil {
		if base.Err() != nil && errors.Is(err, context.Canceled) {
			return nil, &RemoteError{Code: CodeShutdown, Message: "service stopped"}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) {
			// The requester's deadline passed: it is gone and reports its
			// own ErrTimeout; an answer now would only race with that.
			return nil, errNoReply
		}
		return nil, err
	}
	return resp, nil
}

// Stop unsubscribes and flushes, so that once it returns the server routes
// new requests elsewhere (no responders, or another member of the queue
// group); then it waits for running handlers until ctx is done, when
// their contexts are cancelled. Requests delivered but not yet started are
// dropped; their requesters time out. Stop is idempotent.
func (svc *Service) Stop(ctx context.Context) error {
	var err error
	svc.once.Do(func() {
		err = svc.sub.Unsubscribe()
		if err == nil && svc.nc.IsConnected() { // a disconnected conn re-subscribes nothing
			fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = svc.nc.FlushWithContext(fctx) // best effort: a closed conn has no subscriptions anyway
			cancel()
		}
		svc.mu.Lock()
		svc.stopped = true
		svc.mu.Unlock()
		done := make(chan struct{})
		go func() { svc.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			svc.cancel()
			<-done
		}
		svc.cancel()
	})
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		return fmt.Errorf("stop %s: %w", svc.sub.Subject, err)
	}
	return nil
}

func handledOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, errNoReply):
		return "expired"
	case IsRemote(err, CodeBadRequest):
		return "bad_request"
	}
	return "error"
}
