package fsm

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
)

// FSM is the locked holder of State that a Raft FSM adapter drives (the
// manager's, which implements raft.FSM over it: this package imports no
// Raft, so api and the other packages that read its types pull in no
// transport): Apply decodes and dispatches under a write lock; reads run
// under a read lock through Read.
type FSM struct {
	mu    sync.RWMutex
	state *State
	// snapSize is the size of the last binary snapshot, to size the next
	// one's buffer in one allocation.
	snapSize atomic.Int64
}

// New returns an FSM holding the empty state with DefaultConfig.
func New() *FSM { return &FSM{state: newState()} }

// Read runs fn with the state under a read lock. fn must not keep s, or
// anything reached through it, after it returns.
func (f *FSM) Read(fn func(s *State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Apply applies one committed command entry (a Raft LogCommand) at its log
// index. The response is a Result, or the business error (ErrUnknownPeer,
// ErrBadConfig wrapping the reason, …) when the command changed nothing. An
// entry that cannot be decoded panics: the log is corrupt or versions are
// skewed, and diverging silently is worse.
func (f *FSM) Apply(index uint64, data []byte) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.apply(index, data)
}

// Snapshot encodes the state under the read lock into private buffers
// (the binary form, cluster version 3 and later: about a microsecond a
// bucket, split over GOMAXPROCS goroutines, no copy of the state); the
// manager's raft.FSMSnapshot writes them out (Write) while Apply goes on.
// Before version 3 the snapshot is the JSON of Marshal, which is too slow
// to hold the lock for: Snapshot then takes a Clone and Write encodes it.
// Either way what Write reads is immutable.
func (f *FSM) Snapshot() (*Snapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.ClusterVersion() < BinarySnapshotVersion {
		return &Snapshot{state: f.state.Clone()}, nil
	}
	// One allocation: the last snapshot's size and an eighth, or (the
	// first) 320 bytes a bucket; a bucket record is about 240.
	size := f.snapSize.Load()
	if size == 0 {
		size = 320 * int64(len(f.state.d.Buckets))
	}
	parts, err := f.state.encodeBinary(make([]byte, 0, size+size/8), runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, err
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	f.snapSize.Store(int64(n))
	return &Snapshot{data: parts}, nil
}

// Restore reads a snapshot into fresh state and swaps it in.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("restore fsm snapshot: %w", err)
	}
	s, err := readSnapshot(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	s.supports = f.state.supports
	f.state = s
	f.mu.Unlock()
	return nil
}

// NewAt returns an FSM that applies as a build supporting cluster version
// v (≤ Version) would: a command type of a later version panics as an
// unknown one does. Tests of rolling upgrades run an "older build" with it.
func NewAt(v int) *FSM {
	if v < 1 || v > Version {
		panic(fmt.Sprintf("fsm: NewAt(%d): this build supports 1..%d", v, Version))
	}
	f := New()
	f.state.supports = v
	return f
}

// Supports is the highest cluster version this FSM applies (Version unless
// made by NewAt).
func (f *FSM) Supports() int { return f.state.supports }

// Marshal returns the state's deterministic encoding: the same state gives
// the same bytes on every manager (the determinism test compares them). It
// copies the state under the read lock and encodes the copy outside it.
func (f *FSM) Marshal() ([]byte, error) {
	f.mu.RLock()
	c := f.state.Clone()
	f.mu.RUnlock()
	return c.Marshal()
}

// Snapshot is the encoded state (data), or a private deep copy of it to
// encode (state, the JSON form); Write writes it. The manager's
// raft.FSMSnapshot writes it to the Raft sink and closes or cancels the
// sink.
type Snapshot struct {
	data  [][]byte
	state *State
}

// Write streams the snapshot to w: the bytes Snapshot encoded, or the JSON
// of Marshal of the copy (snapcodec.go).
func (s *Snapshot) Write(w io.Writer) error {
	var err error
	if s.state != nil {
		err = s.state.writeSnapshot(w)
	} else {
		for _, b := range s.data {
			for len(b) > 0 && err == nil {
				n := min(len(b), 1<<20)
				_, err = w.Write(b[:n])
				b = b[n:]
			}
		}
	}
	if err != nil {
		return fmt.Errorf("persist fsm snapshot: %w", err)
	}
	return nil
}

// Release drops the snapshot.
func (s *Snapshot) Release() { s.state, s.data = nil, nil }

// snapshotMagic starts every snapshot, so a foreign file is refused.
const snapshotMagic = "quarry-fsm\n"

// Marshal encodes the state deterministically: encoding/json writes struct
// fields in declaration order and map keys sorted; no field is a float.
func (s *State) Marshal() ([]byte, error) {
	b, err := json.Marshal(&s.d)
	if err != nil {
		return nil, fmt.Errorf("encode fsm state: %w", err)
	}
	return append([]byte(snapshotMagic), b...), nil
}

// Unmarshal decodes a state written by Marshal.
func Unmarshal(b []byte) (*State, error) {
	if len(b) < len(snapshotMagic) || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("decode fsm state: not a quarry fsm snapshot")
	}
	s := &State{supports: Version}
	if err := json.Unmarshal(b[len(snapshotMagic):], &s.d); err != nil {
		return nil, fmt.Errorf("decode fsm state: %w", err)
	}
	if s.d.Version != 1 {
		return nil, fmt.Errorf("decode fsm state: version %d, this build reads 1", s.d.Version)
	}
	if s.d.Peers == nil {
		s.d.Peers = map[string]*Peer{}
	}
	if s.d.Buckets == nil {
		s.d.Buckets = map[string]*Bucket{}
	}
	if s.d.Tasks == nil {
		s.d.Tasks = map[uint64]*Task{}
	}
	for _, b := range s.d.Buckets {
		if b.Copies == nil {
			b.Copies = map[string]*Copy{}
		}
		if b.Primary == nil {
			b.Primary = map[string]string{}
		}
	}
	s.rebuildDerived()
	return s, nil
}

