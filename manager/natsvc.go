package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// The manager's NATS service (DESIGN.md, "NATS service"): while this
// manager is the leader — after the Barrier of its term, until the term
// ends — it serves the peers' protocol of package api on
// <prefix>.mgr.<op>, publishes a Notice on <prefix>.gen after every change
// of the generation, the table version or the peer config, and delivers
// open fixup tasks to <prefix>.fixup.<site>.<peer>.

// connectNATS makes the manager's bus connection (nil without cfg.NATS).
func (m *Manager) connectNATS(ctx context.Context) error {
	if m.cfg.NATS == "" {
		return nil
	}
	s, err := bus.NewSubjects(m.cfg.NATSPrefix)
	if err != nil {
		return err
	}
	m.subjects = s
	cctx, cancel := context.WithTimeout(ctx, m.cfg.NATSConnectTimeout)
	defer cancel()
	nc, err := bus.Connect(cctx, m.cfg.NATS, bus.ConnectOptions{
		Name: "manager " + m.cfg.ID, User: m.cfg.NATSUser, Password: m.cfg.NATSPassword, Logger: m.log, TLSCA: m.cfg.TLS.CA,
		OnReconnect: m.busHeard,
	})
	if err != nil {
		return fmt.Errorf("manager %s: %w", m.cfg.ID, err)
	}
	m.nc = nc
	return nil
}

// NATS is the manager's bus connection (nil without Config.NATS).
func (m *Manager) NATS() *nats.Conn { return m.nc }

// signalApplied wakes the notice publisher; called by the mux FSM after
// every applied entry.
func (m *Manager) signalApplied() {
	select {
	case m.applied <- struct{}{}:
	default:
	}
}

// natsTerm is the NATS side of one leadership term.
type natsTerm struct {
	m  *Manager
	wg sync.WaitGroup

	// subscribed is closed once every manager operation is subscribed: the
	// term's first notice (kind leader) waits for it.
	subscribed chan struct{}

	mu    sync.Mutex
	seals map[uint64]map[string]api.FixupAck // seal task → holder → its length
}

// serveNATS starts the NATS service for a leadership term that passed its
// Barrier: the mgr subscriptions, the notice publisher and the fixup
// deliverer. The returned function stops them and returns when the
// subscriptions are gone from the server (bus.Service.Stop flushes) and
// the goroutines ended. ctx is the term's context.
func (m *Manager) serveNATS(ctx context.Context) (stop func()) {
	if m.nc == nil {
		return func() {}
	}
	t := &natsTerm{m: m, seals: map[uint64]map[string]api.FixupAck{}, subscribed: make(chan struct{})}
	t.wg.Add(3)
	go func() { defer t.wg.Done(); t.subscribe(ctx) }()
	go func() { defer t.wg.Done(); t.publishNotices(ctx) }()
	go func() { defer t.wg.Done(); t.deliverLoop(ctx) }()
	return func() {
		t.wg.Wait() // ctx is done: subscribe returned after stopping its services
	}
}

// serveOp subscribes one manager operation from every sender,
// <prefix>.mgr.<op>.*; each handler checks the operation's peer id against
// the sender the subject names (sentBy), which permissions bind to the
// sender's NATS user.
func (m *Manager) serveOp(op string) (*bus.Service, error) {
	subj, err := m.subjects.MgrOpAny(op)
	if err != nil {
		return nil, err
	}
	o := bus.ServeOptions{Logger: m.log}
	switch op {
	case api.OpRegister:
		return bus.Serve(m.nc, subj, o, guard(m, "register", m.natsRegister))
	case api.OpHeartbeat:
		return bus.Serve(m.nc, subj, o, guard(m, "heartbeat", m.natsHeartbeat))
	case api.OpTargets:
		return bus.Serve(m.nc, subj, o, guard(m, "targets", m.natsTargets))
	case api.OpBucket:
		return bus.Serve(m.nc, subj, o, guard(m, "bucket event", m.natsBucket))
	case api.OpGeneration:
		return bus.Serve(m.nc, subj, o, guard(m, "generation", m.natsGeneration))
	case api.OpConfig:
		return bus.Serve(m.nc, subj, o, guard(m, "config", m.natsConfig))
	case api.OpConfirm:
		return bus.Serve(m.nc, subj, o, guard(m, "confirm", m.natsConfirm))
	case api.OpFixupResult:
		return bus.Serve(m.nc, subj, o, guard(m, "fixup result", m.natsFixupResult))
	case api.OpBuckets:
		return bus.Serve(m.nc, subj, o, guard(m, "buckets", m.natsBuckets))
	}
	return nil, fmt.Errorf("unknown manager operation %q", op)
}

