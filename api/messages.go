package api

import (
	"fmt"
	"time"

	"github.com/quarry-dev/quarry/bus/wire"
	"github.com/quarry-dev/quarry/fsm"
)

// WireVersion is the version this build writes on every message type of
// this package but a multi-part Register (WireVersionParts).
const WireVersion = 1

// MaxWireVersion is the newest version this build reads.
const MaxWireVersion = WireVersionParts

// Manager operations: the last token of <prefix>.mgr.<op>.
const (
	OpRegister    = "register"
	OpHeartbeat   = "heartbeat"
	OpTargets     = "targets"
	OpBucket      = "bucket"
	OpGeneration  = "generation"
	OpConfig      = "config"
	OpConfirm     = "confirm"
	OpFixupResult = "fixup-result"
	OpBuckets     = "buckets"
	// OpBundle fetches the configuration bundle in force (a peer, when its
	// config names a bundle hash it does not run).
	OpBundle = "bundle"
)

// Ops lists every manager operation, in the order the manager subscribes.
var Ops = []string{OpRegister, OpHeartbeat, OpTargets, OpBucket, OpGeneration, OpConfig, OpConfirm, OpFixupResult, OpBuckets, OpBundle, OpSavedSearch}

// Remote error codes of the manager protocol (wire.RemoteError.Code).
const (
	// CodeNotLeader: the manager that got the request is no longer the
	// leader (its subscriptions are going away): retry.
	CodeNotLeader = "not_leader"
	// CodeVersion: the message's V is newer than the receiver speaks.
	CodeVersion = "bad_version"
	// CodeBadRequest: a required field is missing or malformed; retrying the
	// same message fails the same way.
	CodeBadRequest = wire.CodeBadRequest
	// CodeRefused: the cluster state refuses the request (unknown peer, peer
	// not up, unknown index, GUID in use, …); the message says which.
	CodeRefused = "refused"
	// CodeUploadIncomplete: the last part of a multi-part Register arrived
	// at a manager that lacks an earlier part; send the upload again.
	CodeUploadIncomplete = "upload_incomplete"
)

// CheckVersion refuses a message version newer than this build speaks; 0 is
// read as 1.
func CheckVersion(what string, v int) error {
	if v > MaxWireVersion {
		return wire.Errorf(CodeVersion, "%s: wire version %d, this manager speaks up to %d", what, v, MaxWireVersion)
	}
	return nil
}

// Copy is one bucket copy in a peer's inventory.
type Copy struct {
	Bucket string `json:"bucket"`
	Index  string `json:"index"`
	// State is "hot" or "warm".
	State      string `json:"state"`
	Searchable bool   `json:"searchable"`
	Events     int64  `json:"events"`
	Blocks     int64  `json:"blocks"`
	Bytes      int64  `json:"bytes"`
	Earliest   int64  `json:"earliest"` // unix ns
	Latest     int64  `json:"latest"`   // unix ns
	// ContentHash identifies the copy's content so copies can be compared
	// without searching them; LastBlockChecksum is the checksum of its last
	// block (the sealed-length protocol compares it).
	ContentHash       string `json:"content_hash,omitempty"`
	LastBlockChecksum string `json:"last_block_checksum,omitempty"`
	Corrupt           bool   `json:"corrupt,omitempty"`
}

// Copy states.
const (
	CopyHot  = "hot"
	CopyWarm = "warm"
)

// CopyInfo converts an inventory entry into the FSM's form.
func (c Copy) CopyInfo() fsm.CopyInfo {
	return fsm.CopyInfo{
		Bucket: c.Bucket, Searchable: c.Searchable, Hot: c.State == CopyHot, Blocks: c.Blocks,
		Corrupt: c.Corrupt, Index: c.Index, Earliest: c.Earliest, Latest: c.Latest, Size: c.Bytes, Events: c.Events,
	}
}

