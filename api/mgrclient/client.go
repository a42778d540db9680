// Package mgrclient is the one client of the manager protocol (SPEC §6):
// peers and search heads send the api messages over NATS with it
// (quarry.mgr.<op>.<sender>, retried while no leader answers), fetch the
// generation table over a bus stream, take notices on quarry.gen and serve
// their fixup subject. The messages and their rules live in api, which
// imports no transport; this package is the transport.
package mgrclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
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
	// FetchTimeout bounds one streamed table transfer (default 60 s).
	FetchTimeout time.Duration
	// Sender is the last token of every operation's subject,
	// <prefix>.mgr.<op>.<sender> (SPEC §6): the peer's id or the search
	// head's name, the only one its NATS user may publish under.
	Sender string

	announce atomic.Pointer[announce] // SetURL
}

// announce is what SetURL set.
type announce struct{ site, url string }

// SetURL is how a search head names its own HTTP URL: FetchGeneration
// names it in every request for the table of site (the head's own), and
// the leader lists it on the cluster page. Safe while requests run.
func (c *ManagerClient) SetURL(site, url string) {
	c.announce.Store(&announce{site: site, url: url})
}

// NewManagerClient makes a client for the subject scheme s.
func NewManagerClient(nc *nats.Conn, s bus.Subjects) *ManagerClient {
	return &ManagerClient{nc: nc, s: s, AttemptTimeout: 2 * time.Second}
}

// urlFor is the URL to name in a generation request for site.
func (c *ManagerClient) urlFor(site string) string {
	if a := c.announce.Load(); a != nil && a.site == site {
		return a.url
	}
	return ""
}

// Retryable reports whether err means "no leader serves this right now".
func Retryable(err error) bool {
	return errors.Is(err, bus.ErrNoResponders) || bus.IsRemote(err, api.CodeNotLeader)
}

// call sends one manager operation, retrying per the type's doc.
func call[Req, Resp any](ctx context.Context, c *ManagerClient, op string, req Req) (Resp, error) {
	subj, err := c.s.MgrOp(op, c.Sender)
	if err != nil {
		var zero Resp
		return zero, err
	}
	return retry(ctx, func() (Resp, error) {
		actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
		defer cancel()
		return bus.Request[Req, Resp](actx, c.nc, subj, req)
	})
}

