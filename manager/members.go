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
// address) that lets a follower redirect a write to the leader's HTTP address,
// and a flag saying the bootstrap config was committed. hashicorp/raft v1.7
// has no per-server metadata, so the table travels in the Raft log as entries
// tagged by raft.Log.Extensions; the cluster FSM never sees them and its
// command space is left untouched. See DESIGN.md, "Member table".

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
}

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
	// Delivered and Reported are the fixup delivery marks, keyed
	// "<task id>/<peer>" (see natsvc.go): a task a peer acknowledged is not
	// delivered again by a later leader. Marks of closed tasks are pruned.
	Delivered map[string]bool `json:"delivered,omitempty"`
	Reported  map[string]bool `json:"reported,omitempty"`
}

// muxFSM is the raft.FSM the manager hands to Raft: member-table entries are
// applied here, every other entry goes to the cluster FSM unchanged.
type muxFSM struct {
	inner raft.FSM
	// onApply, if set, is called after every applied entry (the leader's
	// notice publisher waits on it); it must not block.
	onApply func()

	mu      sync.RWMutex
	members memberState
}

func newMuxFSM(inner raft.FSM) *muxFSM {
	return &muxFSM{inner: inner, members: memberState{Members: map[string]Member{}}}
}

// Apply implements raft.FSM.
func (f *muxFSM) Apply(l *raft.Log) any {
	if f.onApply != nil {
		defer f.onApply()
	}
	if !bytes.Equal(l.Extensions, memberExtension) {
		return f.inner.Apply(l)
	}
	var c memberCommand
	if err := json.Unmarshal(l.Data, &c); err != nil {
		// Same rule as the cluster FSM: an undecodable entry means a corrupt
		// log or skewed versions, and diverging silently is worse.
		panic(fmt.Sprintf("manager: undecodable member entry at index %d: %v", l.Index, err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch c.Op {
	case "set":
		f.members.Members[c.Member.ID] = c.Member
	case "seeded":
		f.members.Seeded = true
	case "delivered", "reported":
		f.pruneMarks()
		key := markKey(c.Task, c.Peer)
		if c.Op == "delivered" {
			if f.members.Delivered == nil {
				f.members.Delivered = map[string]bool{}
			}
			f.members.Delivered[key] = true
		} else {
			if f.members.Reported == nil {
				f.members.Reported = map[string]bool{}
			}
			f.members.Reported[key] = true
		}
	default:
		panic(fmt.Sprintf("manager: unknown member entry %q at index %d", c.Op, l.Index))
	}
	return nil
}

// markKey names a fixup delivery mark.
func markKey(task uint64, peer string) string { return fmt.Sprintf("%d/%s", task, peer) }

// pruneMarks drops the marks of tasks that are no longer open in the
// cluster FSM (deterministic: it depends only on the applied log). Called
// with f.mu held, from Apply.
func (f *muxFSM) pruneMarks() {
	cf, ok := f.inner.(*fsm.FSM)
	if !ok || len(f.members.Delivered)+len(f.members.Reported) == 0 {
		return
	}
	open := map[uint64]bool{}
	cf.Read(func(s *fsm.State) {
		for _, t := range s.Tasks() {
			open[t.ID] = true
		}
	})
	for _, m := range []map[string]bool{f.members.Delivered, f.members.Reported} {
		for k := range m {
			var id uint64
			fmt.Sscanf(k, "%d/", &id)
			if !open[id] {
				delete(m, k)
			}
		}
	}
}

// marked reports whether a delivery ("delivered") or report ("reported")
// mark exists.
func (f *muxFSM) marked(op string, task uint64, peer string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if op == "reported" {
		return f.members.Reported[markKey(task, peer)]
	}
	return f.members.Delivered[markKey(task, peer)]
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

// Snapshot implements raft.FSM.
func (f *muxFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	members, err := json.Marshal(f.members)
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
	f.mu.Lock()
	f.members = st
	f.mu.Unlock()
	return nil
}

type muxSnapshot struct {
	members []byte
	inner   raft.FSMSnapshot
}

// Persist writes the member table, then lets the cluster FSM write its part
// to the same sink (it cancels the sink itself on error).
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
	return s.inner.Persist(sink)
}

// Release implements raft.FSMSnapshot.
func (s *muxSnapshot) Release() { s.inner.Release() }