// Register is <prefix>.mgr.register: a peer joins or comes back with its
// whole inventory. It is committed as fsm.RegisterPeer (the peer becomes Up,
// copies it reports count again, copies it no longer has are dropped) and
// counts as a heartbeat. RequestID makes a retried registration apply once
// (use a fresh one per registration attempt, the same across its retries).
type Register struct {
	V         int               `json:"v"`
	RequestID string            `json:"request_id,omitempty"`
	Peer      string            `json:"peer"`
	GUID      string            `json:"guid"`
	Site      string            `json:"site"`
	Host      string            `json:"host,omitempty"`
	Attrs     map[string]string `json:"attrs,omitempty"`
	// HTTPAddr is the peer's HTTP address (HEC, /v1/search), kept in its
	// attributes as "http_addr" so search heads and tools find it.
	HTTPAddr  string `json:"http_addr,omitempty"`
	Inventory []Copy `json:"inventory"`
	// KeyedDigests: as ConfigRequest.KeyedDigests, for the config in the
	// registration's reply.
	KeyedDigests bool `json:"keyed_digests,omitempty"`
	// Upload, Part and Parts split an inventory too large for one message
	// (the bus's max payload, 1 MiB by default, holds about 3,000 copies)
	// over Parts messages, numbered 1..Parts, that share Upload (an id the
	// peer picks per attempt). Every part repeats the other fields; the
	// manager keeps the parts and registers the peer, with the whole
	// inventory in one FSM command, when the last one arrives (the earlier
	// parts are answered with Pending). A manager that lacks a part (the
	// leader changed during the upload) refuses the last one with
	// CodeUploadIncomplete, and the peer sends the whole upload again. A
	// multi-part message carries V = WireVersionParts, so a manager that
	// predates parts refuses it instead of registering a partial inventory.
	// Parts 0 or 1: the inventory is whole in this message.
	Upload string `json:"upload,omitempty"`
	Part   int    `json:"part,omitempty"`
	Parts  int    `json:"parts,omitempty"`
}

// MaxRegisterParts bounds the parts of one register upload (at 1 MiB each,
// 4 GiB of inventory: far more than any peer holds).
const MaxRegisterParts = 4096

// WireVersionParts is the wire version of a multi-part Register.
const WireVersionParts = 2

// RegisterReply answers Register.
type RegisterReply struct {
	V     int           `json:"v"`
	State fsm.PeerState `json:"state"`
	// Index is the Raft index that applied the registration.
	Index uint64 `json:"index"`
	// Pending answers a part of a multi-part Register before the last:
	// nothing is registered yet, and the other fields are empty.
	Pending bool       `json:"pending,omitempty"`
	Config  PeerConfig `json:"config"`
	Status
}

// Status is what every reply to a peer carries so it notices changes it
// missed: the generation, the table version and the config id.
type Status struct {
	Generation   uint64 `json:"generation"`
	TableVersion uint64 `json:"table_version"`
	ConfigID     string `json:"config_id"`
}

// PeerConfig is the part of the cluster config a peer needs (pushed as
// Splunk pushes its configuration bundle).
type PeerConfig struct {
	V int `json:"v"`
	// ID names this config: a hash of everything below. Equal ids, equal
	// configs.
	ID                string            `json:"id"`
	Indexes           []fsm.IndexConfig `json:"indexes"`
	AutoCreateIndexes bool              `json:"auto_create_indexes"`
	// KnownIndexes are every index the cluster knows (declared and
	// auto-created), sorted.
	KnownIndexes []string       `json:"known_indexes"`
	HECTokens    []fsm.HECToken `json:"hec_tokens"`
	// AdminTokenDigest is the digest (fsm.KeyedDigest) of the managers'
	// admin token: a peer's admin endpoints (roll, searchable, pprof, every
	// index's search) take that token, checked against this, so peers are
	// not given the secret.
	AdminTokenDigest string `json:"admin_token_digest,omitempty"`
	// TokenKey is the cluster's token key (fsm.TokenKeyOf), under which
	// the token digests above are keyed (fsm.KeyedDigest): peers and
	// search heads check presented tokens with it (fsm.TokenMatches).
	// Sent only in the config replies to registered peers and to search
	// heads; absent while the cluster has none (digests unkeyed).
	TokenKey []byte `json:"token_key,omitempty"`
	// SearchTokens: search heads and peers check searches against them.
	SearchTokens  []fsm.SearchToken `json:"search_tokens,omitempty"`
	MaxHotBytes   int64             `json:"max_hot_bytes"`
	MaxHotSpan    time.Duration     `json:"max_hot_span"`
	MaxHotBuckets int               `json:"max_hot_buckets"`
	// TargetTimeout: a target that has not acked a block for this long
	// leaves the replication set (SPEC §4).
	TargetTimeout   time.Duration `json:"target_timeout"`
	HeartbeatPeriod time.Duration `json:"heartbeat_period"`
	// Maintenance: the origin does not roll on a target failure; it keeps
	// the target and resends the blocks it missed (SPEC §4).
	Maintenance bool `json:"maintenance"`
	// ReplicationFactor is the copies a bucket gets: RF, or the site
	// policy's total in multisite mode (the ack rule takes min(2, it)).
	ReplicationFactor int  `json:"replication_factor"`
	Multisite         bool `json:"multisite"`
	// BundleHash names the configuration bundle in force ("" none): a
	// peer that runs another fetches it (OpBundle). Part of the id, so a
	// new bundle is a config change the peers hear of at once.
	BundleHash   string `json:"bundle_hash,omitempty"`
	Generation   uint64 `json:"generation"`
	TableVersion uint64 `json:"table_version"`
}

