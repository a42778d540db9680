// Package manager owns a quarry manager: one member of the Raft group of
// managers (hashicorp/raft with raft-boltdb log and stable store, file
// snapshots, TCP transport) that applies the cluster state machine of
// package fsm; the leader's loops (peer liveness with the grace rule, the
// fixup planner, whose decisions are FSM commands and task records); the
// admin HTTP API of SPEC §7 on every manager (followers answer reads and
// redirect writes to the leader); the NATS service the leader runs for the
// peers' protocol of package api (leader-only subscriptions, notices on
// quarry.gen, fixup task delivery); the cluster web page; and Client, the
// HTTP client the CLI uses. DESIGN.md explains leadership, the grace rule, the
// member table, write redirects and recovery after quorum loss.
package manager
