package peer

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer/repl"
	"github.com/quarry-dev/quarry/peer/store"
)

// replicator is the origin side of SPEC §4: every durable block of a hot
// bucket goes to every target of the bucket's replication set; a block is
// marked replicated (so the HEC acks of its events may turn true) once
// every target in the current set has acknowledged it and the copies number
// at least min(2, RF). A target that has not acknowledged within
// TargetTimeout leaves the set: the origin tells the managers, rolls the
// bucket (at most three times in a row for one target), and when the set
// falls below min(2, RF) copies it adds a replacement target that receives
// the bucket from block 0 — acks wait for it rather than count fewer
// copies.
type replicator struct {
	p    *Peer
	nc   *nats.Conn
	subj bus.Subjects
	cp   ControlPlane
	// timeout is target_timeout in nanoseconds: the peer's own until the
	// managers' config says otherwise (setTimeout, at join and at every
	// config read).
	timeout atomic.Int64
	log     *slog.Logger

	mu        sync.Mutex
	hot       map[string]*hotRepl
	failures  map[string]int // consecutive failures per target peer
	peers     map[string]fsm.PeerView
	minCopies int
	// maintenance (SPEC §3, §4): a failing target does not make its origin
	// roll; it stays in the set, acks count the copies that have the block
	// (never fewer than minCopies), and it gets the missed blocks when back.
	maintenance atomic.Bool
	// last is the replication set of the newest hot bucket the managers
	// answered for; away: the last targets request found no manager. With
	// every manager unreachable a new hot bucket replicates to last and is
	// registered when they return (SPEC §4).
	last []replTarget
	away atomic.Bool
	// shortUnreported counts short-target reports the managers could not
	// take (acks waited: reportShort).
	shortUnreported atomic.Int64
	stop            chan struct{}
	// stopCtx ends with stop (the BeforeReplicate test hook's context).
	stopCtx    context.Context
	cancelStop context.CancelFunc
	wg         sync.WaitGroup
}

type hotRepl struct {
	id, index, localID string
	ready              bool
	targets            []*replTarget // the current set (failed ones removed)
	tried              map[string]bool
	durable            uint32   // blocks durable here
	marks              []func() // marks[i] marks block base+i replicated
	base               uint32
	closedAt           int // -1 until the journal is closed
	kick               chan struct{}
	// registered is closed once the managers know the bucket; nil when
	// they did from the start. A bucket started on the last targets while
	// no manager answered reports its roll only after it.
	registered chan struct{}
	// failed: targets that left the set, newest last. replacing: the
	// managers are choosing a replacement (askReplacement); replaceAfter:
	// not before then after a refusal.
	failed       []string
	replacing    bool
	replaceAfter time.Time
	// sealedAway: the managers sealed the bucket (final) before they knew
	// a target short; the blocks that target lacks may lie past the seal
	// and be truncated, so nothing more is acknowledged (reportShort).
	sealedAway bool
	// ambiguous: a targets request for this bucket timed out, so the
	// managers may have recorded copies the origin never heard of. Such a
	// copy is in the state as whole (not short) yet never gets a block;
	// had the origin then chosen targets itself, a seal while it was cut
	// off would be answered by those empty copies and be final at their
	// length, cutting every acknowledged event (issue 24's chaos run:
	// main~57 sealed final at 0 blocks). So from then on the origin never
	// chooses on its own for this bucket: it asks again with the same
	// request id, which answers what was committed, and acks wait.
	ambiguous bool
}

type replTarget struct {
	peer, site   string
	searchable   bool
	acked        uint32
	inflight     bool
	pendingSince time.Time // when the oldest unacknowledged send started
	lagging      bool      // maintenance: timed out, kept in the set, not waited for
	retryAt      time.Time // after a failed send
	// reporting: timed out, and the managers are being told the copy is
	// short; acks keep waiting for it until they know (so no search can
	// pick as primary a copy that misses an acknowledged event), then it
	// leaves the set (or, in maintenance, turns lagging).
	reporting bool
	// reportAt: after a report the managers could not take, when to try
	// again (acks keep waiting for the target meanwhile).
	reportAt time.Time
}

// reportRetry is the pause before a short-target report the managers could
// not take is sent again.
const reportRetry = time.Second

