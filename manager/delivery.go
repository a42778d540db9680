package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// Fixup delivery: who gets a task (recipients), the deliverer that sends
// open tasks every round and completes seals and freezes, and the delivery
// marks it commits.

// stateView answers bucket questions about one committed state, caching
// the bucket views it built (per index). Use it only inside the state's
// Read.
type stateView struct {
	s       *fsm.State
	byIndex map[string]map[string]fsm.BucketView
}

func newView(s *fsm.State) *stateView {
	return &stateView{s: s, byIndex: map[string]map[string]fsm.BucketView{}}
}

// bucket returns a bucket's view.
func (v *stateView) bucket(id string) (fsm.BucketView, bool) {
	index, _, _, err := fsm.ParseBucketID(id)
	if err != nil {
		return fsm.BucketView{}, false
	}
	m, ok := v.byIndex[index]
	if !ok {
		m = map[string]fsm.BucketView{}
		for _, b := range v.s.BucketList(index, "") {
			m[b.ID] = b
		}
		v.byIndex[index] = m
	}
	b, ok := m[id]
	return b, ok
}

// sealedOf is a sealed bucket's length and last block checksum (0, "" when
// it is not sealed): a point read of the state (it used to decode the
// whole state's encoding).
func (v *stateView) sealedOf(id string) (int64, string) {
	blocks, sum, _ := v.s.SealedLength(id)
	return blocks, sum
}

// findBucket returns a bucket's view from the committed state.
func findBucket(s *fsm.State, id string) (fsm.BucketView, bool) { return newView(s).bucket(id) }

// sealedOf is a sealed bucket's length and last block checksum.
func sealedOf(s *fsm.State, id string) (int64, string) { return newView(s).sealedOf(id) }

// finishFreeze closes a freeze task once every running holder reported.
// With no holder running it closes at once: the FSM keeps the frozen
// bucket's tombstone with the holders that are away, and each deletes its
// copy when it returns (fsm/frozen.go).
func (m *Manager) finishFreeze(ctx context.Context, task fsm.Task, holders []string) (uint64, error) {
	for _, h := range holders {
		if !m.mux.marked(fsm.MarkReported, task.ID, h) {
			return 0, nil
		}
	}
	res, err := m.Apply(ctx, &fsm.FixupDone{ReqID: fsm.ReqID{RequestID: fmt.Sprintf("freeze-done-%d", task.ID)}, ID: task.ID,
		Reason: "every holder deleted its copy"})
	if err != nil && !errors.Is(err, fsm.ErrUnknownTask) {
		return 0, err
	}
	return resultIndex(res), nil
}

// mark commits a delivery mark (fsm.MarkFixup). Until the group agreed
// the cluster version that carries MarkFixup, it writes the version-1
// member-table entry instead, which every build applies alike (members.go).
// A mark of a task closed meanwhile is no error: it has nothing to mark.
func (m *Manager) mark(ctx context.Context, kind string, task uint64, peer string) error {
	if m.mux.marked(kind, task, peer) {
		return nil
	}
	if m.allowed(fsm.CmdMarkFixup) != nil {
		data, _ := json.Marshal(memberCommand{Op: kind, Task: task, Peer: peer})
		_, err := m.applyLog(ctx, raft.Log{Data: data, Extensions: memberExtension})
		return err
	}
	_, err := m.Apply(ctx, &fsm.MarkFixup{Task: task, Peer: peer, Kind: kind})
	if errors.Is(err, fsm.ErrUnknownTask) {
		return nil
	}
	return err
}

// recipients are the peers a task is delivered to (api.FixupTask's doc).
func recipients(v *stateView, t *fsm.Task) []string {
	switch t.Kind {
	case fsm.TaskReplicate, fsm.TaskFetch:
		if t.Source != "" {
			return []string{t.Source}
		}
		return nil
	case fsm.TaskFreeze:
		if t.Target != "" {
			// One holder's copy of a bucket already frozen (fsm/frozen.go).
			return []string{t.Target}
		}
		return activeHolders(v, t.Bucket)
	case fsm.TaskSeal:
		return activeHolders(v, t.Bucket)
	}
	if t.Target != "" {
		return []string{t.Target}
	}
	return nil
}

func isRecipient(v *stateView, t *fsm.Task, peer string) bool {
	for _, p := range recipients(v, t) {
		if p == peer {
			return true
		}
	}
	// A freeze holder that went down after reporting still counts.
	return t.Kind == fsm.TaskFreeze && hasCopy(v, t.Bucket, peer)
}

func hasCopy(v *stateView, bucket, peer string) bool {
	b, _ := v.bucket(bucket)
	for _, c := range b.Copies {
		if c.Peer == peer {
			return true
		}
	}
	return false
}

