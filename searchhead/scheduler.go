package searchhead

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/schedule"
)

// The saved-search scheduler (issue 28 item 3; README "Saved searches and
// alerts"). Every search head runs one; the managers make each slot run
// once: a head asks the leader to claim a due slot (fsm.ClaimSlot, a lease
// of the search time limit plus leaseMargin), and only the head granted it
// runs the search, with the admin scope (every index), publishes the rows
// to <prefix>.results.<publish or name> with the Quarry-Slot header, the
// alert to <prefix>.alerts.<name> when the condition holds, and finishes
// the slot (fsm.FinishSlot). A head runs at most one slot of a search at a
// time, oldest first.
//
// A slot is "on time" while it is at most the grace period old: each is
// run. Older due slots were missed (no head was up, or every one was
// busy): only the newest missed one runs, and the others are recorded
// skipped in the same claim, unless an on-time slot runs instead.

// Defaults of the scheduler.
const (
	// DefaultSavedSearchRefresh bounds how long a head goes without
	// reading the saved searches (a new one, a manual run, a slot whose
	// lease ended) when no slot is due sooner.
	DefaultSavedSearchRefresh = 5 * time.Second
	// DefaultSavedSearchGrace is how old a due slot may be and still run
	// as on time.
	DefaultSavedSearchGrace = 10 * time.Second
	// leaseMargin is added to the search time limit for a slot's lease.
	leaseMargin = 30 * time.Second
	// schedulerCall bounds one call to the leader.
	schedulerCall = 5 * time.Second
)

// scheduler runs the saved searches for its head; the head starts it in
// New and stops it in Close (h.stop, h.wg).
type scheduler struct {
	h     *Head
	kick  chan struct{}
	mu    sync.Mutex
	busy  map[string]bool // search names with a run in flight on this head
	crons map[string]schedule.Schedule
	wg    sync.WaitGroup
}

func newScheduler(h *Head) *scheduler {
	return &scheduler{h: h, kick: make(chan struct{}, 1), busy: map[string]bool{}, crons: map[string]schedule.Schedule{}}
}

