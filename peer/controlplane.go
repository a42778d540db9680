package peer

import (
	"context"
	"errors"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
)

// ControlPlane is what a cluster peer asks of the managers (SPEC §3, §6).
// It takes and returns the api messages themselves: the protocol has one
// type per message and one set of rules (api), sent by one client
// (api/mgrclient) over NATS. NATSControlPlane is the implementation; tests
// script one. Fixup tasks are not asked for: the managers push them on
// quarry.fixup.<site>.<peer> and the peer hands each to its fixup runner
// as it arrives.
type ControlPlane interface {
	// Register registers the peer with its inventory.
	Register(ctx context.Context, r api.Register) error
	// Heartbeat sends one heartbeat; a reply with Reregister set means
	// the managers want a fresh registration (the peer was declared Down,
	// or is unknown).
	Heartbeat(ctx context.Context, h api.Heartbeat) (api.HeartbeatReply, error)
	// Config is the peer config (tokens as digests, indexes, roll limits,
	// target_timeout, maintenance).
	Config(ctx context.Context) (api.PeerConfig, error)
	// Bundle is the configuration bundle in force (its hash and files).
	Bundle(ctx context.Context) (api.BundleReply, error)
	// Peers is the peer list of the generation table.
	Peers(ctx context.Context) ([]fsm.PeerView, error)
	// Targets asks for the replication targets of a new hot bucket (or
	// a replacement, or records the targets used while no manager
	// answered); the managers commit the bucket with them.
	Targets(ctx context.Context, r api.TargetsRequest) (api.TargetsReply, error)
	// BucketEvent reports a bucket event (rolled, target failed, …).
	BucketEvent(ctx context.Context, e api.BucketEvent) error
	// Buckets is the managers' record of the named buckets that hold a
	// copy on this peer.
	Buckets(ctx context.Context, ids []string) ([]fsm.BucketView, error)
	// Confirm checks a task against the leader's committed state: a
	// destructive task addressed to this peer, or a replicate/fetch task
	// whose target it is; it fails unless the task is open there.
	Confirm(ctx context.Context, id uint64) (fsm.Task, error)
	// FixupResult reports a task's outcome.
	FixupResult(ctx context.Context, r api.FixupResult) error
}

// fixupOutcome is what the fixup runner keeps of a task it ran: the result
// it reports (api.FixupResult, the one message) and, for the peer's own
// logs and tests, the bucket and the bytes it moved over the network.
type fixupOutcome struct {
	api.FixupResult
	Bucket string
	Bytes  int64
}

// ErrRegisterFirst: the managers do not count this peer as up.
var ErrRegisterFirst = errors.New("managers ask the peer to register first")