// subscribe serves every manager operation for the term: it retries the
// ones that could not subscribe (the connection is down: Serve's flush
// fails) every 250 ms, and when the term ends it stops them all; Stop
// unsubscribes and flushes, so the server forgets this manager's
// subscribers before the term is over.
func (t *natsTerm) subscribe(ctx context.Context) {
	m := t.m
	var services []*bus.Service
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		for _, s := range services {
			if err := s.Stop(sctx); err != nil {
				m.log.Warn("stopping a manager subscription failed", "err", err)
			}
		}
	}()
	missing := append([]string(nil), api.Ops...)
	for attempt := 0; ; attempt++ {
		var still []string
		for _, op := range missing {
			svc, err := m.serveOp(op)
			if err != nil {
				if attempt == 0 {
					m.log.Warn("subscribing a manager operation failed; retrying", "op", op, "err", err)
				}
				still = append(still, op)
				continue
			}
			services = append(services, svc)
		}
		missing = still
		if len(missing) == 0 {
			m.log.Info("serving the manager protocol on NATS", "subjects", m.subjects.All("mgr"))
			m.busHeard()
			close(t.subscribed)
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	<-ctx.Done()
}

// versioned is implemented by every request type (its V field).
func versionOf(v any) int {
	switch x := v.(type) {
	case api.Register:
		return x.V
	case api.Heartbeat:
		return x.V
	case api.TargetsRequest:
		return x.V
	case api.BucketEvent:
		return x.V
	case api.GenerationRequest:
		return x.V
	case api.ConfigRequest:
		return x.V
	case api.ConfirmRequest:
		return x.V
	case api.FixupResult:
		return x.V
	}
	return 0
}

// guard wraps a handler: refuse a newer wire version, refuse when this
// manager is no longer the leader (its subscription is going away), and map
// errors to stable remote codes.
func guard[Req, Resp any](m *Manager, what string, h func(ctx context.Context, req Req) (Resp, error)) bus.Handler[Req, Resp] {
	return func(ctx context.Context, req Req) (Resp, error) {
		var zero Resp
		if err := api.CheckVersion(what, versionOf(req)); err != nil {
			return zero, err
		}
		if !m.leading() {
			return zero, bus.Errorf(api.CodeNotLeader, "%s: manager %s is not the leader", what, m.cfg.ID)
		}
		resp, err := h(ctx, req)
		if err != nil {
			return zero, remoteError(what, err)
		}
		return resp, nil
	}
}

// remoteError gives err a stable code: the HTTP API's codes (unknown_peer,
// peer_not_up, …), not_leader, bad_request.
func remoteError(what string, err error) error {
	var re *bus.RemoteError
	if errors.As(err, &re) {
		return err
	}
	if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrClosed) {
		return bus.Errorf(api.CodeNotLeader, "%s: %v", what, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	ae := toAPIError(err)
	return bus.Errorf(ae.Code, "%s: %s", what, ae.Message)
}

// leading reports whether this manager is the leader with its term's loops
// running.
func (m *Manager) leading() bool {
	m.leadMu.Lock()
	active := m.term.active
	m.leadMu.Unlock()
	return active && m.IsLeader()
}

// status is what every reply to a peer carries.
// It is cached per applied index (a heartbeat per peer per second would
// otherwise hash the config each time).
func (m *Manager) status() api.Status {
	var st api.Status
	m.state.Read(func(s *fsm.State) {
		idx := s.AppliedIndex()
		m.statusMu.Lock()
		defer m.statusMu.Unlock()
		if m.statusAt == idx && m.statusCached.ConfigID != "" {
			st = m.statusCached
			return
		}
		st = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: m.peerConfigOf(s).ID}
		m.statusAt, m.statusCached = idx, st
	})
	return st
}

// peerConfigOf is the peer config of a committed state, with its id.
func (m *Manager) peerConfigOf(s *fsm.State) api.PeerConfig {
	// Secrets never leave the managers (SPEC §7): peers and search heads
	// get each token's digest and check presented tokens against it.
	c := s.Config().Redacted()
	targetTimeout := m.cfg.TargetTimeout
	if c.TargetTimeout > 0 {
		targetTimeout = c.TargetTimeout // set through the admin API
	}
	pc := api.PeerConfig{
		V: api.WireVersion, Indexes: c.Indexes, AutoCreateIndexes: c.AutoCreateIndexes, KnownIndexes: s.Indexes(),
		HECTokens: c.HECTokens, SearchTokens: c.SearchTokens, MaxHotBytes: c.MaxHotBytes, MaxHotSpan: c.MaxHotSpan, MaxHotBuckets: c.MaxHotBuckets,
		TargetTimeout: targetTimeout, HeartbeatPeriod: c.HeartbeatPeriod, Maintenance: s.Maintenance(),
		AdminTokenDigest:  fsm.TokenDigest(m.cfg.AdminToken),
		ReplicationFactor: c.ReplicationFactor, Multisite: c.Multisite(),
	}
	if c.Multisite() {
		// The copies a bucket gets: the site policy's total in multisite
		// mode, so a peer's ack rule min(2, RF) counts the policy (SPEC §4).
		pc.ReplicationFactor = c.SiteReplicationFactor.Total
	}
	b, _ := json.Marshal(pc) // plain data: cannot fail
	sum := sha256.Sum256(b)
	pc.ID = hex.EncodeToString(sum[:8])
	pc.Generation, pc.TableVersion = s.CurrentGeneration(), s.TableVersion()
	return pc
}

// subjectSite is the site token of a peer's subjects: the site it
// registered with (the one it subscribes under), "default" if none.
func subjectSite(p fsm.Peer) string {
	if p.Site == "" {
		return fsm.DefaultSite
	}
	return p.Site
}

// checkIDs validates the ids of an operation where they arrive (SPEC §6,
// fsm's one validator): kind/value pairs, kind one of "bucket", "index",
// "local id", "guid" or a name kind ("peer", "site", "target"); empty
// values are left to the handler's own required-field checks. A refusal is
// a bad_request and nothing is applied.
func checkIDs(what string, kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		kind, v := kv[i], kv[i+1]
		if v == "" {
			continue
		}
		var err error
		switch kind {
		case "bucket":
			_, _, _, err = fsm.ValidBucketID(v)
		case "index":
			err = fsm.ValidIndexName(v)
		case "local id":
			err = fsm.ValidLocalID(v)
		case "guid":
			err = fsm.ValidGUID(v)
		default:
			err = fsm.ValidName(kind, v)
		}
		if err != nil {
			return bus.Errorf(api.CodeBadRequest, "%s: %v", what, err)
		}
	}
	return nil
}

// ErrNotSender: an operation names another peer than the one that sent it
// (the last token of its subject, <prefix>.mgr.<op>.<sender>).
var ErrNotSender = errors.New("operation names another peer than its sender")

// sentBy refuses an operation whose peer id is not its sender's (SPEC §6):
// a peer's NATS user may publish only under its own id, so the subject's
// last token is who sent it, and a body naming another peer is forged.
func sentBy(ctx context.Context, what, peer string) error {
	sender := bus.SubjectSender(bus.RequestSubject(ctx))
	if sender != peer {
		return bus.Errorf(api.CodeBadRequest, "%s for peer %q sent by %q: %v", what, peer, sender, ErrNotSender)
	}
	return nil
}

// ---- handlers -------------------------------------------------------------

func (m *Manager) natsRegister(ctx context.Context, r api.Register) (api.RegisterReply, error) {
	if err := r.Validate(); err != nil {
		return api.RegisterReply{}, bus.Errorf(api.CodeBadRequest, "%v", err)
	}
	if err := checkIDs("register", "peer", r.Peer, "guid", r.GUID, "site", r.Site); err != nil {
		return api.RegisterReply{}, err
	}
	if err := sentBy(ctx, "register", r.Peer); err != nil {
		return api.RegisterReply{}, err
	}
	for _, c := range r.Inventory {
		index, _, _, _ := fsm.ParseBucketID(c.Bucket) // valid: Validate checked it
		if c.Index != "" && c.Index != index {
			return api.RegisterReply{}, bus.Errorf(api.CodeBadRequest, "register %s: copy %s names index %q", r.Peer, c.Bucket, c.Index)
		}
	}
	if r.Parts > 1 {
		whole, done, err := m.uploads.add(r, m.cfg.Now())
		if err != nil || !done {
			return api.RegisterReply{V: api.WireVersion, Pending: err == nil}, err
		}
		r = whole
	}
	attrs := map[string]string{}
	for k, v := range r.Attrs {
		attrs[k] = v
	}
	if r.HTTPAddr != "" {
		attrs["http_addr"] = r.HTTPAddr
	}
	if len(attrs) == 0 {
		attrs = nil
	}
	inv := make([]fsm.CopyInfo, 0, len(r.Inventory))
	for _, c := range r.Inventory {
		inv = append(inv, c.CopyInfo())
	}
	now := m.cfg.Now().UTC()
	res, err := m.Apply(ctx, &fsm.RegisterPeer{ReqID: fsm.ReqID{RequestID: r.RequestID}, ID: r.Peer, GUID: r.GUID,
		Site: r.Site, Host: r.Host, Attrs: attrs, Inventory: inv, At: now})
	if err != nil {
		return api.RegisterReply{}, err
	}
	m.Heartbeat(r.Peer, now)
	reply := api.RegisterReply{V: api.WireVersion}
	if x, ok := res.(fsm.Result); ok {
		reply.Index = x.Index
	}
	m.state.Read(func(s *fsm.State) {
		p, _ := s.Peer(r.Peer)
		reply.State = p.State
		reply.Config = m.peerConfigOf(s)
		reply.Status = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: reply.Config.ID}
	})
	m.log.Info("peer registered over NATS", "peer", r.Peer, "site", r.Site, "copies", len(r.Inventory))
	return reply, nil
}

