package peer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer/repl"
	"github.com/quarry-dev/quarry/peer/store"
)

// fixupRunner executes the fixup tasks the managers give this peer
// (SPEC §3): make searchable (rebuilt locally, nothing on the network),
// replicate a warm bucket to a target (chunks of whole checksummed frames;
// resumable, since the target answers how many blocks it holds; throttled),
// fetch the blocks a shorter copy lacks up to the sealed length, truncate a
// longer copy and remove a copy — the last two destructive, so they run only
// after Confirm said the task is open in the leader's committed state.
// Each task id runs at most once per process (a task delivered again gets
// its first outcome re-reported); every operation is also idempotent on
// disk, so a restart that runs a task again changes nothing more.
type fixupRunner struct {
	p        *Peer
	cp       ControlPlane
	rate     int64 // replication bytes per second (0: unthrottled)
	parallel chan struct{}

	kick chan struct{} // wakes the loop: a task pushed, a task ended

	mu sync.Mutex
	// queued are the pushed tasks not yet reported; done the outcome of
	// the tasks run (a push of the same id again is re-reported), bounded
	// by keepOutcome.
	queued  map[uint64]api.FixupTask
	done    map[uint64]fixupOutcome
	running map[uint64]bool
	// moved counts transfers that moved bytes, by "bucket>target" (tests:
	// each (bucket, target) transfer happens at most once).
	moved map[string]int
	// sentBytes counts the block bytes this peer sent for the managers'
	// fixup tasks (quarry_peer_fixup_sent_bytes_total); catchupBytes those
	// it sent, as a restarted origin, to bring its replicas to its length
	// (quarry_peer_restart_catchup_bytes_total) — replication of its own
	// blocks, not fixup.
	sentBytes, catchupBytes atomic.Int64
	// divergent counts copies longer than their sealed length whose block
	// at the sealed length did not match the seal, truncated
	// (quarry_peer_seal_divergent_copies_total).
	divergent atomic.Int64
}

// ErrNotReady: a task cannot run yet (the copy is still hot, the peer
// list does not name the source yet); it is tried again after the retry
// interval.
var ErrNotReady = errors.New("fixup task not ready")

func newFixupRunner(p *Peer, cp ControlPlane, rate int64) *fixupRunner {
	if rate == 0 {
		rate = DefaultReplicationRate
	}
	return &fixupRunner{p: p, cp: cp, rate: rate, parallel: make(chan struct{}, 2), kick: make(chan struct{}, 1),
		queued: map[uint64]api.FixupTask{}, done: map[uint64]fixupOutcome{}, running: map[uint64]bool{}, moved: map[string]int{}}
}

// submit hands the runner a task the managers pushed (idempotent per id:
// a task delivered again is queued once, and one already run has its
// outcome reported again). It never blocks: the fixup subject's handler
// answers the push at once.
func (f *fixupRunner) submit(t api.FixupTask) {
	f.mu.Lock()
	f.queued[t.ID] = t
	f.mu.Unlock()
	f.wake()
}