func newReplicator(p *Peer, nc *nats.Conn, subj bus.Subjects, cp ControlPlane, timeout time.Duration, minCopies int) *replicator {
	r := &replicator{p: p, nc: nc, subj: subj, cp: cp, log: p.log,
		hot: map[string]*hotRepl{}, failures: map[string]int{}, peers: map[string]fsm.PeerView{},
		minCopies: minCopies, stop: make(chan struct{})}
	r.stopCtx, r.cancelStop = context.WithCancel(context.Background())
	r.timeout.Store(int64(timeout))
	return r
}

func (r *replicator) close() {
	// Under mu: BlockDurable, called from the store's writer (a goroutine
	// wg does not count), checks stop and adds to wg under mu, so it never
	// adds while Wait runs (the race detector caught that in CI).
	r.mu.Lock()
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.mu.Unlock()
	r.cancelStop()
	r.wg.Wait()
}

// AckCopies implements store.AckRule: a block is marked replicated only
// once at least minCopies copies hold it, this one included (the store
// records it in each new bucket's copy.json; idemrestart.go reads it).
func (r *replicator) AckCopies() int { return r.minCopies }

func (r *replicator) setMaintenance(on bool) {
	if r.maintenance.Swap(on) != on {
		r.log.Info("maintenance mode", "enabled", on)
	}
}

func (r *replicator) setPeers(list []fsm.PeerView) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pv := range list {
		r.peers[pv.ID] = pv
	}
}

// BlockDurable implements store.ReplicationHook (called by the writer).
func (r *replicator) BlockDurable(bucket, index string, no uint32, replicated func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stop:
		return // closing: nothing more is replicated (or acknowledged)
	default:
	}
	hb := r.hot[bucket]
	if hb == nil {
		_, local, _, _ := fsmParse(bucket)
		hb = &hotRepl{id: bucket, index: index, localID: local, closedAt: -1, base: no,
			kick: make(chan struct{}, 1), tried: map[string]bool{}}
		r.hot[bucket] = hb
		r.wg.Add(1)
		go r.run(hb)
	}
	if no+1 > hb.durable {
		hb.durable = no + 1
	}
	hb.marks = append(hb.marks, replicated)
	r.advanceLocked(hb)
	hb.poke()
}

// JournalClosed implements store.ReplicationHook.
func (r *replicator) JournalClosed(bucket string, blocks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hb := r.hot[bucket]; hb != nil {
		hb.closedAt = blocks
		hb.poke()
	}
}

func (hb *hotRepl) poke() {
	select {
	case hb.kick <- struct{}{}:
	default:
	}
}

func fsmParse(id string) (index, local, guid string, ok bool) {
	index, local, guid, err := fsm.ParseBucketID(id)
	return index, local, guid, err == nil
}

// advanceLocked marks every block that the whole current set holds, when
// the set makes at least minCopies copies.
func (r *replicator) advanceLocked(hb *hotRepl) {
	if !hb.ready || hb.sealedAway {
		return
	}
	upTo := hb.durable
	active := 0
	for _, t := range hb.targets {
		if t.lagging {
			continue
		}
		active++
		upTo = min(upTo, t.acked)
	}
	if 1+active < r.minCopies {
		return
	}
	for hb.base < upTo && len(hb.marks) > 0 {
		hb.marks[0]()
		hb.marks[0] = nil
		hb.marks = hb.marks[1:]
		hb.base++
	}
}

