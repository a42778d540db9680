package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/bus"
)

// ManagerClient is a peer's (or a search head's) typed client of the
// manager protocol over one NATS connection. Every call retries while no
// manager serves the subject (bus.ErrNoResponders: an election, or a
// subscription still propagating across a gateway) or the answering manager
// lost leadership (CodeNotLeader), backing off from 20 ms to 500 ms, until
// ctx ends; other errors are returned at once. Each attempt has at most
// AttemptTimeout (default 2 s) of ctx's time. An attempt that timed out is
// retried too, so calls that commit (Register, Targets, BucketEvent) should
// carry a RequestID: the manager then applies a retry once (a retried
// Targets answers the committed bucket).
type ManagerClient struct {
	nc *nats.Conn
	s  bus.Subjects
	// AttemptTimeout bounds one request (default 2 s).
	AttemptTimeout time.Duration
}

// NewManagerClient makes a client for the subject scheme s.
func NewManagerClient(nc *nats.Conn, s bus.Subjects) *ManagerClient {
	return &ManagerClient{nc: nc, s: s, AttemptTimeout: 2 * time.Second}
}

// Retryable reports whether err means "no leader serves this right now".
func Retryable(err error) bool {
	return errors.Is(err, bus.ErrNoResponders) || bus.IsRemote(err, CodeNotLeader)
}

// call sends one manager operation, retrying per the type's doc.
func call[Req, Resp any](ctx context.Context, c *ManagerClient, op string, req Req) (Resp, error) {
	var zero Resp
	subj, err := c.s.MgrOp(op)
	if err != nil {
		return zero, err
	}
	backoff := 20 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
		resp, err := bus.Request[Req, Resp](actx, c.nc, subj, req)
		cancel()
		if err == nil {
			return resp, nil
		}
		if !Retryable(err) {
			if errors.Is(err, bus.ErrTimeout) && ctx.Err() == nil {
				// One attempt timed out, ctx has time left: a manager may be
				// stuck in a commit during an election; try again.
				continue
			}
			return zero, err
		}
		select {
		case <-ctx.Done():
			return zero, fmt.Errorf("%w (retried until: %w)", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// Register registers the peer (or brings it back) with its inventory.
func (c *ManagerClient) Register(ctx context.Context, r Register) (RegisterReply, error) {
	r.V = WireVersion
	return call[Register, RegisterReply](ctx, c, OpRegister, r)
}

// Heartbeat sends one heartbeat.
func (c *ManagerClient) Heartbeat(ctx context.Context, h Heartbeat) (HeartbeatReply, error) {
	h.V = WireVersion
	return call[Heartbeat, HeartbeatReply](ctx, c, OpHeartbeat, h)
}

// Targets asks for the replication targets of a new hot bucket.
func (c *ManagerClient) Targets(ctx context.Context, r TargetsRequest) (TargetsReply, error) {
	r.V = WireVersion
	return call[TargetsRequest, TargetsReply](ctx, c, OpTargets, r)
}

// BucketEvent reports a bucket event.
func (c *ManagerClient) BucketEvent(ctx context.Context, e BucketEvent) (BucketEventReply, error) {
	e.V = WireVersion
	return call[BucketEvent, BucketEventReply](ctx, c, OpBucket, e)
}

// Generation fetches a site's primary table (or its changes after since).
func (c *ManagerClient) Generation(ctx context.Context, site string, since uint64) (GenerationReply, error) {
	return call[GenerationRequest, GenerationReply](ctx, c, OpGeneration, GenerationRequest{V: WireVersion, Site: site, Since: since})
}

// Config fetches the peer config.
func (c *ManagerClient) Config(ctx context.Context, peer string) (PeerConfig, error) {
	return call[ConfigRequest, PeerConfig](ctx, c, OpConfig, ConfigRequest{V: WireVersion, Peer: peer})
}

// Confirm asks the leader to confirm a destructive task.
func (c *ManagerClient) Confirm(ctx context.Context, id uint64, peer string) (ConfirmReply, error) {
	return call[ConfirmRequest, ConfirmReply](ctx, c, OpConfirm, ConfirmRequest{V: WireVersion, ID: id, Peer: peer})
}

// FixupResult reports the outcome of an accepted task.
func (c *ManagerClient) FixupResult(ctx context.Context, r FixupResult) (FixupResultReply, error) {
	r.V = WireVersion
	return call[FixupResult, FixupResultReply](ctx, c, OpFixupResult, r)
}

// SubscribeNotices calls fn for every Notice on <prefix>.gen (in order, on
// one goroutine of nats.go). Undecodable notices are skipped. Unsubscribe
// the returned subscription to stop.
func SubscribeNotices(nc *nats.Conn, s bus.Subjects, fn func(Notice)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(s.Gen(), func(m *nats.Msg) {
		var n Notice
		if err := bus.Decode(m, &n); err != nil || n.V > WireVersion {
			return
		}
		fn(n)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", s.Gen(), err)
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe %s: flush: %w", s.Gen(), err)
	}
	return sub, nil
}

// ServeFixups serves a peer's fixup subject <prefix>.fixup.<site>.<peer>
// with h (which must answer quickly: accept, then work, then FixupResult).
func ServeFixups(nc *nats.Conn, s bus.Subjects, site, peer string, o bus.ServeOptions, h bus.Handler[FixupTask, FixupAck]) (*bus.Service, error) {
	subj, err := s.Fixup(site, peer)
	if err != nil {
		return nil, err
	}
	return bus.Serve(nc, subj, o, func(ctx context.Context, t FixupTask) (FixupAck, error) {
		if err := CheckVersion("fixup task", t.V); err != nil {
			return FixupAck{}, err
		}
		a, err := h(ctx, t)
		a.V = WireVersion
		return a, err
	})
}
