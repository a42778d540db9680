package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// CommandType is the first byte of an encoded command (an iota+1 enum; 0 is
// never valid). Values are part of the log format: append, never renumber.
type CommandType byte

// Command types.
const (
	CmdSetConfig CommandType = iota + 1
	CmdRegisterPeer
	CmdPeerDown
	CmdSetPeerState
	CmdAddBucket
	CmdAddCopy
	CmdCopySearchable
	CmdRemoveCopy
	CmdRollBucket
	CmdSealBucket
	CmdCreateFixup
	CmdFixupDone
	CmdSetMaintenance
	CmdRebalancePrimaries
	CmdPeerOffline
	CmdMarkCorrupt
	CmdCopyLength
	CmdCopyShort
	CmdSetDetention
	// Cluster version 2 (version.go): a command of these types is appended
	// only once the group agreed a cluster version that carries it.
	CmdSetClusterVersion
	CmdMarkFixup
	CmdExtendSeal
	// Cluster version 8 (BundleVersion, bundle.go).
	CmdSetBundle
	// Cluster version 9 (SavedSearchVersion, savedsearch.go).
	CmdAddSavedSearch
	CmdRemoveSavedSearch
	CmdRunSavedSearch
	CmdClaimSlot
	CmdFinishSlot
	// Cluster version 10 (TokenKeyVersion, tokenkey.go).
	CmdSetTokenKey
)

// bodyVersion is the version byte written after the type byte of a command
// whose body never changed. Decoding a newer version panics: a follower must
// not apply what it cannot read.
const bodyVersion byte = 1

// bodyVersions lists the commands whose body grew since version 1, with the
// version this build writes. A body version is per command type, so adding
// a field to one command does not make every other entry unreadable to an
// older build. Older versions of a body still decode: a field added in a
// later version is absent from them and the handler applies them as it
// always did.
//
//   - SealBucket 2: Lengths (the per-holder lengths the seal was computed
//     from); a version 1 body carries none. 3: Final (a holder known to
//     hold every acknowledged block answered), written only by a group at
//     cluster version SealFinalVersion; a body without it is still
//     written as version 2.
//   - RollBucket 2: Origin (the peer that sent the roll, checked against
//     the bucket's origin); written only by a group at cluster version
//     RollOriginVersion, and a body without it is still written as
//     version 1 (bodyVersioned), so an older build reads every roll the
//     group may send it.
//   - PeerDown 2: Registered (the registration the planner judged),
//     written only by a group at cluster version
//     PeerDownRegisteredVersion; without it, still version 1.
var bodyVersions = map[CommandType]byte{
	CmdSealBucket: 3,
	CmdRollBucket: 2,
	CmdPeerDown:   2,
}

// versionOf is the body version this build writes (and reads up to) for a
// command type.
func versionOf(t CommandType) byte {
	if v, ok := bodyVersions[t]; ok {
		return v
	}
	return bodyVersion
}

// bodyVersioned is implemented by commands whose body version depends on
// what the body carries: Encode writes the lowest version that holds it,
// and NeedsClusterVersion the cluster version that may carry it.
type bodyVersioned interface {
	bodyVersion() (body byte, cluster int)
}

// NeedsClusterVersion is the cluster version a command needs: its type's
// (MinClusterVersion), or more when its body carries a field only a newer
// group reads (RollBucket's Origin). The manager appends it only when the
// agreed version is at least that.
func NeedsClusterVersion(c Command) int {
	v := MinClusterVersion(c.Type())
	if bv, ok := c.(bodyVersioned); ok {
		_, cv := bv.bodyVersion()
		v = max(v, cv)
	}
	return v
}

// versioned is implemented by commands whose body grew: it refuses a body
// that claims an older version but carries a field that version lacks.
type versioned interface {
	checkVersion(v byte) error
}

// Command is one FSM command. Every command type of this package
// implements it; the manager encodes one with Encode and proposes the bytes.
type Command interface {
	// Type is the command's type byte.
	Type() CommandType
	// Request is the command's request id ("" for none). A command whose
	// non-empty request id was applied before is not applied again: Apply
	// answers Result{Duplicate: true} with the first index.
	Request() string
}

