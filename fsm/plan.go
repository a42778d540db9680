package fsm

import (
	"fmt"
	"sort"
	"time"
)

// PlanInput is what the leader knows beyond the committed state.
type PlanInput struct {
	// Now is the leader's clock.
	Now time.Time
	// LastHeartbeat is the leader's in-memory liveness view: the last
	// heartbeat per peer id. A peer missing from it has not been heard from
	// since this leader started.
	LastHeartbeat map[string]time.Time
	// GraceUntil: before it the planner declares no peer Down (a new leader
	// treats every Up peer as alive for one heartbeat_timeout after its
	// Barrier).
	GraceUntil time.Time
	// TaskTimeout, when positive, fails open tasks older than it so they can
	// be planned again.
	TaskTimeout time.Duration
	// Disk is each peer's last reported free space and Detention the rule
	// that detains a peer short of it (detention.go).
	Disk      map[string]DiskReport
	Detention DetentionRule
}

// Plan is the fixup planner. It reads the committed state and the leader's
// liveness view and returns the commands to propose, in this order:
//
//  1. liveness: PeerDown for a peer silent for heartbeat_timeout once the
//     grace period is over; GracefulShutdown for a Restarting peer past
//     restart_timeout; then the free-disk detention rule (detention.go);
//  2. task hygiene: FixupDone for open tasks whose goal is met (success) or
//     whose peers went away, restarted or timed out (failed);
//
// and, unless maintenance mode is on (which leaves only the primary fixup the
// FSM does itself when peers come and go), Splunk's fixup levels:
//
//  3. corruption: remove a corrupt copy when a healthy one exists;
//  4. streaming: seal the hot buckets of a dead origin; truncate copies
//     longer than the sealed length, fetch into shorter ones;
//  5. data safety: replicate warm buckets with fewer than min(2, RF) copies;
//  6. generation: make a copy searchable where a bucket has no primary, or a
//     site is served by a remote fill-in and has a copy that can be made
//     searchable (the fill-in then moves back);
//  7. replication factor: replicate until the explicit sites and the total
//     are met;
//  8. search factor: make a non-searchable copy searchable, else copy;
//  9. decommission: Removed for a Decommissioning peer once every bucket
//     meets RF/SF without it;
//  10. excess copies (a returning peer) and retention (freeze), then the
//     copies of frozen buckets on peers that were away (frozen.go).
//
// Buckets with a copy on a Restarting peer get no fixup beyond primaries.
// Open tasks are counted as work in progress: a planned copy is not planned
// again, and per-peer throttles (make-searchable, incoming replications)
// count them, so a new leader continues the previous leader's tasks. Plan
// simulates each command on a private copy of the state, so later decisions
// see earlier ones. It is pure: the same state and input give the same
// commands.
//
// Plan reads s and changes nothing in it, but s must not change during the
// call (run it under FSM.Read): the private copy shares s's bucket records
// until it edits one (planCopy), and the per-bucket levels visit only the
// buckets the state lists as unsettled (incremental.go), so a pass costs
// what needs work, not the size of the state.
func Plan(s *State, in PlanInput) []Command { return plan(s, in, false) }

// planFull is Plan on a deep copy of s with every level visiting every
// bucket: the reference the property test compares Plan with.
func planFull(s *State, in PlanInput) []Command { return plan(s, in, true) }

func plan(s *State, in PlanInput, full bool) []Command {
	p := &planner{orig: s, in: in, full: full}
	if full {
		p.sim = s.Clone()
	} else {
		p.sim = s.planCopy()
	}
	p.liveness()
	p.detention()
	p.hygiene()
	if p.sim.d.Maintenance {
		return p.out
	}
	p.each(p.corruption)
	p.each(p.streaming)
	p.each(p.dataSafety)
	p.each(p.generation)
	p.each(p.replication)
	p.each(p.search)
	p.decommission()
	p.each(p.excess)
	p.retention()
	p.frozenCopies()
	return p.out
}