// Heartbeat is <prefix>.mgr.heartbeat, every heartbeat_period (1 s). It is
// not a Raft entry: the leader records it in memory.
type Heartbeat struct {
	V    int    `json:"v"`
	Peer string `json:"peer"`
	GUID string `json:"guid"`
	// Light stats, for the cluster page and metrics.
	Stats PeerStats `json:"stats"`
}

// PeerStats are a peer's light statistics.
type PeerStats struct {
	HotBuckets int   `json:"hot_buckets"`
	Copies     int   `json:"copies"`
	Bytes      int64 `json:"bytes"`
	// DiskFree and DiskTotal are the bytes free (to unprivileged users)
	// and in all of the data directory's file system. DiskTotal 0 means
	// the peer could not read them; with it set, DiskFree 0 is a full disk.
	// The managers' free-disk detention rule reads them.
	DiskFree    int64 `json:"disk_free,omitempty"`
	DiskTotal   int64 `json:"disk_total,omitempty"`
	IngestQueue int   `json:"ingest_queue,omitempty"`
	// ReplicationLag is, per replication target peer, the blocks of this
	// peer's hot buckets durable here that the target has not acknowledged.
	ReplicationLag map[string]int64 `json:"replication_lag_blocks,omitempty"`
	// HotEvents is, per hot bucket this peer is the origin of, the events
	// it holds (at most MaxHotEventsReported buckets): the managers' FSM
	// learns a bucket's count only when it rolls, so the leader shows these
	// live on GET /v1/buckets and the cluster page.
	HotEvents map[string]int64 `json:"hot_events,omitempty"`
	// Bundle is the hash of the configuration bundle the peer runs ("":
	// none), for `quarry cluster bundle status`.
	Bundle string `json:"bundle,omitempty"`
}

// MaxHotEventsReported bounds PeerStats.HotEvents (a peer's hot buckets
// are capped too, --max-hot-buckets-total).
const MaxHotEventsReported = 1024

// HeartbeatReply answers Heartbeat. Reregister is set when the manager does
// not know the peer as running (unknown, Down, Removed, GracefulShutdown)
// or knows another GUID for it: the peer must Register again with its
// inventory (a heartbeat never brings a peer back).
type HeartbeatReply struct {
	V          int           `json:"v"`
	Reregister bool          `json:"reregister"`
	State      fsm.PeerState `json:"state,omitempty"`
	Status
}

// TargetsRequest is <prefix>.mgr.targets: an origin starting a hot bucket
// asks for its replication targets. The manager chooses them
// (fsm.State.ChooseTargets) and commits AddBucket; RequestID makes a retry
// answer the same bucket instead of failing with "bucket exists".
type TargetsRequest struct {
	V         int    `json:"v"`
	RequestID string `json:"request_id,omitempty"`
	Origin    string `json:"origin"`
	Index     string `json:"index"`
	LocalID   string `json:"local_id"`
	Earliest  int64  `json:"earliest,omitempty"`
	// Used: the origin already replicates the bucket to these targets, its
	// last known set, chosen while no manager answered (SPEC §4: with every
	// manager unreachable, origins keep indexing and acking to their last
	// targets). The manager records them as the bucket's copies instead of
	// choosing, so the state knows who holds a copy that counted toward an
	// ack; targets that are no longer Up are left out (their copies are
	// found at their next registration).
	Used []Target `json:"used,omitempty"`
	// Replace asks for one replacement target of the origin's existing
	// hot bucket instead (a target failed past target_timeout): the peers
	// the origin tried, the failed one first, none of which is chosen. The
	// manager chooses under the site policy (fsm.State.ChooseReplacement),
	// records the copy (AddCopy) and answers it as the only target. The
	// RequestID names the attempt, so a retry answers the same peer.
	Replace []string `json:"replace,omitempty"`
}