func (m *Manager) natsHeartbeat(ctx context.Context, h api.Heartbeat) (api.HeartbeatReply, error) {
	if h.Peer == "" {
		return api.HeartbeatReply{}, bus.Errorf(api.CodeBadRequest, "heartbeat: peer is required")
	}
	if err := checkIDs("heartbeat", "peer", h.Peer, "guid", h.GUID); err != nil {
		return api.HeartbeatReply{}, err
	}
	if err := sentBy(ctx, "heartbeat", h.Peer); err != nil {
		return api.HeartbeatReply{}, err
	}
	var (
		p     fsm.Peer
		known bool
	)
	m.state.Read(func(s *fsm.State) { p, known = s.Peer(h.Peer) })
	reply := api.HeartbeatReply{V: api.WireVersion, Status: m.status()}
	switch {
	case !known:
		reply.Reregister = true
	case p.State == fsm.StateDown || p.State == fsm.StateRemoved || p.State == fsm.StateGracefulShutdown:
		reply.Reregister, reply.State = true, p.State
	case h.GUID != p.GUID:
		// Not the registered incarnation (or no GUID at all): nothing is
		// recorded, and a peer that is who it says registers again.
		reply.Reregister, reply.State = true, p.State
	default:
		m.Heartbeat(h.Peer, m.cfg.Now())
		m.recordPeerStats(h.Peer, h.Stats, time.Now())
		reply.State = p.State
	}
	return reply, nil
}

func (m *Manager) natsTargets(ctx context.Context, r api.TargetsRequest) (api.TargetsReply, error) {
	if r.Index == "" || r.LocalID == "" || r.Origin == "" {
		return api.TargetsReply{}, bus.Errorf(api.CodeBadRequest, "targets: index, local_id and origin are required, got %+v", r)
	}
	if err := checkIDs("targets", "index", r.Index, "local id", r.LocalID, "peer", r.Origin); err != nil {
		return api.TargetsReply{}, err
	}
	if err := sentBy(ctx, "targets", r.Origin); err != nil {
		return api.TargetsReply{}, err
	}
	if len(r.Replace) > 0 {
		return m.replaceTarget(ctx, r)
	}
	var used []fsm.CopySpec
	for _, t := range r.Used {
		if err := bus.ValidToken("peer", t.Peer); err != nil || t.Peer == r.Origin {
			return api.TargetsReply{}, bus.Errorf(api.CodeBadRequest, "targets: used target %q: not a peer id other than the origin", t.Peer)
		}
		used = append(used, fsm.CopySpec{Peer: t.Peer, Searchable: t.Searchable})
	}
	id, choice, res, err := m.startBucket(ctx, r.RequestID, r.Index, r.LocalID, r.Origin, r.Earliest, used)
	if err != nil {
		return api.TargetsReply{}, err
	}
	reply := api.TargetsReply{V: api.WireVersion, Bucket: id, Index: r.Index, Origin: r.Origin,
		OriginSite: choice.OriginSite, Degraded: choice.Degraded, Reason: choice.Reason}
	m.state.Read(func(s *fsm.State) {
		specs := choice.Targets
		if x, ok := res.(fsm.Result); ok && x.Duplicate {
			// A retried request: answer what was committed, not a new choice.
			specs = committedTargets(s, id, r.Origin)
		}
		for _, t := range specs {
			p, _ := s.Peer(t.Peer)
			reply.Targets = append(reply.Targets, api.Target{Peer: t.Peer, Site: subjectSite(p), Searchable: t.Searchable})
		}
		reply.Status = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: m.peerConfigOf(s).ID}
	})
	return reply, nil
}

// replaceTarget answers a targets request with Replace: the managers
// choose the replacement of a failed target of a hot bucket under the site
// policy and record its copy before the origin sends it a block, so every
// copy that counts toward an ack is in the state (SPEC §4).
func (m *Manager) replaceTarget(ctx context.Context, r api.TargetsRequest) (api.TargetsReply, error) {
	for _, p := range r.Replace {
		if err := bus.ValidToken("peer", p); err != nil {
			return api.TargetsReply{}, bus.Errorf(api.CodeBadRequest, "targets: replace %q: %v", p, err)
		}
	}
	var (
		id   string
		spec fsm.CopySpec
		err  error
		b    fsm.BucketView
		ok   bool
	)
	m.state.Read(func(s *fsm.State) {
		o, known := s.Peer(r.Origin)
		if !known {
			err = fmt.Errorf("%w: origin %q", fsm.ErrUnknownPeer, r.Origin)
			return
		}
		id = fsm.BucketID(r.Index, r.LocalID, o.GUID)
		if b, ok = findBucket(s, id); !ok {
			err = fmt.Errorf("%w: %q", fsm.ErrUnknownBucket, id)
			return
		}
		if b.Origin != r.Origin {
			err = bus.Errorf(api.CodeBadRequest, "targets: %s is not the origin of %s", r.Origin, id)
			return
		}
		spec, err = s.ChooseReplacement(id, r.Replace)
	})
	if err != nil {
		return api.TargetsReply{}, err
	}
	res, err := m.Apply(ctx, &fsm.AddCopy{ReqID: fsm.ReqID{RequestID: r.RequestID}, Bucket: id, Peer: spec.Peer, Searchable: spec.Searchable})
	if err != nil {
		return api.TargetsReply{}, err
	}
	if x, dup := res.(fsm.Result); dup && x.Duplicate {
		// A retry whose first attempt was recorded: Replace names every
		// peer the origin tried, so the copy on none of them (and not the
		// origin's) is the replacement recorded then.
		spec.Peer = ""
		m.state.Read(func(s *fsm.State) {
			for _, c := range committedTargets(s, id, r.Origin) {
				if !slices.Contains(r.Replace, c.Peer) {
					spec.Peer = c.Peer
				}
			}
		})
		if spec.Peer == "" {
			return api.TargetsReply{}, fmt.Errorf("%w: the replacement recorded for %s is gone", fsm.ErrUnknownCopy, id)
		}
	}
	reply := api.TargetsReply{V: api.WireVersion, Bucket: id, Index: r.Index, Origin: r.Origin}
	m.state.Read(func(s *fsm.State) {
		p, _ := s.Peer(spec.Peer)
		for _, c := range committedTargets(s, id, r.Origin) {
			if c.Peer == spec.Peer {
				reply.Targets = []api.Target{{Peer: c.Peer, Site: subjectSite(p), Searchable: c.Searchable}}
			}
		}
		reply.Status = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: m.peerConfigOf(s).ID}
	})
	m.log.Info("replacement replication target chosen", "bucket", id, "failed", r.Replace[0], "replacement", spec.Peer)
	return reply, nil
}