type planner struct {
	orig *State
	sim  *State
	in   PlanInput
	out  []Command
	// full visits every bucket (planFull) instead of the unsettled ones.
	full bool
	// room caches roomForCopies; peerIDs the sorted peer ids (no command
	// the planner emits adds a peer).
	room struct {
		valid bool
		key   [2]int
		ok    bool
	}
	peerIDs []string
	// tasks indexes the simulated state's open tasks by bucket and by
	// target, ids ascending (taskIndex); nil when a command may have
	// changed the task set other than by adding one task. Without it every
	// level scanned and sorted every open task for every bucket: O(buckets
	// × tasks) per pass.
	tasks *taskIndex
	// committed caches, for the unsettled ids a level visits, each one's
	// committed record (nil: not in the committed state), so the seven
	// levels find each bucket in the million-entry committed map once a
	// pass, not seven times (each, below).
	committed struct {
		ids  []string
		recs []*Bucket
	}
}

type taskIndex struct {
	n        int // len(sim.d.Tasks) when built or last extended
	byBucket map[string][]uint64
	byTarget map[string][]uint64
	copying  map[string]int // open replications and fetches per target
}

func (ti *taskIndex) add(id uint64, t *Task) {
	ti.byBucket[t.Bucket] = append(ti.byBucket[t.Bucket], id)
	ti.byTarget[t.Target] = append(ti.byTarget[t.Target], id)
	if t.Kind == TaskReplicate || t.Kind == TaskFetch {
		ti.copying[t.Target]++
	}
}

// taskIdx returns the index of the simulated state's open tasks, building
// it when a command invalidated it.
func (p *planner) taskIdx() *taskIndex {
	if p.tasks != nil && p.tasks.n == len(p.sim.d.Tasks) {
		return p.tasks
	}
	ti := &taskIndex{n: len(p.sim.d.Tasks), byBucket: map[string][]uint64{}, byTarget: map[string][]uint64{}, copying: map[string]int{}}
	for _, id := range sortedTaskIDs(p.sim.d.Tasks) {
		ti.add(id, p.sim.d.Tasks[id])
	}
	p.tasks = ti
	return ti
}

// indexEmitted keeps the task index current after c applied at idx: a
// CreateFixup that added exactly one task is appended (task ids are the
// applying index, so the lists stay ascending); anything else drops it.
func (p *planner) indexEmitted(c Command, idx uint64) {
	if p.tasks == nil {
		return
	}
	if _, ok := c.(*CreateFixup); ok && len(p.sim.d.Tasks) == p.tasks.n+1 {
		if t, ok := p.sim.d.Tasks[idx]; ok {
			p.tasks.n++
			p.tasks.add(idx, t)
			return
		}
	}
	p.tasks = nil
}

// emit simulates c on the private state and keeps it when it applies. Its
// request id is derived from the applied index and its position, so a
// retried proposal of the same plan is applied once.
func (p *planner) emit(c Command) bool {
	rid := fmt.Sprintf("plan-%d-%d", p.orig.d.Applied, len(p.out))
	switch x := c.(type) {
	case *PeerDown:
		x.RequestID = rid
	case *SetPeerState:
		x.RequestID = rid
	case *SetDetention:
		x.RequestID = rid
	case *CreateFixup:
		x.RequestID = rid
	case *FixupDone:
		x.RequestID = rid
	}
	idx := p.orig.d.Applied + 1 + uint64(len(p.out))
	res := p.sim.ApplyCommand(idx, c)
	p.indexEmitted(c, idx)
	if _, bad := res.(error); bad {
		return false
	}
	p.out = append(p.out, c)
	return true
}

func (p *planner) task(kind TaskKind, lvl Level, b *Bucket, source, target string, searchable bool, reason string) bool {
	return p.emit(&CreateFixup{Kind: kind, Level: lvl, Bucket: b.ID, Source: source, Target: target,
		Searchable: searchable, Reason: reason, At: p.in.Now})
}

