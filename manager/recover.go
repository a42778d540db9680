package manager

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/quarry-dev/quarry/fsm"
)

// Recovery after quorum loss, offline half (DESIGN.md, "Recovery after quorum
// loss"): Recover checks a stopped manager's data directory and writes the
// member list hashicorp/raft's recovery reads, DATA_DIR/raft/peers.json.
//
// Why peers.json rather than calling raft.RecoverCluster here: openRaft
// already applies the file at the next start with raft.RecoverCluster and
// exactly the FSM (member table + cluster FSM), log and stable store,
// snapshot store and transport (plain TCP or the mutual-TLS stream layer)
// the manager runs with — one code path, the one a start takes. Recovering
// here would need a transport built from the manager's TLS material and a
// second copy of that wiring, and would rewrite the log and snapshots in a
// tool rather than in the process that owns them. Recover itself only reads
// the data directory (bolt opened read-only, under its shared lock) and
// writes one file; on any refusal nothing is written.

// Recovery refusals. Each leaves the data directory as it was.
var (
	// ErrNoRaftState: the data directory holds no Raft log, stable store or
	// snapshot (a wrong --data-dir, or a manager that never started).
	ErrNoRaftState = errors.New("no raft state in the data directory")
	// ErrDataDirInUse: a running manager holds the data directory's bolt lock.
	ErrDataDirInUse = errors.New("the data directory is in use by a running manager")
	// ErrLeaderReachable: a manager of the group reports a leader, so quorum
	// is not lost; recovering would split the group.
	ErrLeaderReachable = errors.New("a leader of the group is reachable")
	// ErrLeaderUnknown: a manager answered, but not with its status (an
	// HTTPS manager asked over http without --tls-ca, say), so whether it
	// has a leader is unknown.
	ErrLeaderUnknown = errors.New("a reachable manager did not say whether it has a leader")
	// ErrBadMembers: --members is empty, malformed, repeats an id or an
	// address, or does not include this manager.
	ErrBadMembers = errors.New("bad member list")
)

// RecoverOptions is the input of Recover (`quarry manager recover`).
type RecoverOptions struct {
	ID      string   // this manager's --id
	DataDir string   // its --data-dir (the manager must be stopped)
	Members []Server // the surviving members, this one included
	// Managers are extra HTTP URLs asked whether they know a leader, beside
	// every manager the member table in the data directory names.
	Managers []string
	// Timeout bounds each leader check call and the bolt lock wait.
	Timeout time.Duration
	// TLS, when set, is used for the leader checks, and member-table
	// addresses are asked over https.
	TLS *tls.Config
}

// RecoverReport says what Recover found and wrote.
type RecoverReport struct {
	PeersFile    string   `json:"peers_file"`
	Members      []Server `json:"members"`
	LastIndex    uint64   `json:"last_index"`
	LastTerm     uint64   `json:"last_term"`
	Buckets      int      `json:"buckets"`
	Peers        int      `json:"peers"`
	Configured   []string `json:"configured"` // the Raft configuration the data dir held: id=addr
	Checked      []string `json:"checked"`    // manager URLs asked for a leader
	Unreachable  []string `json:"unreachable,omitempty"`
	ReplacedFile bool     `json:"replaced_file,omitempty"` // a previous peers.json was overwritten
}

