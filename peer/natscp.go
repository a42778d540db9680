package peer

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// NATSControlPlane is the ControlPlane over the managers' NATS service
// (quarry.mgr.<op>, mgrclient.ManagerClient). Fixup tasks arrive pushed on
// quarry.fixup.<site>.<peer>: each is acknowledged at once and queued for
// the fixup runner, except a seal task, whose acknowledgement carries this
// peer's length of the bucket. The HTTP control plane, when given, answers
// what the NATS service has no operation for (the bucket list a restarted
// origin needs).
type NATSControlPlane struct {
	mc   *mgrclient.ManagerClient
	peer string
	HTTP *HTTPControlPlane
	// guid is the GUID this peer registered with; heartbeats carry it and
	// the managers check it against the registered one.
	guid atomic.Value // string

	mu    sync.Mutex
	tasks map[uint64]FixupTask // delivered, not yet reported
}

// NewNATSControlPlane returns a control plane on nc.
func NewNATSControlPlane(nc *nats.Conn, subj bus.Subjects, peer string) *NATSControlPlane {
	mc := mgrclient.NewManagerClient(nc, subj)
	mc.Sender = peer // quarry.mgr.<op>.<peer>: the only subjects its NATS user may publish
	return &NATSControlPlane{mc: mc, peer: peer, tasks: map[uint64]FixupTask{}}
}

// ReportsFixups: results travel on quarry.mgr.fixup-result.
func (c *NATSControlPlane) ReportsFixups() bool { return true }

func (c *NATSControlPlane) Register(ctx context.Context, id string, req RegisterRequest) error {
	r := api.Register{Peer: id, GUID: req.GUID, Site: req.Site, Host: req.Host, Attrs: req.Attrs, HTTPAddr: req.HTTPAddr,
		Inventory: []api.Copy{}}
	for _, ci := range req.Inventory {
		state := api.CopyWarm
		if ci.Hot {
			state = api.CopyHot
		}
		r.Inventory = append(r.Inventory, api.Copy{Bucket: ci.Bucket, Index: ci.Index, State: state, Searchable: ci.Searchable,
			Events: ci.Events, Blocks: ci.Blocks, Bytes: ci.Size, Earliest: ci.Earliest, Latest: ci.Latest,
			ContentHash: req.hashes[ci.Bucket], LastBlockChecksum: req.lastSums[ci.Bucket], Corrupt: ci.Corrupt})
	}
	c.guid.Store(req.GUID)
	_, err := c.mc.Register(ctx, r)
	return err
}

func (c *NATSControlPlane) Heartbeat(ctx context.Context, id string, stats api.PeerStats) (fsm.PeerState, error) {
	guid, _ := c.guid.Load().(string)
	h := api.Heartbeat{Peer: id, GUID: guid, Stats: stats}
	rep, err := c.mc.Heartbeat(ctx, h)
	if err != nil {
		return "", err
	}
	if rep.Reregister {
		return rep.State, ErrRegisterFirst
	}
	return rep.State, nil
}

func (c *NATSControlPlane) Config(ctx context.Context) (fsm.Config, error) {
	pc, err := c.mc.Config(ctx, "")
	if err != nil {
		return fsm.Config{}, err
	}
	// The peer config carries the single-site RF; with sites min(2, RF)
	// is taken from it too (a multisite total is at least 2 in practice).
	return fsm.Config{ReplicationFactor: pc.ReplicationFactor, HeartbeatPeriod: pc.HeartbeatPeriod, HECTokens: pc.HECTokens, SearchTokens: pc.SearchTokens,
		Indexes: pc.Indexes, AutoCreateIndexes: pc.AutoCreateIndexes, MaxHotBytes: pc.MaxHotBytes, MaxHotSpan: pc.MaxHotSpan,
		MaxHotBuckets: pc.MaxHotBuckets, TargetTimeout: pc.TargetTimeout}, nil
}

func (c *NATSControlPlane) Maintenance(ctx context.Context) (bool, error) {
	pc, err := c.mc.Config(ctx, "")
	return pc.Maintenance, err
}

func (c *NATSControlPlane) Peers(ctx context.Context) ([]fsm.PeerView, error) {
	rep, err := c.mc.Generation(ctx, "site0", 0)
	if err != nil {
		return nil, err
	}
	var out []fsm.PeerView
	for _, p := range rep.View.Peers {
		out = append(out, fsm.PeerView{ID: p.ID, GUID: p.GUID, Site: p.Site, State: p.State, Attrs: p.Attrs})
	}
	return out, nil
}

func (c *NATSControlPlane) Targets(ctx context.Context, req TargetsRequest) (TargetsResponse, error) {
	ar := api.TargetsRequest{RequestID: "targets-" + req.Origin + "-" + req.Index + "-" + req.LocalID,
		Origin: req.Origin, Index: req.Index, LocalID: req.LocalID, Earliest: req.Earliest, Replace: req.Replace}
	if len(req.Replace) > 0 {
		// One replacement per set of tried peers: a retry of the same
		// attempt answers the same peer.
		ar.RequestID = "replace-" + req.Origin + "-" + req.Index + "-" + req.LocalID + "-" + strconv.Itoa(len(req.Replace))
	}
	for _, u := range req.Used {
		ar.Used = append(ar.Used, api.Target{Peer: u.Peer, Searchable: u.Searchable})
	}
	rep, err := c.mc.Targets(ctx, ar)
	if err != nil {
		return TargetsResponse{}, err
	}
	out := TargetsResponse{Bucket: rep.Bucket, TargetChoice: fsm.TargetChoice{Origin: rep.Origin, OriginSite: rep.OriginSite,
		Degraded: rep.Degraded, Reason: rep.Reason}}
	out.Sites = map[string]string{}
	for _, t := range rep.Targets {
		out.Targets = append(out.Targets, fsm.CopySpec{Peer: t.Peer, Searchable: t.Searchable})
		out.Sites[t.Peer] = t.Site
	}
	return out, nil
}