func (p *planner) cfg() Config { return p.sim.d.Config }

// liveness declares silent peers Down and restarting peers gone.
func (p *planner) liveness() {
	s := p.sim
	for _, id := range sortedKeys(s.d.Peers) {
		peer := s.d.Peers[id]
		switch peer.State {
		case StateUp, StateDetention, StateDecommissioning, StatePending:
			if p.in.Now.Before(p.in.GraceUntil) {
				continue
			}
			last, heard := p.in.LastHeartbeat[id]
			if !heard || p.in.Now.Sub(last) > p.cfg().HeartbeatTimeout {
				why := "no heartbeat since this leader started"
				if heard {
					why = fmt.Sprintf("no heartbeat for %s", p.in.Now.Sub(last).Round(time.Millisecond))
				}
				pd := &PeerDown{ID: id, Reason: why, At: p.in.Now}
				if s.ClusterVersion() >= PeerDownRegisteredVersion {
					pd.Registered = peer.Registered
				}
				p.emit(pd)
			}
		case StateRestarting:
			if p.in.Now.UnixNano()-peer.Since > int64(p.cfg().RestartTimeout) {
				p.emit(&SetPeerState{ID: id, State: StateGracefulShutdown, At: p.in.Now})
			}
		}
	}
}

// active reports whether a peer is running and can do fixup work.
func (s *State) active(peer string) bool {
	switch s.stateOf(peer) {
	case StateUp, StateDetention, StateDecommissioning:
		return true
	}
	return false
}

// hygiene closes open tasks that are done, or can no longer be done.
func (p *planner) hygiene() {
	s := p.sim
	for _, id := range sortedTaskIDs(s.d.Tasks) {
		t := s.d.Tasks[id]
		b, live := s.lookup(t.Bucket)
		fail := ""
		for _, peer := range []string{t.Source, t.Target} {
			if peer == "" {
				continue
			}
			if !s.active(peer) {
				fail = fmt.Sprintf("peer %s is %s", peer, s.stateOf(peer))
			} else if s.d.Peers[peer].Registered > t.ID {
				fail = fmt.Sprintf("peer %s restarted", peer)
			}
		}
		if fail == "" && p.in.TaskTimeout > 0 && p.in.Now.UnixNano()-t.Created > int64(p.in.TaskTimeout) {
			fail = fmt.Sprintf("not done within %s", p.in.TaskTimeout)
		}
		if !live {
			p.frozenHygiene(t, fail) // a frozen bucket's leftover copy (frozen.go)
			continue
		}
		done := false
		var c *Copy
		if t.Target != "" {
			c = b.Copies[t.Target]
		}
		switch t.Kind {
		case TaskReplicate:
			done = c != nil && (!t.Searchable || c.Searchable)
		case TaskMakeSearchable:
			done = c != nil && c.Searchable
			if c == nil {
				fail = "the copy is gone"
			}
		case TaskRemoveCopy:
			done = c == nil
		case TaskSeal, TaskRoll:
			done = !b.Hot
		case TaskTruncate, TaskFetch:
			done = c != nil && c.atSealed(b)
			if c == nil {
				fail = "the copy is gone"
			}
		}
		switch {
		case done:
			p.emit(&FixupDone{ID: id, Reason: "already done"})
		case fail != "":
			p.emit(&FixupDone{ID: id, Failed: true, Reason: fail})
		}
	}
}