// Result is Apply's response for a command that succeeded. A business error
// is returned as an error value instead.
type Result struct {
	// Index is the Raft index that applied the command; for CreateFixup it
	// is the new task's id, for AddBucket the bucket's creation index.
	Index uint64 `json:"index"`
	// Generation is the generation after the command.
	Generation uint64 `json:"generation"`
	// Duplicate is set when the request id was applied before; Index is
	// then the first application's.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Encode writes a command as the bytes the manager proposes to Raft: the
// type byte, the body version byte, then the JSON body.
func Encode(c Command) ([]byte, error) {
	if _, ok := registry[c.Type()]; !ok {
		return nil, fmt.Errorf("encode command type %d: not registered", c.Type())
	}
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode command type %d: %w", c.Type(), err)
	}
	v := versionOf(c.Type())
	if bv, ok := c.(bodyVersioned); ok {
		v, _ = bv.bodyVersion()
	}
	out := make([]byte, 0, len(body)+2)
	out = append(out, byte(c.Type()), v)
	return append(out, body...), nil
}

// Decode reads a command written by Encode. It returns an error for an
// unknown type or a body it cannot read; Apply turns that into a panic.
func Decode(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("decode command: %d bytes, want at least 2", len(b))
	}
	h, ok := registry[CommandType(b[0])]
	if !ok {
		return nil, fmt.Errorf("decode command: unknown type %d", b[0])
	}
	if v := versionOf(CommandType(b[0])); b[1] == 0 || b[1] > v {
		return nil, fmt.Errorf("decode command type %d: body version %d, this build reads up to %d", b[0], b[1], v)
	}
	c := h.new()
	dec := json.NewDecoder(bytes.NewReader(b[2:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("decode command type %d: %w", b[0], err)
	}
	if vc, ok := c.(versioned); ok {
		if err := vc.checkVersion(b[1]); err != nil {
			return nil, fmt.Errorf("decode command type %d: body version %d: %w", b[0], b[1], err)
		}
	}
	return c, nil
}

// handler is one entry of the dispatch table.
type handler struct {
	new   func() Command
	apply func(s *State, idx uint64, c Command) (any, error)
}

var registry = map[CommandType]handler{}

// register adds a command type to the dispatch table; a duplicate panics.
func register[T any, PT interface {
	*T
	Command
}](t CommandType, apply func(s *State, idx uint64, c PT) (any, error)) {
	if _, dup := registry[t]; dup {
		panic(fmt.Sprintf("fsm: command type %d registered twice", t))
	}
	registry[t] = handler{
		new:   func() Command { return PT(new(T)) },
		apply: func(s *State, idx uint64, c Command) (any, error) { return apply(s, idx, c.(PT)) },
	}
}

// ReqID is embedded in every command: the request id that makes a retried
// Apply harmless.
type ReqID struct {
	RequestID string `json:"request_id,omitempty"`
}

// Request returns the request id.
func (r ReqID) Request() string { return r.RequestID }

// SetConfig replaces the cluster config. Refused (ErrBadConfig) when the
// config cannot be met; the state is then unchanged.
type SetConfig struct {
	ReqID
	Config Config `json:"config"`
}

// CopyInfo is one copy in a peer's inventory.
type CopyInfo struct {
	Bucket     string `json:"bucket"`
	Searchable bool   `json:"searchable"`
	Hot        bool   `json:"hot,omitempty"`
	Blocks     int64  `json:"blocks,omitempty"`
	Corrupt    bool   `json:"corrupt,omitempty"`
	// Index, Earliest, Latest, Size, Events describe a bucket the FSM does
	// not know (rebuilding the table from inventories after quorum loss).
	Index    string `json:"index,omitempty"`
	Earliest int64  `json:"earliest,omitempty"`
	Latest   int64  `json:"latest,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Events   int64  `json:"events,omitempty"`
}

// RegisterPeer registers a peer or brings one back: state Up, its inventory
// reconciled (copies it still holds count again, copies it lost are
// dropped, buckets nobody knew are added warm), primaries rebalanced once.
type RegisterPeer struct {
	ReqID
	ID        string            `json:"id"`
	GUID      string            `json:"guid"`
	Site      string            `json:"site"`
	Host      string            `json:"host,omitempty"`
	Attrs     map[string]string `json:"attrs,omitempty"`
	Inventory []CopyInfo        `json:"inventory,omitempty"`
	At        time.Time         `json:"at"`
}

// PeerDown marks a peer Down (no heartbeat for heartbeat_timeout); its
// primaries move to other copies.
type PeerDown struct {
	ReqID
	ID     string    `json:"id"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Registered is the peer's registration (Peer.Registered) the planner
	// saw when it found the heartbeats missing (cluster version
	// PeerDownRegisteredVersion): a peer that registered again before the
	// entry applies is not declared Down (chaos: a declaration planned just
	// before a restarted peer's registration committed just after it, and
	// took the fresh peer Down, its buckets missing from searches, until it
	// registered once more). 0 in older groups: not checked.
	Registered uint64 `json:"registered,omitempty"`
}

// PeerDownRegisteredVersion is the cluster version from which the planner
// sets PeerDown.Registered (body version 2; a version 5 build cannot read
// it).
const PeerDownRegisteredVersion = 6

func (c *PeerDown) bodyVersion() (byte, int) {
	if c.Registered != 0 {
		return 2, PeerDownRegisteredVersion
	}
	return 1, 1
}

func (c *PeerDown) checkVersion(v byte) error {
	if v < 2 && c.Registered != 0 {
		return fmt.Errorf("peer down %q: registered needs body version 2", c.ID)
	}
	return nil
}

// SetPeerState sets a peer's state directly (Detention, Removed,
// GracefulShutdown, Restarting, Decommissioning, Pending, Up, Down).
// Removed drops the peer's copies from the table.
type SetPeerState struct {
	ReqID
	ID    string    `json:"id"`
	State PeerState `json:"state"`
	At    time.Time `json:"at"`
}

// CopySpec is one copy of a new bucket.
type CopySpec struct {
	Peer       string `json:"peer"`
	Searchable bool   `json:"searchable"`
}

// AddBucket records a new hot bucket with its origin copy and its targets'
// copies. The bucket joins the current generation.
type AddBucket struct {
	ReqID
	ID       string `json:"id"`
	Index    string `json:"index"`
	Origin   string `json:"origin"`
	Earliest int64  `json:"earliest,omitempty"`
	// Targets are the replication targets (the origin's copy is implied,
	// searchable).
	Targets []CopySpec `json:"targets"`
	// Degraded: the targets could not meet the policy; fixup restores it.
	Degraded bool `json:"degraded,omitempty"`
}

// AddCopy records a new copy of a bucket on a peer.
type AddCopy struct {
	ReqID
	Bucket     string `json:"bucket"`
	Peer       string `json:"peer"`
	Searchable bool   `json:"searchable"`
	Blocks     int64  `json:"blocks,omitempty"`
}

// CopySearchable marks a copy searchable (its index rebuilt) or, with
// Searchable false, rawdata-only.
type CopySearchable struct {
	ReqID
	Bucket     string `json:"bucket"`
	Peer       string `json:"peer"`
	Searchable bool   `json:"searchable"`
}

// RemoveCopy drops a copy from the table.
type RemoveCopy struct {
	ReqID
	Bucket string `json:"bucket"`
	Peer   string `json:"peer"`
}

// RollBucket records that the origin rolled a hot bucket to warm.
type RollBucket struct {
	ReqID
	Bucket       string `json:"bucket"`
	Earliest     int64  `json:"earliest"`
	Latest       int64  `json:"latest"`
	Size         int64  `json:"size"`
	Events       int64  `json:"events"`
	Blocks       int64  `json:"blocks,omitempty"`
	LastChecksum string `json:"last_checksum,omitempty"`
	// Origin is the peer that sent the roll (body version 2, cluster
	// version RollOriginVersion): Apply refuses the roll (ErrNotOrigin)
	// unless it is the bucket's origin, the only peer entitled to roll
	// it (SPEC §11). Empty in rolls of an older group: not checked.
	Origin string `json:"origin,omitempty"`
}

// RollOriginVersion is the cluster version from which the manager names
// the sender of a roll in RollBucket.Origin (a version 3 build cannot read
// that body).
const RollOriginVersion = 4

func (c *RollBucket) bodyVersion() (byte, int) {
	if c.Origin != "" {
		return 2, RollOriginVersion
	}
	return 1, 1
}

func (c *RollBucket) checkVersion(v byte) error {
	if v < 2 && c.Origin != "" {
		return fmt.Errorf("roll %q: origin needs body version 2", c.Bucket)
	}
	return nil
}

// SealBucket fixes a bucket's length after its origin went away: the
// longest surviving copy's blocks and its last block's checksum. The bucket
// becomes warm.
//
// Lengths (body version 2) are the holders' reported lengths the seal was
// computed from; each listed copy's length becomes known, so the planner
// fetches into the shorter copies and truncates the longer ones. When
// present they must be consistent with the seal: the longest is Blocks, and
// a holder at Blocks reported LastChecksum. A listed peer that no longer
// holds a copy is skipped (its copy went away between its answer and the
// commit). A version 1 entry has no Lengths: the copies' lengths stay as
// they were (unknown until a peer reports them).
type SealBucket struct {
	ReqID
	Bucket       string       `json:"bucket"`
	Blocks       int64        `json:"blocks"`
	LastChecksum string       `json:"last_checksum"`
	Earliest     int64        `json:"earliest,omitempty"`
	Latest       int64        `json:"latest,omitempty"`
	Size         int64        `json:"size,omitempty"`
	Events       int64        `json:"events,omitempty"`
	Lengths      []PeerLength `json:"lengths,omitempty"`
	// Final (body version 3, cluster version SealFinalVersion): the
	// manager saw a holder whose copy is not known short answer, so the
	// seal holds every acknowledged block. Informational: Apply judges it
	// again on the state the entry applies to (State.SealAnsweredWhole
	// over Lengths' peers) and records the seal Provisional when no such
	// holder is left — a short report may have been applied in between.
	Final bool `json:"final,omitempty"`
}

// SealFinalVersion is the cluster version from which seals say whether
// they are final (SealBucket.Final, Bucket.Provisional) and only a
// provisional seal may be extended.
const SealFinalVersion = 5

func (c *SealBucket) bodyVersion() (byte, int) {
	if c.Final {
		return 3, SealFinalVersion
	}
	return 2, 1
}

// PeerLength is one holder's copy length: its blocks and its last block's
// checksum.
type PeerLength struct {
	Peer         string `json:"peer"`
	Blocks       int64  `json:"blocks"`
	LastChecksum string `json:"last_checksum,omitempty"`
}

func (c *SealBucket) checkVersion(v byte) error {
	if v < 2 && len(c.Lengths) > 0 {
		return fmt.Errorf("seal %q: lengths need body version 2", c.Bucket)
	}
	if v < 3 && c.Final {
		return fmt.Errorf("seal %q: final needs body version 3", c.Bucket)
	}
	return nil
}

// CopyLength records a copy's length reported by its peer (after it fetched
// the missing blocks or truncated to the sealed length). The bucket must be
// sealed. When the copy now has the sealed length, the open fetch and
// truncate tasks of that copy are closed in the same entry.
type CopyLength struct {
	ReqID
	Bucket       string `json:"bucket"`
	Peer         string `json:"peer"`
	Blocks       int64  `json:"blocks"`
	LastChecksum string `json:"last_checksum,omitempty"`
}

// ExtendSeal moves a sealed bucket's length forward to a copy that came
// back longer than the seal (SPEC §4, fsm/DESIGN.md "Extending a seal"):
// a copy that could have counted toward an acknowledgement while the
// managers could not reach it (its site cut off) holds blocks the seal
// lacks. Its peer checked that the copy's block From-1 carries the sealed
// checksum FromChecksum — the copy is the sealed copy plus more blocks of
// the same origin — so instead of being truncated the copy becomes the
// sealed length: Blocks blocks, its last block's checksum LastChecksum.
// Refused (ErrSealMoved) unless the bucket is still sealed at exactly
// (From, FromChecksum), so two longer copies racing cannot both extend
// from the same seal, and one verified against an older seal must verify
// again. The shorter copies then fetch the rest; the open fetch and
// truncate tasks of the bucket, computed for the old length, are closed
// in the same entry, and a new generation begins (searches that used the
// bucket at the old length see the new blocks exactly once, from the
// primaries chosen now).
type ExtendSeal struct {
	ReqID
	Bucket       string `json:"bucket"`
	Peer         string `json:"peer"`
	From         int64  `json:"from"`
	FromChecksum string `json:"from_checksum"`
	Blocks       int64  `json:"blocks"`
	LastChecksum string `json:"last_checksum"`
	Earliest     int64  `json:"earliest,omitempty"`
	Latest       int64  `json:"latest,omitempty"`
	Size         int64  `json:"size,omitempty"`
	Events       int64  `json:"events,omitempty"`
}

// CreateFixup records a fixup task; its id is this entry's Raft index.
type CreateFixup struct {
	ReqID
	Kind       TaskKind  `json:"kind"`
	Level      Level     `json:"level"`
	Bucket     string    `json:"bucket"`
	Source     string    `json:"source,omitempty"`
	Target     string    `json:"target,omitempty"`
	Searchable bool      `json:"searchable,omitempty"`
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// FixupDone closes a task. On success its effect is applied in the same
// entry (replicate: the copy exists; make-searchable: the copy is
// searchable; remove/freeze: the copy or bucket is gone; fetch/truncate:
// the copy has the sealed length), so no window exists where the work is
// done but the task open. Failed closes it without effect.
type FixupDone struct {
	ReqID
	ID     uint64 `json:"id"`
	Failed bool   `json:"failed,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// SetMaintenance turns maintenance mode on or off.
type SetMaintenance struct {
	ReqID
	Enabled bool `json:"enabled"`
}

// RebalancePrimaries evens out primaries per peer within each site (site0
// across all peers) without changing coverage.
type RebalancePrimaries struct {
	ReqID
}

// PeerOffline takes a peer offline. Without EnforceCounts its primaries move
// and it enters Restarting (it may stop; no fixup beyond primaries for
// restart_timeout). With EnforceCounts it enters Decommissioning: its
// primaries move, its copies stop counting, and the planner decommissions it
// (Removed) once every bucket meets RF/SF without it.
type PeerOffline struct {
	ReqID
	ID            string    `json:"id"`
	EnforceCounts bool      `json:"enforce_counts"`
	At            time.Time `json:"at"`
}

// MarkCorrupt records that a copy failed its checksums; the copy counts for
// nothing until the corruption fixup replaces it.
// CopyShort records what an origin knows of a hot replica (SPEC §4): a
// target that left the replication set, or that acks stopped waiting for
// (maintenance), holds fewer blocks than were acknowledged — Short=true; a
// lagging target that caught up again — Short=false. A short copy is never
// a primary nor in searchable_on (a search on it would miss acknowledged
// events). On a sealed bucket only Short=true is recorded: the copy's
// length report (CopyLength at the sealed length) is what clears it.
type CopyShort struct {
	ReqID
	Bucket string `json:"bucket"`
	Peer   string `json:"peer"`
	Short  bool   `json:"short"`
}

type MarkCorrupt struct {
	ReqID
	Bucket string `json:"bucket"`
	Peer   string `json:"peer"`
	Reason string `json:"reason,omitempty"`
}

func (SetConfig) Type() CommandType          { return CmdSetConfig }
func (RegisterPeer) Type() CommandType       { return CmdRegisterPeer }
func (PeerDown) Type() CommandType           { return CmdPeerDown }
func (SetPeerState) Type() CommandType       { return CmdSetPeerState }
func (AddBucket) Type() CommandType          { return CmdAddBucket }
func (AddCopy) Type() CommandType            { return CmdAddCopy }
func (CopySearchable) Type() CommandType     { return CmdCopySearchable }
func (RemoveCopy) Type() CommandType         { return CmdRemoveCopy }
func (RollBucket) Type() CommandType         { return CmdRollBucket }
func (SealBucket) Type() CommandType         { return CmdSealBucket }
func (CreateFixup) Type() CommandType        { return CmdCreateFixup }
func (FixupDone) Type() CommandType          { return CmdFixupDone }
func (SetMaintenance) Type() CommandType     { return CmdSetMaintenance }
func (RebalancePrimaries) Type() CommandType { return CmdRebalancePrimaries }
func (PeerOffline) Type() CommandType        { return CmdPeerOffline }
func (MarkCorrupt) Type() CommandType        { return CmdMarkCorrupt }
func (CopyLength) Type() CommandType         { return CmdCopyLength }
func (CopyShort) Type() CommandType          { return CmdCopyShort }
func (ExtendSeal) Type() CommandType         { return CmdExtendSeal }