// Target is one replication target: where its copy lives and whether it
// must be searchable (index as it receives).
type Target struct {
	Peer       string `json:"peer"`
	Site       string `json:"site"`
	Searchable bool   `json:"searchable"`
}

// TargetsReply answers TargetsRequest: the bucket id (<index>~<local
// id>~<origin GUID>) and its replication set.
type TargetsReply struct {
	V          int      `json:"v"`
	Bucket     string   `json:"bucket"`
	Index      string   `json:"index"`
	Origin     string   `json:"origin"`
	OriginSite string   `json:"origin_site"`
	Targets    []Target `json:"targets"`
	// Degraded: the policy could not be met (a site is down); fixup
	// restores it once the bucket is warm.
	Degraded bool   `json:"degraded,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Status
}

// BucketEventKind says what happened to a bucket.
type BucketEventKind string

// Bucket events. Each is a Raft command.
const (
	// EventRolled: the origin rolled its hot bucket (Earliest, Latest,
	// Bytes, Events, Blocks, LastBlockChecksum) → fsm.RollBucket.
	EventRolled BucketEventKind = "rolled"
	// EventSearchable: Peer's copy is searchable now (Searchable true) or
	// rawdata only (false) → fsm.CopySearchable.
	EventSearchable BucketEventKind = "searchable"
	// EventCopyAdded: Peer holds a new copy (Searchable, Blocks) →
	// fsm.AddCopy. A copy that a fixup task made is reported by FixupResult
	// instead.
	EventCopyAdded BucketEventKind = "copy_added"
	// EventLength: Peer's copy of a sealed bucket now has Blocks blocks
	// (after fetching or truncating); when that is the sealed length, the
	// open fetch/truncate task of that copy is done.
	EventLength BucketEventKind = "length"
	// EventCopyRemoved: Peer no longer holds its copy → fsm.RemoveCopy.
	EventCopyRemoved BucketEventKind = "copy_removed"
	// EventCorrupt: Peer's copy failed its checksums → fsm.MarkCorrupt.
	EventCorrupt BucketEventKind = "corrupt"
	// EventTargetFailed: the origin dropped Target from the replication
	// set (no ack within target_timeout): Target's copy misses blocks that
	// are acknowledged without it → fsm.CopyShort (short). The origin rolls
	// (its EventRolled follows) and fixup completes the warm copy.
	EventTargetFailed BucketEventKind = "target_failed"
	// EventTargetLagging: in maintenance mode the origin stopped waiting
	// for Target (kept in the set, sent the missed blocks when back) →
	// fsm.CopyShort (short).
	EventTargetLagging BucketEventKind = "target_lagging"
	// EventTargetCaughtUp: a lagging Target holds every durable block
	// again → fsm.CopyShort (not short). Ignored once the bucket is sealed.
	EventTargetCaughtUp BucketEventKind = "target_caught_up"
	// EventExtendSeal: Peer's copy of a sealed bucket is longer than the
	// sealed length SealedBlocks (checksum SealedChecksum) and its block
	// SealedBlocks-1 carries that checksum, so it is the sealed copy plus
	// Blocks-SealedBlocks blocks of the same origin (blocks a cut-off
	// origin may have acknowledged on it): the seal moves to Blocks,
	// LastBlockChecksum (Earliest, Latest, Bytes, Events of the copy) →
	// fsm.ExtendSeal. Refused when the bucket is no longer sealed at
	// SealedBlocks.
	EventExtendSeal BucketEventKind = "extend_seal"
)

// BucketEvent is <prefix>.mgr.bucket.
type BucketEvent struct {
	V                 int             `json:"v"`
	RequestID         string          `json:"request_id,omitempty"`
	Kind              BucketEventKind `json:"kind"`
	Bucket            string          `json:"bucket"`
	Peer              string          `json:"peer"` // the reporting peer (the origin for rolled)
	Target            string          `json:"target,omitempty"`
	Searchable        bool            `json:"searchable,omitempty"`
	Earliest          int64           `json:"earliest,omitempty"`
	Latest            int64           `json:"latest,omitempty"`
	Bytes             int64           `json:"bytes,omitempty"`
	Events            int64           `json:"events,omitempty"`
	Blocks            int64           `json:"blocks,omitempty"`
	LastBlockChecksum string          `json:"last_block_checksum,omitempty"`
	Reason            string          `json:"reason,omitempty"`
	// SealedBlocks and SealedChecksum: the sealed length an extend_seal
	// was verified against.
	SealedBlocks   int64  `json:"sealed_blocks,omitempty"`
	SealedChecksum string `json:"sealed_checksum,omitempty"`
}

// BucketEventReply answers BucketEvent. Index is the Raft index that
// applied it (0 when the event is not a Raft command or changed nothing).
type BucketEventReply struct {
	V         int    `json:"v"`
	Index     uint64 `json:"index"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Status
}