// each runs a level over the unsettled buckets in id order (every bucket
// in a full pass): a settled one gives no command at any level
// (State.settled), so skipping it changes nothing.
func (p *planner) each(level func(b *Bucket)) {
	s := p.sim
	if p.full || s.base == nil {
		ids := s.bucketIDs
		if !p.full {
			ids = s.unsettledIDs
		}
		for _, id := range ids() {
			if b, ok := s.lookup(id); ok {
				level(b)
			}
		}
		return
	}
	// s.lookup, with the committed records of the list cached: the
	// simulation's own copy first, then none if it removed the bucket,
	// then the committed record.
	ids := s.unsettledIDs()
	c := &p.committed
	if len(ids) != len(c.ids) || (len(ids) > 0 && &ids[0] != &c.ids[0]) {
		c.ids, c.recs = ids, make([]*Bucket, len(ids))
		for i, id := range ids {
			c.recs[i] = s.base[id]
		}
	}
	for i, id := range ids {
		b, ok := s.d.Buckets[id]
		if !ok {
			if _, gone := s.gone[id]; gone {
				continue
			}
			b, ok = c.recs[i], c.recs[i] != nil
		}
		if ok {
			level(b)
		}
	}
}

// held reports a bucket with a copy on a Restarting peer: no fixup beyond
// primaries until the peer returns or its restart_timeout passes. Also a
// bucket rebuilt from inventories whose copies disagree on their length:
// it waits for the operator's rebuild seal (rebuild.go).
func (p *planner) held(b *Bucket) bool {
	if awaitsRebuild(b) {
		return true
	}
	for peer := range b.Copies { // any order: the answer is a yes or no
		if p.sim.stateOf(peer) == StateRestarting {
			return true
		}
	}
	return false
}

// open returns the bucket's open tasks of a kind.
func (p *planner) open(b *Bucket, kinds ...TaskKind) []*Task {
	var out []*Task
	for _, id := range p.taskIdx().byBucket[b.ID] {
		t := p.sim.d.Tasks[id]
		for _, k := range kinds {
			if t.Kind == k {
				out = append(out, t)
			}
		}
	}
	return out
}

// incoming counts a peer's open tasks of the given kinds (the throttles).
func (p *planner) incoming(peer string, kinds ...TaskKind) int {
	n := 0
	for _, id := range p.taskIdx().byTarget[peer] {
		t := p.sim.d.Tasks[id]
		for _, k := range kinds {
			if t.Kind == k {
				n++
			}
		}
	}
	return n
}

func (p *planner) corruption(b *Bucket) {
	s := p.sim
	if awaitsRebuild(b) {
		// Until the rebuild seal says which copies are short, a corrupt
		// copy may be the one holding blocks the healthy ones lack (a
		// read error keeps a copy, marked corrupt, with everything after
		// it): keep it (property test TestProperties, failfile
		// TestProperties-20261207011537-3603).
		return
	}
	t := s.tallyOf(b)
	if t.total == 0 {
		return // the corrupt copies are all there is: keep them
	}
	for _, peer := range sortedKeys(b.Copies) {
		if b.Copies[peer].Corrupt && s.active(peer) && !(b.Hot && b.Origin == peer) && len(p.openOn(b, TaskRemoveCopy, peer)) == 0 {
			p.task(TaskRemoveCopy, LevelCorruption, b, "", peer, false, "corrupt copy")
		}
	}
}

func (p *planner) openOn(b *Bucket, kind TaskKind, target string) []*Task {
	var out []*Task
	for _, t := range p.open(b, kind) {
		if t.Target == target {
			out = append(out, t)
		}
	}
	return out
}

