package fsm

import (
	"fmt"
	"time"
)

// Detention (SPEC §3): a detained peer keeps serving searches — it may hold
// primaries, its copies count, it is a fixup source — but takes no new data
// and no replication: AddBucket refuses it as origin and as target,
// ChooseTargets and the planner target only Up peers. Entering or leaving
// detention changes no routing, so it starts no generation.
//
// Who put the peer there is recorded in Peer.Detention, because the two ways
// in leave differently:
//
//   - DetentionManual: the operator (`quarry peer detention <id> on`, or a
//     raw SetPeerState to Detention). Only the operator lifts it.
//   - DetentionDisk: the leader's free-disk rule (Plan, with PlanInput.
//     Detention), when a peer reports less free space than the threshold.
//     The rule lifts it once the peer reports at least threshold +
//     hysteresis; the operator may lift it too (the rule then puts it back
//     if the disk is still short).
//
// The flag outlives Down and a re-registration: a detained peer that
// restarts registers back into Detention, not Up, so a full disk does not
// take new data in the seconds before its first heartbeat. A removed peer
// loses it; SetPeerState Up clears it.

// DetentionBy says who put a peer in detention.
type DetentionBy string

// Who put a peer in detention.
const (
	DetentionManual DetentionBy = "manual"
	DetentionDisk   DetentionBy = "disk"
)

// Valid reports whether d is one of the known values.
func (d DetentionBy) Valid() bool { return d == DetentionManual || d == DetentionDisk }

// SetDetention puts a peer in detention or takes it out. By says who asks:
// the disk rule neither lifts a manual detention nor overrides one
// (ErrBadState); a manual request does either. A peer that is not running
// keeps the flag and comes back detained.
type SetDetention struct {
	ReqID
	ID      string      `json:"id"`
	Enabled bool        `json:"enabled"`
	By      DetentionBy `json:"by"`
	// Reason is for the record (the disk rule says what it read).
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Type is CmdSetDetention.
func (SetDetention) Type() CommandType { return CmdSetDetention }

func init() {
	register(CmdSetDetention, (*State).applySetDetention)
}

func (s *State) applySetDetention(idx uint64, c *SetDetention) (any, error) {
	p, err := s.peer(c.ID)
	if err != nil {
		return nil, err
	}
	if !c.By.Valid() {
		return nil, fmt.Errorf("%w: set detention of %s by %q", ErrBadState, c.ID, c.By)
	}
	if p.State == StateRemoved {
		return nil, fmt.Errorf("%w: set detention of %s: the peer was removed", ErrBadState, c.ID)
	}
	flag := p.Detention
	switch {
	case c.Enabled && c.By == DetentionDisk && flag != "":
		return nil, fmt.Errorf("%w: disk detention of %s: already in %s detention", ErrBadState, c.ID, flag)
	case !c.Enabled && c.By == DetentionDisk && flag != DetentionDisk:
		return nil, fmt.Errorf("%w: lift disk detention of %s: its detention is %q (only the operator lifts a manual one)", ErrBadState, c.ID, flag)
	case c.Enabled:
		flag = c.By
	default:
		flag = ""
	}
	ch := s.begin(idx)
	if flag != p.Detention {
		p.Detention = flag
		ch.table = true
	}
	switch {
	case flag != "" && p.State == StateUp:
		s.setState(ch, p, StateDetention, c.At.UnixNano())
	case flag == "" && p.State == StateDetention:
		s.setState(ch, p, StateUp, c.At.UnixNano())
	}
	s.commit(ch)
	return nil, nil
}

// setDetentionFlag keeps Peer.Detention true to a raw SetPeerState: into
// Detention without a flag is a manual detention, Up and Removed clear it.
func (s *State) setDetentionFlag(ch *change, p *Peer, st PeerState) {
	old := p.Detention
	switch st {
	case StateDetention:
		if p.Detention == "" {
			p.Detention = DetentionManual
		}
	case StateUp, StateRemoved:
		p.Detention = ""
	}
	if p.Detention != old {
		ch.table = true
	}
}

// DiskReport is a peer's data-directory file system as its last heartbeat
// reported it (bytes). Total 0 means the peer did not report.
type DiskReport struct {
	Free  int64
	Total int64
}

// DetentionRule is the leader's free-disk rule: a peer reporting less than
// FreeBytes free enters detention; it leaves once it reports at least
// FreeBytes + HysteresisBytes. FreeBytes 0 turns the rule off.
type DetentionRule struct {
	FreeBytes       int64
	HysteresisBytes int64
}

// detention applies the free-disk rule to the running peers, by id.
func (p *planner) detention() {
	rule := p.in.Detention
	if rule.FreeBytes <= 0 {
		return
	}
	s := p.sim
	for _, id := range sortedKeys(s.d.Peers) {
		peer := s.d.Peers[id]
		d, ok := p.in.Disk[id]
		if !ok || d.Total <= 0 {
			continue
		}
		switch {
		case peer.State == StateUp && d.Free < rule.FreeBytes:
			p.emit(&SetDetention{ID: id, Enabled: true, By: DetentionDisk, At: p.in.Now,
				Reason: fmt.Sprintf("%d bytes free of %d, below %d", d.Free, d.Total, rule.FreeBytes)})
		case peer.State == StateDetention && peer.Detention == DetentionDisk && d.Free >= rule.FreeBytes+rule.HysteresisBytes:
			p.emit(&SetDetention{ID: id, Enabled: false, By: DetentionDisk, At: p.in.Now,
				Reason: fmt.Sprintf("%d bytes free of %d, at least %d", d.Free, d.Total, rule.FreeBytes+rule.HysteresisBytes)})
		}
	}
}