func (r *replicator) run(hb *hotRepl) {
	defer r.wg.Done()
	// Ask the managers for targets; acks wait meanwhile. When no manager
	// answers at all (not a refusal: nobody serves the subject, or the
	// request times out), the bucket replicates to the last targets the
	// managers gave and is registered with them later (registerLater).
	for {
		wait := 5 * time.Second
		if r.away.Load() {
			wait = time.Second // the last request found no manager either
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := r.cp.Targets(ctx, api.TargetsRequest{V: api.WireVersion, Index: hb.index, LocalID: hb.localID, Origin: r.p.cfg.ID})
		cancel()
		if err != nil && managersUnreachable(err) {
			r.away.Store(true)
			r.mu.Lock()
			var used []string
			if r.mayChooseLocked(hb, err) {
				used = r.adoptLastLocked(hb)
			}
			r.mu.Unlock()
			if used != nil {
				r.log.Warn("no manager answers: the new hot bucket replicates to the last targets and is registered when they return", "bucket", hb.id, "targets", used)
				r.wg.Add(1)
				go r.registerLater(hb)
				break
			}
		}
		if err == nil {
			r.away.Store(false)
			if resp.Bucket != hb.id {
				r.log.Error("managers named another bucket id", "want", hb.id, "got", resp.Bucket)
			}
			r.mu.Lock()
			for _, cs := range resp.Targets {
				r.addTargetLocked(hb, cs.Peer, cs.Searchable)
				if cs.Site != "" {
					hb.targets[len(hb.targets)-1].site = cs.Site
				}
			}
			r.last = r.last[:0]
			for _, t := range hb.targets {
				r.last = append(r.last, replTarget{peer: t.peer, site: t.site, searchable: t.searchable})
			}
			hb.ready = true
			r.advanceLocked(hb)
			r.mu.Unlock()
			break
		}
		r.log.Warn("no replication targets yet; acks wait", "bucket", hb.id, "err", err)
		select {
		case <-r.stop:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if r.step(hb) {
			return
		}
		select {
		case <-r.stop:
			return
		case <-hb.kick:
		case <-tick.C:
		}
	}
}

func (r *replicator) addTargetLocked(hb *hotRepl, peer string, searchable bool) {
	site := r.peers[peer].Site
	hb.tried[peer] = true
	hb.targets = append(hb.targets, &replTarget{peer: peer, site: site, searchable: searchable})
}

// step sends what each target lacks, fails slow targets, and finishes a
// closed bucket. It reports whether the bucket is done.
func (r *replicator) step(hb *hotRepl) bool {
	r.mu.Lock()
	now := time.Now()
	for i := 0; i < len(hb.targets); i++ {
		t := hb.targets[i]
		if t.acked < hb.durable && !t.pendingSince.IsZero() && now.Sub(t.pendingSince) > r.targetTimeout() && !t.reporting && now.After(t.reportAt) {
			maint := r.maintenance.Load()
			switch {
			case t.lagging && !maint:
				// Maintenance ended with it still late: already known
				// short, it leaves the set now.
				r.failLocked(hb, t)
				i--
				continue
			case !t.lagging:
				kind := api.EventTargetFailed
				if maint {
					kind = api.EventTargetLagging
				}
				t.reporting = true
				r.wg.Add(1)
				go r.reportShort(hb, t, kind)
			}
		}
		if t.acked < hb.durable && !t.inflight && now.After(t.retryAt) {
			if t.site == "" {
				if pv, ok := r.peers[t.peer]; ok {
					t.site = pv.Site
				} else {
					continue
				}
			}
			if t.pendingSince.IsZero() {
				t.pendingSince = now
			}
			t.inflight = true
			r.wg.Add(1)
			go r.send(hb, t, t.acked)
		}
	}
	if 1+len(hb.targets) < r.minCopies && !r.maintenance.Load() {
		r.replaceLocked(hb)
	}
	r.advanceLocked(hb)
	done := hb.closedAt >= 0 && (hb.base >= uint32(hb.closedAt) || hb.sealedAway)
	for _, t := range hb.targets {
		if t.acked < uint32(max(hb.closedAt, 0)) && !hb.sealedAway {
			done = false // a lagging target still lacks blocks
		}
	}
	var targets []replTarget
	if done {
		for _, t := range hb.targets {
			targets = append(targets, *t)
		}
		delete(r.hot, hb.id)
	}
	r.mu.Unlock()
	if done {
		r.finish(hb, targets)
	}
	return done
}

// reportShort tells the managers that target t misses blocks that are
// about to be acknowledged without it (kind target_failed: it leaves the
// set; target_lagging: maintenance keeps it), and only then stops waiting
// for it. With the managers unreachable it keeps waiting — no event is
// acknowledged without the target — and reports again after reportRetry:
// the managers, not knowing the copy short, would seal the bucket at that
// copy's length if the origin then died or was cut off, shorter than what
// was acknowledged, and every search until the seal is extended would be
// short yet look complete (issue 24's chaos suite found exactly that in a
// cut between the sites). Consistency over availability: while the origin
// can reach neither the target nor the managers, its acks wait (SPEC §4
// "rather than ack on fewer, it waits").
func (r *replicator) reportShort(hb *hotRepl, t *replTarget, kind api.BucketEventKind) {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := r.cp.BucketEvent(ctx, api.BucketEvent{V: api.WireVersion, Kind: kind, Bucket: hb.id, Peer: r.p.cfg.ID, Target: t.peer})
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	t.reporting = false
	if err != nil && bus.IsRemote(err, api.CodeBucketNotHot) {
		// The managers sealed the bucket, final, before they knew: the
		// blocks the target lacks may be cut by the seal. They are never
		// acknowledged; the seal and its fixups decide the copies.
		hb.sealedAway = true
		r.log.Warn("the managers sealed the bucket before they learnt a target was short: the blocks it lacks are not acknowledged",
			"bucket", hb.id, "target", t.peer, "acked", hb.base, "durable", hb.durable)
		hb.poke()
		return
	}
	if err != nil {
		r.shortUnreported.Add(1)
		r.log.Warn("could not report a short replication target; acks wait for it until the managers know", "kind", kind, "bucket", hb.id, "target", t.peer, "err", err)
		t.reportAt = time.Now().Add(reportRetry)
		if t.acked >= hb.durable {
			// It answered meanwhile; the report may have landed all the same.
			t.pendingSince = time.Time{}
			r.reportCaughtUpLocked(hb, t)
		}
		hb.poke()
		return
	}
	if t.acked >= hb.durable {
		// It answered meanwhile: nothing is missing.
		t.pendingSince = time.Time{}
		r.reportCaughtUpLocked(hb, t)
		return
	}
	if kind == api.EventTargetLagging {
		t.lagging = true
		r.log.Warn("maintenance: replication target is late; kept in the set, acks go on without it",
			"bucket", hb.id, "target", t.peer, "acked", t.acked, "durable", hb.durable)
	} else {
		r.failLocked(hb, t)
	}
	r.advanceLocked(hb)
	hb.poke()
}

// reportCaughtUpLocked tells the managers that a target reported short
// holds every durable block again.
func (r *replicator) reportCaughtUpLocked(hb *hotRepl, t *replTarget) {
	ev := api.BucketEvent{V: api.WireVersion, Kind: api.EventTargetCaughtUp, Bucket: hb.id, Peer: r.p.cfg.ID, Target: t.peer}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := r.cp.BucketEvent(ctx, ev); err != nil {
			r.log.Warn("could not report a caught-up target (its copy stays short until sealed and fetched)", "bucket", hb.id, "target", t.peer, "err", err)
		}
	}()
}

// failLocked removes a target that did not acknowledge in time (the
// managers were told by reportShort).
func (r *replicator) failLocked(hb *hotRepl, t *replTarget) {
	found := false
	for i, x := range hb.targets {
		if x == t {
			hb.targets = append(hb.targets[:i:i], hb.targets[i+1:]...)
			found = true
			break
		}
	}
	if !found {
		return
	}
	hb.failed = append(hb.failed, t.peer)
	r.failures[t.peer]++
	n := r.failures[t.peer]
	r.log.Warn("replication target left the set", "bucket", hb.id, "target", t.peer, "acked", t.acked,
		"durable", hb.durable, "consecutive_failures", n)
	if n <= 3 && hb.closedAt < 0 {
		// Roll off the store's lock order: the writer calls us under r.mu.
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.p.store.Roll(hb.id); err != nil && !errors.Is(err, store.ErrClosed) {
				r.log.Warn("roll after a failed target", "bucket", hb.id, "err", err)
			}
		}()
	}
}

