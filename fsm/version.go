package fsm

import (
	"errors"
	"fmt"
	"slices"
)

// Version is the highest cluster version (command-set version) this build
// supports: it applies every command type whose MinClusterVersion is at
// most Version. Version 1 is the command set up to CmdSetDetention;
// version 2 adds CmdSetClusterVersion, CmdMarkFixup and CmdExtendSeal;
// version 3 adds no command but the binary snapshot format
// (BinarySnapshotVersion, snapcodec.go), which a version 2 build cannot
// read; version 4 adds no command but RollBucket's Origin (body version 2,
// RollOriginVersion), which a version 3 build cannot read; version 5 adds no
// command but SealBucket's Final (body version 3, SealFinalVersion) and
// the rule that only a provisional seal is extended; version 6 adds no
// command but Bucket.LeftAt (LeftAtVersion), which a version 5 build does
// not record, so its state would differ; version 7 adds no command but
// the inventory rules (InventoryVersion, inventory.go): a registration
// adopts only the claimed copies the managers can vouch for and declares
// no index unless indexes are created automatically; version 8 adds
// CmdSetBundle, the configuration bundle (BundleVersion, bundle.go);
// version 9 the saved-search commands (SavedSearchVersion,
// savedsearch.go); version 10 CmdSetTokenKey, the token key under which
// token secrets are digested before they leave the managers
// (TokenKeyVersion, tokenkey.go). A build that adds a command type raises Version and
// lists the type in clusterVersions.
const Version = 10

// LeftAtVersion is the cluster version from which the FSM records when a
// copy leaves a hot bucket's searchable set (Bucket.LeftAt).
const LeftAtVersion = 6

// clusterVersions is the cluster version that may carry each command type
// added after version 1: the leader never appends a command of such a type
// before the group agreed that version (SetClusterVersion), so a follower
// of an older build never meets a type it does not know. Types not listed
// are version 1.
var clusterVersions = map[CommandType]int{
	CmdSetClusterVersion: 2,
	CmdMarkFixup:         2,
	CmdExtendSeal:        2,
	CmdAddSavedSearch:    SavedSearchVersion,
	CmdRemoveSavedSearch: SavedSearchVersion,
	CmdRunSavedSearch:    SavedSearchVersion,
	CmdClaimSlot:         SavedSearchVersion,
	CmdFinishSlot:        SavedSearchVersion,
}

// MinClusterVersion is the cluster version a command of type t needs.
func MinClusterVersion(t CommandType) int {
	if v, ok := clusterVersions[t]; ok {
		return v
	}
	return 1
}

// ErrClusterVersion: a command the agreed cluster version does not carry
// (the manager refuses to append it), or a SetClusterVersion that would
// lower the version.
var ErrClusterVersion = errors.New("cluster version")

func init() {
	register(CmdSetClusterVersion, (*State).applySetClusterVersion)
	register(CmdMarkFixup, (*State).applyMarkFixup)
}

// SetClusterVersion raises the cluster version. The leader proposes it once
// every manager of the Raft configuration reported that it supports
// Version; it is itself a version 2 command, appended only then (the
// manager checks the members, not the current version, for this one). A
// version lower than the current one is refused; the same version is a
// no-op. A build that supports less than Version panics on it: every other
// manager moves on to commands it cannot read, so it must stop here rather
// than diverge.
type SetClusterVersion struct {
	ReqID
	Version int `json:"version"`
}

// Mark kinds of MarkFixup.
const (
	// MarkDelivered: the peer accepted the task's delivery; a later leader
	// does not deliver it to that peer again.
	MarkDelivered = "delivered"
	// MarkReported: the peer reported its part of a multi-peer task (a
	// freeze's holders).
	MarkReported = "reported"
)

// MarkFixup records a fixup delivery mark: Peer accepted (MarkDelivered)
// or reported its part of (MarkReported) open task Task. Marking a task
// that is not open is refused (ErrUnknownTask); marking twice is a no-op.
// A task's marks are dropped with the task (pruneMarks), so they are
// bounded by the open tasks and pruning depends only on the log.
type MarkFixup struct {
	ReqID
	Task uint64 `json:"task"`
	Peer string `json:"peer"`
	Kind string `json:"kind"`
}

// TaskMarks are one open task's marks: the peers, sorted.
type TaskMarks struct {
	Delivered []string `json:"delivered,omitempty"`
	Reported  []string `json:"reported,omitempty"`
}

func (SetClusterVersion) Type() CommandType { return CmdSetClusterVersion }
func (MarkFixup) Type() CommandType         { return CmdMarkFixup }

// ClusterVersion is the agreed cluster version (1 before any
// SetClusterVersion).
func (s *State) ClusterVersion() int { return max(1, s.d.ClusterVersion) }

// Marked reports whether task carries a mark of kind for peer.
func (s *State) Marked(kind string, task uint64, peer string) bool {
	m := s.d.Marks[task]
	if m == nil {
		return false
	}
	_, ok := slices.BinarySearch(m.list(kind), peer)
	return ok
}

