package bus

// Sender-initiated streams, for tests only: quarry's roles open every stream
// from the receiver's side (the search head's invites ride in the request,
// and replication is request/reply), but the stream tests drive a Sender
// and a Receiver (resume, permissions, gateways) through this small server.

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
)

// streamHandler receives one sender-initiated stream. meta is what the
// sender sent with openStream. Before it consumes anything the handler
// calls accept(resume) exactly once — that answers the sender with an
// Invite starting at chunk resume — or returns an error, which the sender
// gets as a *RemoteError. After accept, bus closes the receiver when the
// handler returns: a nil error after io.EOF confirms the stream to the
// sender, any other error aborts it with that reason.
type streamHandler[Meta any] func(ctx context.Context, meta Meta, accept func(resume uint64) (*Receiver, error)) error

// serveStreams subscribes h to subject for sender-initiated streams. Each stream runs in its own
// goroutine; Stop on the returned Service cancels the handlers' contexts
// once its own ctx ends.
func serveStreams[Meta any](nc *nats.Conn, subject string, o ServeOptions, so StreamOptions, h streamHandler[Meta]) (*Service, error) {
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

func runStream[Meta any](ctx context.Context, nc *nats.Conn, m *nats.Msg, so StreamOptions, h streamHandler[Meta], log *slog.Logger) {
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

// openStream asks the stream handler serving subject to receive a stream
// described by meta, and returns the sender once it accepted. Errors are
// those of Request (ErrNoResponders, ErrTimeout, *RemoteError).
func openStream[Meta any](ctx context.Context, nc *nats.Conn, subject string, meta Meta) (*Sender, error) {
	inv, err := Request[Meta, Invite](ctx, nc, subject, meta)
	if err != nil {
		return nil, err
	}
	return NewSender(ctx, nc, inv)
}
