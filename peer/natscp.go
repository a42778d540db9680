package peer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// NATSControlPlane is the ControlPlane over the managers' NATS service
// (quarry.mgr.<op>.<peer>, mgrclient.ManagerClient). What it adds to the
// client is the request id of the calls that commit, so a retry is applied
// once.
type NATSControlPlane struct {
	mc   *mgrclient.ManagerClient
	peer string
}

// NewNATSControlPlane returns a control plane on nc.
func NewNATSControlPlane(nc *nats.Conn, subj bus.Subjects, peer string) *NATSControlPlane {
	mc := mgrclient.NewManagerClient(nc, subj)
	mc.Sender = peer // quarry.mgr.<op>.<peer>: the only subjects its NATS user may publish
	return &NATSControlPlane{mc: mc, peer: peer}
}

func (c *NATSControlPlane) Register(ctx context.Context, r api.Register) error {
	_, err := c.mc.Register(ctx, r)
	return err
}

func (c *NATSControlPlane) Heartbeat(ctx context.Context, h api.Heartbeat) (api.HeartbeatReply, error) {
	return c.mc.Heartbeat(ctx, h)
}

func (c *NATSControlPlane) Config(ctx context.Context) (api.PeerConfig, error) {
	return c.mc.Config(ctx, c.peer)
}

// Bundle fetches the configuration bundle in force.
func (c *NATSControlPlane) Bundle(ctx context.Context) (api.BundleReply, error) {
	return c.mc.Bundle(ctx, c.peer)
}

// Peers asks for the generation table's peer list only (PeersOnly): the
// buckets of a large table are not sent on every heartbeat.
func (c *NATSControlPlane) Peers(ctx context.Context) ([]fsm.PeerView, error) {
	rep, err := c.mc.GenerationPeers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]fsm.PeerView, 0, len(rep.View.Peers))
	for _, p := range rep.View.Peers {
		out = append(out, fsm.PeerView{ID: p.ID, GUID: p.GUID, Site: p.Site, State: p.State, Attrs: p.Attrs})
	}
	return out, nil
}

func (c *NATSControlPlane) Targets(ctx context.Context, r api.TargetsRequest) (api.TargetsReply, error) {
	r.RequestID = "targets-" + r.Origin + "-" + r.Index + "-" + r.LocalID
	if len(r.Replace) > 0 {
		// One replacement per set of tried peers: a retry of the same
		// attempt answers the same peer.
		r.RequestID = "replace-" + r.Origin + "-" + r.Index + "-" + r.LocalID + "-" + strconv.Itoa(len(r.Replace))
	}
	return c.mc.Targets(ctx, r)
}

// BucketEvent sends e with a request id that makes its retries one event.
func (c *NATSControlPlane) BucketEvent(ctx context.Context, e api.BucketEvent) error {
	e.RequestID = fmt.Sprintf("%s-%s-%s-%d", e.Kind, e.Bucket, e.Peer, e.Blocks)
	if e.SealedBlocks > 0 {
		e.RequestID = fmt.Sprintf("%s-%s-%s-%d-%d", e.Kind, e.Bucket, e.Peer, e.SealedBlocks, e.Blocks)
	}
	if e.Target != "" {
		// A target can lag, catch up and lag again: each report is new
		// (its retries share the id).
		e.RequestID = fmt.Sprintf("%s-%s-%s-%s-%d", e.Kind, e.Bucket, e.Peer, e.Target, time.Now().UnixNano())
	}
	_, err := c.mc.BucketEvent(ctx, e)
	return err
}

func (c *NATSControlPlane) Buckets(ctx context.Context, ids []string) ([]fsm.BucketView, error) {
	return c.mc.Buckets(ctx, c.peer, ids)
}

func (c *NATSControlPlane) Confirm(ctx context.Context, id uint64) (fsm.Task, error) {
	rep, err := c.mc.Confirm(ctx, id, c.peer)
	if err != nil {
		return fsm.Task{}, err
	}
	if !rep.Confirmed || rep.Task == nil {
		return fsm.Task{}, fmt.Errorf("fixup %d not confirmed: %s", id, rep.Reason)
	}
	return *rep.Task, nil
}

func (c *NATSControlPlane) FixupResult(ctx context.Context, r api.FixupResult) error {
	_, err := c.mc.FixupResult(ctx, r)
	return err
}