// ApplyCommand applies a command at a Raft index directly, without Raft:
// tests and replay tools use it. It encodes and decodes the command, so it
// exercises the same path as a log entry.
func (s *State) ApplyCommand(idx uint64, c Command) any {
	b, err := Encode(c)
	if err != nil {
		panic(err)
	}
	return s.apply(idx, b)
}

// NewState returns an empty state with DefaultConfig, for use without Raft.
func NewState() *State { return newState() }

// apply decodes and dispatches one entry.
func (s *State) apply(idx uint64, data []byte) any {
	c, err := Decode(data)
	if err != nil {
		panic(fmt.Sprintf("fsm: apply index %d: %v", idx, err))
	}
	if v := NeedsClusterVersion(c); v > s.supports {
		// What a build of cluster version s.supports does on meeting this
		// type: it does not know it (tests play older builds with NewAt).
		panic(fmt.Sprintf("fsm: apply index %d: command type %d needs cluster version %d, this build supports %d", idx, c.Type(), v, s.supports))
	}
	h := registry[c.Type()]
	if idx > s.d.Applied {
		s.d.Applied = idx
	}
	if rid := c.Request(); rid != "" {
		if first, ok := s.requests[rid]; ok {
			return Result{Index: first, Generation: s.d.Generation, Duplicate: true}
		}
	}
	res, err := h.apply(s, idx, c)
	s.refreshTouched()
	if err != nil {
		return err
	}
	s.pruneMarks()
	if rid := c.Request(); rid != "" {
		s.d.Requests = append(s.d.Requests, RequestRecord{ID: rid, Index: idx})
		s.requests[rid] = idx
		if n := len(s.d.Requests) - maxRequests; n > 0 {
			for _, r := range s.d.Requests[:n] {
				delete(s.requests, r.ID)
			}
			s.d.Requests = append([]RequestRecord(nil), s.d.Requests[n:]...)
		}
	}
	if res == nil {
		res = Result{Index: idx, Generation: s.d.Generation}
	}
	return res
}

// Hash returns the applied index and the SHA-256 of the state's
// deterministic encoding. The lock is held for a Clone only; the encoding
// runs outside it.
func (f *FSM) Hash() (applied uint64, sum [32]byte, err error) {
	f.mu.RLock()
	c := f.state.Clone()
	f.mu.RUnlock()
	b, err := c.Marshal()
	if err != nil {
		return 0, sum, err
	}
	return c.d.Applied, sha256.Sum256(b), nil
}
