// Package fsm owns quarry's cluster state: the deterministic state machine
// every manager applies from the Raft log (config, sites, peers, indexes,
// buckets, copies, the primary tables per site and for site0, the generation
// history, fixup task records and their delivery marks, the agreed cluster
// version), the read-only views the manager serves
// (/v1/status, /v1/generation, /v1/peers, /v1/buckets), replication-target
// choice, and the fixup planner, whose decisions are plain commands.
//
// The package imports nothing of quarry's and no Raft or transport package
// (the manager adapts FSM to raft.FSM), so the protocol types in api that
// embed its views pull in no NATS or HTTP. Apply never reads the clock, draws random numbers, does I/O or
// iterates a map without sorting its keys: the same log gives byte-identical
// state on every manager (see DESIGN.md).
package fsm
