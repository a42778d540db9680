package manager

import (
	"github.com/quarry-dev/quarry/bus"
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/quarry-dev/quarry/fsm"
)

// metrics are the manager's Prometheus metrics, on a registry of its own so
// several managers can live in one process (tests).
type metrics struct {
	reg           *prometheus.Registry
	applied       prometheus.Counter
	heartbeats    prometheus.Counter
	redirects     prometheus.Counter
	ticks         prometheus.Counter
	planned       prometheus.Counter
	peersDown     prometheus.Counter
	leaderChanges prometheus.Counter
	notices       prometheus.Counter
	deliveries    *prometheus.CounterVec
	applySeconds  prometheus.Histogram
}

func newMetrics(m *Manager) *metrics {
	reg := prometheus.NewRegistry()
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(x)
		return x
	}
	mt := &metrics{
		reg:           reg,
		applied:       c("quarry_manager_commands_applied_total", "Commands this manager proposed through Raft that were applied."),
		heartbeats:    c("quarry_manager_heartbeats_total", "Peer heartbeats received by this manager."),
		redirects:     c("quarry_manager_write_redirects_total", "Writes this manager redirected to the leader (307)."),
		ticks:         c("quarry_manager_leader_loop_ticks_total", "Iterations of the leader loop (liveness and fixup planner) run by this manager."),
		planned:       c("quarry_manager_planned_commands_total", "Fixup planner commands this manager applied as leader."),
		peersDown:     c("quarry_manager_peers_declared_down_total", "Peers this manager declared Down as leader (no heartbeat for heartbeat_timeout)."),
		leaderChanges: c("quarry_manager_leadership_changes_total", "Leadership transitions (gained or lost) seen by this manager."),
	}
	mt.notices = c("quarry_manager_notices_published_total", "Notices this manager published on <prefix>.gen as leader.")
	mt.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_manager_fixup_deliveries_total",
		Help: "Fixup task deliveries to peers over NATS by outcome (accepted, refused, no_responders, timeout, error)."}, []string{"outcome"})
	reg.MustRegister(mt.deliveries)
	mt.applySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "quarry_manager_raft_apply_duration_seconds",
		Help:    "Time from proposing a command on this manager to its commit and apply (successful proposals only).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}})
	reg.MustRegister(mt.applySeconds)
	reg.MustRegister(&stateCollector{m: m})
	if err := bus.RegisterMetrics(reg); err != nil {
		panic(err) // a fresh registry: only a duplicate name could fail
	}
	reg.MustRegister(collectors.NewGoCollector())
	return mt
}

var (
	descRaftState   = prometheus.NewDesc("quarry_manager_raft_state", "1 for this manager's current Raft state.", []string{"state"}, nil)
	descLeader      = prometheus.NewDesc("quarry_manager_is_leader", "1 when this manager is the Raft leader and its leader loops run.", nil, nil)
	descTermTicks   = prometheus.NewDesc("quarry_manager_leader_loop_term_ticks", "Leader loop iterations in this manager's current leadership term (0 when not leading).", nil, nil)
	descTerm        = prometheus.NewDesc("quarry_manager_raft_term", "Current Raft term.", nil, nil)
	descApplied     = prometheus.NewDesc("quarry_manager_raft_applied_index", "Raft index of the last entry applied to the FSM.", nil, nil)
	descCommit      = prometheus.NewDesc("quarry_manager_raft_commit_index", "Raft commit index.", nil, nil)
	descFirstIndex  = prometheus.NewDesc("quarry_manager_raft_log_first_index", "First index still in the Raft log (entries before it live only in a snapshot).", nil, nil)
	descSnapIndex   = prometheus.NewDesc("quarry_manager_raft_last_snapshot_index", "Raft index of the last snapshot.", nil, nil)
	descGeneration  = prometheus.NewDesc("quarry_manager_generation", "Current generation id.", nil, nil)
	descTable       = prometheus.NewDesc("quarry_manager_table_version", "Current generation table version.", nil, nil)
	descPeers       = prometheus.NewDesc("quarry_manager_peers", "Peers by state.", []string{"state"}, nil)
	descBuckets     = prometheus.NewDesc("quarry_manager_buckets", "Buckets in the cluster state.", nil, nil)
	descFixups      = prometheus.NewDesc("quarry_manager_fixup_tasks", "Open fixup task records by level.", []string{"level"}, nil)
	descValid       = prometheus.NewDesc("quarry_manager_cluster_valid", "1 when the cluster is valid (site0 has a primary for every bucket).", nil, nil)
	descComplete    = prometheus.NewDesc("quarry_manager_cluster_complete", "1 when every bucket meets RF, SF and the site policy.", nil, nil)
	descMaintenance = prometheus.NewDesc("quarry_manager_maintenance", "1 when maintenance mode is on.", nil, nil)
	descTaskKinds   = prometheus.NewDesc("quarry_manager_fixup_queue_tasks", "Open fixup task records by kind.", []string{"kind"}, nil)
	descWaiting     = prometheus.NewDesc("quarry_manager_fixup_waiting_buckets", "Buckets not valid or complete, waiting for a fixup, by level.", []string{"level"}, nil)
	descPeerLag     = prometheus.NewDesc("quarry_manager_peer_replication_lag_blocks", "Replication lag a peer reported in its last heartbeat, per origin peer and target, in blocks (leader only).", []string{"peer", "target"}, nil)
)