// replaceLocked adds a replacement target when the set makes fewer than
// minCopies copies. The managers choose it under the site policy and
// record its copy first (askReplacement), so the state knows every copy
// that counts toward an ack (SPEC §4). Only while no manager answers does
// the origin choose itself (localReplaceLocked).
func (r *replicator) replaceLocked(hb *hotRepl) {
	if hb.replacing || time.Now().Before(hb.replaceAfter) {
		return
	}
	registered := hb.registered == nil
	if !registered {
		select {
		case <-hb.registered:
			registered = true
		default:
		}
	}
	if (r.away.Load() || !registered) && !hb.ambiguous {
		r.localReplaceLocked(hb)
		return
	}
	// The failed targets, newest first, then every other peer tried.
	var exclude []string
	for i := len(hb.failed) - 1; i >= 0; i-- {
		if !slices.Contains(exclude, hb.failed[i]) {
			exclude = append(exclude, hb.failed[i])
		}
	}
	for _, p := range slices.Sorted(maps.Keys(hb.tried)) {
		if !slices.Contains(exclude, p) {
			exclude = append(exclude, p)
		}
	}
	if len(exclude) == 0 {
		if !hb.ambiguous {
			r.localReplaceLocked(hb)
		}
		return
	}
	hb.replacing = true
	r.wg.Add(1)
	go r.askReplacement(hb, exclude)
}