var eventKinds = map[string]api.BucketEventKind{
	"rolled": api.EventRolled, "target_failed": api.EventTargetFailed, "length": api.EventLength,
	"target_lagging": api.EventTargetLagging, "target_caught_up": api.EventTargetCaughtUp,
	"searchable": api.EventSearchable, "copy_added": api.EventCopyAdded, "copy_removed": api.EventCopyRemoved,
	"extend_seal": api.EventExtendSeal,
}

func (c *NATSControlPlane) BucketEvent(ctx context.Context, ev BucketEvent) error {
	kind, ok := eventKinds[ev.Type]
	if !ok {
		return fmt.Errorf("bucket event %q: unknown type", ev.Type)
	}
	rid := fmt.Sprintf("%s-%s-%s-%d", ev.Type, ev.Bucket, ev.Peer, ev.Blocks)
	if ev.SealedBlocks > 0 {
		rid = fmt.Sprintf("%s-%s-%s-%d-%d", ev.Type, ev.Bucket, ev.Peer, ev.SealedBlocks, ev.Blocks)
	}
	if ev.Target != "" {
		// A target can lag, catch up and lag again: each report is new
		// (its retries share the id).
		rid = fmt.Sprintf("%s-%s-%s-%s-%d", ev.Type, ev.Bucket, ev.Peer, ev.Target, time.Now().UnixNano())
	}
	_, err := c.mc.BucketEvent(ctx, api.BucketEvent{RequestID: rid,
		Kind: kind, Bucket: ev.Bucket, Peer: ev.Peer, Target: ev.Target, Searchable: ev.Searchable, Earliest: ev.Earliest,
		Latest: ev.Latest, Bytes: ev.Size, Events: ev.Events, Blocks: int64(ev.Blocks), LastBlockChecksum: ev.LastChecksum,
		SealedBlocks: int64(ev.SealedBlocks), SealedChecksum: ev.SealedChecksum})
	return err
}

func (c *NATSControlPlane) Buckets(ctx context.Context, peer string) ([]fsm.BucketView, error) {
	if c.HTTP == nil {
		return nil, ErrUnsupported
	}
	return c.HTTP.Buckets(ctx, peer)
}

// deliver queues a pushed task (idempotent per id).
func (c *NATSControlPlane) deliver(t api.FixupTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tasks[t.ID] = FixupTask{Task: fsm.Task{ID: t.ID, Kind: t.Kind, Bucket: t.Bucket, Source: t.Source, Target: t.Target,
		Searchable: t.Searchable, Destructive: t.Destructive, Reason: t.Reason},
		SealedBlocks: t.SealedBlocks, LastChecksum: t.LastBlockChecksum}
}

func (c *NATSControlPlane) Fixups(ctx context.Context, peer string) ([]FixupTask, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]FixupTask, 0, len(c.tasks))
	for _, t := range c.tasks {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (c *NATSControlPlane) Confirm(ctx context.Context, id uint64) (FixupTask, error) {
	c.mu.Lock()
	t, ok := c.tasks[id]
	c.mu.Unlock()
	if !ok {
		return FixupTask{}, fmt.Errorf("fixup %d was not delivered here", id)
	}
	rep, err := c.mc.Confirm(ctx, id, c.peer)
	if err != nil {
		return FixupTask{}, err
	}
	if !rep.Confirmed || rep.Task == nil {
		return FixupTask{}, fmt.Errorf("fixup %d not confirmed: %s", id, rep.Reason)
	}
	t.Task = *rep.Task
	t.Confirmed = true
	return t, nil
}

// ConfirmTransfer asks the leader whether task id is an open replicate or
// fetch task whose target is this peer: the replication receiver takes
// blocks from a peer that is not the bucket's origin only for such a task
// of which that peer is the source.
func (c *NATSControlPlane) ConfirmTransfer(ctx context.Context, id uint64) (fsm.Task, error) {
	rep, err := c.mc.Confirm(ctx, id, c.peer)
	if err != nil {
		return fsm.Task{}, err
	}
	if !rep.Confirmed || rep.Task == nil {
		return fsm.Task{}, fmt.Errorf("fixup %d not confirmed: %s", id, rep.Reason)
	}
	return *rep.Task, nil
}

func (c *NATSControlPlane) FixupResult(ctx context.Context, res FixupResult) error {
	_, err := c.mc.FixupResult(ctx, api.FixupResult{ID: res.ID, Peer: res.Peer, OK: !res.Failed, Reason: res.Reason})
	if err == nil {
		c.mu.Lock()
		delete(c.tasks, res.ID)
		c.mu.Unlock()
	}
	return err
}
