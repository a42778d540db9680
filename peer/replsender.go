package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer/repl"
)

// ErrNotOrigin: a replication request that adds blocks to a copy or rolls
// it came from a peer that is neither the bucket's origin nor the source
// of an open fixup copy to this peer (SPEC §6: a replica takes frames only
// from its bucket's origin). It changes nothing.
var ErrNotOrigin = errors.New("replication sender is not the bucket's origin")

// ErrReplicaTruncate: a roll shorter than the copy would cut it; a replica
// is cut only through a truncate task confirmed against the managers'
// committed state, never by a replication message.
var ErrReplicaTruncate = errors.New("a roll does not truncate a copy")

// replSenders decides who may write to this peer's copies over
// quarry.repl.<site>.<me>.<sender>: the sender token is bound to the
// sender's NATS user by permissions, and a write (blocks, roll) is taken
// only from the bucket's origin — the peer whose registered GUID the
// bucket id carries — or from the source of an open replicate/fetch task
// whose target is this peer, as the leader confirms.
type replSenders struct {
	p  *Peer
	cl *cluster // the cluster being joined: p.cl is set only once it serves

	mu        sync.Mutex
	refreshed time.Time
	confirmed map[uint64]confirmedTransfer
}

type confirmedTransfer struct {
	bucket, source string
	until          time.Time
}

// transferConfirmFor is how long a confirmed transfer is trusted before it
// is confirmed again (a push of a large copy sends many messages).
const transferConfirmFor = 10 * time.Second

// check refuses req unless sender may write it. Reads (length, fetch) are
// anyone's: they change nothing.
func (rs *replSenders) check(ctx context.Context, sender string, req repl.Request, guid string) error {
	if req.Op != repl.OpBlocks && req.Op != repl.OpRoll {
		return nil
	}
	me := rs.p.cfg.ID
	if sender == "" || sender == me {
		return bus.Errorf(bus.CodeBadRequest, "replication %s of %s from %q: %v", req.Op, req.Bucket, sender, ErrNotOrigin)
	}
	if req.Task != 0 {
		return rs.checkTransfer(ctx, sender, req)
	}
	if req.Origin != sender {
		return bus.Errorf(bus.CodeBadRequest, "replication %s of %s: origin %q sent by %q: %v", req.Op, req.Bucket, req.Origin, sender, ErrNotOrigin)
	}
	if rs.guidOf(ctx, sender, guid) != guid {
		return bus.Errorf(bus.CodeBadRequest, "replication %s of %s from %s: the bucket's origin GUID %s is not the sender's: %v",
			req.Op, req.Bucket, sender, guid, ErrNotOrigin)
	}
	return nil
}

// guidOf is sender's registered GUID from the peer list, which is read
// again (at most every 200 ms) when the sender is unknown or its GUID is
// not want (it may have registered anew).
func (rs *replSenders) guidOf(ctx context.Context, sender, want string) string {
	r := rs.cl.repl
	r.mu.Lock()
	got := r.peers[sender].GUID
	r.mu.Unlock()
	if got == want {
		return got
	}
	rs.mu.Lock()
	stale := time.Since(rs.refreshed) > 200*time.Millisecond
	if stale {
		rs.refreshed = time.Now()
	}
	rs.mu.Unlock()
	if !stale {
		return got
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	peers, err := rs.cl.cp.Peers(cctx)
	if err != nil {
		return got
	}
	r.setPeers(peers)
	for _, pv := range peers {
		if pv.ID == sender {
			return pv.GUID
		}
	}
	return got
}

func (rs *replSenders) checkTransfer(ctx context.Context, sender string, req repl.Request) error {
	rs.mu.Lock()
	c, ok := rs.confirmed[req.Task]
	rs.mu.Unlock()
	if ok && time.Now().Before(c.until) && c.bucket == req.Bucket && c.source == sender {
		return nil
	}
	// The leader confirms an open replicate or fetch task to its target
	// (mgr.confirm, the same operation that confirms destructive tasks).
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t, err := rs.cl.cp.Confirm(cctx, req.Task)
	if err != nil {
		return fmt.Errorf("replication %s of %s from %s: task %d: %w", req.Op, req.Bucket, sender, req.Task, err)
	}
	if (t.Kind != fsm.TaskReplicate && t.Kind != fsm.TaskFetch) || t.Bucket != req.Bucket || t.Source != sender || t.Target != rs.p.cfg.ID {
		return bus.Errorf(bus.CodeBadRequest, "replication %s of %s from %s: task %d is %s of %s from %s to %s: %v",
			req.Op, req.Bucket, sender, req.Task, t.Kind, t.Bucket, t.Source, t.Target, ErrNotOrigin)
	}
	rs.mu.Lock()
	if rs.confirmed == nil || len(rs.confirmed) > 1024 {
		rs.confirmed = map[uint64]confirmedTransfer{}
	}
	rs.confirmed[req.Task] = confirmedTransfer{bucket: req.Bucket, source: sender, until: time.Now().Add(transferConfirmFor)}
	rs.mu.Unlock()
	return nil
}