func (p *planner) streaming(b *Bucket) {
	s := p.sim
	if p.held(b) {
		return
	}
	if b.Hot {
		if !s.originAlive(b) && len(p.open(b, TaskSeal)) == 0 {
			p.task(TaskSeal, LevelStreaming, b, "", "", false,
				fmt.Sprintf("origin %s is %s", b.Origin, s.stateOf(b.Origin)))
		}
		return
	}
	if !b.Sealed || b.Blocks == 0 {
		return
	}
	// Copies of known lengths other than the sealed one: truncate the longer
	// (destructive), fetch into the shorter from a copy of the sealed length
	// (blocks and, when known, last checksum). A copy of unknown length,
	// unless reported short, waits for its peer's report (a seal answer, a registration, a length
	// event); one at the sealed blocks with another last checksum is left
	// alone (one origin numbers the blocks, so it should not happen).
	// The source: a running copy at the sealed length whose last checksum
	// is known to match first (an inventory carries no checksum), then by
	// peer id.
	var source string
	for _, verified := range []bool{true, false} {
		for _, peer := range sortedKeys(b.Copies) {
			c := b.Copies[peer]
			if c.atSealed(b) && !c.Corrupt && s.active(peer) && (!verified || c.LastChecksum != "") {
				source = peer
				break
			}
		}
		if source != "" {
			break
		}
	}
	for _, peer := range sortedKeys(b.Copies) {
		c := b.Copies[peer]
		// A copy its origin reported short (it left the replication set
		// with blocks missing) fetches even with its length unknown: no
		// report of it may ever come, as the origin no longer rolls it.
		if (!c.known() && !c.Short) || (c.known() && c.Blocks == b.Blocks) || c.Corrupt || !s.active(peer) {
			continue
		}
		if c.Blocks > b.Blocks {
			if len(p.openOn(b, TaskTruncate, peer)) == 0 {
				p.task(TaskTruncate, LevelStreaming, b, "", peer, false,
					fmt.Sprintf("%d blocks, sealed at %d", c.Blocks, b.Blocks))
			}
		} else if source != "" && len(p.openOn(b, TaskFetch, peer)) == 0 &&
			p.incoming(peer, TaskReplicate, TaskFetch) < p.cfg().MaxIncomingReplicationsPerPeer {
			p.task(TaskFetch, LevelStreaming, b, source, peer, false,
				fmt.Sprintf("%d blocks, sealed at %d", c.Blocks, b.Blocks))
		}
	}
}

// pending is a bucket's copies-to-be: open replications by target, and
// open make-searchable tasks by target.
type pending struct {
	replicas   map[string]bool // target -> searchable
	searchable map[string]bool // make-searchable targets
}

func (p *planner) pendingOf(b *Bucket) pending {
	pd := pending{replicas: map[string]bool{}, searchable: map[string]bool{}}
	for _, t := range p.open(b, TaskReplicate, TaskMakeSearchable) {
		if t.Kind == TaskReplicate {
			pd.replicas[t.Target] = t.Searchable
		} else {
			pd.searchable[t.Target] = true
		}
	}
	return pd
}

// projected is the tally with the pending work counted as done.
func (p *planner) projected(b *Bucket) tally {
	s := p.sim
	t := s.tallyOf(b)
	pd := p.pendingOf(b)
	for _, peer := range sortedKeys(pd.replicas) {
		site := s.siteOf(peer)
		t.copies[site]++
		t.total++
		if pd.replicas[peer] {
			t.searchable[site]++
			t.totalSrch++
		}
	}
	for _, peer := range sortedKeys(pd.searchable) {
		if c, ok := b.Copies[peer]; ok && !c.Searchable && s.healthy(c) {
			site := s.siteOf(peer)
			t.searchable[site]++
			t.totalSrch++
		}
	}
	return t
}

// copyable reports a warm bucket that copy-making levels may work on.
func (p *planner) copyable(b *Bucket) bool {
	return !b.Hot && !p.held(b)
}

// source picks the copy to stream from: a healthy copy, else one on a
// Decommissioning peer (still running); same site as the target first, then
// searchable, then peer id.
func (p *planner) source(b *Bucket, targetSite string) string {
	s := p.sim
	type cand struct {
		peer              string
		far, weak, noSrch bool
	}
	var cs []cand
	for _, peer := range sortedKeys(b.Copies) {
		c := b.Copies[peer]
		if c.Corrupt || !s.active(peer) {
			continue
		}
		if b.Sealed && c.known() && !c.atSealed(b) {
			continue
		}
		cs = append(cs, cand{peer, s.siteOf(peer) != targetSite, !s.healthy(c), !c.Searchable})
	}
	if len(cs) == 0 {
		return ""
	}
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.far != b.far {
			return !a.far
		}
		if a.weak != b.weak {
			return !a.weak
		}
		return !a.noSrch && b.noSrch
	})
	return cs[0].peer
}