// loop reads the saved searches, starts the due runs and sleeps until the
// next slot, the refresh period, or a run's end; it returns when the head
// stops, after its runs ended.
func (sc *scheduler) loop() {
	h := sc.h
	defer h.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); sc.wg.Wait() }()
	go func() {
		<-h.stop
		cancel()
	}()
	for {
		wait := h.cfg.SavedSearchRefresh
		lctx, lcancel := context.WithTimeout(ctx, schedulerCall)
		list, err := h.mc.SavedSearches(lctx)
		lcancel()
		if err != nil {
			h.log.Debug("saved searches", "err", err)
			wait = min(wait, time.Second)
		} else {
			wait = min(wait, sc.plan(ctx, list, time.Now()))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-sc.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// plan starts a run for each search that has a claimable slot and no run
// in flight here, and returns how long until the next slot is due.
func (sc *scheduler) plan(ctx context.Context, list fsmList, now time.Time) time.Duration {
	next := sc.h.cfg.SavedSearchRefresh
	for _, ss := range list.Searches {
		sch, err := sc.cron(ss.Cron)
		if err != nil {
			sc.h.log.Warn("saved search has a bad schedule", "saved_search", ss.Name, "err", err)
			continue
		}
		after := time.Unix(max(ss.LastSlot, ss.Created), 0)
		if n := sch.Next(later(after, now)); !n.IsZero() {
			next = min(next, max(time.Until(n), 0))
		}
		sc.mu.Lock()
		busy := sc.busy[ss.Name]
		sc.mu.Unlock()
		if busy {
			continue
		}
		c, ok := sc.pick(ss, sch, after, now, list.Now)
		if !ok {
			continue
		}
		sc.mu.Lock()
		sc.busy[ss.Name] = true
		sc.mu.Unlock()
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			sc.run(ctx, ss, c)
			sc.mu.Lock()
			delete(sc.busy, ss.Name)
			sc.mu.Unlock()
			select {
			case sc.kick <- struct{}{}:
			default:
			}
		}()
	}
	return next
}

type fsmList = api.SavedSearchReply

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// pick chooses the slot to claim: an open one no head holds (a manual
// run, a retry, a lease that ended), oldest first; else the oldest
// on-time due slot, recording the missed ones before it skipped; else the
// newest missed slot, the others skipped.
func (sc *scheduler) pick(ss fsm.SavedSearchState, sch schedule.Schedule, after, now time.Time, leaderNow int64) (fsm.ClaimSlot, bool) {
	for _, o := range ss.Open {
		if o.Head == "" || o.LeaseUntil <= leaderNow {
			return fsm.ClaimSlot{Name: ss.Name, Slot: o.Slot, Manual: o.Manual}, true
		}
	}
	due, _ := schedule.Due(sch, after, now, 4*fsm.MaxSlotRecords)
	if len(due) == 0 {
		return fsm.ClaimSlot{}, false
	}
	onTime := now.Add(-sc.h.cfg.SavedSearchGrace)
	var missed []int64
	for _, t := range due {
		if t.After(onTime) {
			return fsm.ClaimSlot{Name: ss.Name, Slot: t.Unix(), Skipped: missed}, true
		}
		missed = append(missed, t.Unix())
	}
	last := missed[len(missed)-1]
	return fsm.ClaimSlot{Name: ss.Name, Slot: last, Skipped: missed[:len(missed)-1]}, true
}

func (sc *scheduler) cron(spec string) (schedule.Schedule, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if s, ok := sc.crons[spec]; ok {
		return s, nil
	}
	s, err := schedule.Parse(spec)
	if err == nil {
		sc.crons[spec] = s
	}
	return s, err
}

// slotHeader is the Quarry-Slot value of a run.
func slotHeader(name string, slot int64, manual bool) string {
	if manual {
		return name + "/manual-" + strconv.FormatInt(slot, 10)
	}
	return name + "/" + strconv.FormatInt(slot, 10)
}

// run claims slot c and, when granted, runs it and finishes it.
func (sc *scheduler) run(ctx context.Context, ss fsm.SavedSearchState, c fsm.ClaimSlot) {
	h := sc.h
	c.LeaseMS = (h.cfg.SearchTimeout + leaseMargin).Milliseconds()
	cctx, cancel := context.WithTimeout(ctx, schedulerCall)
	g, err := h.mc.ClaimSlot(cctx, c)
	cancel()
	if err != nil || !g.Granted {
		if err != nil {
			h.log.Debug("claim saved search slot", "saved_search", c.Name, "slot", c.Slot, "err", err)
		}
		return
	}
	start := time.Now()
	count, runErr := sc.search(ctx, ss, c)
	f := fsm.FinishSlot{Name: c.Name, Slot: c.Slot, Manual: c.Manual, Attempt: g.Attempt, Status: fsm.SlotOK,
		DurationMS: time.Since(start).Milliseconds(), Count: count}
	if runErr != nil {
		f.Status, f.Error = fsm.SlotFailed, runErr.Error()
		h.log.Warn("saved search run failed", "saved_search", c.Name, "slot", c.Slot, "attempt", g.Attempt, "err", runErr)
	}
	// Finish even when the head is stopping: the run is done.
	fctx, cancel := context.WithTimeout(context.Background(), schedulerCall)
	defer cancel()
	if err := h.mc.FinishSlot(fctx, f); err != nil {
		h.metrics.savedRuns.WithLabelValues("unrecorded").Inc()
		h.log.Warn("finish saved search slot", "saved_search", c.Name, "slot", c.Slot, "err", err)
		return
	}
	h.metrics.savedRuns.WithLabelValues(f.Status).Inc()
}

// search runs the saved search for a slot with the admin scope, publishes
// its rows and, when the condition holds, its alert; it returns the number
// of result rows. A partial answer is a failure.
func (sc *scheduler) search(ctx context.Context, ss fsm.SavedSearchState, c fsm.ClaimSlot) (int64, error) {
	h := sc.h
	name := ss.Publish
	if name == "" {
		name = ss.Name
	}
	no := false
	req := Request{Query: ss.Search, Earliest: ss.Earliest, Latest: ss.Latest, Publish: name, AllowPartial: &no,
		slot: slotHeader(ss.Name, c.Slot, c.Manual)}
	// Queued (it waits for a search slot rather than failing) within the
	// search time limit, the lease's length less its margin.
	sctx, cancel := context.WithTimeout(ctx, h.cfg.SearchTimeout)
	defer cancel()
	resp, err := h.search(sctx, req, nil, nil, &queuedSearch{})
	if err != nil {
		return 0, err
	}
	if resp.Summary.Partial {
		return 0, errors.New("partial answer")
	}
	count := int64(len(resp.Results))
	if ss.AlertIf == "" {
		return count, nil
	}
	cond, err := schedule.ParseCondition(ss.AlertIf)
	if err != nil {
		return count, err
	}
	if cond.Holds(count) {
		if err := sc.alert(ss, c, count, cond); err != nil {
			return count, fmt.Errorf("publish alert: %w", err)
		}
	}
	return count, nil
}

// alert publishes an api.Alert to <prefix>.alerts.<name>.
func (sc *scheduler) alert(ss fsm.SavedSearchState, c fsm.ClaimSlot, count int64, cond schedule.Condition) error {
	h := sc.h
	subj, err := h.subj.Alerts(ss.Name)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(api.Alert{Name: ss.Name, Slot: c.Slot, Manual: c.Manual, Count: count, Condition: cond.String(), Search: ss.Search})
	m := nats.NewMsg(subj)
	m.Header.Set(api.SlotHeader, slotHeader(ss.Name, c.Slot, c.Manual))
	m.Data = b
	if err := h.nc.PublishMsg(m); err != nil {
		return err
	}
	return h.nc.Flush()
}