func (f *fixupRunner) wake() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// loop runs the queued tasks as they are pushed (submit wakes it) until
// stop. A task that is not ready, was throttled by the two-task limit, or
// whose result could not be reported stays queued and is tried again
// after retry.
func (f *fixupRunner) loop(stop <-chan struct{}, wg *sync.WaitGroup, retry time.Duration) {
	defer wg.Done()
	t := time.NewTicker(retry)
	defer t.Stop()
	var inner sync.WaitGroup
	defer inner.Wait()
	for {
		select {
		case <-stop:
			return
		case <-f.kick:
		case <-t.C:
		}
		f.mu.Lock()
		tasks := make([]api.FixupTask, 0, len(f.queued))
		for _, tk := range f.queued {
			tasks = append(tasks, tk)
		}
		f.mu.Unlock()
		sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
		for _, tk := range tasks {
			f.mu.Lock()
			res, isDone := f.done[tk.ID]
			busy := f.running[tk.ID]
			if !isDone && !busy {
				f.running[tk.ID] = true
			}
			f.mu.Unlock()
			if isDone {
				f.report(res) // the managers have not taken it yet
				continue
			}
			if busy {
				continue
			}
			select {
			case f.parallel <- struct{}{}:
			default:
				f.mu.Lock()
				delete(f.running, tk.ID)
				f.mu.Unlock()
				continue // throttled: a finishing task wakes the loop
			}
			inner.Add(1)
			go func() {
				defer inner.Done()
				defer f.wake()
				defer func() { <-f.parallel }()
				res, err := f.run(tk, stop)
				f.mu.Lock()
				delete(f.running, tk.ID)
				if !errors.Is(err, ErrNotReady) {
					f.keepOutcome(res)
				}
				f.mu.Unlock()
				if errors.Is(err, ErrNotReady) {
					return
				}
				f.report(res)
			}()
		}
	}
}

// fixupOutcomesKept bounds fixupRunner.done: past twice this many outcomes,
// the oldest (lowest task ids) of those already reported are forgotten until
// this many remain. A forgotten task pushed again runs again, as after a
// restart, which changes nothing more on disk (every operation is
// idempotent); an outcome not yet reported is never forgotten.
const fixupOutcomesKept = 1024

// keepOutcome records a task's outcome (f.mu held).
func (f *fixupRunner) keepOutcome(res fixupOutcome) {
	f.done[res.ID] = res
	if len(f.done) <= 2*fixupOutcomesKept {
		return
	}
	reported := make([]uint64, 0, len(f.done))
	for id := range f.done {
		if _, open := f.queued[id]; !open {
			reported = append(reported, id)
		}
	}
	slices.Sort(reported)
	for _, id := range reported {
		if len(f.done) <= fixupOutcomesKept {
			break
		}
		delete(f.done, id)
	}
}

// report sends a task's result; once the managers took it the task leaves
// the queue (its outcome is kept, so a task pushed again is reported, not
// run, again).
func (f *fixupRunner) report(res fixupOutcome) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := f.cp.FixupResult(ctx, res.FixupResult); err != nil {
		f.p.log.Warn("could not report a fixup result", "task", res.ID, "err", err)
		return
	}
	f.mu.Lock()
	delete(f.queued, res.ID)
	f.mu.Unlock()
}

