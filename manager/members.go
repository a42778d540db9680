package manager

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/fsm"
)

// The manager keeps one small piece of replicated state of its own, beside the
// cluster state of package fsm: the member table (manager id → HTTP and Raft
// address, and the cluster version its build supports) that lets a follower
// redirect a write to the leader's HTTP address and the leader agree a
// cluster version, and a flag saying the bootstrap config was committed.
// hashicorp/raft v1.7 has no per-server metadata, so the table travels in the
// Raft log as entries tagged by raft.Log.Extensions; the cluster FSM never
// sees them. See DESIGN.md, "Member table".
//
// The fixup delivery marks used to live here too ("delivered"/"reported"
// entries, and maps in the member table). They are cluster state now
// (fsm.MarkFixup, cluster version 2); this file still applies the
// version-1 entries (into the cluster FSM, as ApplyLegacyMark) and reads
// and writes them in the snapshot's member table, so a manager upgraded in
// place restores its snapshot and replays its log, and a version-1 build
// that restores a snapshot of this one keeps the marks.

// memberExtension tags a Raft log entry as a member-table entry.
var memberExtension = []byte("quarry.manager.members/v1")

// snapshotMagic starts every snapshot written by the manager: the member
// table comes first (length-prefixed JSON), then the cluster FSM's snapshot.
const snapshotMagic = "QMGRSNP1"

