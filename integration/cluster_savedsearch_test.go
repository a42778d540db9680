package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/searchhead"
)

// slotSeen is what a results subscriber saw of one slot.
type slotSeen struct {
	summaries int
	rows      []map[string]any
}

// savedWatcher collects the messages of a saved search's results and
// alerts subjects, by their Quarry-Slot header.
type savedWatcher struct {
	mu     sync.Mutex
	slots  map[string]*slotSeen
	order  []string // slots in the order their summary arrived
	alerts []api.Alert
	bad    []string
}

func (w *savedWatcher) onResult(m *nats.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	slot := m.Header.Get(api.SlotHeader)
	if slot == "" {
		w.bad = append(w.bad, "a results message without "+api.SlotHeader)
		return
	}
	s := w.slots[slot]
	if s == nil {
		s = &slotSeen{}
		w.slots[slot] = s
	}
	for _, line := range strings.Split(strings.TrimSpace(string(m.Data)), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			w.bad = append(w.bad, fmt.Sprintf("slot %s: line %q: %v", slot, line, err))
			continue
		}
		if _, ok := row["summary"]; ok {
			s.summaries++
			w.order = append(w.order, slot)
			continue
		}
		s.rows = append(s.rows, row)
	}
}

func (w *savedWatcher) onAlert(m *nats.Msg) {
	var a api.Alert
	err := json.Unmarshal(m.Data, &a)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.bad = append(w.bad, fmt.Sprintf("alert %q: %v", m.Data, err))
		return
	}
	w.alerts = append(w.alerts, a)
}

func (w *savedWatcher) finished() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.order)
}

