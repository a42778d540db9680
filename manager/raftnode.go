package manager

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// Files under the data directory.
const (
	raftDirName   = "raft"
	boltFileName  = "raft.db"
	snapDirName   = "snapshots"
	peersFileName = "peers.json"
	retainSnaps   = 2
)

// raftNode is the Raft half of a manager: the Raft instance and the stores it
// owns. close releases them in the right order.
type raftNode struct {
	raft   *raft.Raft
	trans  *raft.NetworkTransport
	store  *raftboltdb.BoltStore
	snaps  *raft.FileSnapshotStore
	notify chan bool
}

// raftConfig builds the hashicorp/raft config from the library defaults,
// overriding only what quarry tunes (DESIGN.md, "Timeouts").
func raftConfig(cfg *Config, notify chan bool, logger hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.RaftHeartbeatTimeout
	rc.ElectionTimeout = cfg.RaftElectionTimeout
	rc.LeaderLeaseTimeout = cfg.RaftLeaderLeaseTimeout
	rc.CommitTimeout = cfg.RaftCommitTimeout
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	rc.NotifyCh = notify
	rc.Logger = logger
	return rc
}

// openRaft opens (or creates) the node's stores under dataDir, applies a
// peers.json recovery file if one is present, and starts Raft. It bootstraps
// the cluster only when there is no existing state and bootstrap is non-empty.
func openRaft(cfg *Config, fsm raft.FSM, newFSM func() raft.FSM, log *slog.Logger) (n *raftNode, err error) {
	dir := filepath.Join(cfg.DataDir, raftDirName)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create raft dir %s: %w", dir, err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{
		Name:   "raft." + cfg.ID,
		Level:  hclog.LevelFromString(cfg.RaftLogLevel),
		Output: cfg.logOutput(),
	})

	n = &raftNode{notify: make(chan bool, 16)}
	defer func() {
		if err != nil {
			n.closeStores()
		}
	}()

	// NoSync stays off: every log append is fsynced before Raft acknowledges.
	n.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, boltFileName), NoSync: false})
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", filepath.Join(dir, boltFileName), err)
	}
	n.snaps, err = raft.NewFileSnapshotStoreWithLogger(dir, retainSnaps, hlog.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("open snapshot store %s: %w", dir, err)
	}
	advertise, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("resolve raft address %q: %w", cfg.RaftAddr, err)
	}
	var adv net.Addr = advertise
	if advertise.Port == 0 {
		// Let the transport advertise what it actually bound.
		adv = nil
	}
	if n.trans, err = newRaftTransport(cfg, adv, hlog.Named("transport")); err != nil {
		return nil, fmt.Errorf("listen for raft on %s: %w", cfg.RaftAddr, err)
	}

	rc := raftConfig(cfg, n.notify, hlog)

	// Recovery after quorum loss: an operator-written peers.json replaces the
	// member list (DESIGN.md, "Recovery after quorum loss").
	peersPath := filepath.Join(dir, peersFileName)
	if _, statErr := os.Stat(peersPath); statErr == nil {
		conf, err := raft.ReadConfigJSON(peersPath)
		if err != nil {
			return nil, fmt.Errorf("read recovery file %s: %w", peersPath, err)
		}
		if err := raft.RecoverCluster(rc, newFSM(), n.store, n.store, n.snaps, n.trans, conf); err != nil {
			return nil, fmt.Errorf("recover cluster from %s: %w", peersPath, err)
		}
		done := peersPath + ".applied-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(peersPath, done); err != nil {
			return nil, fmt.Errorf("recovered from %s but could not move it aside (remove it before the next start): %w", peersPath, err)
		}
		log.Warn("recovered raft member list from peers.json", "file", peersPath, "servers", len(conf.Servers), "moved_to", done)
	}

	hasState, err := raft.HasExistingState(n.store, n.store, n.snaps)
	if err != nil {
		return nil, fmt.Errorf("check existing raft state in %s: %w", dir, err)
	}

	n.raft, err = raft.NewRaft(rc, fsm, n.store, n.store, n.snaps, n.trans)
	if err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}

	switch {
	case hasState:
		log.Info("restarting from existing raft state", "dir", dir, "last_index", n.raft.LastIndex())
	case len(cfg.Bootstrap) > 0:
		conf := raft.Configuration{}
		for _, s := range cfg.Bootstrap {
			if s.ID == cfg.ID && strings.HasSuffix(s.RaftAddr, ":0") {
				s.RaftAddr = string(n.trans.LocalAddr()) // port chosen by the OS
			}
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.RaftAddr)})
		}
		f := n.raft.BootstrapCluster(conf)
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			n.raft.Shutdown()
			return nil, fmt.Errorf("bootstrap raft cluster: %w", err)
		}
		log.Info("bootstrapped raft cluster", "servers", len(conf.Servers))
	default:
		log.Info("no raft state and no bootstrap list: waiting to be added by a leader (join)")
	}
	return n, nil
}

// newRaftTransport is hashicorp/raft's TCP transport, or the same network
// transport on a mutual-TLS stream layer when the manager has a
// certificate (DESIGN.md, "Raft over TLS").
func newRaftTransport(cfg *Config, adv net.Addr, logger hclog.Logger) (*raft.NetworkTransport, error) {
	const maxPool, timeout = 3, 10 * time.Second
	if !cfg.TLS.Serving() {
		return raft.NewTCPTransportWithLogger(cfg.RaftAddr, adv, maxPool, timeout, logger)
	}
	mutual, err := cfg.TLS.Mutual(tlsconfig.RaftRoles...)
	if err != nil {
		return nil, err
	}
	stream, err := newTLSStreamLayer(cfg.RaftAddr, adv, mutual)
	if err != nil {
		return nil, err
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: maxPool, Timeout: timeout, Logger: logger,
	}), nil
}

// closeStores releases the stores and the transport; used on a failed open
// and after Raft has shut down.
func (n *raftNode) closeStores() {
	if n.trans != nil {
		n.trans.Close()
	}
	if n.store != nil {
		n.store.Close()
	}
}

// shutdown stops Raft and releases everything the node holds.
func (n *raftNode) shutdown() error {
	var err error
	if n.raft != nil {
		err = n.raft.Shutdown().Error()
	}
	n.closeStores()
	return err
}