// committedTargets reads a bucket's non-origin copies from the state.
func committedTargets(s *fsm.State, bucket, origin string) []fsm.CopySpec {
	var out []fsm.CopySpec
	b, _ := findBucket(s, bucket)
	for _, c := range b.Copies {
		if c.Peer != origin {
			out = append(out, fsm.CopySpec{Peer: c.Peer, Searchable: c.Searchable})
		}
	}
	return out
}

// startBucket chooses targets for a new hot bucket on the committed state
// and commits AddBucket with them; if the state moved in between (a target
// went down) it chooses again, up to three times.
//
// used (an origin that replicated to its last targets while no manager
// answered) replaces the choice with the targets of it that are Up.
func (m *Manager) startBucket(ctx context.Context, reqID, index, localID, originID string, earliest int64, used []fsm.CopySpec) (string, fsm.TargetChoice, any, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		var (
			choice fsm.TargetChoice
			origin fsm.Peer
			known  bool
			err    error
		)
		m.state.Read(func(s *fsm.State) {
			origin, known = s.Peer(originID)
			if known {
				choice, err = s.ChooseTargets(originID, index)
			}
			if known && len(used) > 0 {
				var up []fsm.CopySpec
				for _, t := range used {
					if p, ok := s.Peer(t.Peer); ok && p.State == fsm.StateUp {
						up = append(up, t)
					}
				}
				// The copies exist: record them, whatever the policy says
				// now (the planner tops a bucket up once it is sealed).
				choice.Targets, err = up, nil
			}
		})
		if !known {
			return "", choice, nil, fmt.Errorf("%w: origin %q", fsm.ErrUnknownPeer, originID)
		}
		id := fsm.BucketID(index, localID, origin.GUID)
		if err != nil {
			// A retried request whose bucket exists: ChooseTargets may now
			// fail (the origin's state moved) but the answer is committed.
			return id, choice, nil, err
		}
		res, err := m.Apply(ctx, &fsm.AddBucket{ReqID: fsm.ReqID{RequestID: reqID}, ID: id, Index: index, Origin: originID,
			Earliest: earliest, Targets: choice.Targets, Degraded: choice.Degraded})
		if err == nil {
			return id, choice, res, nil
		}
		if errors.Is(err, fsm.ErrBucketExists) {
			return m.existingHotBucket(ctx, reqID, id, originID, choice, len(used) > 0, err)
		}
		lastErr = err
		if !errors.Is(err, fsm.ErrPeerNotUp) {
			break
		}
	}
	return "", fsm.TargetChoice{}, nil, lastErr
}

// existingHotBucket answers a targets request for a bucket the state
// already holds under another request: its origin re-registered while the
// request was unanswered (a leader change, a cut bus node) and the
// inventory brought the hot bucket in first, with no copy but the origin's.
// The answer is the committed targets; if there are none, the choice just
// made is recorded as copies (AddCopy) and answered, so the origin's acks
// get the copies the ack rule needs instead of "bucket exists" forever.
// Another peer's bucket, or a bucket no longer hot, stays refused.
//
// With used (the origin replicated to them while no manager answered), the
// used targets the state lacks are recorded even when it has others.
func (m *Manager) existingHotBucket(ctx context.Context, reqID, id, originID string, choice fsm.TargetChoice, used bool, exists error) (string, fsm.TargetChoice, any, error) {
	var b fsm.BucketView
	var ok bool
	var have []fsm.CopySpec
	m.state.Read(func(s *fsm.State) {
		b, ok = findBucket(s, id)
		have = committedTargets(s, id, originID)
	})
	if !ok || b.Origin != originID || !b.Hot {
		return "", fsm.TargetChoice{}, nil, exists
	}
	if len(have) == 0 || used {
		for _, t := range choice.Targets {
			if slices.ContainsFunc(have, func(h fsm.CopySpec) bool { return h.Peer == t.Peer }) {
				continue
			}
			_, err := m.Apply(ctx, &fsm.AddCopy{ReqID: fsm.ReqID{RequestID: reqID + "/" + t.Peer}, Bucket: id, Peer: t.Peer, Searchable: t.Searchable})
			if err != nil && !errors.Is(err, fsm.ErrCopyExists) {
				return "", fsm.TargetChoice{}, nil, err
			}
		}
		m.log.Info("targets for a hot bucket its origin's inventory brought in", "bucket", id, "origin", originID, "targets", len(choice.Targets))
	}
	return id, choice, fsm.Result{Duplicate: true}, nil
}