// GenerationRequest is <prefix>.mgr.generation: the primary table of a site
// (or site0), whole (Since 0) or the changes after table version Since.
//
// Generation, when set and not the current generation, asks for the
// primaries as they were in that generation (fsm.State.PrimariesAt: the
// whole table, Since ignored); a generation older than the kept history or
// newer than the current one is refused with CodeGeneration.
//
// Invite, when set, makes the manager send the view as one JSON message
// over a bus stream to that invite (chunked under credits) and answer
// GenerationReply with Streamed set and an empty View: a table of a million
// buckets is far larger than the bus's max payload. FetchGeneration does
// this; every search head and peer uses it.
type GenerationRequest struct {
	V          int          `json:"v"`
	Site       string       `json:"site"`
	Since      uint64       `json:"since,omitempty"`
	Generation uint64       `json:"generation,omitempty"`
	Invite     *wire.Invite `json:"invite,omitempty"`
	// PeersOnly asks for the view's generation, version and peer list
	// without primaries or buckets (a peer's heartbeat refresh; a manager
	// of an older build ignores it and answers the whole view).
	PeersOnly bool `json:"peers_only,omitempty"`
	// URL is a search head's own HTTP URL, which the leader lists on the
	// cluster page (GET /v1/status search_heads); empty from peers. A
	// manager of an older build ignores it.
	URL string `json:"url,omitempty"`
}

// GenerationReply wraps fsm.GenerationView (the JSON of GET /v1/generation).
type GenerationReply struct {
	V        int                `json:"v"`
	View     fsm.GenerationView `json:"view"`
	Streamed bool               `json:"streamed,omitempty"`
}

// CodeGeneration: a generation request named a generation the manager
// cannot resolve (older than its kept history, or not reached yet).
const CodeGeneration = "unknown_generation"

// CodeSealFinal: an extend_seal bucket event for a bucket whose seal is
// final (fsm.ErrSealFinal): the peer truncates its longer copy instead.
const CodeSealFinal = "seal_final"

// CodeBucketNotHot: a bucket event for a bucket the managers no longer
// hold hot (fsm.ErrBucketNotHot), such as a short report after a final seal.
const CodeBucketNotHot = "bucket_not_hot"

// CodeKeyDenied: a replica append refused for a moment because a key its
// frames carry was just answered unknown to another peer's lookup
// (peer/idem.ErrRecentlyDenied); the origin resends after its pause.
const CodeKeyDenied = "key_recently_unknown"

// CodeSealHold: a replica append from the origin's stream refused because
// the copy answered the managers' seal task (store.ErrSealHold); the
// origin's blocks past it wait, and it reports the target short.
const CodeSealHold = "seal_hold"

// ConfigRequest is <prefix>.mgr.config: the peer config now.
type ConfigRequest struct {
	V    int    `json:"v"`
	Peer string `json:"peer,omitempty"`
	// KeyedDigests: the asker checks tokens against digests keyed under the
	// cluster's token key (PeerConfig.TokenKey). A build before it leaves
	// it out and is sent the unkeyed digests it can check, so a rolling
	// upgrade that reaches the managers first keeps every older peer and
	// search head taking its tokens.
	KeyedDigests bool `json:"keyed_digests,omitempty"`
}