// ValidateMembers checks a recovery member list against this manager's id.
func ValidateMembers(id string, members []Server) error {
	if id == "" {
		return fmt.Errorf("%w: --id is required", ErrBadMembers)
	}
	if len(members) == 0 {
		return fmt.Errorf("%w: --members is required (id=host:port of every surviving manager, this one included)", ErrBadMembers)
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	self := false
	for _, s := range members {
		if ids[s.ID] {
			return fmt.Errorf("%w: id %q twice in --members", ErrBadMembers, s.ID)
		}
		if addrs[s.RaftAddr] {
			return fmt.Errorf("%w: address %q twice in --members", ErrBadMembers, s.RaftAddr)
		}
		if strings.HasSuffix(s.RaftAddr, ":0") {
			return fmt.Errorf("%w: member %s: address %q needs a real port", ErrBadMembers, s.ID, s.RaftAddr)
		}
		ids[s.ID], addrs[s.RaftAddr] = true, true
		self = self || s.ID == id
	}
	if !self {
		return fmt.Errorf("%w: --members does not include this manager (--id %s)", ErrBadMembers, id)
	}
	return nil
}

// Recover runs the safety checks on a stopped manager's data directory and
// writes DATA_DIR/raft/peers.json with opts.Members; the manager applies it
// at its next start (openRaft). Checks, in order, each refusing with nothing
// written: a valid member list including opts.ID; Raft state present; the
// bolt store not locked by a running manager; no manager of the group (the
// member table's HTTP addresses and opts.Managers) reporting a leader.
func Recover(ctx context.Context, opts RecoverOptions) (RecoverReport, error) {
	var rep RecoverReport
	if err := ValidateMembers(opts.ID, opts.Members); err != nil {
		return rep, err
	}
	if opts.DataDir == "" {
		return rep, fmt.Errorf("%w: --data-dir is required", ErrNoRaftState)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	dir := filepath.Join(opts.DataDir, raftDirName)
	boltPath := filepath.Join(dir, boltFileName)
	if _, err := os.Stat(boltPath); err != nil {
		return rep, fmt.Errorf("%w: %s: %v", ErrNoRaftState, boltPath, err)
	}
	// Read-only: a shared lock (a running manager holds the exclusive one,
	// and none can start while we hold it), no write transaction.
	store, err := raftboltdb.New(raftboltdb.Options{Path: boltPath,
		BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: opts.Timeout}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return rep, fmt.Errorf("%w: %s is locked (stop the manager first)", ErrDataDirInUse, boltPath)
	}
	if err != nil {
		return rep, fmt.Errorf("open raft log %s read-only: %w", boltPath, err)
	}
	defer store.Close()

	snapDir := filepath.Join(dir, snapDirName)
	var snaps []*raft.SnapshotMeta
	var snapStore *raft.FileSnapshotStore
	if _, err := os.Stat(snapDir); err == nil {
		snapStore, err = raft.NewFileSnapshotStoreWithLogger(dir, retainSnaps, hclog.NewNullLogger())
		if err != nil {
			return rep, fmt.Errorf("open snapshot store %s: %w", dir, err)
		}
		if snaps, err = snapStore.List(); err != nil {
			return rep, fmt.Errorf("list snapshots in %s: %w", dir, err)
		}
	}
	term, err := store.GetUint64([]byte("CurrentTerm"))
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return rep, fmt.Errorf("read current term from %s: %w", boltPath, err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return rep, fmt.Errorf("read last index from %s: %w", boltPath, err)
	}
	if term == 0 && last == 0 && len(snaps) == 0 {
		return rep, fmt.Errorf("%w: %s has no log, term or snapshot", ErrNoRaftState, dir)
	}

	// Replay what the data dir holds (latest snapshot, then the log) into a
	// throwaway FSM: the member table names the managers to ask for a
	// leader, and the operator sees what the recovered manager will hold.
	mux := newMuxFSM(fsm.New())
	conf, err := replayDataDir(mux, store, snapStore, snaps, &rep)
	if err != nil {
		return rep, err
	}
	for _, s := range conf.Servers {
		rep.Configured = append(rep.Configured, fmt.Sprintf("%s=%s", s.ID, s.Address))
	}
	mux.inner.Read(func(s *fsm.State) { rep.Buckets, rep.Peers = len(s.BucketList("", "")), len(s.PeerList()) })

	// Ask every manager we know of whether it sees a leader.
	urls := map[string]bool{}
	scheme := "http://"
	if opts.TLS != nil {
		scheme = "https://"
	}
	for _, m := range mux.memberList() {
		if m.ID != opts.ID && m.HTTPAddr != "" {
			urls[scheme+m.HTTPAddr] = true
		}
	}
	for _, u := range opts.Managers {
		if u = strings.TrimSpace(u); u != "" {
			urls[u] = true
		}
	}
	if err := checkNoLeader(ctx, sortedSet(urls), opts, &rep); err != nil {
		return rep, err
	}

	// Write peers.json (temp file, fsync, rename) while holding the lock.
	peersPath := filepath.Join(dir, peersFileName)
	if _, err := os.Stat(peersPath); err == nil {
		rep.ReplacedFile = true
	}
	body := make([]map[string]any, 0, len(opts.Members))
	for _, s := range opts.Members {
		body = append(body, map[string]any{"id": s.ID, "address": s.RaftAddr, "non_voter": false})
	}
	data, err := json.MarshalIndent(body, "", "  ")
	if err != nil {
		return rep, err
	}
	if err := writeFileSync(peersPath, append(data, '\n')); err != nil {
		return rep, err
	}
	if _, err := raft.ReadConfigJSON(peersPath); err != nil {
		os.Remove(peersPath)
		return rep, fmt.Errorf("%w: hashicorp/raft refuses it: %v", ErrBadMembers, err)
	}
	rep.PeersFile, rep.Members = peersPath, opts.Members
	return rep, nil
}

// replayDataDir restores the newest readable snapshot into mux, applies the
// log after it, and returns the last Raft configuration seen.
func replayDataDir(mux *muxFSM, store *raftboltdb.BoltStore, snapStore *raft.FileSnapshotStore, snaps []*raft.SnapshotMeta, rep *RecoverReport) (conf raft.Configuration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("replay the raft log: %v", r)
		}
	}()
	var from uint64
	for _, meta := range snaps { // newest first
		_, rc, err := snapStore.Open(meta.ID)
		if err != nil {
			continue
		}
		if err := mux.Restore(rc); err != nil {
			return conf, fmt.Errorf("restore snapshot %s: %w", meta.ID, err)
		}
		from, conf = meta.Index, meta.Configuration
		rep.LastIndex, rep.LastTerm = meta.Index, meta.Term
		break
	}
	first, err := store.FirstIndex()
	if err != nil {
		return conf, fmt.Errorf("read first index: %w", err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return conf, fmt.Errorf("read last index: %w", err)
	}
	for i := max(first, from+1); i > 0 && i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return conf, fmt.Errorf("read log entry %d: %w", i, err)
		}
		switch l.Type {
		case raft.LogCommand:
			mux.Apply(&l)
		case raft.LogConfiguration:
			conf = raft.DecodeConfiguration(l.Data)
		}
		rep.LastIndex, rep.LastTerm = l.Index, l.Term
	}
	return conf, nil
}