func (m *Manager) natsBucket(ctx context.Context, e api.BucketEvent) (api.BucketEventReply, error) {
	if e.Bucket == "" || e.Peer == "" {
		return api.BucketEventReply{}, bus.Errorf(api.CodeBadRequest, "bucket event %q: bucket and peer are required", e.Kind)
	}
	if err := checkIDs(fmt.Sprintf("bucket event %q", e.Kind), "bucket", e.Bucket, "peer", e.Peer, "target", e.Target); err != nil {
		return api.BucketEventReply{}, err
	}
	if err := m.eventSentBy(ctx, e); err != nil {
		return api.BucketEventReply{}, err
	}
	rid := fsm.ReqID{RequestID: e.RequestID}
	var cmd fsm.Command
	switch e.Kind {
	case api.EventRolled:
		cmd = &fsm.RollBucket{ReqID: rid, Bucket: e.Bucket, Earliest: e.Earliest, Latest: e.Latest, Size: e.Bytes,
			Events: e.Events, Blocks: e.Blocks, LastChecksum: e.LastBlockChecksum}
	case api.EventSearchable:
		cmd = &fsm.CopySearchable{ReqID: rid, Bucket: e.Bucket, Peer: e.Peer, Searchable: e.Searchable}
	case api.EventCopyAdded:
		cmd = &fsm.AddCopy{ReqID: rid, Bucket: e.Bucket, Peer: e.Peer, Searchable: e.Searchable, Blocks: e.Blocks}
	case api.EventCopyRemoved:
		cmd = &fsm.RemoveCopy{ReqID: rid, Bucket: e.Bucket, Peer: e.Peer}
	case api.EventCorrupt:
		cmd = &fsm.MarkCorrupt{ReqID: rid, Bucket: e.Bucket, Peer: e.Peer, Reason: e.Reason}
	case api.EventLength:
		// The copy's new length (after a fetch or truncate). The FSM records
		// it and, when it is the sealed length, closes the copy's open
		// fetch/truncate task in the same entry.
		cmd = &fsm.CopyLength{ReqID: rid, Bucket: e.Bucket, Peer: e.Peer, Blocks: e.Blocks, LastChecksum: e.LastBlockChecksum}
	case api.EventExtendSeal:
		// A copy that returned longer than the seal, its prefix verified
		// by its peer (fsm/DESIGN.md "Extending a seal").
		cmd = &fsm.ExtendSeal{ReqID: rid, Bucket: e.Bucket, Peer: e.Peer, From: e.SealedBlocks, FromChecksum: e.SealedChecksum,
			Blocks: e.Blocks, LastChecksum: e.LastBlockChecksum, Earliest: e.Earliest, Latest: e.Latest, Size: e.Bytes, Events: e.Events}
		m.log.Info("a copy longer than the sealed length asks to extend the seal", "bucket", e.Bucket, "peer", e.Peer,
			"sealed", e.SealedBlocks, "blocks", e.Blocks)
	case api.EventTargetFailed, api.EventTargetLagging, api.EventTargetCaughtUp:
		// Only the bucket's origin knows which blocks were acknowledged
		// without a target; a copy the FSM does not hold (a replacement
		// target chosen by the origin) has nothing to mark.
		var origin string
		var held bool
		m.state.Read(func(s *fsm.State) {
			if b, ok := findBucket(s, e.Bucket); ok {
				origin = b.Origin
				for _, c := range b.Copies {
					held = held || c.Peer == e.Target
				}
			}
		})
		if e.Kind != api.EventTargetCaughtUp {
			m.log.Warn("replication target short of acknowledged blocks", "kind", e.Kind, "bucket", e.Bucket, "origin", e.Peer, "target", e.Target)
		}
		if !held {
			return api.BucketEventReply{V: api.WireVersion, Status: m.status()}, nil
		}
		if origin != e.Peer {
			return api.BucketEventReply{}, bus.Errorf(api.CodeBadRequest, "bucket event %q: %s is not the origin of %s", e.Kind, e.Peer, e.Bucket)
		}
		cmd = &fsm.CopyShort{ReqID: rid, Bucket: e.Bucket, Peer: e.Target, Short: e.Kind != api.EventTargetCaughtUp}
	default:
		return api.BucketEventReply{}, bus.Errorf(api.CodeBadRequest, "bucket event: unknown kind %q", e.Kind)
	}
	res, err := m.Apply(ctx, cmd)
	if err != nil {
		return api.BucketEventReply{}, err
	}
	reply := api.BucketEventReply{V: api.WireVersion, Status: m.status()}
	if x, ok := res.(fsm.Result); ok {
		reply.Index, reply.Duplicate = x.Index, x.Duplicate
	}
	return reply, nil
}

// eventSentBy checks a bucket event's peer against its sender: the peer
// itself, or — for a length — the source of the open fetch task that
// pushed the blocks to that peer's copy (it reports the length it made).
func (m *Manager) eventSentBy(ctx context.Context, e api.BucketEvent) error {
	what := fmt.Sprintf("bucket event %q", e.Kind)
	err := sentBy(ctx, what, e.Peer)
	if err == nil || e.Kind != api.EventLength {
		return err
	}
	sender := bus.SubjectSender(bus.RequestSubject(ctx))
	pushed := false
	m.state.Read(func(s *fsm.State) {
		for _, t := range s.Tasks() {
			if t.Kind == fsm.TaskFetch && t.Bucket == e.Bucket && t.Source == sender && t.Target == e.Peer {
				pushed = true
			}
		}
	})
	if pushed {
		return nil
	}
	return err
}

// stateView answers bucket questions about one committed state, caching
// the bucket views it built (per index). Use it only inside the state's
// Read.
type stateView struct {
	s       *fsm.State
	byIndex map[string]map[string]fsm.BucketView
}

func newView(s *fsm.State) *stateView {
	return &stateView{s: s, byIndex: map[string]map[string]fsm.BucketView{}}
}

// bucket returns a bucket's view.
func (v *stateView) bucket(id string) (fsm.BucketView, bool) {
	index, _, _, err := fsm.ParseBucketID(id)
	if err != nil {
		return fsm.BucketView{}, false
	}
	m, ok := v.byIndex[index]
	if !ok {
		m = map[string]fsm.BucketView{}
		for _, b := range v.s.BucketList(index, "") {
			m[b.ID] = b
		}
		v.byIndex[index] = m
	}
	b, ok := m[id]
	return b, ok
}

// sealedOf is a sealed bucket's length and last block checksum (0, "" when
// it is not sealed): a point read of the state (it used to decode the
// whole state's encoding).
func (v *stateView) sealedOf(id string) (int64, string) {
	blocks, sum, _ := v.s.SealedLength(id)
	return blocks, sum
}

// findBucket returns a bucket's view from the committed state.
func findBucket(s *fsm.State, id string) (fsm.BucketView, bool) { return newView(s).bucket(id) }

// sealedOf is a sealed bucket's length and last block checksum.
func sealedOf(s *fsm.State, id string) (int64, string) { return newView(s).sealedOf(id) }

func (m *Manager) natsGeneration(ctx context.Context, r api.GenerationRequest) (api.GenerationReply, error) {
	if err := checkIDs("generation", "site", r.Site); err != nil {
		return api.GenerationReply{}, err
	}
	site := r.Site
	if site == "" {
		site = fsm.Site0
	}
	build := func() (view fsm.GenerationView, err error) {
		m.state.Read(func(s *fsm.State) {
			if r.PeersOnly {
				view = s.GenerationPeers(site)
				return
			}
			if r.Generation == 0 || r.Generation == s.CurrentGeneration() {
				view, err = s.Generation(site, r.Since)
				return
			}
			if r.Generation > s.CurrentGeneration() {
				err = bus.Errorf(api.CodeGeneration, "generation %d is not reached yet (current %d)", r.Generation, s.CurrentGeneration())
				return
			}
			var prim map[string]string
			if prim, err = s.PrimariesAt(site, r.Generation); err != nil {
				if errors.Is(err, fsm.ErrGenerationTooOld) {
					err = bus.Errorf(api.CodeGeneration, "%v", err)
				}
				return
			}
			// Primaries of a past generation; the buckets as they are now.
			if view, err = s.Generation(site, 0); err == nil {
				view.Generation, view.Primaries = r.Generation, prim
			}
		})
		if err != nil {
			var re *bus.RemoteError
			if !errors.As(err, &re) {
				err = fmt.Errorf("generation for site %q: %w", site, err)
			}
		}
		return view, err
	}
	if r.Invite != nil {
		if err := mgrclient.SendGeneration(ctx, m.nc, *r.Invite, build); err != nil {
			var re *bus.RemoteError
			if errors.As(err, &re) {
				return api.GenerationReply{}, err
			}
			return api.GenerationReply{}, fmt.Errorf("generation for site %q: stream: %w", site, err)
		}
		return api.GenerationReply{V: api.WireVersion, Streamed: true}, nil
	}
	view, err := build()
	if err != nil {
		return api.GenerationReply{}, err
	}
	return api.GenerationReply{V: api.WireVersion, View: view}, nil
}

