package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Collector receives streams from many senders that are not known in
// advance: a search head publishes one request on quarry.search.<site>
// carrying Inbox(), every peer that answers joins with JoinCollector, and
// each gets its own stream and its own credits (SPEC §5 point 7: a slow
// merge slows the peers, it does not overflow NATS buffers).
type Collector struct {
	nc   *nats.Conn
	opts StreamOptions
	sub  *nats.Subscription
	in   chan joined

	mu     sync.Mutex
	closed bool
}

type joined struct {
	from string
	r    *Receiver
}

// joinRequest is what a sender sends to a collector's inbox.
type joinRequest struct {
	From   string `json:"from"`
	Resume uint64 `json:"resume,omitempty"`
}

// ErrCollectorClosed is returned by Accept after Close.
var ErrCollectorClosed = errors.New("collector closed")

// NewCollector opens a collector; hand Inbox() to the senders.
func NewCollector(nc *nats.Conn, o StreamOptions) (*Collector, error) {
	c := &Collector{nc: nc, opts: o, in: make(chan joined, 1024)}
	sub, err := nc.Subscribe(nc.NewInbox(), c.onJoin)
	if err != nil {
		return nil, fmt.Errorf("collector: subscribe: %w", err)
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("collector: flush: %w", err)
	}
	c.sub = sub
	return c, nil
}

// Inbox is the subject senders join on.
func (c *Collector) Inbox() string { return c.sub.Subject }

func (c *Collector) onJoin(m *nats.Msg) {
	reply := func(v any, err error) {
		var out *nats.Msg
		if err == nil {
			out, err = Encode(m.Reply, v)
		}
		if err != nil {
			out = nats.NewMsg(m.Reply)
			out.Header.Set(HeaderErrorCode, CodeBadRequest)
			out.Data = []byte(err.Error())
		}
		_ = m.RespondMsg(out)
	}
	var req joinRequest
	if err := Decode(m, &req); err != nil {
		reply(nil, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		reply(nil, ErrCollectorClosed)
		return
	}
	r, err := NewReceiver(c.nc, req.Resume, c.opts)
	if err != nil {
		reply(nil, err)
		return
	}
	select {
	case c.in <- joined{from: req.From, r: r}:
		reply(r.Invite(), nil)
	default:
		_ = r.Close(errors.New("collector backlog full"))
		reply(nil, errors.New("collector backlog full"))
	}
}

// Accept returns the next sender's stream, with the name it joined under.
func (c *Collector) Accept(ctx context.Context) (string, *Receiver, error) {
	select {
	case j, ok := <-c.in:
		if !ok {
			return "", nil, ErrCollectorClosed
		}
		return j.from, j.r, nil
	case <-ctx.Done():
		return "", nil, fmt.Errorf("collector %s: %w", c.Inbox(), ctx.Err())
	}
}

// Close stops accepting (later joiners get no responders or
// ErrCollectorClosed) and aborts streams joined but never accepted. Streams
// already accepted are the caller's to close.
func (c *Collector) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	_ = c.sub.Unsubscribe()
	close(c.in)
	c.mu.Unlock()
	for j := range c.in {
		_ = j.r.Close(ErrCollectorClosed)
	}
}

// JoinCollector opens a stream to the collector at inbox, as from. Across
// a gateway the collector's fresh inbox may not be known on this side yet
// (interest-only mode propagates it asynchronously), so no-responders is
// retried for up to a second (or ctx's deadline) before it is believed.
func JoinCollector(ctx context.Context, nc *nats.Conn, inbox, from string) (*Sender, error) {
	giveUp := time.Now().Add(time.Second)
	var noResponders error
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 200*time.Millisecond) {
		inv, err := Request[joinRequest, Invite](ctx, nc, inbox, joinRequest{From: from})
		if err == nil {
			return NewSender(ctx, nc, inv)
		}
		if errors.Is(err, ErrTimeout) && ctx.Err() != nil && noResponders != nil {
			return nil, noResponders // ctx ran out while retrying: say why
		}
		if !errors.Is(err, ErrNoResponders) || time.Now().Add(backoff).After(giveUp) {
			return nil, err
		}
		noResponders = err
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, err
		}
	}
}
