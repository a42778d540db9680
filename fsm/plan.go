package fsm

import "time"

// PlanInput is what the leader knows beyond the committed state.
type PlanInput struct {
	// Now is the leader's clock.
	Now time.Time
	// LastHeartbeat is the leader's in-memory liveness view: the last
	// heartbeat per peer id. A peer missing from it has not been heard from
	// since this leader started.
	LastHeartbeat map[string]time.Time
	// GraceUntil: before it the planner declares no peer Down (a new leader
	// treats every Up peer as alive for one heartbeat_timeout).
	GraceUntil time.Time
}

// Plan is the fixup planner. It reads the committed state and the leader's
// liveness view and returns the commands to propose, in Splunk's priority
// order: liveness (PeerDown), corruption, streaming, data safety,
// generation, replication factor, search factor; then decommission
// completion, excess copies and retention. It is pure: same state and input,
// same commands.
func Plan(s *State, in PlanInput) []Command { return nil }
