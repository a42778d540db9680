package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// The peers' protocol on NATS: peerService and its operation table, the
// guard every operation passes, and one handler per operation.

// peerService serves the peers' protocol of package api on
// <prefix>.mgr.<op> for the Manager it borrows (Consul's Catalog{srv}
// shape): one method per operation, bound in peerOps. natsTerm builds one
// per leadership term.
type peerService struct{ m *Manager }

// peerOp subscribes one operation on subj for s.
type peerOp func(s *peerService, subj string) (*bus.Service, error)

// peerOps are the manager operations (api.Ops) by name.
var peerOps = map[string]peerOp{
	api.OpRegister:    op("register", (*peerService).register),
	api.OpHeartbeat:   op("heartbeat", (*peerService).heartbeat),
	api.OpTargets:     op("targets", (*peerService).targets),
	api.OpBucket:      op("bucket event", (*peerService).bucketEvent),
	api.OpGeneration:  op("generation", (*peerService).generation),
	api.OpConfig:      op("config", (*peerService).config),
	api.OpConfirm:     op("confirm", (*peerService).confirm),
	api.OpFixupResult: op("fixup result", (*peerService).fixupResult),
	api.OpBuckets:     op("buckets", (*peerService).buckets),
	api.OpBundle:      op("bundle", (*peerService).bundle),
	api.OpSavedSearch: op("saved search", savedSearchOp), // savedops.go
}

// op binds an operation's handler: guard checks the request's wire version
// and this manager's leadership and maps errors to remote codes; what names
// the operation in errors.
func op[Req api.Request, Resp any](what string, h func(*peerService, context.Context, Req) (Resp, error)) peerOp {
	return func(s *peerService, subj string) (*bus.Service, error) {
		handle := func(ctx context.Context, req Req) (Resp, error) { return h(s, ctx, req) }
		return bus.Serve(s.m.nc, subj, bus.ServeOptions{Logger: s.m.log}, guard(s.m, what, handle))
	}
}

// serve subscribes one manager operation from every sender,
// <prefix>.mgr.<op>.*; each handler checks the operation's peer id against
// the sender the subject names (sentBy), which permissions bind to the
// sender's NATS user.
func (ps *peerService) serve(op string) (*bus.Service, error) {
	subj, err := ps.m.subjects.MgrOpAny(op)
	if err != nil {
		return nil, err
	}
	serve, ok := peerOps[op]
	if !ok {
		return nil, fmt.Errorf("unknown manager operation %q", op)
	}
	return serve(ps, subj)
}

// guard wraps a handler: refuse a newer wire version, refuse when this
// manager is no longer the leader (its subscription is going away), and map
// errors to stable remote codes.
func guard[Req api.Request, Resp any](m *Manager, what string, h func(ctx context.Context, req Req) (Resp, error)) bus.Handler[Req, Resp] {
	return func(ctx context.Context, req Req) (Resp, error) {
		var zero Resp
		if err := api.CheckVersion(what, req.Version()); err != nil {
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

func (ps *peerService) register(ctx context.Context, r api.Register) (api.RegisterReply, error) {
	m := ps.m
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
		reply.Config = m.peerConfigFor(s, r.KeyedDigests)
		reply.Status = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: reply.Config.ID}
	})
	m.log.Info("peer registered over NATS", "peer", r.Peer, "site", r.Site, "copies", len(r.Inventory))
	return reply, nil
}

func (ps *peerService) heartbeat(ctx context.Context, h api.Heartbeat) (api.HeartbeatReply, error) {
	m := ps.m
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

func (ps *peerService) targets(ctx context.Context, r api.TargetsRequest) (api.TargetsReply, error) {
	m := ps.m
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
		return ps.replaceTarget(ctx, r)
	}
	var used []fsm.CopySpec
	for _, t := range r.Used {
		if err := bus.ValidToken("peer", t.Peer); err != nil || t.Peer == r.Origin {
			return api.TargetsReply{}, bus.Errorf(api.CodeBadRequest, "targets: used target %q: not a peer id other than the origin", t.Peer)
		}
		used = append(used, fsm.CopySpec{Peer: t.Peer, Searchable: t.Searchable})
	}
	id, choice, res, err := ps.startBucket(ctx, r.RequestID, r.Index, r.LocalID, r.Origin, r.Earliest, used)
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
		reply.Status = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: m.peerConfigFor(s, true).ID}
	})
	return reply, nil
}