func (m *TaskMarks) list(kind string) []string {
	if kind == MarkReported {
		return m.Reported
	}
	return m.Delivered
}

func (s *State) applySetClusterVersion(idx uint64, c *SetClusterVersion) (any, error) {
	if c.Version > s.supports {
		panic(fmt.Sprintf("fsm: apply index %d: the group agreed cluster version %d, this build supports up to %d: upgrade this manager", idx, c.Version, s.supports))
	}
	if c.Version < s.ClusterVersion() {
		return nil, fmt.Errorf("%w: %d is below the agreed %d", ErrClusterVersion, c.Version, s.ClusterVersion())
	}
	if s.ClusterVersion() < LeftAtVersion && c.Version >= LeftAtVersion {
		s.d.LeftAtFrom = idx
	}
	s.d.ClusterVersion = c.Version
	return nil, nil
}

func (s *State) applyMarkFixup(idx uint64, c *MarkFixup) (any, error) {
	if c.Kind != MarkDelivered && c.Kind != MarkReported {
		return nil, fmt.Errorf("%w: mark kind %q, want %q or %q", ErrBadTask, c.Kind, MarkDelivered, MarkReported)
	}
	if c.Peer == "" {
		return nil, fmt.Errorf("%w: mark of task %d names no peer", ErrBadTask, c.Task)
	}
	if _, ok := s.d.Tasks[c.Task]; !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownTask, c.Task)
	}
	if s.Marked(c.Kind, c.Task, c.Peer) {
		return nil, nil
	}
	if s.d.Marks == nil {
		s.d.Marks = map[uint64]*TaskMarks{}
	}
	m := s.d.Marks[c.Task]
	if m == nil {
		m = &TaskMarks{}
		s.d.Marks[c.Task] = m
	}
	l := &m.Delivered
	if c.Kind == MarkReported {
		l = &m.Reported
	}
	i, _ := slices.BinarySearch(*l, c.Peer)
	*l = slices.Insert(*l, i, c.Peer)
	return nil, nil
}

// pruneMarks drops the marks of tasks that are no longer open. It runs
// after every applied entry, so it depends only on the log (no clock), and
// an entry that closes a task drops its marks in the same entry.
func (s *State) pruneMarks() {
	for id := range s.d.Marks { // deleting in any order gives the same map
		if _, open := s.d.Tasks[id]; !open {
			delete(s.d.Marks, id)
		}
	}
	if len(s.d.Marks) == 0 {
		s.d.Marks = nil
	}
}

// ImportMarks adds marks kept outside the state by an older build (the
// manager's member table of snapshots written before version 2): keys
// "<task id>/<peer>" as that build wrote them. Marks of tasks that are not
// open are dropped; an unreadable key is an error. Deterministic: the
// result depends only on the keys and the state.
func (s *State) ImportMarks(kind string, keys []string) error {
	if kind != MarkDelivered && kind != MarkReported {
		return fmt.Errorf("import marks: kind %q", kind)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var id uint64
		var peer string
		if n, err := fmt.Sscanf(k, "%d/%s", &id, &peer); n != 2 || err != nil {
			return fmt.Errorf("import marks: key %q is not <task>/<peer>", k)
		}
		if _, err := s.applyMarkFixup(0, &MarkFixup{Task: id, Peer: peer, Kind: kind}); err != nil && !errors.Is(err, ErrUnknownTask) {
			return fmt.Errorf("import marks: key %q: %w", k, err)
		}
	}
	return nil
}

// ApplyLegacyMark applies a mark written by an older build (the manager's
// member-table entry "delivered"/"reported" of cluster version 1) at a Raft
// index, as that build applied it: a mark of a task that is not open
// changes nothing and is no error.
func (f *FSM) ApplyLegacyMark(idx uint64, kind string, task uint64, peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.state
	if idx > s.d.Applied {
		s.d.Applied = idx
	}
	if _, err := s.applyMarkFixup(idx, &MarkFixup{Task: task, Peer: peer, Kind: kind}); err != nil && !errors.Is(err, ErrUnknownTask) {
		panic(fmt.Sprintf("fsm: apply legacy mark at index %d: %v", idx, err))
	}
}

// ImportMarks is State.ImportMarks under the FSM's write lock (the manager's
// Restore of a snapshot whose member table carries marks).
func (f *FSM) ImportMarks(kind string, keys []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.ImportMarks(kind, keys)
}

// MarkKeys lists the marks of one kind as "<task id>/<peer>" keys, the form
// the manager's version-1 member table kept them in, sorted by task id then
// peer (the manager writes them into its snapshot's member table too, so a
// version-1 build that restores it keeps them).
func (s *State) MarkKeys(kind string) []string {
	var out []string
	for _, id := range sortedMarkIDs(s.d.Marks) {
		for _, p := range s.d.Marks[id].list(kind) {
			out = append(out, fmt.Sprintf("%d/%s", id, p))
		}
	}
	return out
}

func sortedMarkIDs(m map[uint64]*TaskMarks) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