// activeHolders are the holders of a bucket's copies that run (Up,
// Detention, Decommissioning), sorted.
func activeHolders(v *stateView, bucket string) []string {
	var out []string
	b, _ := v.bucket(bucket)
	for _, c := range b.Copies {
		p, ok := v.s.Peer(c.Peer)
		if ok && (p.State == fsm.StateUp || p.State == fsm.StateDetention || p.State == fsm.StateDecommissioning) {
			out = append(out, c.Peer)
		}
	}
	return out
}

// deliverer delivers open fixup tasks to their peers for one leadership
// term, keeping the seal answers of the term (natsTerm owns it).
type deliverer struct {
	m     *Manager
	mu    sync.Mutex
	seals map[uint64]map[string]api.FixupAck // seal task → holder → its length
}

func newDeliverer(m *Manager) *deliverer {
	return &deliverer{m: m, seals: map[uint64]map[string]api.FixupAck{}}
}

// loop delivers open fixup tasks every LoopInterval until the term
// ends.
func (dl *deliverer) loop(ctx context.Context) {
	tk := time.NewTicker(dl.m.cfg.LoopInterval)
	defer tk.Stop()
	for {
		dl.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// delivery is one (task, recipient) to send.
type delivery struct {
	msg  api.FixupTask
	site string
}

// round sends every open task to each recipient that has not
// acknowledged it (a committed "delivered" mark; seal answers are kept for
// the term), waits for the answers, then completes seals and freezes whose
// holders all answered.
func (dl *deliverer) round(ctx context.Context) {
	m := dl.m
	var (
		todo   []delivery
		tasks  []fsm.Task
		sealOf = map[uint64][]string{}
		freeze = map[uint64][]string{}
	)
	m.state.Read(func(s *fsm.State) {
		tasks = s.Tasks()
		v := newView(s)
		for i := range tasks {
			task := &tasks[i]
			b, _ := v.bucket(task.Bucket)
			to := recipients(v, task)
			switch task.Kind {
			case fsm.TaskSeal:
				sealOf[task.ID] = to
			case fsm.TaskFreeze:
				freeze[task.ID] = to
			}
			for _, peer := range to {
				if task.Kind == fsm.TaskSeal {
					if dl.sealAck(task.ID, peer) {
						continue
					}
				} else if s.Marked(fsm.MarkDelivered, task.ID, peer) {
					continue
				}
				p, ok := s.Peer(peer)
				if !ok || !(p.State.Serving() || p.State == fsm.StateDecommissioning) {
					continue // not running: the planner fails the task
				}
				msg := api.FixupTask{V: api.WireVersion, ID: task.ID, Kind: task.Kind, Level: task.Level.String(), Bucket: task.Bucket,
					Index: b.Index, Source: task.Source, Target: task.Target, Searchable: task.Searchable,
					Destructive: task.Destructive, Reason: task.Reason, To: peer}
				if sp, ok := s.Peer(task.Source); ok {
					msg.SourceSite = subjectSite(sp)
				}
				if tp, ok := s.Peer(task.Target); ok {
					msg.TargetSite = subjectSite(tp)
				}
				if task.Kind == fsm.TaskFetch || task.Kind == fsm.TaskTruncate {
					msg.SealedBlocks, msg.LastBlockChecksum = v.sealedOf(task.Bucket)
				}
				todo = append(todo, delivery{msg: msg, site: subjectSite(p)})
			}
		}
	})
	dl.pruneSeals(tasks)

	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, d := range todo {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			dl.deliver(ctx, d)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for id, holders := range sealOf {
		dl.finishSeal(ctx, id, holders)
	}
	for _, task := range tasks {
		if holders, ok := freeze[task.ID]; ok {
			if _, err := m.finishFreeze(ctx, task, holders); err != nil && ctx.Err() == nil {
				m.log.Warn("closing a freeze task failed", "task", task.ID, "err", err)
			}
		}
	}
}

// deliver sends one task to one peer and acts on the answer.
func (dl *deliverer) deliver(ctx context.Context, d delivery) {
	m := dl.m
	subj, err := m.subjects.Fixup(d.site, d.msg.To)
	if err != nil {
		m.log.Error("fixup task for a peer whose name is no subject token", "task", d.msg.ID, "peer", d.msg.To, "err", err)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, m.cfg.FixupDeliveryTimeout)
	ack, err := bus.Request[api.FixupTask, api.FixupAck](dctx, m.nc, subj, d.msg)
	cancel()
	if err != nil {
		outcome := "error"
		switch {
		case errors.Is(err, bus.ErrNoResponders):
			outcome = "no_responders"
		case errors.Is(err, bus.ErrTimeout):
			outcome = "timeout"
		}
		m.metrics.deliveries.WithLabelValues(outcome).Inc()
		m.log.Debug("fixup task not delivered; retried next round", "task", d.msg.ID, "kind", d.msg.Kind, "peer", d.msg.To, "err", err)
		return
	}
	if !ack.Accepted {
		m.metrics.deliveries.WithLabelValues("refused").Inc()
		m.log.Warn("peer refused a fixup task", "task", d.msg.ID, "kind", d.msg.Kind, "peer", d.msg.To, "reason", ack.Reason)
		_, err := m.Apply(ctx, &fsm.FixupDone{ReqID: fsm.ReqID{RequestID: "fixup-refused-" + strconv.FormatUint(d.msg.ID, 10) + "-" + d.msg.To},
			ID: d.msg.ID, Failed: true, Reason: fmt.Sprintf("%s refused: %s", d.msg.To, ack.Reason)})
		if err != nil && !errors.Is(err, fsm.ErrUnknownTask) && ctx.Err() == nil {
			m.log.Warn("failing a refused fixup task failed", "task", d.msg.ID, "err", err)
		}
		return
	}
	m.metrics.deliveries.WithLabelValues("accepted").Inc()
	if d.msg.Kind == fsm.TaskSeal {
		dl.mu.Lock()
		if dl.seals[d.msg.ID] == nil {
			dl.seals[d.msg.ID] = map[string]api.FixupAck{}
		}
		dl.seals[d.msg.ID][d.msg.To] = ack
		dl.mu.Unlock()
		return
	}
	if err := m.mark(ctx, fsm.MarkDelivered, d.msg.ID, d.msg.To); err != nil && ctx.Err() == nil {
		// The peer has the task; a later leader may deliver it again, which
		// the peer answers as a task it already has.
		m.log.Warn("recording a fixup delivery failed", "task", d.msg.ID, "peer", d.msg.To, "err", err)
	}
}

func (dl *deliverer) sealAck(id uint64, peer string) bool {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	_, ok := dl.seals[id][peer]
	return ok
}

// pruneSeals forgets the answers of seal tasks that are no longer open.
func (dl *deliverer) pruneSeals(open []fsm.Task) {
	ids := map[uint64]bool{}
	for _, x := range open {
		ids[x.ID] = true
	}
	dl.mu.Lock()
	for id := range dl.seals {
		if !ids[id] {
			delete(dl.seals, id)
		}
	}
	dl.mu.Unlock()
}

// finishSeal commits the bucket sealed at the longest length its running
// holders reported, then closes the task, once every one of them answered.
func (dl *deliverer) finishSeal(ctx context.Context, id uint64, holders []string) {
	if len(holders) == 0 {
		return
	}
	m := dl.m
	dl.mu.Lock()
	acks := dl.seals[id]
	var (
		best    api.FixupAck
		found   bool
		lengths []fsm.PeerLength
	)
	for _, h := range holders {
		a, ok := acks[h]
		if !ok {
			dl.mu.Unlock()
			return
		}
		if !found || a.Blocks > best.Blocks {
			best, found = a, true
		}
		lengths = append(lengths, fsm.PeerLength{Peer: h, Blocks: a.Blocks, LastChecksum: a.LastBlockChecksum})
	}
	dl.mu.Unlock()
	var bucket string
	final := false
	m.state.Read(func(s *fsm.State) {
		if x, ok := s.Task(id); ok {
			bucket = x.Bucket
			final = s.ClusterVersion() >= fsm.SealFinalVersion && s.SealAnsweredWhole(bucket, holders)
		}
	})
	if bucket == "" {
		return
	}
	// Every holder's length goes with the seal, so the FSM knows which
	// copies are shorter (fetch) and which longer (truncate).
	_, err := m.Apply(ctx, &fsm.SealBucket{ReqID: fsm.ReqID{RequestID: fmt.Sprintf("seal-%d", id)}, Bucket: bucket,
		Blocks: best.Blocks, LastChecksum: best.LastBlockChecksum, Earliest: best.Earliest, Latest: best.Latest,
		Size: best.Bytes, Events: best.Events, Lengths: lengths, Final: final})
	if err != nil && !errors.Is(err, fsm.ErrBucketNotHot) {
		if ctx.Err() == nil {
			m.log.Warn("sealing a bucket failed", "bucket", bucket, "task", id, "err", err)
		}
		return
	}
	if _, err := m.Apply(ctx, &fsm.FixupDone{ReqID: fsm.ReqID{RequestID: fmt.Sprintf("seal-done-%d", id)}, ID: id,
		Reason: fmt.Sprintf("sealed at %d blocks", best.Blocks)}); err != nil && !errors.Is(err, fsm.ErrUnknownTask) && ctx.Err() == nil {
		m.log.Warn("closing a seal task failed", "task", id, "err", err)
	}
	m.log.Info("bucket sealed", "bucket", bucket, "blocks", best.Blocks, "holders", len(holders), "final", final)
}