// placement builds the target chooser for new copies of b: Up peers holding
// no copy of it and no pending one, under the incoming-replication
// throttle, loaded by copies plus open incoming replications.
func (p *planner) placement(b *Bucket) *placement {
	s := p.sim
	pd := p.pendingOf(b)
	if p.peerIDs == nil {
		p.peerIDs = sortedKeys(s.d.Peers)
	}
	ti := p.taskIdx()
	pl := &placement{s: s, taken: map[string]bool{}, load: map[string]int{}, per: map[string]int{}, peers: p.peerIDs,
		base: func(peer string) int { return s.copyCount[peer] + ti.copying[peer] }}
	for peer := range b.Copies {
		pl.taken[peer] = true
	}
	for peer := range pd.replicas {
		pl.taken[peer] = true
	}
	t := p.projected(b)
	for site, n := range t.copies {
		pl.per[site] = n
	}
	max := p.cfg().MaxIncomingReplicationsPerPeer
	pl.ok = func(peer string) bool { return p.incoming(peer, TaskReplicate, TaskFetch) < max }
	return pl
}

// addCopies plans replications of b until the projected tally has want
// copies in total and, when sites is set, every explicit site its count and
// the other sites the rest (as far as they have room). Each new copy is
// searchable when the search requirement of its site, or the search total,
// is still short.
func (p *planner) addCopies(b *Bucket, lvl Level, want int, sites bool, why string) {
	if !p.roomForCopies() {
		return
	}
	s := p.sim
	n := s.needsOf(b)
	for {
		t := p.projected(b)
		pl := p.placement(b)
		target, reason := "", ""
		if sites {
			for _, st := range sortedKeys(n.rfSite) {
				if t.copies[st] < n.rfSite[st] {
					if target = pl.pick(st); target != "" {
						reason = fmt.Sprintf("%s: %s has %d of %d copies", why, st, t.copies[st], n.rfSite[st])
						break
					}
				}
			}
			if have := outside(t.copies, n.rfSite); target == "" && have < n.rfOther {
				if target, _ = pl.spread(n.rfSite, false); target != "" {
					reason = fmt.Sprintf("%s: other sites have %d of %d copies", why, have, n.rfOther)
				}
			}
		}
		if target == "" && t.total < want {
			target, _ = pl.spread(n.rfSite, true)
			reason = fmt.Sprintf("%s: %d of %d copies", why, t.total, want)
		}
		if target == "" {
			return // met, or nowhere to put it (site down, throttled)
		}
		tsite := s.siteOf(target)
		src := p.source(b, tsite)
		if src == "" {
			return
		}
		srch := p.copyMustBeSearchable(b, n, t, tsite)
		if !p.task(TaskReplicate, lvl, b, src, target, srch, reason) {
			return
		}
	}
}

func isNamed(m map[string]int, site string) bool { _, ok := m[site]; return ok }

// roomForCopies reports whether some Up peer is under the incoming
// replication throttle. Without one, no placement can choose a target (pick
// takes only Up peers its throttle accepts), so addCopies and
// copySearchable stop before building one: after a peer failure most of its
// buckets wait for the throttle, and building a placement for each cost
// milliseconds (BenchmarkScale plan-peer-down).
//
// The answer is kept until a command is planned or the open tasks change
// (the only ways a peer's state or incoming count moves during a pass).
func (p *planner) roomForCopies() bool {
	key := [2]int{len(p.out), len(p.sim.d.Tasks)}
	if p.room.valid && p.room.key == key {
		return p.room.ok
	}
	max := p.cfg().MaxIncomingReplicationsPerPeer
	ok := false
	for id, peer := range p.sim.d.Peers { // any order: a yes or no
		if peer.State == StateUp && p.incoming(id, TaskReplicate, TaskFetch) < max {
			ok = true
			break
		}
	}
	p.room.valid, p.room.key, p.room.ok = true, key, ok
	return ok
}