// checkNoLeader asks each URL's /v1/status (one call each, in parallel,
// opts.Timeout each) and refuses when any names a leader, or answers with
// an HTTP error (it runs, but its answer says nothing). An unreachable
// manager is what quorum loss looks like, so it is only reported.
func checkNoLeader(ctx context.Context, urls []string, opts RecoverOptions, rep *RecoverReport) error {
	type answer struct {
		url, leader string
		err         error
	}
	answers := make([]answer, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i].url = u
			cl, err := NewClient([]string{u}, "", opts.Timeout)
			if err != nil {
				answers[i].err = err
				return
			}
			if opts.TLS != nil {
				cl.UseTLS(opts.TLS)
			}
			cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
			defer cancel()
			st, err := cl.Status(cctx)
			answers[i].leader, answers[i].err = st.Leader, err
		}()
	}
	wg.Wait()
	for _, a := range answers {
		rep.Checked = append(rep.Checked, a.url)
		var ae *APIError
		if errors.As(a.err, &ae) {
			return fmt.Errorf("%w: %s answered %v (an HTTPS manager needs --tls-ca)", ErrLeaderUnknown, a.url, ae)
		}
		if a.err != nil {
			rep.Unreachable = append(rep.Unreachable, a.url)
			continue
		}
		if a.leader != "" {
			return fmt.Errorf("%w: %s reports leader %s (quorum is not lost: restart this manager normally and it rejoins)", ErrLeaderReachable, a.url, a.leader)
		}
	}
	return nil
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// writeFileSync writes path atomically: a temporary file beside it, fsynced,
// renamed over it.
func writeFileSync(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, strings.NewReader(string(data))); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return nil
}