// run executes one task and returns its outcome; ErrNotReady leaves it for
// a later poll.
func (f *fixupRunner) run(tk api.FixupTask, stop <-chan struct{}) (fixupOutcome, error) {
	res := fixupOutcome{FixupResult: api.FixupResult{V: api.WireVersion, ID: tk.ID, Peer: f.p.cfg.ID, OK: true}, Bucket: tk.Bucket}
	st := f.p.store
	// A task's ids are checked again before it touches a copy
	// (acceptFixup checks pushed tasks on arrival too).
	if err := validTaskIDs(tk); err != nil {
		res.OK, res.Reason = false, err.Error()
		f.p.log.Warn("fixup task refused: invalid id", "task", tk.ID, "kind", tk.Kind, "err", err)
		return res, nil
	}
	var err error
	switch tk.Kind {
	case fsm.TaskMakeSearchable:
		if n, state, ok := st.Replicas().Blocks(tk.Bucket); ok && state != store.StateWarm {
			_ = n
			err = fmt.Errorf("%w: %s is %s here", ErrNotReady, tk.Bucket, state)
			break
		}
		err = st.Repairs().MakeSearchable(tk.Bucket)
	case fsm.TaskReplicate:
		if tk.Source != f.p.cfg.ID {
			return res, fmt.Errorf("%w: replication tasks run on their source", ErrNotReady)
		}
		res.Bytes, err = f.push(tk, stop)
	case fsm.TaskFetch:
		if tk.Source == f.p.cfg.ID {
			// Delivered to the source (NATS control plane): push the blocks
			// the shorter copy lacks, up to the sealed length.
			if tk.SealedBlocks < 0 {
				err = fmt.Errorf("%w: sealed length of %s unknown", ErrNotReady, tk.Bucket)
				break
			}
			if res.Bytes, err = f.pushCopy(tk.ID, tk.Bucket, tk.Target, tk.Searchable, int(tk.SealedBlocks), &f.sentBytes, stop); err == nil {
				f.reportLength(tk.Bucket, tk.Target, int(tk.SealedBlocks), tk.LastBlockChecksum)
				f.sealOwn(tk)
			}
			break
		}
		if res.Bytes, err = f.fetch(tk, stop); err == nil {
			f.reportLength(tk.Bucket, f.p.cfg.ID, int(tk.SealedBlocks), st.Replicas().LastChecksum(tk.Bucket, int(tk.SealedBlocks)))
		}
	case fsm.TaskTruncate:
		var c api.FixupTask
		if c, err = f.confirm(tk); err == nil {
			if c.SealedBlocks < 0 {
				err = fmt.Errorf("%w: sealed length of %s unknown", ErrNotReady, tk.Bucket)
				break
			}
			var extended bool
			if extended, err = f.extendSeal(c); extended || err != nil {
				break
			}
			err = st.Replicas().ReplicaRoll(tk.Bucket, int(c.SealedBlocks))
			if errors.Is(err, store.ErrBucketState) {
				// Our copy is warm, not a replica: cut it directly.
				err = st.Repairs().Truncate(tk.Bucket, int(c.SealedBlocks))
			}
			if err == nil {
				f.reportLength(tk.Bucket, f.p.cfg.ID, int(c.SealedBlocks), st.Replicas().LastChecksum(tk.Bucket, int(c.SealedBlocks)))
			}
		}
	case fsm.TaskRemoveCopy, fsm.TaskFreeze:
		if _, err = f.confirm(tk); err == nil {
			err = st.Replicas().RemoveCopy(tk.Bucket)
		}
	case fsm.TaskSeal:
		return res, fmt.Errorf("%w: the managers coordinate a seal", ErrNotReady)
	case fsm.TaskRoll:
		// The origin rolls its hot bucket; the roll reaches the managers
		// as every roll does (the replicator's roll event), which closes
		// the task. A bucket already warm here is done.
		if _, state, ok := st.Replicas().Blocks(tk.Bucket); ok && state != store.StateHot {
			break
		}
		err = st.Roll(tk.Bucket)
	default:
		err = fmt.Errorf("unknown fixup kind %q", tk.Kind)
	}
	if errors.Is(err, ErrNotReady) {
		return res, err
	}
	if err != nil {
		res.OK, res.Reason = false, err.Error()
		f.p.log.Warn("fixup task failed", "task", tk.ID, "kind", tk.Kind, "bucket", tk.Bucket, "err", err)
	} else {
		n, _, _ := st.Replicas().Blocks(tk.Bucket)
		f.p.log.Info("fixup task done", "task", tk.ID, "kind", tk.Kind, "bucket", tk.Bucket, "blocks", n, "bytes", res.Bytes)
	}
	return res, nil
}