func (m *Manager) natsConfig(ctx context.Context, r api.ConfigRequest) (api.PeerConfig, error) {
	var pc api.PeerConfig
	m.state.Read(func(s *fsm.State) { pc = m.peerConfigOf(s) })
	return pc, nil
}

func (m *Manager) natsConfirm(ctx context.Context, r api.ConfirmRequest) (api.ConfirmReply, error) {
	if r.ID == 0 || r.Peer == "" {
		return api.ConfirmReply{}, bus.Errorf(api.CodeBadRequest, "confirm: id and peer are required")
	}
	if err := checkIDs("confirm", "peer", r.Peer); err != nil {
		return api.ConfirmReply{}, err
	}
	if err := sentBy(ctx, "confirm", r.Peer); err != nil {
		return api.ConfirmReply{}, err
	}
	return m.confirmTask(ctx, r)
}

// confirmTask answers a confirmation from the committed state of a leader
// that has just verified its leadership with a quorum (raft VerifyLeader):
// a deposed leader can never let a peer destroy data.
func (m *Manager) confirmTask(ctx context.Context, r api.ConfirmRequest) (api.ConfirmReply, error) {
	if err := m.verifyLeader(ctx); err != nil {
		return api.ConfirmReply{}, err
	}
	reply := api.ConfirmReply{V: api.WireVersion, Leader: m.cfg.ID}
	m.state.Read(func(s *fsm.State) {
		var task *fsm.Task
		for _, t := range s.Tasks() {
			if t.ID == r.ID {
				t := t
				task = &t
			}
		}
		switch {
		case task == nil:
			reply.Reason = fmt.Sprintf("task %d is not open (done, failed or never created)", r.ID)
		case (task.Kind == fsm.TaskReplicate || task.Kind == fsm.TaskFetch) && task.Target == r.Peer:
			// The target of a copy asks who may push it blocks: the task's
			// source, while the task is open (peer/repl's sender rule).
			reply.Confirmed, reply.Task = true, task
		case !task.Destructive:
			reply.Reason = fmt.Sprintf("task %d (%s) is not destructive: nothing to confirm", r.ID, task.Kind)
		case !isRecipient(newView(s), task, r.Peer):
			reply.Reason = fmt.Sprintf("task %d (%s of %s) is not addressed to %s", r.ID, task.Kind, task.Bucket, r.Peer)
		default:
			reply.Confirmed, reply.Task = true, task
		}
	})
	return reply, nil
}

// natsBuckets answers a peer's question about its own buckets: the views of
// those named that hold a copy on it (a peer learns nothing of buckets it
// does not hold). Read from the leader's applied state, like every other
// operation.
func (m *Manager) natsBuckets(ctx context.Context, r api.BucketsRequest) (api.BucketsReply, error) {
	if err := r.Validate(); err != nil {
		return api.BucketsReply{}, bus.Errorf(api.CodeBadRequest, "%v", err)
	}
	if err := checkIDs("buckets", "peer", r.Peer); err != nil {
		return api.BucketsReply{}, err
	}
	if err := sentBy(ctx, "buckets", r.Peer); err != nil {
		return api.BucketsReply{}, err
	}
	reply := api.BucketsReply{V: api.WireVersion, Buckets: []fsm.BucketView{}}
	m.state.Read(func(s *fsm.State) {
		for _, v := range s.BucketViews(r.Buckets) {
			for _, c := range v.Copies {
				if c.Peer == r.Peer {
					reply.Buckets = append(reply.Buckets, v)
					break
				}
			}
		}
	})
	return reply, nil
}

func (m *Manager) natsFixupResult(ctx context.Context, r api.FixupResult) (api.FixupResultReply, error) {
	if r.ID == 0 || r.Peer == "" {
		return api.FixupResultReply{}, bus.Errorf(api.CodeBadRequest, "fixup result: id and peer are required")
	}
	if err := checkIDs("fixup result", "peer", r.Peer); err != nil {
		return api.FixupResultReply{}, err
	}
	if err := sentBy(ctx, "fixup result", r.Peer); err != nil {
		return api.FixupResultReply{}, err
	}
	var (
		task    fsm.Task
		open    bool
		recip   bool
		holders []string
	)
	m.state.Read(func(s *fsm.State) {
		for _, t := range s.Tasks() {
			if t.ID == r.ID {
				task, open = t, true
			}
		}
		if open {
			v := newView(s)
			recip = isRecipient(v, &task, r.Peer)
			holders = recipients(v, &task)
		}
	})
	reply := api.FixupResultReply{V: api.WireVersion}
	if !open {
		return reply, nil
	}
	if !recip {
		return reply, bus.Errorf(api.CodeBadRequest, "fixup result: task %d (%s of %s) is not addressed to %s", r.ID, task.Kind, task.Bucket, r.Peer)
	}
	reply.Known = true
	reqID := fmt.Sprintf("fixup-result-%d-%s", r.ID, r.Peer)
	if !r.OK {
		res, err := m.Apply(ctx, &fsm.FixupDone{ReqID: fsm.ReqID{RequestID: reqID}, ID: r.ID, Failed: true,
			Reason: fmt.Sprintf("%s: %s", r.Peer, r.Reason)})
		if err != nil && !errors.Is(err, fsm.ErrUnknownTask) {
			return api.FixupResultReply{}, err
		}
		reply.Index = resultIndex(res)
		return reply, nil
	}
	switch task.Kind {
	case fsm.TaskSeal:
		return api.FixupResultReply{}, bus.Errorf(api.CodeBadRequest, "fixup result: seal task %d: lengths travel in the delivery's FixupAck", r.ID)
	case fsm.TaskFreeze:
		if err := m.mark(ctx, fsm.MarkReported, r.ID, r.Peer); err != nil {
			return api.FixupResultReply{}, err
		}
		idx, err := m.finishFreeze(ctx, task, holders)
		if err != nil {
			return api.FixupResultReply{}, err
		}
		reply.Index = idx
		return reply, nil
	}
	res, err := m.Apply(ctx, &fsm.FixupDone{ReqID: fsm.ReqID{RequestID: reqID}, ID: r.ID, Reason: "done by " + r.Peer})
	if err != nil && !errors.Is(err, fsm.ErrUnknownTask) {
		return api.FixupResultReply{}, err
	}
	reply.Index = resultIndex(res)
	return reply, nil
}