// askReplacement asks the managers for hb's replacement target (api
// TargetsRequest.Replace) and adds the one they recorded. With no manager
// answering it falls back to the origin's own choice; a refusal (no Up
// peer can take it) is asked again a second later.
func (r *replicator) askReplacement(hb *hotRepl, exclude []string) {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	resp, err := r.cp.Targets(ctx, api.TargetsRequest{V: api.WireVersion, Index: hb.index, LocalID: hb.localID, Origin: r.p.cfg.ID, Replace: exclude})
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	hb.replacing = false
	if _, open := r.hot[hb.id]; !open {
		return
	}
	switch {
	case err == nil && len(resp.Targets) == 1 && !hb.tried[resp.Targets[0].Peer]:
		cs := resp.Targets[0]
		r.log.Info("replacement replication target chosen by the managers", "bucket", hb.id, "target", cs.Peer, "failed", exclude[0])
		r.addTargetLocked(hb, cs.Peer, cs.Searchable)
		if cs.Site != "" {
			hb.targets[len(hb.targets)-1].site = cs.Site
		}
	case err != nil && managersUnreachable(err):
		r.away.Store(true)
		if r.mayChooseLocked(hb, err) {
			r.localReplaceLocked(hb)
			break
		}
		// The managers may have recorded a replacement: asked again with
		// the same tried set (the same request id), which answers it.
		hb.replaceAfter = time.Now().Add(time.Second)
	default:
		r.log.Warn("the managers chose no replacement replication target; asking again", "bucket", hb.id, "err", err)
		hb.replaceAfter = time.Now().Add(time.Second)
	}
	select {
	case hb.kick <- struct{}{}:
	default:
	}
}

// localReplaceLocked is the origin's own choice of a replacement target,
// while no manager answers: an Up peer not yet tried for this bucket,
// preferring the fewest consecutive failures, then the id. The managers
// learn of the copy from the peer's inventory.
func (r *replicator) localReplaceLocked(hb *hotRepl) {
	var cands []fsm.PeerView
	for _, pv := range r.peers {
		if pv.ID == r.p.cfg.ID || hb.tried[pv.ID] || pv.State != fsm.StateUp {
			continue
		}
		cands = append(cands, pv)
	}
	sort.Slice(cands, func(i, j int) bool {
		fi, fj := r.failures[cands[i].ID], r.failures[cands[j].ID]
		if fi != fj {
			return fi < fj
		}
		return cands[i].ID < cands[j].ID
	})
	for _, pv := range cands {
		if 1+len(hb.targets) >= r.minCopies {
			return
		}
		r.log.Info("replacement replication target", "bucket", hb.id, "target", pv.ID)
		r.addTargetLocked(hb, pv.ID, false)
	}
}

const maxSendBytes = 4 << 20

// sendBudget is how many frame bytes one message may carry: at most 4 MiB
// and the bus's max payload less room for the header (a larger message
// would be refused by NATS, and the target would time out for nothing).
func sendBudget(nc *nats.Conn) int {
	budget := maxSendBytes
	if mp := int(nc.MaxPayload()); mp > 0 {
		budget = min(budget, mp-16<<10)
	}
	return max(budget, 1)
}