// taskKinds are the fixup task kinds, each exported (0 when none is open).
var taskKinds = []fsm.TaskKind{fsm.TaskSeal, fsm.TaskTruncate, fsm.TaskFetch, fsm.TaskReplicate, fsm.TaskMakeSearchable, fsm.TaskRemoveCopy, fsm.TaskFreeze, fsm.TaskRoll}

// stateCollector reads Raft and the FSM at scrape time.
type stateCollector struct{ m *Manager }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descLeader, descTermTicks, descTerm, descApplied, descCommit, descFirstIndex, descSnapIndex, descGeneration, descTable, descPeers, descBuckets, descFixups, descValid, descComplete, descMaintenance, descTaskKinds, descWaiting, descPeerLag} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	if m.node == nil {
		return
	}
	r := m.node.raft
	cur := r.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftState, prometheus.GaugeValue, v, s.String())
	}
	active, _, _, termTicks := m.LeaderState()
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, b2f(active))
	ch <- prometheus.MustNewConstMetric(descTermTicks, prometheus.GaugeValue, float64(termTicks))
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(r.CurrentTerm()))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(r.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(r.CommitIndex()))
	if first, err := m.node.store.FirstIndex(); err == nil {
		ch <- prometheus.MustNewConstMetric(descFirstIndex, prometheus.GaugeValue, float64(first))
	}
	if si, err := strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64); err == nil {
		ch <- prometheus.MustNewConstMetric(descSnapIndex, prometheus.GaugeValue, float64(si))
	}

	var (
		gen, table  uint64
		peers       = map[fsm.PeerState]int{}
		buckets     int
		levels      = map[string]int{}
		kinds       = map[fsm.TaskKind]int{}
		waiting     = map[string]int{}
		valid, comp bool
		maint       bool
	)
	m.state.Read(func(s *fsm.State) {
		gen, table, maint = s.CurrentGeneration(), s.TableVersion(), s.Maintenance()
		for _, p := range s.PeerList() {
			peers[p.State]++
		}
		buckets = len(s.BucketList("", ""))
		for _, t := range s.Tasks() {
			levels[t.Level.String()]++
			kinds[t.Kind]++
		}
		st := s.Status()
		valid, comp = st.Valid, st.Complete
		for _, f := range st.Fixups {
			waiting[f.Level.String()]++
		}
	})
	ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(gen))
	ch <- prometheus.MustNewConstMetric(descTable, prometheus.GaugeValue, float64(table))
	for _, st := range []fsm.PeerState{fsm.StateUp, fsm.StatePending, fsm.StateDown, fsm.StateDecommissioning, fsm.StateGracefulShutdown, fsm.StateRestarting, fsm.StateDetention, fsm.StateRemoved} {
		ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, float64(peers[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(descBuckets, prometheus.GaugeValue, float64(buckets))
	for _, l := range []fsm.Level{fsm.LevelCorruption, fsm.LevelStreaming, fsm.LevelDataSafety, fsm.LevelGeneration, fsm.LevelReplication, fsm.LevelSearch, fsm.LevelExcess, fsm.LevelRetention} {
		ch <- prometheus.MustNewConstMetric(descFixups, prometheus.GaugeValue, float64(levels[l.String()]), l.String())
	}
	for _, k := range taskKinds {
		ch <- prometheus.MustNewConstMetric(descTaskKinds, prometheus.GaugeValue, float64(kinds[k]), string(k))
	}
	for _, l := range []fsm.Level{fsm.LevelCorruption, fsm.LevelStreaming, fsm.LevelDataSafety, fsm.LevelGeneration, fsm.LevelReplication, fsm.LevelSearch, fsm.LevelExcess, fsm.LevelRetention} {
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(waiting[l.String()]), l.String())
	}
	m.hbMu.Lock()
	for id, ps := range m.peerStats {
		for target, n := range ps.ReplicationLag {
			ch <- prometheus.MustNewConstMetric(descPeerLag, prometheus.GaugeValue, float64(n), id, target)
		}
	}
	m.hbMu.Unlock()
	ch <- prometheus.MustNewConstMetric(descValid, prometheus.GaugeValue, b2f(valid))
	ch <- prometheus.MustNewConstMetric(descComplete, prometheus.GaugeValue, b2f(comp))
	ch <- prometheus.MustNewConstMetric(descMaintenance, prometheus.GaugeValue, b2f(maint))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