func resultIndex(res any) uint64 {
	if x, ok := res.(fsm.Result); ok {
		return x.Index
	}
	return 0
}

// finishFreeze closes a freeze task once every running holder reported.
// With no holder running it closes at once: the FSM keeps the frozen
// bucket's tombstone with the holders that are away, and each deletes its
// copy when it returns (fsm/frozen.go).
func (m *Manager) finishFreeze(ctx context.Context, task fsm.Task, holders []string) (uint64, error) {
	for _, h := range holders {
		if !m.mux.marked(fsm.MarkReported, task.ID, h) {
			return 0, nil
		}
	}
	res, err := m.Apply(ctx, &fsm.FixupDone{ReqID: fsm.ReqID{RequestID: fmt.Sprintf("freeze-done-%d", task.ID)}, ID: task.ID,
		Reason: "every holder deleted its copy"})
	if err != nil && !errors.Is(err, fsm.ErrUnknownTask) {
		return 0, err
	}
	return resultIndex(res), nil
}

// mark commits a delivery mark (fsm.MarkFixup). Until the group agreed
// the cluster version that carries MarkFixup, it writes the version-1
// member-table entry instead, which every build applies alike (members.go).
// A mark of a task closed meanwhile is no error: it has nothing to mark.
func (m *Manager) mark(ctx context.Context, kind string, task uint64, peer string) error {
	if m.mux.marked(kind, task, peer) {
		return nil
	}
	if m.allowed(fsm.CmdMarkFixup) != nil {
		data, _ := json.Marshal(memberCommand{Op: kind, Task: task, Peer: peer})
		_, err := m.applyLog(ctx, raft.Log{Data: data, Extensions: memberExtension})
		return err
	}
	_, err := m.Apply(ctx, &fsm.MarkFixup{Task: task, Peer: peer, Kind: kind})
	if errors.Is(err, fsm.ErrUnknownTask) {
		return nil
	}
	return err
}

// ---- who gets a task --------------------------------------------------------

// recipients are the peers a task is delivered to (api.FixupTask's doc).
func recipients(v *stateView, t *fsm.Task) []string {
	switch t.Kind {
	case fsm.TaskReplicate, fsm.TaskFetch:
		if t.Source != "" {
			return []string{t.Source}
		}
		return nil
	case fsm.TaskFreeze:
		if t.Target != "" {
			// One holder's copy of a bucket already frozen (fsm/frozen.go).
			return []string{t.Target}
		}
		return activeHolders(v, t.Bucket)
	case fsm.TaskSeal:
		return activeHolders(v, t.Bucket)
	}
	if t.Target != "" {
		return []string{t.Target}
	}
	return nil
}

func isRecipient(v *stateView, t *fsm.Task, peer string) bool {
	for _, p := range recipients(v, t) {
		if p == peer {
			return true
		}
	}
	// A freeze holder that went down after reporting still counts.
	return t.Kind == fsm.TaskFreeze && hasCopy(v, t.Bucket, peer)
}

func hasCopy(v *stateView, bucket, peer string) bool {
	b, _ := v.bucket(bucket)
	for _, c := range b.Copies {
		if c.Peer == peer {
			return true
		}
	}
	return false
}

// activeHolders are the holders of a bucket's copies that run (Up,
// Detention, Decommissioning), sorted.
func activeHolders(v *stateView, bucket string) []string {
	var out []string
	b, _ := v.bucket(bucket)
	for _, c := range b.Copies {
		p, ok := v.s.Peer(c.Peer)
		if ok && (p.State == fsm.StateUp || p.State == fsm.StateDetention || p.State == fsm.StateDecommissioning) {
			out = append(out, c.Peer)
		}
	}
	return out
}

// ---- notices ------------------------------------------------------------------

// publishNotices publishes a Notice when the term starts (a new leader
// serves) and after every applied entry that changed the generation, the
// table version or the peer config.
func (t *natsTerm) publishNotices(ctx context.Context) {
	m := t.m
	select {
	case <-ctx.Done():
		return
	case <-t.subscribed:
	}
	var last api.Status
	first := true
	for {
		var (
			st    api.Status
			maint bool
		)
		m.state.Read(func(s *fsm.State) {
			st = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: m.peerConfigOf(s).ID}
			maint = s.Maintenance()
		})
		var kinds []api.NoticeKind
		if first {
			kinds = append(kinds, api.NoticeLeader)
		}
		if !first && (st.Generation != last.Generation || st.TableVersion != last.TableVersion) {
			kinds = append(kinds, api.NoticeGeneration)
		}
		if !first && st.ConfigID != last.ConfigID {
			kinds = append(kinds, api.NoticeConfig)
		}
		if len(kinds) > 0 {
			n := api.Notice{V: api.WireVersion, Kinds: kinds, Leader: m.cfg.ID, Maintenance: maint, Status: st}
			if err := bus.Publish(m.nc, m.subjects.Gen(), n); err != nil {
				m.log.Warn("publishing a generation notice failed", "err", err)
			} else {
				m.metrics.notices.Inc()
			}
		}
		last, first = st, false
		select {
		case <-ctx.Done():
			return
		case <-m.applied:
		}
	}
}

// ---- fixup delivery -------------------------------------------------------------