// BundleRequest is <prefix>.mgr.bundle: a registered peer (itself, the
// sender) asks for the configuration bundle in force.
type BundleRequest struct {
	V    int    `json:"v"`
	Peer string `json:"peer"`
}

// BundleReply carries the configuration bundle in force: its hash and its
// files by name (none: no bundle).
type BundleReply struct {
	V     int               `json:"v"`
	Hash  string            `json:"hash,omitempty"`
	Files map[string]string `json:"files,omitempty"`
}

// NoticeKind says why a Notice was published.
type NoticeKind string

// Notice kinds.
const (
	NoticeGeneration NoticeKind = "generation" // generation or table version changed
	NoticeConfig     NoticeKind = "config"     // the peer config changed
	NoticeLeader     NoticeKind = "leader"     // a new leader serves the mgr subjects
)

// Notice is published on <prefix>.gen by the leader after it applied a
// change: a new generation or table version, or a new peer config. Each
// receiver fetches what it lacks (mgr.generation with since, mgr.config).
// Notices are at most once; Status in every heartbeat reply is the backstop.
type Notice struct {
	V     int          `json:"v"`
	Kinds []NoticeKind `json:"kinds"`
	// Leader is the id of the manager that published it.
	Leader      string `json:"leader"`
	Maintenance bool   `json:"maintenance"`
	Status
}

// FixupTask is delivered on <prefix>.fixup.<site>.<peer> (the site the peer
// registered with). Who receives which kind:
//
//   - replicate, fetch: the Source, which streams the bucket to Target on
//     <prefix>.repl.<target site>.<target> (a fetch resumes where the
//     target's copy ends: the receiver's invite says so);
//   - make_searchable, truncate, remove_copy: the Target;
//   - seal: every running holder of a copy; its FixupAck carries its
//     copy's length (Blocks, LastBlockChecksum) and the manager commits the
//     bucket sealed at the longest once every running holder answered;
//   - freeze: every holder of a copy; each deletes its copy (after
//     ConfirmRequest) and reports FixupResult; the bucket goes when all did.
//     With Target set, that peer only: its copy of a bucket already frozen
//     (it was away at the freeze; fsm/frozen.go).
type FixupTask struct {
	V int `json:"v"`
	// ID is the task id: the Raft index of its record.
	ID          uint64       `json:"id"`
	Kind        fsm.TaskKind `json:"kind"`
	Level       string       `json:"level"`
	Bucket      string       `json:"bucket"`
	Index       string       `json:"index,omitempty"`
	Source      string       `json:"source,omitempty"`
	SourceSite  string       `json:"source_site,omitempty"`
	Target      string       `json:"target,omitempty"`
	TargetSite  string       `json:"target_site,omitempty"`
	Searchable  bool         `json:"searchable,omitempty"`
	Destructive bool         `json:"destructive"`
	// SealedBlocks and LastBlockChecksum are the sealed length of the
	// bucket (truncate, fetch; 0 when not sealed).
	SealedBlocks      int64  `json:"sealed_blocks,omitempty"`
	LastBlockChecksum string `json:"last_block_checksum,omitempty"`
	Reason            string `json:"reason,omitempty"`
	// To is the peer this delivery is addressed to.
	To string `json:"to"`
}

// FixupAck answers a FixupTask delivery at once.
type FixupAck struct {
	V int `json:"v"`
	// Accepted: the peer has the task (now, or already). A peer that
	// already executed this task id answers Accepted too (and Done).
	Accepted bool `json:"accepted"`
	Done     bool `json:"done,omitempty"`
	// Refused with Reason: the peer cannot do it (no such copy, …); the
	// manager fails the task so the planner chooses again.
	Reason string `json:"reason,omitempty"`
	// Seal answers: the holder's copy length.
	Blocks            int64  `json:"blocks,omitempty"`
	LastBlockChecksum string `json:"last_block_checksum,omitempty"`
	Earliest          int64  `json:"earliest,omitempty"`
	Latest            int64  `json:"latest,omitempty"`
	Bytes             int64  `json:"bytes,omitempty"`
	Events            int64  `json:"events,omitempty"`
}