// copyMustBeSearchable decides whether a new copy on tsite is streamed
// searchable: only when the search requirement it would count for (its
// site's, the other sites', or the total) is short by more than the healthy
// non-searchable copies that could be made searchable in place — rebuilding
// the index locally costs no network copy, so the search-factor level does
// that instead.
func (p *planner) copyMustBeSearchable(b *Bucket, n needs, t tally, tsite string) bool {
	s := p.sim
	pd := p.pendingOf(b)
	avail := map[string]int{}
	total := 0
	for _, peer := range sortedKeys(b.Copies) {
		c := b.Copies[peer]
		if !c.Searchable && s.healthy(c) && !pd.searchable[peer] {
			avail[s.siteOf(peer)]++
			total++
		}
	}
	if n.sfSite[tsite]-t.searchable[tsite] > avail[tsite] {
		return true
	}
	if !isNamed(n.sfSite, tsite) && n.sfOther-outside(t.searchable, n.sfSite) > outside(avail, n.sfSite) {
		return true
	}
	return n.sfTotal-t.totalSrch > total
}

func (p *planner) dataSafety(b *Bucket) {
	if !p.copyable(b) {
		return
	}
	want := min(2, p.sim.needsOf(b).rfTotal)
	if p.projected(b).total < want {
		p.addCopies(b, LevelDataSafety, want, false, "data safety")
	}
}

// makeSearchable plans a make-searchable task on the best non-searchable
// healthy copy among peers accepted by filter: fewest open make-searchable
// tasks on the peer, ties by peer id; under the throttle.
func (p *planner) makeSearchable(b *Bucket, lvl Level, filter func(peer string) bool, reason string) bool {
	s := p.sim
	pd := p.pendingOf(b)
	best, bestN := "", 0
	for _, peer := range sortedKeys(b.Copies) {
		c := b.Copies[peer]
		if c.Searchable || pd.searchable[peer] || !s.healthy(c) || !filter(peer) {
			continue
		}
		n := p.incoming(peer, TaskMakeSearchable)
		if n >= p.cfg().MaxMakeSearchablePerPeer {
			continue
		}
		if best == "" || n < bestN {
			best, bestN = peer, n
		}
	}
	if best == "" {
		return false
	}
	return p.task(TaskMakeSearchable, lvl, b, "", best, true, reason)
}

func (p *planner) generation(b *Bucket) {
	s := p.sim
	if b.Hot || p.held(b) {
		return
	}
	pd := p.pendingOf(b)
	if b.Primary[Site0] == "" {
		if len(pd.searchable) == 0 && !anyTrue(pd.replicas) {
			p.makeSearchable(b, LevelGeneration, func(string) bool { return true }, "no primary")
		}
		return
	}
	if !s.d.Config.Multisite() {
		return
	}
	for _, site := range s.d.Config.SiteNames() {
		if s.validFor(b, site) {
			continue
		}
		busy := false
		for peer := range pd.searchable {
			busy = busy || s.siteOf(peer) == site
		}
		for peer, srch := range pd.replicas {
			busy = busy || (srch && s.siteOf(peer) == site)
		}
		if busy {
			continue
		}
		p.makeSearchable(b, LevelGeneration, func(peer string) bool { return s.siteOf(peer) == site },
			fmt.Sprintf("remote fill-in %s serves %s", b.Primary[site], site))
	}
}

func anyTrue(m map[string]bool) bool {
	for _, v := range m {
		if v {
			return true
		}
	}
	return false
}

func (p *planner) replication(b *Bucket) {
	if b.Hot {
		p.rollShort(b)
		return
	}
	if !p.copyable(b) {
		return
	}
	n := p.sim.needsOf(b)
	if !n.rfMet(p.projected(b)) {
		p.addCopies(b, LevelReplication, n.rfTotal, true, "replication factor")
	}
}