// deliverLoop delivers open fixup tasks every LoopInterval until the term
// ends.
func (t *natsTerm) deliverLoop(ctx context.Context) {
	tk := time.NewTicker(t.m.cfg.LoopInterval)
	defer tk.Stop()
	for {
		t.deliverRound(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// delivery is one (task, recipient) to send.
type delivery struct {
	msg  api.FixupTask
	site string
}

// deliverRound sends every open task to each recipient that has not
// acknowledged it (a committed "delivered" mark; seal answers are kept for
// the term), waits for the answers, then completes seals and freezes whose
// holders all answered.
func (t *natsTerm) deliverRound(ctx context.Context) {
	m := t.m
	var (
		todo   []delivery
		tasks  []fsm.Task
		sealOf = map[uint64][]string{}
		freeze = map[uint64][]string{}
	)
	m.state.Read(func(s *fsm.State) {
		tasks = s.Tasks()
		v := newView(s)
		for i := range tasks {
			task := &tasks[i]
			b, _ := v.bucket(task.Bucket)
			to := recipients(v, task)
			switch task.Kind {
			case fsm.TaskSeal:
				sealOf[task.ID] = to
			case fsm.TaskFreeze:
				freeze[task.ID] = to
			}
			for _, peer := range to {
				if task.Kind == fsm.TaskSeal {
					if t.sealAck(task.ID, peer) {
						continue
					}
				} else if s.Marked(fsm.MarkDelivered, task.ID, peer) {
					continue
				}
				p, ok := s.Peer(peer)
				if !ok || !(p.State.Serving() || p.State == fsm.StateDecommissioning) {
					continue // not running: the planner fails the task
				}
				msg := api.FixupTask{V: api.WireVersion, ID: task.ID, Kind: task.Kind, Level: task.Level.String(), Bucket: task.Bucket,
					Index: b.Index, Source: task.Source, Target: task.Target, Searchable: task.Searchable,
					Destructive: task.Destructive, Reason: task.Reason, To: peer}
				if sp, ok := s.Peer(task.Source); ok {
					msg.SourceSite = subjectSite(sp)
				}
				if tp, ok := s.Peer(task.Target); ok {
					msg.TargetSite = subjectSite(tp)
				}
				if task.Kind == fsm.TaskFetch || task.Kind == fsm.TaskTruncate {
					msg.SealedBlocks, msg.LastBlockChecksum = v.sealedOf(task.Bucket)
				}
				todo = append(todo, delivery{msg: msg, site: subjectSite(p)})
			}
		}
	})
	t.pruneSeals(tasks)

	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, d := range todo {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t.deliver(ctx, d)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for id, holders := range sealOf {
		t.finishSeal(ctx, id, holders)
	}
	for _, task := range tasks {
		if holders, ok := freeze[task.ID]; ok {
			if _, err := m.finishFreeze(ctx, task, holders); err != nil && ctx.Err() == nil {
				m.log.Warn("closing a freeze task failed", "task", task.ID, "err", err)
			}
		}
	}
}

// deliver sends one task to one peer and acts on the answer.
func (t *natsTerm) deliver(ctx context.Context, d delivery) {
	m := t.m
	subj, err := m.subjects.Fixup(d.site, d.msg.To)
	if err != nil {
		m.log.Error("fixup task for a peer whose name is no subject token", "task", d.msg.ID, "peer", d.msg.To, "err", err)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, m.cfg.FixupDeliveryTimeout)
	ack, err := bus.Request[api.FixupTask, api.FixupAck](dctx, m.nc, subj, d.msg)
	cancel()
	if err != nil {
		outcome := "error"
		switch {
		case errors.Is(err, bus.ErrNoResponders):
			outcome = "no_responders"
		case errors.Is(err, bus.ErrTimeout):
			outcome = "timeout"
		}
		m.metrics.deliveries.WithLabelValues(outcome).Inc()
		m.log.Debug("fixup task not delivered; retried next round", "task", d.msg.ID, "kind", d.msg.Kind, "peer", d.msg.To, "err", err)
		return
	}
	if !ack.Accepted {
		m.metrics.deliveries.WithLabelValues("refused").Inc()
		m.log.Warn("peer refused a fixup task", "task", d.msg.ID, "kind", d.msg.Kind, "peer", d.msg.To, "reason", ack.Reason)
		_, err := m.Apply(ctx, &fsm.FixupDone{ReqID: fsm.ReqID{RequestID: "fixup-refused-" + strconv.FormatUint(d.msg.ID, 10) + "-" + d.msg.To},
			ID: d.msg.ID, Failed: true, Reason: fmt.Sprintf("%s refused: %s", d.msg.To, ack.Reason)})
		if err != nil && !errors.Is(err, fsm.ErrUnknownTask) && ctx.Err() == nil {
			m.log.Warn("failing a refused fixup task failed", "task", d.msg.ID, "err", err)
		}
		return
	}
	m.metrics.deliveries.WithLabelValues("accepted").Inc()
	if d.msg.Kind == fsm.TaskSeal {
		t.mu.Lock()
		if t.seals[d.msg.ID] == nil {
			t.seals[d.msg.ID] = map[string]api.FixupAck{}
		}
		t.seals[d.msg.ID][d.msg.To] = ack
		t.mu.Unlock()
		return
	}
	if err := m.mark(ctx, fsm.MarkDelivered, d.msg.ID, d.msg.To); err != nil && ctx.Err() == nil {
		// The peer has the task; a later leader may deliver it again, which
		// the peer answers as a task it already has.
		m.log.Warn("recording a fixup delivery failed", "task", d.msg.ID, "peer", d.msg.To, "err", err)
	}
}

func (t *natsTerm) sealAck(id uint64, peer string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.seals[id][peer]
	return ok
}

// pruneSeals forgets the answers of seal tasks that are no longer open.
func (t *natsTerm) pruneSeals(open []fsm.Task) {
	ids := map[uint64]bool{}
	for _, x := range open {
		ids[x.ID] = true
	}
	t.mu.Lock()
	for id := range t.seals {
		if !ids[id] {
			delete(t.seals, id)
		}
	}
	t.mu.Unlock()
}

// finishSeal commits the bucket sealed at the longest length its running
// holders reported, then closes the task, once every one of them answered.
func (t *natsTerm) finishSeal(ctx context.Context, id uint64, holders []string) {
	if len(holders) == 0 {
		return
	}
	m := t.m
	t.mu.Lock()
	acks := t.seals[id]
	var (
		best    api.FixupAck
		found   bool
		lengths []fsm.PeerLength
	)
	for _, h := range holders {
		a, ok := acks[h]
		if !ok {
			t.mu.Unlock()
			return
		}
		if !found || a.Blocks > best.Blocks {
			best, found = a, true
		}
		lengths = append(lengths, fsm.PeerLength{Peer: h, Blocks: a.Blocks, LastChecksum: a.LastBlockChecksum})
	}
	t.mu.Unlock()
	var bucket string
	m.state.Read(func(s *fsm.State) {
		for _, x := range s.Tasks() {
			if x.ID == id {
				bucket = x.Bucket
			}
		}
	})
	if bucket == "" {
		return
	}
	// Every holder's length goes with the seal, so the FSM knows which
	// copies are shorter (fetch) and which longer (truncate).
	_, err := m.Apply(ctx, &fsm.SealBucket{ReqID: fsm.ReqID{RequestID: fmt.Sprintf("seal-%d", id)}, Bucket: bucket,
		Blocks: best.Blocks, LastChecksum: best.LastBlockChecksum, Earliest: best.Earliest, Latest: best.Latest,
		Size: best.Bytes, Events: best.Events, Lengths: lengths})
	if err != nil && !errors.Is(err, fsm.ErrBucketNotHot) {
		if ctx.Err() == nil {
			m.log.Warn("sealing a bucket failed", "bucket", bucket, "task", id, "err", err)
		}
		return
	}
	if _, err := m.Apply(ctx, &fsm.FixupDone{ReqID: fsm.ReqID{RequestID: fmt.Sprintf("seal-done-%d", id)}, ID: id,
		Reason: fmt.Sprintf("sealed at %d blocks", best.Blocks)}); err != nil && !errors.Is(err, fsm.ErrUnknownTask) && ctx.Err() == nil {
		m.log.Warn("closing a seal task failed", "task", id, "err", err)
	}
	m.log.Info("bucket sealed", "bucket", bucket, "blocks", best.Blocks, "holders", len(holders))
}