// FixupResult is <prefix>.mgr.fixup-result: the outcome of a task the
// peer accepted. OK false fails the task (Reason says why); the planner
// plans again.
type FixupResult struct {
	V      int    `json:"v"`
	ID     uint64 `json:"id"`
	Peer   string `json:"peer"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// FixupResultReply answers FixupResult. Known is false when the task is
// not open any more (done, failed or never existed): nothing to do.
type FixupResultReply struct {
	V     int    `json:"v"`
	Known bool   `json:"known"`
	Index uint64 `json:"index,omitempty"`
}

// ConfirmRequest is <prefix>.mgr.confirm: before a destructive task a peer
// asks the leader to confirm it against the committed state.
type ConfirmRequest struct {
	V    int    `json:"v"`
	ID   uint64 `json:"id"`
	Peer string `json:"peer"`
}

// ConfirmReply answers ConfirmRequest. Confirmed is set only by a leader
// that verified its leadership with a quorum after the request arrived,
// for a task that is open, destructive and addressed to Peer. Anything
// else (Reason says what) means: do not destroy anything.
type ConfirmReply struct {
	V         int       `json:"v"`
	Confirmed bool      `json:"confirmed"`
	Leader    string    `json:"leader,omitempty"`
	Task      *fsm.Task `json:"task,omitempty"`
	Reason    string    `json:"reason,omitempty"`
}

// Validate checks the fields every manager needs in a Register.
func (r Register) Validate() error {
	if r.Peer == "" || r.GUID == "" {
		return fmt.Errorf("register: peer and guid are required (peer %q, guid %q)", r.Peer, r.GUID)
	}
	if err := wire.ValidToken("peer", r.Peer); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if r.Site != "" {
		if err := wire.ValidToken("site", r.Site); err != nil {
			return fmt.Errorf("register: %w", err)
		}
	}
	if r.Parts < 0 || r.Parts > MaxRegisterParts {
		return fmt.Errorf("register %s: %d parts, want 0 to %d", r.Peer, r.Parts, MaxRegisterParts)
	}
	if r.Parts > 1 {
		if err := wire.ValidToken("upload", r.Upload); err != nil {
			return fmt.Errorf("register %s: %w", r.Peer, err)
		}
		if r.Part < 1 || r.Part > r.Parts {
			return fmt.Errorf("register %s: part %d of %d", r.Peer, r.Part, r.Parts)
		}
	} else if r.Part > 1 || r.Upload != "" {
		return fmt.Errorf("register %s: part %d and upload %q without parts", r.Peer, r.Part, r.Upload)
	}
	for i, c := range r.Inventory {
		if c.Bucket == "" {
			return fmt.Errorf("register %s: inventory entry %d has no bucket id", r.Peer, i)
		}
		if err := ValidBucketID(c.Bucket); err != nil {
			return fmt.Errorf("register %s: inventory entry %d: %w", r.Peer, i, err)
		}
		if c.State != "" && c.State != CopyHot && c.State != CopyWarm {
			return fmt.Errorf("register %s: copy %s has state %q, want hot or warm", r.Peer, c.Bucket, c.State)
		}
	}
	return nil
}

// MaxBucketsPerRequest bounds the ids of one BucketsRequest, so a reply
// stays far below the bus's max payload whatever a peer holds
// (mgrclient.Buckets sends a longer list in such chunks).
const MaxBucketsPerRequest = 256

// BucketsRequest is <prefix>.mgr.buckets.<peer>: the managers' records of
// the named buckets, asked by a peer about its own (a restarted origin
// learns which replicas its restart rolled, and where they are).
type BucketsRequest struct {
	V       int      `json:"v"`
	Peer    string   `json:"peer"`
	Buckets []string `json:"buckets"`
}

// Validate checks the peer id, the number of ids and every id.
func (r BucketsRequest) Validate() error {
	if r.Peer == "" {
		return fmt.Errorf("buckets: peer is required")
	}
	if len(r.Buckets) > MaxBucketsPerRequest {
		return fmt.Errorf("buckets: %d ids, at most %d a request", len(r.Buckets), MaxBucketsPerRequest)
	}
	for _, id := range r.Buckets {
		if err := ValidBucketID(id); err != nil {
			return fmt.Errorf("buckets: %w", err)
		}
	}
	return nil
}

// BucketsReply answers BucketsRequest with the views of the buckets the
// managers know with a copy on the asking peer, in the order asked;
// others are left out.
type BucketsReply struct {
	V       int              `json:"v"`
	Buckets []fsm.BucketView `json:"buckets"`
}