func (r *replicator) send(hb *hotRepl, t *replTarget, from uint32) {
	defer r.wg.Done()
	if h := r.p.cfg.BeforeReplicate; h != nil {
		h(r.stopCtx, hb.id, from)
		if r.stopCtx.Err() != nil { // stopping: nothing more is sent
			r.mu.Lock()
			t.inflight = false
			r.mu.Unlock()
			return
		}
	}
	next, err := r.sendOnce(hb, t, from)
	r.mu.Lock()
	defer r.mu.Unlock()
	t.inflight = false
	if err != nil {
		if errors.Is(err, bus.ErrTimeout) || errors.Is(err, bus.ErrNoResponders) || bus.IsRemote(err, api.CodeKeyDenied) || bus.IsRemote(err, api.CodeSealHold) {
			r.log.Debug("replication send failed", "bucket", hb.id, "target", t.peer, "err", err)
		} else {
			r.log.Warn("replication send failed", "bucket", hb.id, "target", t.peer, "err", err)
		}
		t.retryAt = time.Now().Add(200 * time.Millisecond)
		return
	}
	if next > t.acked {
		t.acked = next
		r.failures[t.peer] = 0
		if t.acked >= hb.durable {
			t.pendingSince = time.Time{}
			if t.lagging {
				t.lagging = false
				r.log.Info("replication target caught up", "bucket", hb.id, "target", t.peer, "blocks", t.acked)
				r.reportCaughtUpLocked(hb, t)
			}
		} else {
			t.pendingSince = time.Now()
		}
	} else if next < t.acked {
		t.acked = next // the copy is shorter than we thought: resend
	}
	r.advanceLocked(hb)
	hb.poke()
}

func (r *replicator) sendOnce(hb *hotRepl, t *replTarget, from uint32) (uint32, error) {
	frames, err := r.p.store.Replicas().ReadFrames(hb.id, from, sendBudget(r.nc))
	if err != nil {
		return 0, err
	}
	subject, err := r.subj.Repl(t.site, t.peer, r.p.cfg.ID)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.targetTimeout())
	defer cancel()
	resp, err := bus.Request[repl.Request, repl.Reply](ctx, r.nc, subject, repl.Request{V: repl.Version, Op: repl.OpBlocks,
		Bucket: hb.id, Index: hb.index, Origin: r.p.cfg.ID, Searchable: t.searchable, First: from, Frames: frames})
	if err != nil {
		return 0, err
	}
	return resp.Blocks, nil
}