// rollShort asks the origin of a hot bucket that falls short of the
// replication factor to roll it (TaskRoll), when targets for a full set are
// available now: the bucket began while a site or peers were away (it was
// degraded), or a target went down or is leaving, and no fixup copies a
// hot bucket. Once warm, replication fixup completes it and the origin's
// next hot bucket gets a full set of targets. Nothing is rolled while no
// better set exists (rolling would only make more short buckets), nor in
// maintenance mode (Plan returns before this level).
func (p *planner) rollShort(b *Bucket) {
	s := p.sim
	if p.held(b) || s.stateOf(b.Origin) != StateUp || !s.originAlive(b) || len(p.open(b, TaskRoll)) > 0 {
		return // (an origin whose copy is corrupt cannot roll: the bucket is sealed)
	}
	n := s.needsOf(b)
	t := p.projected(b)
	if n.rfMet(t) {
		return
	}
	choice, err := s.ChooseTargets(b.Origin, b.Index)
	if err != nil || choice.Degraded {
		return
	}
	p.task(TaskRoll, LevelReplication, b, "", b.Origin, false,
		fmt.Sprintf("hot bucket with %d of %d copies (%s); a full set of targets is available", t.total, n.rfTotal, siteCounts(n.rfSite, t.copies)))
}

func (p *planner) search(b *Bucket) {
	s := p.sim
	if !p.copyable(b) {
		return
	}
	n := s.needsOf(b)
	for _, site := range sortedKeys(n.sfSite) {
		for p.projected(b).searchable[site] < n.sfSite[site] {
			t := p.projected(b)
			reason := fmt.Sprintf("search factor: %s has %d of %d searchable copies", site, t.searchable[site], n.sfSite[site])
			if p.makeSearchable(b, LevelSearch, func(peer string) bool { return s.siteOf(peer) == site }, reason) {
				continue
			}
			if !p.copySearchable(b, site, false, reason) {
				break
			}
		}
	}
	for outside(p.projected(b).searchable, n.sfSite) < n.sfOther {
		t := p.projected(b)
		reason := fmt.Sprintf("search factor: other sites have %d of %d searchable copies", outside(t.searchable, n.sfSite), n.sfOther)
		if p.makeSearchable(b, LevelSearch, func(peer string) bool { return !isNamed(n.sfSite, s.siteOf(peer)) }, reason) {
			continue
		}
		if !p.copySearchable(b, "", false, reason) {
			break
		}
	}
	for p.projected(b).totalSrch < n.sfTotal {
		t := p.projected(b)
		reason := fmt.Sprintf("search factor: %d of %d searchable copies", t.totalSrch, n.sfTotal)
		// Prefer the sites with the fewest searchable copies.
		sites := s.d.Config.SiteNames()
		sort.SliceStable(sites, func(i, j int) bool { return t.searchable[sites[i]] < t.searchable[sites[j]] })
		made := false
		for _, site := range sites {
			if p.makeSearchable(b, LevelSearch, func(peer string) bool { return s.siteOf(peer) == site }, reason) {
				made = true
				break
			}
		}
		if made {
			continue
		}
		if !p.copySearchable(b, "", true, reason) {
			break
		}
	}
}

// copySearchable plans a searchable replication to site, or with site ""
// to the other sites (any site when anywhere is set).
func (p *planner) copySearchable(b *Bucket, site string, anywhere bool, reason string) bool {
	if !p.roomForCopies() {
		return false
	}
	pl := p.placement(b)
	var target string
	if site != "" {
		target = pl.pick(site)
	} else {
		target, _ = pl.spread(p.sim.needsOf(b).sfSite, anywhere)
	}
	if target == "" {
		return false
	}
	src := p.source(b, p.sim.siteOf(target))
	if src == "" {
		return false
	}
	return p.task(TaskReplicate, LevelSearch, b, src, target, true, reason)
}
