package fsm

// TargetChoice is the manager's answer to a peer starting a hot bucket
// (rule 4): the replication targets and which must be searchable.
type TargetChoice struct {
	Origin     string     `json:"origin"`
	OriginSite string     `json:"origin_site"`
	Targets    []CopySpec `json:"targets"`
	// Degraded is set when the policy cannot be met (a site is down or too
	// small): the targets come from what is up, and AddBucket records the
	// bucket for fixup.
	Degraded bool   `json:"degraded,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// ChooseTargets picks replication targets for a new bucket of index on
// origin: Up peers satisfying the policy (origin site first, then explicit
// sites, then the rest over the other sites), least copies first, ties by
// peer id, never two copies on one peer.
func (s *State) ChooseTargets(origin string, index string) (TargetChoice, error) {
	return TargetChoice{}, nil
}
