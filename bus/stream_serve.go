package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
)

// StreamHandler receives one sender-initiated stream. meta is what the
// sender sent with OpenStream. Before it consumes anything the handler
// calls accept(resume) exactly once — that answers the sender with an
// Invite starting at chunk resume — or returns an error, which the sender
// gets as a *RemoteError. After accept, bus closes the receiver when the
// handler returns: a nil error after io.EOF confirms the stream to the
// sender, any other error aborts it with that reason.
type StreamHandler[Meta any] func(ctx context.Context, meta Meta, accept func(resume uint64) (*Receiver, error)) error

// ServeStreams subscribes h to subject for sender-initiated streams (e.g.
// warm-bucket copies on a peer's repl subject). Each stream runs in its own
// goroutine; Stop on the returned Service cancels the handlers' contexts
// once its own ctx ends.
func ServeStreams[Meta any](nc *nats.Conn, subject string, o ServeOptions, so StreamOptions, h StreamHandler[Meta]) (*Service, error) {
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 64
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return startService(nc, subject, "serve streams", o, func(ctx context.Context, m *nats.Msg) {
		runStream(ctx, nc, m, so, h, log)
	})
}

func runStream[Meta any](ctx context.Context, nc *nats.Conn, m *nats.Msg, so StreamOptions, h StreamHandler[Meta], log *slog.Logger) {
	reject := func(code string, err error) {
		if m.Reply == "" {
			return
		}
		_ = m.RespondMsg(errorReply(m.Reply, code, err))
	}
	var meta Meta
	if err := Decode(m, &meta); err != nil {
		reject(CodeBadRequest, err)
		return
	}
	if m.Reply == "" {
		log.Warn("stream open without a reply subject", "subject", m.Subject)
		return
	}
	var (
		once sync.Once
		rcv  *Receiver
	)
	accept := func(resume uint64) (*Receiver, error) {
		err := errors.New("accept called twice")
		once.Do(func() {
			var r *Receiver
			r, err = NewReceiver(nc, resume, so)
			if err != nil {
				return
			}
			var out *nats.Msg
			if out, err = Encode(m.Reply, r.Invite()); err == nil {
				err = m.RespondMsg(out)
			}
			if err != nil {
				_ = r.Close(err)
				return
			}
			rcv = r
		})
		return rcv, err
	}
	err := h(ctx, meta, accept)
	if rcv == nil {
		if err == nil {
			err = errors.New("stream handler neither accepted nor failed")
		}
		reject(CodeInternal, err)
		return
	}
	if cerr := rcv.Close(err); cerr != nil {
		log.Warn("stream close failed", "subject", m.Subject, "err", cerr)
	}
}

// OpenStream asks the stream handler serving subject to receive a stream
// described by meta, and returns the sender once it accepted. Errors are
// those of Request (ErrNoResponders, ErrTimeout, *RemoteError).
func OpenStream[Meta any](ctx context.Context, nc *nats.Conn, subject string, meta Meta) (*Sender, error) {
	inv, err := Request[Meta, Invite](ctx, nc, subject, meta)
	if err != nil {
		return nil, err
	}
	return NewSender(ctx, nc, inv)
}
