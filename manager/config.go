package manager

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// Server is one voter of the bootstrap member list: `--bootstrap m1=addr,…`.
type Server struct {
	ID       string
	RaftAddr string
}

// Config is what a manager needs to start. Zero durations take the defaults
// of DefaultConfig; only ID, DataDir, RaftAddr, HTTPAddr and AdminToken are
// required.
type Config struct {
	ID       string // manager id, unique in the group (the Raft server id)
	Site     string // the failure domain this manager lives in (informational)
	DataDir  string // Raft log, stable store and snapshots live under DataDir/raft
	RaftAddr string // host:port the Raft TCP transport binds and advertises
	HTTPAddr string // host:port of the admin HTTP API; port 0 picks one
	// NATS is the bus URL (several separated by commas). Empty: no NATS
	// service (the HTTP API only). Set: the manager connects at start
	// (failing after NATSConnectTimeout) and reconnects forever; while it
	// is the leader it serves the peers' protocol (package api) there.
	NATS string
	// NATSUser and NATSPassword authenticate (a manager-role user).
	NATSUser, NATSPassword string
	// NATSPrefix is the subject prefix (default bus.DefaultPrefix).
	NATSPrefix string
	// NATSConnectTimeout bounds the first connection (default 10s).
	NATSConnectTimeout time.Duration
	// FixupDeliveryTimeout bounds one fixup task delivery (default 2s); an
	// unanswered delivery is retried on the next round.
	FixupDeliveryTimeout time.Duration
	// TargetTimeout is pushed to peers: a replication target that has not
	// acked within it leaves the set (SPEC §4; default 2s). It lives here,
	// not in the FSM config, because only peers read it.
	TargetTimeout time.Duration
	AdminToken    string // bearer token every write must carry
	// ReadToken, when set, guards the reads of the HTTP API (the layout:
	// status, generation, peers, buckets, indexes, fixups, managers, state
	// hash, /metrics): each needs it or the admin token. /healthz and the
	// cluster page's own files stay open (the page asks for a token). Empty:
	// reads are open, as SPEC §7 has them (review L8; SECURITY.md).
	ReadToken string
	// TLS: with a certificate the HTTP API serves HTTPS and the Raft
	// transport is mutual TLS (both need the CA; the certificate must
	// carry the manager role, OU quarry-manager); with the CA, the
	// manager verifies the bus, and the other managers it joins through,
	// against it (DESIGN.md, "Raft over TLS").
	TLS tlsconfig.Files

	// Bootstrap is the initial member list. It is used only when the data
	// directory holds no Raft state; otherwise it is ignored.
	Bootstrap []Server
	// Join is the HTTP URL of any running manager; used only when the data
	// directory holds no Raft state. The join is retried until JoinTimeout.
	Join        string
	JoinTimeout time.Duration

	// Seed is the cluster config the first leader commits after bootstrap
	// (nil: fsm.DefaultConfig()). Later changes go through the admin API.
	Seed *fsm.Config

	// Raft tuning; defaults suit a LAN (DESIGN.md, "Timeouts").
	RaftHeartbeatTimeout   time.Duration
	RaftElectionTimeout    time.Duration
	RaftLeaderLeaseTimeout time.Duration
	RaftCommitTimeout      time.Duration
	// SnapshotThreshold (entries since the last snapshot before the next) and
	// TrailingLogs (entries kept behind a snapshot); 0 keeps hashicorp/raft's
	// defaults (8192 and 10240). Low values make a lagging follower catch up
	// from a snapshot rather than from the log.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration // how often Raft checks the threshold (default 120s)
	RaftLogLevel      string        // hclog level for hashicorp/raft's own log (default "info")

	// LoopInterval is how often the leader runs the fixup planner, liveness
	// included (default 500ms).
	LoopInterval time.Duration
	// FixupTaskTimeout fails an open fixup task older than this so it can be
	// planned again (default 10m; negative: never).
	FixupTaskTimeout time.Duration
	// DetentionFreeBytes: a peer whose data directory reports less free
	// space than this enters detention; DetentionHysteresisBytes: it leaves
	// once it reports at least DetentionFreeBytes + this (detention.go).
	// 0 takes the defaults (5000 MiB, Splunk's minFreeSpace, and 500 MiB);
	// a negative DetentionFreeBytes turns the rule off. Give every manager
	// the same values: only the leader applies them.
	DetentionFreeBytes       int64
	DetentionHysteresisBytes int64

	Logger    *slog.Logger
	LogOutput io.Writer // where hashicorp/raft writes; default os.Stderr

	// Now is the clock of the leader loops (liveness, fixup timestamps);
	// tests replace it. Default time.Now.
	Now func() time.Time

	// fsmVersion, when set, makes this manager play a build that supports
	// cluster versions up to it (fsm.NewAt), below fsm.Version: the rolling
	// upgrade test runs "old" and "new" builds in one process.
	fsmVersion int
}

// buildVersion is the highest cluster version this manager supports.
func (c *Config) buildVersion() int {
	if c.fsmVersion > 0 {
		return c.fsmVersion
	}
	return fsm.Version
}

// newFSM is a fresh cluster FSM of this manager's build.
func (c *Config) newFSM() *fsm.FSM { return fsm.NewAt(c.buildVersion()) }