// TestSavedSearchExactlyOnce: a saved search every second on a real
// cluster (3 managers, 6 peers, real NATS with role users) and 3 search
// heads, one of them stopped and restarted midway: a subscriber of its
// results sees every slot exactly once (by the Quarry-Slot header), in
// increasing order, each with the whole count, and an alert for each.
func TestSavedSearchExactlyOnce(t *testing.T) {
	c := Start(t, Options{RoleUsers: true, SearchHeads: []string{"sh1", "sh2", "sh3"}})
	raws := searchIngest(t, c, "sv", 100)
	c.WaitFor(20*time.Second, func() error {
		if v := c.Leader().ClusterVersion(); v < fsm.SavedSearchVersion {
			return fmt.Errorf("cluster version %d", v)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub, err := bus.Connect(ctx, c.Bus.Server("site1").ClientURL(), bus.ConnectOptions{Name: "watcher", User: AdminNATSUser, Password: AdminNATSPassword, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	w := &savedWatcher{slots: map[string]*slotSeen{}}
	subj, _ := bus.NewSubjects("")
	resSubj, _ := subj.Results("every-second")
	alertSubj, _ := subj.Alerts("every-second")
	if _, err := sub.Subscribe(resSubj, w.onResult); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(alertSubj, w.onAlert); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	fast := func(cfg *searchhead.Config) { cfg.SavedSearchRefresh = 500 * time.Millisecond }
	c.StartSearchHead("sh1", "site1", fast)
	c.StartSearchHead("sh2", "site2", fast)
	c.StartSearchHead("sh3", "site0", fast)
	c.AdminPost("/v1/savedsearches", `{"name":"every-second","search":"index=main | stats count","cron":"@every 1s","alert_if":"count > 0"}`)

	c.WaitFor(30*time.Second, func() error {
		if n := w.finished(); n < 4 {
			return fmt.Errorf("%d slots published", n)
		}
		return nil
	})
	c.Mu.Lock()
	sh2 := c.Heads["sh2"]
	delete(c.Heads, "sh2")
	c.Mu.Unlock()
	sh2.Close()
	stoppedAt := w.finished()
	c.WaitFor(30*time.Second, func() error {
		if n := w.finished(); n < stoppedAt+3 {
			return fmt.Errorf("%d slots published, %d before sh2 stopped", n, stoppedAt)
		}
		return nil
	})
	c.StartSearchHead("sh2", "site2", fast)
	restartedAt := w.finished()
	c.WaitFor(30*time.Second, func() error {
		if n := w.finished(); n < max(restartedAt+3, 10) {
			return fmt.Errorf("%d slots published, %d before sh2 restarted", n, restartedAt)
		}
		return nil
	})
	views := savedSearchList(t, c)
	checkSavedSlots(t, w, views, len(raws))
}

// savedSearchList reads GET /v1/savedsearches from the leader.
func savedSearchList(t *testing.T, c *Cluster) []manager.SavedSearchView {
	t.Helper()
	cl, err := manager.NewClient([]string{"http://" + c.Leader().HTTPAddr()}, AdminToken, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cl.SavedSearches(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("saved searches: %+v, %v", list, err)
	}
	return list
}

// checkSavedSlots: every slot published once, in increasing order, with
// the whole count and its alert; a slot between the first and the last
// that was not published is recorded (skipped or failed), never missing
// in silence.
func checkSavedSlots(t *testing.T, w *savedWatcher, views []manager.SavedSearchView, events int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bad) > 0 {
		t.Fatalf("bad messages: %v", w.bad)
	}
	var nums []int64
	for _, slot := range w.order {
		s := w.slots[slot]
		if s.summaries != 1 {
			t.Fatalf("slot %s published %d times", slot, s.summaries)
		}
		if len(s.rows) != 1 || fmt.Sprint(s.rows[0]["count"]) != fmt.Sprint(events) {
			t.Fatalf("slot %s rows %v, want one with count %d", slot, s.rows, events)
		}
		var n int64
		if _, err := fmt.Sscanf(strings.TrimPrefix(slot, "every-second/"), "%d", &n); err != nil {
			t.Fatalf("slot header %q: %v", slot, err)
		}
		nums = append(nums, n)
	}
	if !slices.IsSorted(nums) {
		t.Fatalf("slots out of order: %v", nums)
	}
	recorded := map[int64]string{}
	for _, r := range views[0].Runs {
		recorded[r.Slot] = r.Status
	}
	for n := nums[0]; n <= nums[len(nums)-1]; n++ {
		if !slices.Contains(nums, n) && recorded[n] != fsm.SlotSkipped && recorded[n] != fsm.SlotFailed {
			t.Fatalf("slot %d neither published nor recorded (records %v; published %v)", n, recorded, nums)
		}
	}
	alerted := map[int64]int{}
	for _, a := range w.alerts {
		if a.Name != "every-second" || a.Count != 1 || a.Condition != "count > 0" {
			t.Fatalf("alert %+v", a)
		}
		if alerted[a.Slot]++; alerted[a.Slot] > 1 {
			t.Fatalf("slot %d alerted twice", a.Slot)
		}
	}
	for _, n := range nums[:len(nums)-1] { // the last slot's alert may still be on its way
		if alerted[n] != 1 {
			t.Fatalf("slot %d published without its alert (alerts %v)", n, alerted)
		}
	}
	t.Logf("%d slots published exactly once (%v), %d alerts", len(nums), nums, len(w.alerts))
}

// TestPeerCannotCallSavedSearchOp: a peer's NATS user may not send the
// saved-search scheduler's operation (its mgr.*.<peer> would otherwise
// match), nor publish an alert; a search head's user may (SECURITY.md).
func TestPeerCannotCallSavedSearchOp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0", Logger: quietLogger(),
		User: "admin", Password: "admin-pw",
		Users: []bus.User{
			{Name: "p1", Password: "p1-pw", Role: bus.RolePeer, Site: "site1", Peer: "p1"},
			{Name: "sh1", Password: "sh1-pw", Role: bus.RoleSearchHead, Head: "sh1"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	subj, _ := bus.NewSubjects("")
	conn := func(user string) *nats.Conn {
		nc, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: user, User: user, Password: user + "-pw", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	admin := conn("admin")
	// A server on every sender's subject (the admin), so only permissions
	// can stop a request.
	any, _ := subj.MgrOpAny(api.OpSavedSearch)
	svc, err := bus.Serve(admin, any, bus.ServeOptions{}, func(ctx context.Context, r api.SavedSearchRequest) (api.SavedSearchReply, error) {
		return api.SavedSearchReply{V: api.WireVersion}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	call := func(nc *nats.Conn, sender string) error {
		s, _ := subj.MgrOp(api.OpSavedSearch, sender)
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		_, err := bus.Request[api.SavedSearchRequest, api.SavedSearchReply](rctx, nc, s, api.SavedSearchRequest{V: api.WireVersion, Head: sender, Action: api.SavedList})
		return err
	}
	if err := call(conn("p1"), "p1"); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("peer sending mgr.savedsearch.p1: %v, want ErrPermissionDenied", err)
	}
	sh := conn("sh1")
	if err := call(sh, "sh1"); err != nil {
		t.Fatalf("search head sending mgr.savedsearch.sh1: %v", err)
	}
	if err := call(sh, "sh2"); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("search head sh1 sending as sh2: %v, want ErrPermissionDenied", err)
	}
}

// savedRuns is the records of saved search name (nil when unknown).
func savedRuns(t *testing.T, c *Cluster, name string) []fsm.SlotRecord {
	t.Helper()
	var runs []fsm.SlotRecord
	c.State(func(s *fsm.State) {
		if ss, ok := fsm.SavedSearchNamed(s, name); ok {
			runs = ss.Runs
		}
	})
	return runs
}

// TestSavedSearchFailuresAndMissedSlots: a run that fails on every head is
// tried MaxSlotAttempts times and then recorded failed (a manual run, so
// one slot); slots due while no search head was up are recorded skipped
// and only the newest runs; a manual run of a healthy search is run once.
func TestSavedSearchFailuresAndMissedSlots(t *testing.T) {
	c := Start(t, Options{})
	searchIngest(t, c, "mf", 20)
	c.WaitFor(20*time.Second, func() error {
		if v := c.Leader().ClusterVersion(); v < fsm.SavedSearchVersion {
			return fmt.Errorf("cluster version %d", v)
		}
		return nil
	})
	// A head whose memory budget no search fits: every attempt fails.
	c.StartSearchHead("sh1", "site1", func(cfg *searchhead.Config) {
		cfg.SearchMemory, cfg.SavedSearchRefresh = 1, 200*time.Millisecond
	})
	c.AdminPost("/v1/savedsearches", `{"name":"fails","search":"index=main | stats count by _raw","cron":"0 0 1 1 *"}`)
	c.AdminPost("/v1/savedsearches/fails/run", "")
	c.WaitFor(30*time.Second, func() error {
		runs := savedRuns(t, c, "fails")
		if len(runs) != 1 || runs[0].Status != fsm.SlotFailed || !runs[0].Manual {
			return fmt.Errorf("records %+v", runs)
		}
		return nil
	})
	if r := savedRuns(t, c, "fails")[0]; r.Attempts != fsm.MaxSlotAttempts || r.Error == "" {
		t.Fatalf("failed record %+v: want %d attempts and the error", r, fsm.MaxSlotAttempts)
	}
	c.Mu.Lock()
	sh1 := c.Heads["sh1"]
	delete(c.Heads, "sh1")
	c.Mu.Unlock()
	sh1.Close()

	// No head up for a few seconds of an every-second search.
	added := time.Now()
	c.AdminPost("/v1/savedsearches", `{"name":"missed","search":"index=main | stats count","cron":"@every 1s"}`)
	c.WaitFor(10*time.Second, func() error { // the slots come due with no head up
		if d := time.Since(added); d < 4*time.Second {
			return fmt.Errorf("%s since the add", d)
		}
		return nil
	})
	c.StartSearchHead("sh2", "site2", func(cfg *searchhead.Config) {
		cfg.SavedSearchRefresh, cfg.SavedSearchGrace = 200*time.Millisecond, 1500*time.Millisecond
	})
	var first int64
	c.WaitFor(30*time.Second, func() error {
		runs := savedRuns(t, c, "missed")
		skipped, ok := 0, 0
		for _, r := range runs {
			switch r.Status {
			case fsm.SlotSkipped:
				skipped++
			case fsm.SlotOK:
				if ok++; ok == 1 {
					first = r.Slot
				}
			}
		}
		if skipped < 2 || ok < 1 {
			return fmt.Errorf("%d skipped, %d ok: %+v", skipped, ok, runs)
		}
		return nil
	})
	for _, r := range savedRuns(t, c, "missed") {
		if r.Status == fsm.SlotSkipped && r.Slot > first {
			t.Fatalf("slot %d skipped after the first run %d", r.Slot, first)
		}
	}
	// A manual run: one head runs it once, beside the schedule.
	c.AdminPost("/v1/savedsearches/missed/run", "")
	c.WaitFor(30*time.Second, func() error {
		for _, r := range savedRuns(t, c, "missed") {
			if r.Manual && r.Status == fsm.SlotOK && r.Count == 1 && r.Head == "sh2" {
				return nil
			}
		}
		return fmt.Errorf("no manual run recorded: %+v", savedRuns(t, c, "missed"))
	})
}