// retry runs attempt until it succeeds, fails for a reason a retry cannot
// mend, or ctx ends: while no leader serves the subject (Retryable) it
// backs off from 20 ms to 500 ms; an attempt that timed out with time left
// in ctx is tried again at once (a manager may be stuck in a commit during
// an election).
func retry[T any](ctx context.Context, attempt func() (T, error)) (T, error) {
	var zero T
	backoff := 20 * time.Millisecond
	for {
		v, err := attempt()
		if err == nil {
			return v, nil
		}
		if !Retryable(err) {
			if errors.Is(err, bus.ErrTimeout) && ctx.Err() == nil {
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

// Register registers the peer (or brings it back) with its inventory. An
// inventory whose message would not fit the bus's max payload is sent in
// parts (Register.Parts); an upload a leader change broke
// (CodeUploadIncomplete) is sent again whole, up to three times.
func (c *ManagerClient) Register(ctx context.Context, r api.Register) (api.RegisterReply, error) {
	r.V = api.WireVersion
	r.Upload, r.Part, r.Parts = "", 0, 0
	limit := registerBudget(c.nc)
	whole, err := json.Marshal(r)
	if err != nil {
		return api.RegisterReply{}, fmt.Errorf("register: encode: %w", err)
	}
	if len(whole) <= limit || len(r.Inventory) < 2 {
		return call[api.Register, api.RegisterReply](ctx, c, api.OpRegister, r)
	}
	parts, err := splitInventory(r, limit)
	if err != nil {
		return api.RegisterReply{}, err
	}
	for attempt := 1; ; attempt++ {
		upload := fmt.Sprintf("u%d%d", time.Now().UnixNano(), attempt)
		var reply api.RegisterReply
		for i, inv := range parts {
			part := r
			part.V, part.Upload, part.Part, part.Parts, part.Inventory = api.WireVersionParts, upload, i+1, len(parts), inv
			reply, err = call[api.Register, api.RegisterReply](ctx, c, api.OpRegister, part)
			if err != nil {
				break
			}
		}
		if err == nil && reply.Pending {
			err = fmt.Errorf("register: the manager holds the last of %d parts but answered pending", len(parts))
		}
		if err == nil || !bus.IsRemote(err, api.CodeUploadIncomplete) || attempt == 3 || ctx.Err() != nil {
			return reply, err
		}
	}
}

// registerBudget is the largest Register message sent whole: the bus's
// max payload less room for the headers.
func registerBudget(nc *nats.Conn) int {
	limit := 1 << 20
	if nc != nil {
		if mp := int(nc.MaxPayload()); mp > 0 {
			limit = mp
		}
	}
	return max(limit-8<<10, 4<<10)
}

// splitInventory cuts r's inventory into consecutive slices whose parts
// each encode within limit bytes (entries are measured one by one, plus
// the message's other fields).
func splitInventory(r api.Register, limit int) ([][]api.Copy, error) {
	head := r
	head.Inventory, head.V, head.Upload, head.Part, head.Parts = nil, api.WireVersionParts, "u00000000000000000000000", api.MaxRegisterParts, api.MaxRegisterParts
	hb, err := json.Marshal(head)
	if err != nil {
		return nil, fmt.Errorf("register: encode: %w", err)
	}
	var parts [][]api.Copy
	start, size := 0, len(hb)
	for i, cp := range r.Inventory {
		b, err := json.Marshal(cp)
		if err != nil {
			return nil, fmt.Errorf("register: encode: %w", err)
		}
		if len(hb)+len(b)+1 > limit {
			return nil, fmt.Errorf("register: inventory entry %s alone is %d bytes, over the bus's limit %d", cp.Bucket, len(b), limit)
		}
		if size+len(b)+1 > limit {
			parts = append(parts, r.Inventory[start:i])
			start, size = i, len(hb)
		}
		size += len(b) + 1
	}
	parts = append(parts, r.Inventory[start:])
	if len(parts) > api.MaxRegisterParts {
		return nil, fmt.Errorf("register: an inventory of %d copies needs %d parts, over %d", len(r.Inventory), len(parts), api.MaxRegisterParts)
	}
	return parts, nil
}

// Heartbeat sends one heartbeat.
func (c *ManagerClient) Heartbeat(ctx context.Context, h api.Heartbeat) (api.HeartbeatReply, error) {
	h.V = api.WireVersion
	return call[api.Heartbeat, api.HeartbeatReply](ctx, c, api.OpHeartbeat, h)
}

// Targets asks for the replication targets of a new hot bucket.
func (c *ManagerClient) Targets(ctx context.Context, r api.TargetsRequest) (api.TargetsReply, error) {
	r.V = api.WireVersion
	return call[api.TargetsRequest, api.TargetsReply](ctx, c, api.OpTargets, r)
}

// BucketEvent reports a bucket event.
func (c *ManagerClient) BucketEvent(ctx context.Context, e api.BucketEvent) (api.BucketEventReply, error) {
	e.V = api.WireVersion
	return call[api.BucketEvent, api.BucketEventReply](ctx, c, api.OpBucket, e)
}

// Generation fetches a site's primary table (or its changes after since)
// in one message. Small tables only: FetchGeneration is what roles use.
func (c *ManagerClient) Generation(ctx context.Context, site string, since uint64) (api.GenerationReply, error) {
	return call[api.GenerationRequest, api.GenerationReply](ctx, c, api.OpGeneration, api.GenerationRequest{V: api.WireVersion, Site: site, Since: since})
}

// GenerationPeers fetches the generation table's peer list only
// (PeersOnly): a reply of a few hundred peers, however many buckets the
// table holds.
func (c *ManagerClient) GenerationPeers(ctx context.Context) (api.GenerationReply, error) {
	return call[api.GenerationRequest, api.GenerationReply](ctx, c, api.OpGeneration, api.GenerationRequest{V: api.WireVersion, Site: "site0", PeersOnly: true})
}

// generationFetchTimeout bounds one streamed table transfer (a million
// buckets is a few hundred MB of JSON on loopback: seconds, not minutes).
const generationFetchTimeout = 60 * time.Second

// FetchGeneration fetches a site's primary table — the whole table, the
// changes after since, or (generation ≠ 0) the primaries as they were in
// that generation — over a bus stream, so its size is not bound by the
// bus's max payload. Retries like every call while no leader answers.
func (c *ManagerClient) FetchGeneration(ctx context.Context, site string, since, generation uint64) (fsm.GenerationView, error) {
	subj, err := c.s.MgrOp(api.OpGeneration, c.Sender)
	if err != nil {
		return fsm.GenerationView{}, err
	}
	return retry(ctx, func() (fsm.GenerationView, error) {
		return c.fetchGenerationOnce(ctx, subj, site, since, generation)
	})
}

func (c *ManagerClient) fetchGenerationOnce(ctx context.Context, subj, site string, since, generation uint64) (fsm.GenerationView, error) {
	var view fsm.GenerationView
	ft := c.FetchTimeout
	if ft <= 0 {
		ft = generationFetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, ft)
	defer cancel()
	rcv, err := bus.NewReceiver(c.nc, 0, bus.StreamOptions{IdleTimeout: 10 * time.Second})
	if err != nil {
		return view, err
	}
	defer rcv.Close(nil)
	inv := rcv.Invite()
	// Read the stream while the request waits for its reply: the manager
	// sends the table before it answers, and the window is smaller than a
	// large table.
	type got struct {
		b   []byte
		err error
	}
	ch := make(chan got, 1)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go func() {
		b, err := rcv.Next(rctx)
		if err == nil {
			// Read to the end: the sender's Close waits for it.
			if _, e := rcv.Next(rctx); !errors.Is(e, io.EOF) {
				err = fmt.Errorf("after the table: %w", e)
			} else {
				rcv.Close(nil) // confirms the end to the sender
			}
		}
		ch <- got{b, err}
	}()
	actx, acancel := context.WithTimeout(ctx, max(c.AttemptTimeout, ft))
	reply, err := bus.Request[api.GenerationRequest, api.GenerationReply](actx, c.nc, subj,
		api.GenerationRequest{V: api.WireVersion, Site: site, Since: since, Generation: generation, Invite: &inv, URL: c.urlFor(site)})
	acancel()
	if err != nil && !errors.Is(err, bus.ErrTimeout) {
		rcancel()
		<-ch
		return view, err
	}
	if err == nil && !reply.Streamed {
		// A manager that does not stream answered in the reply itself.
		rcancel()
		<-ch
		return reply.View, nil
	}
	// The reply may time out while a big table is still streaming: the
	// stream's own idle timeout says whether the manager is sending.
	g := <-ch
	if g.err != nil {
		if err != nil {
			return view, err
		}
		return view, fmt.Errorf("generation table of %s: %w", site, g.err)
	}
	if err := json.Unmarshal(g.b, &view); err != nil {
		return view, fmt.Errorf("generation table of %s: decode: %w", site, err)
	}
	return view, nil
}

// SendGeneration is the manager's half of FetchGeneration: it opens the
// stream first (so the requester hears from it while a large table is
// built), then builds the view, and sends its JSON as one message. An
// error of build aborts the stream and is returned (the manager answers
// it in the reply).
func SendGeneration(ctx context.Context, nc *nats.Conn, inv bus.Invite, build func() (fsm.GenerationView, error)) error {
	s, err := bus.NewSender(ctx, nc, inv)
	if err != nil {
		return err
	}
	view, err := build()
	if err != nil {
		s.Abort(err)
		return err
	}
	b, err := json.Marshal(view)
	if err != nil {
		s.Abort(err)
		return err
	}
	if err := s.Send(ctx, b); err != nil {
		s.Abort(err)
		return err
	}
	return s.Close(ctx)
}

// Config fetches the peer config.
func (c *ManagerClient) Config(ctx context.Context, peer string) (api.PeerConfig, error) {
	return call[api.ConfigRequest, api.PeerConfig](ctx, c, api.OpConfig, api.ConfigRequest{V: api.WireVersion, Peer: peer, KeyedDigests: true})
}

// Bundle fetches the configuration bundle in force, as peer.
func (c *ManagerClient) Bundle(ctx context.Context, peer string) (api.BundleReply, error) {
	return call[api.BundleRequest, api.BundleReply](ctx, c, api.OpBundle, api.BundleRequest{V: api.WireVersion, Peer: peer})
}

// Confirm asks the leader to confirm a destructive task.
func (c *ManagerClient) Confirm(ctx context.Context, id uint64, peer string) (api.ConfirmReply, error) {
	return call[api.ConfirmRequest, api.ConfirmReply](ctx, c, api.OpConfirm, api.ConfirmRequest{V: api.WireVersion, ID: id, Peer: peer})
}

// FixupResult reports the outcome of an accepted task.
func (c *ManagerClient) FixupResult(ctx context.Context, r api.FixupResult) (api.FixupResultReply, error) {
	r.V = api.WireVersion
	return call[api.FixupResult, api.FixupResultReply](ctx, c, api.OpFixupResult, r)
}

// Buckets asks the managers' records of the named buckets that hold a copy
// on peer, in requests of at most api.MaxBucketsPerRequest ids (a reply
// never nears the bus's max payload, however many buckets a peer holds).
func (c *ManagerClient) Buckets(ctx context.Context, peer string, ids []string) ([]fsm.BucketView, error) {
	out := []fsm.BucketView{}
	for len(ids) > 0 {
		n := min(len(ids), api.MaxBucketsPerRequest)
		rep, err := call[api.BucketsRequest, api.BucketsReply](ctx, c, api.OpBuckets, api.BucketsRequest{V: api.WireVersion, Peer: peer, Buckets: ids[:n]})
		if err != nil {
			return nil, err
		}
		out = append(out, rep.Buckets...)
		ids = ids[n:]
	}
	return out, nil
}

// SubscribeNotices calls fn for every Notice on <prefix>.gen (in order, on
// one goroutine of nats.go). Undecodable notices are skipped. Unsubscribe
// the returned subscription to stop.
func SubscribeNotices(nc *nats.Conn, s bus.Subjects, fn func(api.Notice)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(s.Gen(), func(m *nats.Msg) {
		var n api.Notice
		if err := bus.Decode(m, &n); err != nil || n.V > api.WireVersion {
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
func ServeFixups(nc *nats.Conn, s bus.Subjects, site, peer string, o bus.ServeOptions, h bus.Handler[api.FixupTask, api.FixupAck]) (*bus.Service, error) {
	subj, err := s.Fixup(site, peer)
	if err != nil {
		return nil, err
	}
	return bus.Serve(nc, subj, o, func(ctx context.Context, t api.FixupTask) (api.FixupAck, error) {
		if err := api.CheckVersion("fixup task", t.V); err != nil {
			return api.FixupAck{}, err
		}
		a, err := h(ctx, t)
		a.V = api.WireVersion
		return a, err
	})
}
