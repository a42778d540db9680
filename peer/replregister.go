package peer

// Registering a hot bucket with the managers when they answer late or not
// at all (peer/CLUSTER.md "Every manager unreachable", "A request that
// timed out is ambiguous").

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// managersUnreachable: no manager answered the request at all (none
// serves the subject, or none replied in time), as opposed to a manager
// refusing it.
func managersUnreachable(err error) bool {
	return errors.Is(err, bus.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// mayChooseLocked takes in a targets or replacement request for hb that
// no manager answered (err: managersUnreachable) and reports whether the
// origin may now choose targets for hb itself. Only when the request
// reached no manager (none serves the subject: nothing was applied) and
// no earlier request for hb timed out: a timeout may have been applied
// with its answer lost, which makes hb ambiguous for good (hotRepl).
func (r *replicator) mayChooseLocked(hb *hotRepl, err error) bool {
	if !errors.Is(err, bus.ErrNoResponders) {
		hb.ambiguous = true
	}
	return !hb.ambiguous
}

// adoptLastLocked starts hb on the last targets the managers gave (those
// the peer list still shows Up), marking it unregistered. It returns the
// targets' ids, nil when there is no such set (the peer never got one:
// acks wait for the managers).
func (r *replicator) adoptLastLocked(hb *hotRepl) []string {
	var ids []string
	for _, t := range r.last {
		if pv, ok := r.peers[t.peer]; ok && pv.State != fsm.StateUp {
			continue
		}
		r.addTargetLocked(hb, t.peer, t.searchable)
		hb.targets[len(hb.targets)-1].site = t.site
		ids = append(ids, t.peer)
	}
	if ids == nil {
		return nil
	}
	hb.registered = make(chan struct{})
	hb.ready = true
	r.advanceLocked(hb)
	return ids
}

// registerLater registers a bucket started while no manager answered: the
// targets request again (same request id), naming the targets the origin
// replicates to, so the managers record those copies (api.TargetsRequest
// Used), retried until a manager answers. A refusal ends it too (logged):
// the bucket then reaches the managers with the origin's inventory.
func (r *replicator) registerLater(hb *hotRepl) {
	defer r.wg.Done()
	defer close(hb.registered)
	backoff := 500 * time.Millisecond
	for {
		r.mu.Lock()
		var used []api.Target
		for _, t := range hb.targets {
			used = append(used, api.Target{Peer: t.peer, Searchable: t.searchable})
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := r.cp.Targets(ctx, api.TargetsRequest{V: api.WireVersion, Index: hb.index, LocalID: hb.localID, Origin: r.p.cfg.ID, Used: used})
		cancel()
		if err == nil {
			r.away.Store(false)
			r.adoptCommitted(hb, resp.Targets)
			r.log.Info("bucket started while no manager answered is registered", "bucket", hb.id, "targets", len(used))
			return
		}
		if !managersUnreachable(err) && !bus.IsRemote(err, api.CodeNotLeader) {
			r.log.Warn("the managers refused a bucket started while none answered; its origin's inventory brings it in", "bucket", hb.id, "err", err)
			return
		}
		select {
		case <-r.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// adoptCommitted adds to hb's set every target the managers answered
// that the origin never tried: the state holds those copies as whole, so
// they get every block (acks wait for them like for any target) rather
// than stay empty copies a seal could be answered from.
func (r *replicator) adoptCommitted(hb *hotRepl, targets []api.Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range targets {
		if hb.tried[t.Peer] || t.Peer == r.p.cfg.ID {
			continue
		}
		r.log.Warn("the managers hold a copy the origin did not replicate to: it is sent every block", "bucket", hb.id, "target", t.Peer)
		r.addTargetLocked(hb, t.Peer, t.Searchable)
		if t.Site != "" {
			hb.targets[len(hb.targets)-1].site = t.Site
		}
	}
	hb.poke()
}