// extendSeal runs before a truncate (SPEC §4, fsm/DESIGN.md "Extending a
// seal"): a copy longer than the sealed length whose block at the sealed
// length carries the sealed checksum is the sealed copy plus blocks of the
// same origin — blocks a cut-off origin may have acknowledged on it — so
// it asks the managers to move the seal to its length instead of cutting
// them. It reports whether it did (the managers close the task with the
// extension); false with no error when the copy diverges (it is then
// truncated: logged, and counted in quarry_peer_seal_divergent_copies_total)
// or is not longer. A refusal (the seal moved meanwhile) fails the task:
// the planner opens another against the current seal.
func (f *fixupRunner) extendSeal(tk api.FixupTask) (bool, error) {
	st := f.p.store
	sealed := int(tk.SealedBlocks)
	if n, _, ok := st.Replicas().Blocks(tk.Bucket); !ok || n <= sealed {
		return false, nil
	}
	n, last, err := st.Replicas().SealPrefix(tk.Bucket, sealed, tk.LastBlockChecksum)
	if errors.Is(err, store.ErrSealDiverged) {
		f.divergent.Add(1)
		f.p.log.Warn("copy diverges from the sealed length: truncated", "bucket", tk.Bucket, "blocks", n,
			"sealed", sealed, "err", err)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ev := api.BucketEvent{V: api.WireVersion, Kind: api.EventExtendSeal, Bucket: tk.Bucket, Peer: f.p.cfg.ID, Blocks: int64(n), LastBlockChecksum: last,
		SealedBlocks: int64(sealed), SealedChecksum: tk.LastBlockChecksum}
	for _, c := range st.Inventory() {
		if c.ID == tk.Bucket {
			ev.Events, ev.Bytes, ev.Earliest, ev.Latest = int64(c.Events), c.JournalBytes, c.Earliest, c.Latest
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.cp.BucketEvent(ctx, ev); err != nil {
		if bus.IsRemote(err, api.CodeSealFinal) {
			// A copy holding every acknowledged block answered the seal:
			// the blocks past it were never acknowledged (fsm.ErrSealFinal).
			f.p.log.Info("copy longer than a final seal: truncated", "bucket", tk.Bucket, "sealed", sealed, "blocks", n)
			return false, nil
		}
		return true, fmt.Errorf("extend the seal of %s from %d to %d blocks: %w", tk.Bucket, sealed, n, err)
	}
	f.p.log.Info("copy longer than the sealed length extended the seal", "bucket", tk.Bucket, "sealed", sealed, "blocks", n)
	return true, nil
}

// confirm checks a destructive task with the leader. A refusal is
// ErrNotReady: the task waits (it may be closed by then, and is not run).
func (f *fixupRunner) confirm(tk api.FixupTask) (api.FixupTask, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := f.cp.Confirm(ctx, tk.ID)
	if err != nil {
		return tk, fmt.Errorf("%w: task %d not confirmed: %v", ErrNotReady, tk.ID, err)
	}
	if c.Kind != tk.Kind || c.Bucket != tk.Bucket || c.Target != tk.Target {
		return tk, fmt.Errorf("task %d confirmed as %s %s on %s, delivered as %s %s on %s", tk.ID, c.Kind, c.Bucket, c.Target, tk.Kind, tk.Bucket, tk.Target)
	}
	return tk, nil
}

func (f *fixupRunner) subject(peer string) (string, error) {
	cl := f.p.cl
	cl.repl.mu.Lock()
	pv, ok := cl.repl.peers[peer]
	cl.repl.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("%w: peer %s unknown here yet", ErrNotReady, peer)
	}
	return cl.repl.subj.Repl(pv.Site, peer, f.p.cfg.ID)
}

func (f *fixupRunner) throttle(n int, stop <-chan struct{}) {
	if f.rate <= 0 {
		return
	}
	select {
	case <-stop:
	case <-time.After(time.Duration(int64(n) * int64(time.Second) / f.rate)):
	}
}

// push streams a warm copy to the task's target: it asks the target how
// many blocks it holds and sends the rest in chunks, then the roll.
func (f *fixupRunner) push(tk api.FixupTask, stop <-chan struct{}) (int64, error) {
	return f.pushCopy(tk.ID, tk.Bucket, tk.Target, tk.Searchable, -1, &f.sentBytes, stop)
}

// pushCopy sends a warm copy to peer target (resuming from the blocks it
// holds) and then the roll, so the target's copy ends warm and identical.
// With limit ≥ 0 (a sealed length) it sends exactly limit blocks, from a
// copy that may still be a hot replica (the origin is gone). Every request
// names task, which the target confirms with the managers (it takes writes
// from a peer other than the bucket's origin only for an open task).
func (f *fixupRunner) pushCopy(task uint64, bucket, target string, searchable bool, limit int, sent *atomic.Int64, stop <-chan struct{}) (int64, error) {
	tk := api.FixupTask{Bucket: bucket, Target: target, Searchable: searchable}
	st := f.p.store
	n, state, ok := st.Replicas().Blocks(tk.Bucket)
	if !ok {
		return 0, fmt.Errorf("no copy of %s here to replicate", tk.Bucket)
	}
	if limit >= 0 {
		if n < limit {
			return 0, fmt.Errorf("%s holds %d blocks here, fewer than the sealed %d", bucket, n, limit)
		}
		n = limit
	} else if state != store.StateWarm {
		return 0, fmt.Errorf("%w: %s is %s here", ErrNotReady, tk.Bucket, state)
	}
	subject, err := f.subject(tk.Target)
	if err != nil {
		return 0, err
	}
	index, _, _, _ := fsmParse(tk.Bucket)
	nc := f.p.cl.nc
	req := func(r repl.Request) (repl.Reply, error) {
		r.V, r.Bucket, r.Index, r.Origin, r.Searchable = repl.Version, tk.Bucket, index, f.p.cfg.ID, tk.Searchable
		r.Task = task // the target confirms it: this peer is the task's source, not the bucket's origin
		if r.Op == repl.OpBlocks && limit > 0 {
			r.Sealed = limit // the target's copy may be sealed shorter (an extended seal)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return bus.Request[repl.Request, repl.Reply](ctx, nc, subject, r)
	}
	have, err := req(repl.Request{Op: repl.OpLength})
	if err != nil {
		return 0, err
	}
	var moved int64
	next := have.Blocks
	for int(next) < n {
		select {
		case <-stop:
			return moved, fmt.Errorf("%w: stopping", ErrNotReady)
		default:
		}
		frames, err := st.Replicas().ReadFrames(tk.Bucket, next, sendBudget(nc))
		if err != nil {
			return moved, err
		}
		if extra := int(next) + len(frames) - n; extra > 0 {
			frames = frames[:len(frames)-extra]
		}
		r, err := req(repl.Request{Op: repl.OpBlocks, First: next, Frames: frames})
		if err != nil {
			return moved, err
		}
		size := 0
		for _, fr := range frames {
			size += len(fr)
		}
		moved += int64(size)
		sent.Add(int64(size))
		if r.Blocks <= next {
			return moved, fmt.Errorf("target %s took no block of %s at %d", tk.Target, tk.Bucket, next)
		}
		next = r.Blocks
		f.throttle(size, stop)
	}
	if moved > 0 {
		f.mu.Lock()
		f.moved[bucket+">"+target]++
		f.mu.Unlock()
	}
	if _, err := req(repl.Request{Op: repl.OpRoll, Blocks: n}); err != nil {
		return moved, err
	}
	return moved, nil
}

// fetch completes a shorter copy up to the sealed length from the task's
// source, checks the last block's checksum, and makes the copy warm at that
// length.
func (f *fixupRunner) fetch(tk api.FixupTask, stop <-chan struct{}) (int64, error) {
	if tk.SealedBlocks < 0 {
		return 0, fmt.Errorf("%w: sealed length of %s unknown", ErrNotReady, tk.Bucket)
	}
	st := f.p.store
	sealed := int(tk.SealedBlocks)
	index, _, _, _ := fsmParse(tk.Bucket)
	searchable := tk.Searchable
	for _, c := range st.Inventory() {
		if c.ID == tk.Bucket {
			searchable = c.Searchable
		}
	}
	subject, err := f.subject(tk.Source)
	if err != nil {
		return 0, err
	}
	// A copy sealed shorter than an extended seal takes the rest.
	if err := st.Replicas().ExtendTo(tk.Bucket, sealed); err != nil && !errors.Is(err, store.ErrNoBucket) {
		return 0, err
	}
	var moved int64
	for {
		have, _, _ := st.Replicas().Blocks(tk.Bucket)
		if have >= sealed {
			break
		}
		select {
		case <-stop:
			return moved, fmt.Errorf("%w: stopping", ErrNotReady)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := bus.Request[repl.Request, repl.Reply](ctx, f.p.cl.nc, subject, repl.Request{V: repl.Version, Op: repl.OpFetch,
			Bucket: tk.Bucket, Index: index, Origin: f.p.cfg.ID, First: uint32(have)})
		cancel()
		if err != nil {
			return moved, err
		}
		if len(r.Frames) == 0 {
			return moved, fmt.Errorf("source %s has %d blocks of %s, fewer than the sealed %d", tk.Source, r.Blocks, tk.Bucket, sealed)
		}
		if extra := have + len(r.Frames) - sealed; extra > 0 {
			r.Frames = r.Frames[:len(r.Frames)-extra]
		}
		size := 0
		for _, fr := range r.Frames {
			size += len(fr)
		}
		moved += int64(size)
		if _, err := st.Replicas().ReplicaAppend(tk.Bucket, index, searchable, uint32(have), r.Frames); err != nil {
			return moved, err
		}
		f.throttle(size, stop)
	}
	if tk.LastBlockChecksum != "" {
		if got := st.Replicas().LastChecksum(tk.Bucket, sealed); got != tk.LastBlockChecksum {
			return moved, fmt.Errorf("%s: block %d checksum %s, the sealed length says %s", tk.Bucket, sealed-1, got, tk.LastBlockChecksum)
		}
	}
	have, _, _ := st.Replicas().Blocks(tk.Bucket)
	if have > sealed {
		return moved, fmt.Errorf("%w: %s holds %d blocks, more than the sealed %d: a truncate task's work", ErrNotReady, tk.Bucket, have, sealed)
	}
	return moved, st.Replicas().ReplicaRoll(tk.Bucket, sealed)
}

// DefaultReplicationRate throttles fixup replication (bytes/s) so ingest
// and search stay responsive; Config.ReplicationRate < 0 removes it.
const DefaultReplicationRate = 64 << 20

// reportLength tells the managers a copy's length after a fetch or truncate
// (it closes the copy's task when it is the sealed length).
func (f *fixupRunner) reportLength(bucket, peer string, blocks int, sum string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := f.cp.BucketEvent(ctx, api.BucketEvent{V: api.WireVersion, Kind: api.EventLength, Bucket: bucket, Peer: peer, Blocks: int64(blocks), LastBlockChecksum: sum})
	if err != nil {
		f.p.log.Warn("could not report a copy length", "bucket", bucket, "peer", peer, "err", err)
	}
}

// sealOwn makes this peer's own hot replica of a sealed bucket warm when it
// holds exactly the sealed length (the source of a fetch has at least it).
func (f *fixupRunner) sealOwn(tk api.FixupTask) {
	st := f.p.store
	n, state, ok := st.Replicas().Blocks(tk.Bucket)
	if !ok || state != store.StateHot || n != int(tk.SealedBlocks) {
		return
	}
	if err := st.Replicas().ReplicaRoll(tk.Bucket, n); err != nil {
		f.p.log.Warn("could not seal the local copy", "bucket", tk.Bucket, "err", err)
		return
	}
	f.reportLength(tk.Bucket, f.p.cfg.ID, n, st.Replicas().LastChecksum(tk.Bucket, n))
}

// Transfers reports, per "bucket>target", how many fixup transfers from this
// peer moved data (nil for a standalone peer).
func (p *Peer) Transfers() map[string]int {
	if p.cl == nil || p.cl.fix == nil {
		return nil
	}
	f := p.cl.fix
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.moved))
	for k, v := range f.moved {
		out[k] = v
	}
	return out
}