// Defaults for a LAN; see DESIGN.md, "Timeouts".
const (
	DefaultRaftHeartbeatTimeout   = 400 * time.Millisecond
	DefaultRaftElectionTimeout    = 400 * time.Millisecond
	DefaultRaftLeaderLeaseTimeout = 400 * time.Millisecond
	DefaultRaftCommitTimeout      = 25 * time.Millisecond
	DefaultJoinTimeout            = 60 * time.Second
	DefaultLoopInterval           = 500 * time.Millisecond
	DefaultFixupTaskTimeout       = 10 * time.Minute
	DefaultFixupDeliveryTimeout   = 2 * time.Second
	DefaultTargetTimeout          = 2 * time.Second
)

// ErrInvalidConfig is wrapped by every refusal of a manager Config.
var ErrInvalidConfig = errors.New("invalid manager config")

func (c *Config) setDefaults() {
	if c.RaftHeartbeatTimeout == 0 {
		c.RaftHeartbeatTimeout = DefaultRaftHeartbeatTimeout
	}
	if c.RaftElectionTimeout == 0 {
		c.RaftElectionTimeout = DefaultRaftElectionTimeout
	}
	if c.RaftLeaderLeaseTimeout == 0 {
		c.RaftLeaderLeaseTimeout = DefaultRaftLeaderLeaseTimeout
	}
	if c.RaftCommitTimeout == 0 {
		c.RaftCommitTimeout = DefaultRaftCommitTimeout
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	if c.LoopInterval == 0 {
		c.LoopInterval = DefaultLoopInterval
	}
	if c.DetentionFreeBytes == 0 {
		c.DetentionFreeBytes = DefaultDetentionFreeBytes
	}
	if c.DetentionHysteresisBytes == 0 {
		c.DetentionHysteresisBytes = DefaultDetentionHysteresisBytes
	}
	if c.FixupTaskTimeout == 0 {
		c.FixupTaskTimeout = DefaultFixupTaskTimeout
	} else if c.FixupTaskTimeout < 0 {
		c.FixupTaskTimeout = 0
	}
	if c.NATSPrefix == "" {
		c.NATSPrefix = bus.DefaultPrefix
	}
	if c.NATSConnectTimeout == 0 {
		c.NATSConnectTimeout = bus.DefaultConnectTimeout
	}
	if c.FixupDeliveryTimeout == 0 {
		c.FixupDeliveryTimeout = DefaultFixupDeliveryTimeout
	}
	if c.TargetTimeout == 0 {
		c.TargetTimeout = DefaultTargetTimeout
	}
	if c.RaftLogLevel == "" {
		c.RaftLogLevel = "info"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) logOutput() io.Writer {
	if c.LogOutput != nil {
		return c.LogOutput
	}
	return os.Stderr
}

// validate refuses a config the manager cannot start with.
func (c *Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if c.ID == "" {
		return bad("--id is required")
	}
	if strings.ContainsAny(c.ID, " /\t\n") {
		return bad("--id %q: no spaces or slashes", c.ID)
	}
	if c.DataDir == "" {
		return bad("--data-dir is required")
	}
	if c.AdminToken == "" {
		return bad("--admin-token is required (writes need it)")
	}
	if c.ReadToken != "" && c.ReadToken == c.AdminToken {
		return bad("--read-token equals --admin-token: a read token is given to those who may only read; make it another secret")
	}
	if _, _, err := net.SplitHostPort(c.RaftAddr); err != nil {
		return bad("--raft-addr %q: %v", c.RaftAddr, err)
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return bad("--http-addr %q: %v", c.HTTPAddr, err)
	}
	if len(c.Bootstrap) > 0 && c.Join != "" {
		return bad("--bootstrap and --join exclude each other")
	}
	seen := map[string]bool{}
	self := false
	for _, s := range c.Bootstrap {
		if s.ID == "" || s.RaftAddr == "" {
			return bad("--bootstrap entry %q=%q: want id=host:port", s.ID, s.RaftAddr)
		}
		if seen[s.ID] {
			return bad("--bootstrap names %q twice", s.ID)
		}
		seen[s.ID] = true
		if s.ID == c.ID {
			self = true
		}
	}
	if len(c.Bootstrap) > 0 && !self {
		return bad("--bootstrap does not name this manager (%q)", c.ID)
	}
	if c.Join != "" {
		u, err := url.Parse(c.Join)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("--join %q: want http://host:port", c.Join)
		}
	}
	if err := c.TLS.Check(); err != nil {
		return bad("%v", err)
	}
	if c.TLS.Serving() && c.TLS.CA == "" {
		return bad("--tls-cert needs --tls-ca: the Raft transport between managers is mutual TLS, verified against that CA")
	}
	if _, err := bus.NewSubjects(c.NATSPrefix); err != nil {
		return bad("nats prefix %q: %v", c.NATSPrefix, err)
	}
	if c.Seed != nil {
		if err := c.Seed.Validate(); err != nil {
			return bad("cluster config: %v", err)
		}
	}
	return nil
}

// ParseBootstrap parses `m1=127.0.0.1:7001,m2=…` into a member list.
func ParseBootstrap(s string) ([]Server, error) {
	var out []Server
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("parse --bootstrap %q: entry %q is not id=host:port", s, part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("parse --bootstrap %q: entry %q: %v", s, part, err)
		}
		out = append(out, Server{ID: id, RaftAddr: addr})
	}
	return out, nil
}