// finish tells the targets and the managers that the bucket rolled.
func (r *replicator) finish(hb *hotRepl, targets []replTarget) {
	for _, t := range targets {
		subject, err := r.subj.Repl(t.site, t.peer, r.p.cfg.ID)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.targetTimeout())
		_, err = bus.Request[repl.Request, repl.Reply](ctx, r.nc, subject, repl.Request{V: repl.Version, Op: repl.OpRoll,
			Bucket: hb.id, Index: hb.index, Origin: r.p.cfg.ID, Blocks: hb.closedAt})
		cancel()
		if err != nil {
			r.log.Warn("target did not take the roll", "bucket", hb.id, "target", t.peer, "err", err)
		}
	}
	if hb.registered != nil {
		// Started while no manager answered: the roll waits until the
		// managers know the bucket.
		select {
		case <-hb.registered:
		case <-r.stop:
			return
		}
	}
	ev := api.BucketEvent{V: api.WireVersion, Kind: api.EventRolled, Bucket: hb.id, Peer: r.p.cfg.ID, Blocks: int64(hb.closedAt),
		LastBlockChecksum: r.p.store.Replicas().LastChecksum(hb.id, hb.closedAt)}
	for _, c := range r.p.store.Inventory() {
		if c.ID == hb.id {
			ev.Events, ev.Bytes, ev.Earliest, ev.Latest = int64(c.Events), c.JournalBytes, c.Earliest, c.Latest
		}
	}
	// The roll must reach the managers: until it does they hold the bucket
	// hot, with its primaries pinned and a replica that missed the last
	// blocks (a target cut off) still counted whole. A leader change or a
	// cut bus node loses single requests, so the report is retried (its
	// request id makes a retry apply once) until the managers answer —
	// taken, or refused with a reason, which no retry changes — or the
	// replicator stops (a restart rolls and reports again).
	backoff := 250 * time.Millisecond
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := r.cp.BucketEvent(ctx, ev)
		cancel()
		var remote *bus.RemoteError
		switch {
		case err == nil:
			if attempt > 0 {
				r.log.Info("roll reported", "bucket", hb.id, "attempts", attempt+1)
			}
			return
		case errors.As(err, &remote) && remote.Code != api.CodeNotLeader:
			r.log.Warn("the managers refused a roll report", "bucket", hb.id, "err", err)
			return
		}
		if attempt == 0 {
			r.log.Warn("could not report a roll; retrying until the managers take it", "bucket", hb.id, "err", err)
		}
		select {
		case <-r.stop:
			r.log.Warn("stopping with a roll not reported", "bucket", hb.id, "err", err)
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// serveRepl is the target side: quarry.repl.<site>.<peer>.<sender>.
// cl is the cluster that serves it (p.cl is set only after every
// service started).
func (p *Peer) serveRepl(ctx context.Context, cl *cluster, req repl.Request) (repl.Reply, error) {
	if req.V != repl.Version {
		return repl.Reply{}, bus.Errorf(bus.CodeBadRequest, "replication message version %d, want %d", req.V, repl.Version)
	}
	// Ids from the network are checked where they arrive, before any
	// lookup or write (fsm's one validator).
	index, _, guid, err := fsm.ValidBucketID(req.Bucket)
	if err != nil {
		return repl.Reply{}, bus.Errorf(bus.CodeBadRequest, "replication %s: %v", req.Op, err)
	}
	if req.Index != "" && req.Index != index {
		return repl.Reply{}, bus.Errorf(bus.CodeBadRequest, "replication %s: index %q, bucket %s", req.Op, req.Index, req.Bucket)
	}
	if req.Origin != "" {
		if err := fsm.ValidName("origin", req.Origin); err != nil {
			return repl.Reply{}, bus.Errorf(bus.CodeBadRequest, "replication %s: %v", req.Op, err)
		}
	}
	// Who sent it is the subject's last token, which the sender's NATS
	// user is bound to: a write is taken only from the bucket's origin or
	// a confirmed fixup source (replsender.go).
	if err := cl.senders.check(ctx, bus.SubjectSender(bus.RequestSubject(ctx)), req, guid); err != nil {
		p.log.Warn("replication request refused", "op", req.Op, "bucket", req.Bucket, "err", err)
		return repl.Reply{Bucket: req.Bucket}, err
	}
	switch req.Op {
	case repl.OpBlocks:
		if h := p.cfg.BeforeReplicaAppend; h != nil {
			h(req.Bucket)
		}
		if req.Sealed > 0 {
			// A fetch into a copy sealed shorter than an extended seal.
			if err := p.store.Replicas().ExtendTo(req.Bucket, req.Sealed); err != nil && !errors.Is(err, store.ErrNoBucket) {
				return repl.Reply{Bucket: req.Bucket}, err
			}
		}
		// Keys carried by the frames are pending from now until learned,
		// or the append is refused when one was just answered unknown to
		// another peer (idem/arrive.go: a retry's lookup racing these
		// blocks).
		release, err := p.keys.Arrive(bus.SubjectSender(bus.RequestSubject(ctx)), store.FramesKeys(req.Frames))
		if err != nil {
			p.deferredAppends.Add(1)
			p.log.Info("replica append deferred", "bucket", req.Bucket, "err", err)
			return repl.Reply{Bucket: req.Bucket}, bus.Errorf(api.CodeKeyDenied, "replica append of %s: %v", req.Bucket, err)
		}
		appendBlocks := p.store.Replicas().ReplicaAppend
		if req.Task == 0 { // the origin's stream: refused once this copy answered a seal
			appendBlocks = p.store.Replicas().OriginAppend
		}
		n, err := appendBlocks(req.Bucket, req.Index, req.Searchable, req.First, req.Frames)
		release()
		if errors.Is(err, store.ErrSealHold) {
			return repl.Reply{Bucket: req.Bucket, Blocks: n}, bus.Errorf(api.CodeSealHold, "replica append of %s: %v", req.Bucket, err)
		}
		if err != nil {
			return repl.Reply{Bucket: req.Bucket, Blocks: n}, err
		}
		return repl.Reply{Bucket: req.Bucket, Blocks: n}, nil
	case repl.OpRoll:
		// A roll makes a copy warm at its length; it never cuts one (a
		// copy longer than the roll is cut only by a truncate task the
		// managers confirm against committed state).
		n, _, ok := p.store.Replicas().Blocks(req.Bucket)
		if ok && n > req.Blocks {
			return repl.Reply{Bucket: req.Bucket, Blocks: uint32(n)}, bus.Errorf(bus.CodeBadRequest,
				"roll of %s at %d blocks: the copy here holds %d: %v", req.Bucket, req.Blocks, n, ErrReplicaTruncate)
		}
		if !ok && req.Blocks == 0 {
			// Rolled at no block (its restarted origin gave up every block
			// no replica held, idemrestart.go): the copy here is empty too.
			if err := p.store.Replicas().EmptyReplica(req.Bucket, index, req.Searchable); err != nil {
				return repl.Reply{}, err
			}
		}
		if err := p.store.Replicas().ReplicaRoll(req.Bucket, req.Blocks); err != nil {
			return repl.Reply{}, err
		}
		n, st, _ := p.store.Replicas().Blocks(req.Bucket)
		return repl.Reply{Bucket: req.Bucket, Blocks: uint32(n), State: string(st)}, nil
	case repl.OpFetch:
		n, st, ok := p.store.Replicas().Blocks(req.Bucket)
		if !ok {
			return repl.Reply{}, bus.Errorf("no_bucket", "no copy of %s here", req.Bucket)
		}
		frames, err := p.store.Replicas().ReadFrames(req.Bucket, req.First, sendBudget(cl.nc))
		if err != nil {
			return repl.Reply{}, err
		}
		return repl.Reply{Bucket: req.Bucket, Blocks: uint32(n), State: string(st), Frames: frames}, nil
	case repl.OpLength:
		n, st, ok := p.store.Replicas().Blocks(req.Bucket)
		if !ok {
			return repl.Reply{Bucket: req.Bucket, Born: p.born}, nil
		}
		return repl.Reply{Bucket: req.Bucket, Blocks: uint32(n), State: string(st), Born: p.born}, nil
	}
	return repl.Reply{}, bus.Errorf(bus.CodeBadRequest, "unknown replication op %q", req.Op)
}

// minCopiesOf is min(2, RF) for the cluster config.
func minCopiesOf(cfg api.PeerConfig) int {
	// The managers send the site policy's total as the RF in multisite
	// mode (api.PeerConfig.ReplicationFactor).
	return max(1, min(2, cfg.ReplicationFactor))
}

var _ = strconv.Itoa
var _ = fmt.Sprint

// lag reports how far the targets trail this origin: blocks durable here
// that the current replication set does not all hold yet, and the age of
// the oldest send a target has not acknowledged.
func (r *replicator) lag() (blocks float64, oldest time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, hb := range r.hot {
		upTo := hb.durable
		for _, t := range hb.targets {
			upTo = min(upTo, t.acked)
			if t.inflight && !t.pendingSince.IsZero() {
				oldest = max(oldest, now.Sub(t.pendingSince))
			}
		}
		if upTo < hb.durable {
			blocks += float64(hb.durable - upTo)
		}
	}
	return blocks, oldest
}

// registerReplicationMetrics exports the replication lag (SPEC §4: a
// searchable hot replica trails its origin by at most a block interval).
func registerReplicationMetrics(reg prometheus.Registerer, r *replicator) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "quarry_peer_replication_lag_seconds",
		Help: "Age of the oldest block send to a replication target that is not acknowledged yet (0 when none).",
	}, func() float64 { _, d := r.lag(); return d.Seconds() }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "quarry_peer_replication_short_unreported_total",
		Help: "Reports of a short replication target the managers could not take; acknowledgements waited for the target (or the managers) each time.",
	}, func() float64 { return float64(r.shortUnreported.Load()) }))
}

// lagBlocks is, per target peer, the blocks durable here that the target
// has not acknowledged yet, summed over the hot buckets it replicates; a
// target that is caught up counts 0.
func (r *replicator) lagBlocks() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int64{}
	for _, h := range r.hot {
		for _, t := range h.targets {
			lag := int64(0)
			if h.durable > t.acked {
				lag = int64(h.durable - t.acked)
			}
			out[t.peer] += lag
		}
	}
	return out
}

// targetTimeout is target_timeout in force.
func (r *replicator) targetTimeout() time.Duration { return time.Duration(r.timeout.Load()) }

// setTimeout sets target_timeout (d ≤ 0 leaves it) and reports whether it
// changed.
func (r *replicator) setTimeout(d time.Duration) bool {
	return d > 0 && time.Duration(r.timeout.Swap(int64(d))) != d
}