// Member is one manager as the member table knows it.
type Member struct {
	ID       string `json:"id"`
	Site     string `json:"site,omitempty"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Version is the highest cluster version the member's build supports
	// (fsm.Version); absent (0) for a build before cluster versions, which
	// supports version 1.
	Version int `json:"version,omitempty"`
}

// supports is the cluster version a member's build supports.
func (m Member) supports() int { return max(1, m.Version) }

// memberCommand is the body of a member-table entry.
type memberCommand struct {
	Op     string `json:"op"` // "set", "seeded", "delivered" or "reported"
	Member Member `json:"member,omitempty"`
	// Task and Peer name a fixup delivery mark ("delivered": Peer accepted
	// task Task; "reported": Peer reported its part of a multi-peer task).
	Task uint64 `json:"task,omitempty"`
	Peer string `json:"peer,omitempty"`
}

// memberState is the replicated member table.
type memberState struct {
	Members map[string]Member `json:"members"`
	// Seeded is set once the bootstrap config flags have been committed, so
	// that a later leader never re-applies its own flags over admin changes.
	Seeded bool `json:"seeded"`
	// Delivered and Reported are the fixup delivery marks as a version-1
	// build keeps them, keyed "<task id>/<peer>". This build holds the marks
	// in the cluster FSM; it writes them here too in a snapshot (for a
	// version-1 build that restores it) and imports them on Restore (a
	// snapshot written by a version-1 build).
	Delivered map[string]bool `json:"delivered,omitempty"`
	Reported  map[string]bool `json:"reported,omitempty"`
}

// muxFSM is the raft.FSM the manager hands to Raft: member-table entries are
// applied here, every other entry goes to the cluster FSM unchanged.
type muxFSM struct {
	inner *fsm.FSM
	// onApply, if set, is called after every applied entry (the leader's
	// notice publisher waits on it); it must not block.
	onApply func()

	mu      sync.RWMutex
	members memberState
}

func newMuxFSM(inner *fsm.FSM) *muxFSM {
	return &muxFSM{inner: inner, members: memberState{Members: map[string]Member{}}}
}

// Apply implements raft.FSM.
func (f *muxFSM) Apply(l *raft.Log) any {
	if f.onApply != nil {
		defer f.onApply()
	}
	if !bytes.Equal(l.Extensions, memberExtension) {
		if l.Type != raft.LogCommand {
			return nil
		}
		return f.inner.Apply(l.Index, l.Data)
	}
	var c memberCommand
	if err := json.Unmarshal(l.Data, &c); err != nil {
		// Same rule as the cluster FSM: an undecodable entry means a corrupt
		// log or skewed versions, and diverging silently is worse.
		panic(fmt.Sprintf("manager: undecodable member entry at index %d: %v", l.Index, err))
	}
	switch c.Op {
	case "set":
		f.mu.Lock()
		f.members.Members[c.Member.ID] = c.Member
		f.mu.Unlock()
	case "seeded":
		f.mu.Lock()
		f.members.Seeded = true
		f.mu.Unlock()
	case fsm.MarkDelivered, fsm.MarkReported:
		// A version-1 mark: cluster state now, applied as that build did.
		f.inner.ApplyLegacyMark(l.Index, c.Op, c.Task, c.Peer)
	default:
		panic(fmt.Sprintf("manager: unknown member entry %q at index %d", c.Op, l.Index))
	}
	return nil
}

// marked reports whether a delivery (fsm.MarkDelivered) or report
// (fsm.MarkReported) mark exists; they are cluster state, read under the
// cluster FSM's read lock. Never call it inside that FSM's Read (a second
// RLock waits behind a waiting Apply: a deadlock); there, use
// State.Marked.
func (f *muxFSM) marked(kind string, task uint64, peer string) bool {
	var ok bool
	f.inner.Read(func(s *fsm.State) { ok = s.Marked(kind, task, peer) })
	return ok
}

// member returns the table's entry for id.
func (f *muxFSM) member(id string) (Member, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.members.Members[id]
	return m, ok
}

// memberList returns the table sorted by id.
func (f *muxFSM) memberList() []Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Member, 0, len(f.members.Members))
	for _, m := range f.members.Members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (f *muxFSM) seeded() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.members.Seeded
}

// Snapshot implements raft.FSM. The member table is small and encoded here;
// the cluster FSM encodes its state under its read lock (fsm.FSM.Snapshot). Raft calls
// Snapshot between two Applies, so the marks copied into the member table
// are those of the cluster state snapshotted.
func (f *muxFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	st := memberState{Members: f.members.Members, Seeded: f.members.Seeded}
	f.inner.Read(func(s *fsm.State) {
		st.Delivered = markSet(s.MarkKeys(fsm.MarkDelivered))
		st.Reported = markSet(s.MarkKeys(fsm.MarkReported))
	})
	members, err := json.Marshal(st)
	f.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("encode member table: %w", err)
	}
	inner, err := f.inner.Snapshot()
	if err != nil {
		return nil, err
	}
	return &muxSnapshot{members: members, inner: inner}, nil
}

// Restore implements raft.FSM.
func (f *muxFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReader(rc)
	var head [len(snapshotMagic) + 4]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if string(head[:len(snapshotMagic)]) != snapshotMagic {
		return fmt.Errorf("snapshot header %q: not a quarry manager snapshot", head[:len(snapshotMagic)])
	}
	n := binary.BigEndian.Uint32(head[len(snapshotMagic):])
	if n > 64<<20 {
		return fmt.Errorf("snapshot member table of %d bytes: too large", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(br, buf); err != nil {
		return fmt.Errorf("read snapshot member table: %w", err)
	}
	st := memberState{Members: map[string]Member{}}
	if err := json.Unmarshal(buf, &st); err != nil {
		return fmt.Errorf("decode snapshot member table: %w", err)
	}
	if st.Members == nil {
		st.Members = map[string]Member{}
	}
	if err := f.inner.Restore(io.NopCloser(br)); err != nil {
		return err
	}
	// Marks a version-1 build kept in its member table (this build's own
	// snapshots carry the same marks in both places: importing is a no-op).
	for kind, m := range map[string]map[string]bool{fsm.MarkDelivered: st.Delivered, fsm.MarkReported: st.Reported} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		if err := f.inner.ImportMarks(kind, keys); err != nil {
			return fmt.Errorf("restore snapshot member table: %w", err)
		}
	}
	st.Delivered, st.Reported = nil, nil
	f.mu.Lock()
	f.members = st
	f.mu.Unlock()
	return nil
}

func markSet(keys []string) map[string]bool {
	if len(keys) == 0 {
		return nil
	}
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

type muxSnapshot struct {
	members []byte
	inner   *fsm.Snapshot
}

// Persist writes the member table, then the cluster FSM's part to the same
// sink; it cancels the sink on any error and closes it on success.
func (s *muxSnapshot) Persist(sink raft.SnapshotSink) error {
	var head [len(snapshotMagic) + 4]byte
	copy(head[:], snapshotMagic)
	binary.BigEndian.PutUint32(head[len(snapshotMagic):], uint32(len(s.members)))
	if _, err := sink.Write(head[:]); err != nil {
		sink.Cancel()
		return fmt.Errorf("write snapshot header: %w", err)
	}
	if _, err := sink.Write(s.members); err != nil {
		sink.Cancel()
		return fmt.Errorf("write snapshot member table: %w", err)
	}
	if err := s.inner.Write(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *muxSnapshot) Release() { s.inner.Release() }