// replaceTarget answers a targets request with Replace: the managers
// choose the replacement of a failed target of a hot bucket under the site
// policy and record its copy before the origin sends it a block, so every
// copy that counts toward an ack is in the state (SPEC §4).
func (ps *peerService) replaceTarget(ctx context.Context, r api.TargetsRequest) (api.TargetsReply, error) {
	m := ps.m
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
		reply.Status = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: m.peerConfigFor(s, true).ID}
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
func (ps *peerService) startBucket(ctx context.Context, reqID, index, localID, originID string, earliest int64, used []fsm.CopySpec) (string, fsm.TargetChoice, any, error) {
	m := ps.m
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
		if x, dup := res.(fsm.Result); err == nil && dup && x.Duplicate && len(used) > 0 {
			// The first attempt was applied but its answer lost, and the
			// origin went on with targets of its own: record those too, so
			// the state knows every copy that counts toward an ack.
			return ps.existingHotBucket(ctx, reqID, id, originID, choice, true, fsm.ErrBucketExists)
		}
		if err == nil {
			return id, choice, res, nil
		}
		if errors.Is(err, fsm.ErrBucketExists) {
			return ps.existingHotBucket(ctx, reqID, id, originID, choice, len(used) > 0, err)
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
func (ps *peerService) existingHotBucket(ctx context.Context, reqID, id, originID string, choice fsm.TargetChoice, used bool, exists error) (string, fsm.TargetChoice, any, error) {
	m := ps.m
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

func (ps *peerService) bucketEvent(ctx context.Context, e api.BucketEvent) (api.BucketEventReply, error) {
	m := ps.m
	if e.Bucket == "" || e.Peer == "" {
		return api.BucketEventReply{}, bus.Errorf(api.CodeBadRequest, "bucket event %q: bucket and peer are required", e.Kind)
	}
	if err := checkIDs(fmt.Sprintf("bucket event %q", e.Kind), "bucket", e.Bucket, "peer", e.Peer, "target", e.Target); err != nil {
		return api.BucketEventReply{}, err
	}
	if err := ps.eventSentBy(ctx, e); err != nil {
		return api.BucketEventReply{}, err
	}
	rid := fsm.ReqID{RequestID: e.RequestID}
	var cmd fsm.Command
	switch e.Kind {
	case api.EventRolled:
		// Only the origin rolls its hot bucket (issue 25 N2): a roll seals
		// the bucket and sets its length, which every other copy is then
		// cut to. Checked here against committed state, and in Apply too
		// once the group reads RollBucket.Origin.
		if origin, known := ps.originOf(e.Bucket); known && origin != e.Peer {
			return api.BucketEventReply{}, bus.Errorf(api.CodeBadRequest, "bucket event %q: %s is not the origin of %s (%s is): %v", e.Kind, e.Peer, e.Bucket, origin, fsm.ErrNotOrigin)
		}
		roll := &fsm.RollBucket{ReqID: rid, Bucket: e.Bucket, Earliest: e.Earliest, Latest: e.Latest, Size: e.Bytes,
			Events: e.Events, Blocks: e.Blocks, LastChecksum: e.LastBlockChecksum}
		if m.ClusterVersion() >= fsm.RollOriginVersion {
			roll.Origin = e.Peer
		}
		cmd = roll
	case api.EventSearchable:
		cmd = &fsm.CopySearchable{ReqID: rid, Bucket: e.Bucket, Peer: e.Peer, Searchable: e.Searchable}
	case api.EventCopyAdded:
		// A claim like an inventory's (fsm/inventory.go, review M5): only
		// a copy the managers can vouch for is recorded.
		vouched := false
		m.state.Read(func(s *fsm.State) { vouched = s.VouchesForCopy(e.Bucket, e.Peer) })
		if !vouched {
			return api.BucketEventReply{}, bus.Errorf(api.CodeRefused, "copy_added: the managers assigned %s no copy of %s (a copy a fixup task made is reported by its result)", e.Peer, e.Bucket)
		}
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
		origin, _ := ps.originOf(e.Bucket)
		var held bool
		m.state.Read(func(s *fsm.State) {
			if b, ok := findBucket(s, e.Bucket); ok {
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

// originOf is a bucket's origin in the committed state, and whether the
// bucket is known.
func (ps *peerService) originOf(id string) (origin string, known bool) {
	ps.m.state.Read(func(s *fsm.State) {
		var b fsm.BucketView
		if b, known = findBucket(s, id); known {
			origin = b.Origin
		}
	})
	return origin, known
}

// eventSentBy checks a bucket event's peer against its sender: the peer
// itself, or — for a length — the source of the open fetch task that
// pushed the blocks to that peer's copy (it reports the length it made).
func (ps *peerService) eventSentBy(ctx context.Context, e api.BucketEvent) error {
	m := ps.m
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

// heardHead records the search head that sent r with its URL (heads.go):
// a sender that is a registered peer is not a search head and is ignored.
func (ps *peerService) heardHead(ctx context.Context, r api.GenerationRequest) {
	sender := bus.SubjectSender(bus.RequestSubject(ctx))
	if sender == "" || r.Site == "" {
		return
	}
	isPeer := false
	ps.m.state.Read(func(s *fsm.State) { _, isPeer = s.Peer(sender) })
	if !isPeer {
		ps.m.heads.record(sender, r.Site, r.URL, time.Now())
	}
}

func (ps *peerService) generation(ctx context.Context, r api.GenerationRequest) (api.GenerationReply, error) {
	m := ps.m
	if err := checkIDs("generation", "site", r.Site); err != nil {
		return api.GenerationReply{}, err
	}
	site := r.Site
	if site == "" {
		site = fsm.Site0
	}
	if r.URL != "" {
		ps.heardHead(ctx, r)
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

// config answers the cluster config a role needs. A peer names itself
// (ConfigRequest.Peer, checked against the sender) and must be registered:
// it gets the whole config. A request naming no peer is a search head's
// (the bus lets no other role send mgr.config): it gets only what a head
// uses — the search tokens' digests and the known indexes — never the HEC
// tokens' digests or the admin token's (review L1: a head's memory or
// traffic would otherwise hold the material for guessing them offline).
// The config id stays the whole config's, so notices compare alike.
func (ps *peerService) config(ctx context.Context, r api.ConfigRequest) (api.PeerConfig, error) {
	m := ps.m
	if r.Peer != "" {
		if err := checkIDs("config", "peer", r.Peer); err != nil {
			return api.PeerConfig{}, err
		}
		if err := sentBy(ctx, "config", r.Peer); err != nil {
			return api.PeerConfig{}, err
		}
	}
	var pc api.PeerConfig
	known := false
	m.state.Read(func(s *fsm.State) {
		pc = m.peerConfigFor(s, r.KeyedDigests)
		_, known = s.Peer(r.Peer)
	})
	switch {
	case r.Peer == "":
		pc.HECTokens, pc.AdminTokenDigest = nil, ""
	case !known:
		return api.PeerConfig{}, bus.Errorf(api.CodeRefused, "config for peer %q: not registered: register first", r.Peer)
	}
	return pc, nil
}

// bundle answers the configuration bundle in force to a registered peer
// (itself the sender); search heads never ask (the bus lets them send
// only generation and config).
func (ps *peerService) bundle(ctx context.Context, r api.BundleRequest) (api.BundleReply, error) {
	if err := checkIDs("bundle", "peer", r.Peer); err != nil {
		return api.BundleReply{}, err
	}
	if err := sentBy(ctx, "bundle", r.Peer); err != nil {
		return api.BundleReply{}, err
	}
	var b *fsm.ConfigBundle
	known := false
	ps.m.state.Read(func(s *fsm.State) {
		b = fsm.BundleOf(s)
		_, known = s.Peer(r.Peer)
	})
	if !known {
		return api.BundleReply{}, bus.Errorf(api.CodeRefused, "bundle for peer %q: not registered: register first", r.Peer)
	}
	reply := api.BundleReply{V: api.WireVersion}
	if b != nil {
		reply.Hash, reply.Files = b.Hash, b.Files
	}
	return reply, nil
}

func (ps *peerService) confirm(ctx context.Context, r api.ConfirmRequest) (api.ConfirmReply, error) {
	if r.ID == 0 || r.Peer == "" {
		return api.ConfirmReply{}, bus.Errorf(api.CodeBadRequest, "confirm: id and peer are required")
	}
	if err := checkIDs("confirm", "peer", r.Peer); err != nil {
		return api.ConfirmReply{}, err
	}
	if err := sentBy(ctx, "confirm", r.Peer); err != nil {
		return api.ConfirmReply{}, err
	}
	return ps.confirmTask(ctx, r)
}

// confirmTask answers a confirmation from the committed state of a leader
// that has just verified its leadership with a quorum (raft VerifyLeader):
// a deposed leader can never let a peer destroy data.
func (ps *peerService) confirmTask(ctx context.Context, r api.ConfirmRequest) (api.ConfirmReply, error) {
	m := ps.m
	if err := m.verifyLeader(ctx); err != nil {
		return api.ConfirmReply{}, err
	}
	reply := api.ConfirmReply{V: api.WireVersion, Leader: m.cfg.ID}
	m.state.Read(func(s *fsm.State) {
		var task *fsm.Task
		if t, ok := s.Task(r.ID); ok {
			task = &t
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

// buckets answers a peer's question about its own buckets: the views of
// those named that hold a copy on it (a peer learns nothing of buckets it
// does not hold). Read from the leader's applied state, like every other
// operation.
func (ps *peerService) buckets(ctx context.Context, r api.BucketsRequest) (api.BucketsReply, error) {
	m := ps.m
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

func (ps *peerService) fixupResult(ctx context.Context, r api.FixupResult) (api.FixupResultReply, error) {
	m := ps.m
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
		task, open = s.Task(r.ID)
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
