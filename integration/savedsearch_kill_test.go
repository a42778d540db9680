//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/integration/proccluster"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer/hec"
)

// TestSavedSearchHeadKills (issue 28 item 3's acceptance, `make
// savedsearch-kill`): real quarry processes — a manager, 2 sites × 2 peers,
// search heads sh1 (site1), sh2 (site2) and sh0 (site0) — run a saved
// search every 10 s for 3 minutes (QUARRY_SAVEDKILL_FOR shortens it) while,
// every 15–30 s, the head that ran the last slot is SIGKILLed and started
// again 2–6 s later. A NATS subscriber of quarry.results.<name> sees every
// slot at most once (by its Quarry-Slot header) with the whole count; a
// slot between the first and the last one published that was not published
// is recorded failed or skipped, never missing in silence; slots arrive in
// increasing order but for a slot retried after a head died holding it
// (attempts > 1 in the record), which may come late. The kills are the
// head processes', with SIGKILL: nothing of a head's shutdown runs.
func TestSavedSearchHeadKills(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for minutes")
	}
	run := 3 * time.Minute
	if v := os.Getenv("QUARRY_SAVEDKILL_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("QUARRY_SAVEDKILL_FOR %q: %v", v, err)
		}
		run = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), run+5*time.Minute)
	defer cancel()
	c, err := proccluster.Start(ctx, proccluster.Options{Bin: cliBinary(t), Dir: t.TempDir(), PeersPerSite: 2,
		Heads:    []proccluster.Head{{ID: "sh1", Site: "site1"}, {ID: "sh2", Site: "site2"}, {ID: "sh0", Site: "site0"}},
		HeadArgs: []string{"--search-timeout", "20s"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	const events = 500
	ingestFile(t, ctx, c, events)
	mc, err := c.ManagerClient(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitProcCount(t, ctx, c.Heads[0].URL, events)

	w := &savedWatcher{slots: map[string]*slotSeen{}}
	sub, err := bus.Connect(ctx, c.Buses[0].URL, bus.ConnectOptions{Name: "watcher", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	subj, _ := bus.NewSubjects("")
	resSubj, _ := subj.Results("tenner")
	if _, err := sub.Subscribe(resSubj, w.onResult); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.AddSavedSearch(ctx, manager.SavedSearchRequest{Name: "tenner", Search: "index=main | stats count", Cron: "@every 10s"}); err != nil {
		t.Fatal(err)
	}
	kills := killRunningHeads(t, ctx, c, mc, run)
	// Two more slots after the last restart, so the last head back runs too.
	settled := w.finished() + 2
	if err := proccluster.WaitFor(ctx, time.Minute, func() error {
		if n := w.finished(); n < settled {
			return fmt.Errorf("%d slots published, want %d", n, settled)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	list, err := mc.SavedSearches(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("saved searches: %+v %v", list, err)
	}
	checkTenSecondSlots(t, w, list[0], events)
	t.Logf("%d head kills: %v", len(kills), kills)
}

// ingestFile sends events lines to the first peer with quarry ingest's
// client (acknowledged).
func ingestFile(t *testing.T, ctx context.Context, c *proccluster.Cluster, n int) {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "saved kill event %d\n", i)
	}
	f := filepath.Join(t.TempDir(), "events.log")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := hec.Ingest(ctx, hec.ClientConfig{URL: c.Peers[0].URL, Token: c.Opts.HECToken, Index: "main", Batch: 100}, []string{f}); err != nil {
		t.Fatal(err)
	}
}

// waitProcCount waits until a head counts n events in main.
func waitProcCount(t *testing.T, ctx context.Context, head string, n int) {
	t.Helper()
	if err := proccluster.WaitFor(ctx, time.Minute, func() error {
		a, err := SearchHTTP(ctx, head, "", map[string]any{"query": "index=main | stats count"})
		if err != nil || a.Status != 200 || len(a.Resp.Results) != 1 || fmt.Sprint(a.Resp.Results[0]["count"]) != strconv.Itoa(n) {
			return fmt.Errorf("count: %+v %v", a, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// killRunningHeads SIGKILLs, every 15–30 s for d, the head that ran the
// newest recorded slot, and starts it again 2–6 s later.
func killRunningHeads(t *testing.T, ctx context.Context, c *proccluster.Cluster, mc *manager.Client, d time.Duration) []string {
	t.Helper()
	var kills []string
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Duration(15+rand.IntN(16)) * time.Second):
		}
		list, err := mc.SavedSearches(ctx)
		if err != nil || len(list) != 1 || list[0].LastRun == nil || list[0].LastRun.Head == "" {
			continue
		}
		p := c.Proc(list[0].LastRun.Head)
		if p == nil || !p.Running() {
			continue
		}
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		kills = append(kills, fmt.Sprintf("%s after slot %d", p.Name, list[0].LastRun.Slot))
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Duration(2+rand.IntN(5)) * time.Second):
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitHealthy(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return kills
}

// checkTenSecondSlots: every slot published at most once with the whole
// count; a slot of the 10-second grid between the first and the last
// published, not published, is recorded failed or skipped; order rises
// but for retried slots.
func checkTenSecondSlots(t *testing.T, w *savedWatcher, v manager.SavedSearchView, events int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bad) > 0 {
		t.Fatalf("bad messages: %v", w.bad)
	}
	attempts := map[int64]int{}
	status := map[int64]string{}
	for _, r := range v.Runs {
		attempts[r.Slot], status[r.Slot] = r.Attempts, r.Status
	}
	var nums []int64
	for _, slot := range w.order {
		s := w.slots[slot]
		if s.summaries != 1 {
			t.Fatalf("slot %s published %d times", slot, s.summaries)
		}
		if len(s.rows) != 1 || fmt.Sprint(s.rows[0]["count"]) != strconv.Itoa(events) {
			t.Fatalf("slot %s rows %v, want one with count %d", slot, s.rows, events)
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(slot, "tenner/"), 10, 64)
		if err != nil {
			t.Fatalf("slot header %q: %v", slot, err)
		}
		if len(nums) > 0 && n < nums[len(nums)-1] && attempts[n] < 2 {
			t.Fatalf("slot %d published after slot %d and was not retried (records %v)", n, nums[len(nums)-1], v.Runs)
		}
		nums = append(nums, n)
	}
	if len(nums) < 2 {
		t.Fatalf("%d slots published", len(nums))
	}
	sorted := slices.Clone(nums)
	slices.Sort(sorted)
	for n := sorted[0]; n <= sorted[len(sorted)-1]; n += 10 {
		if !slices.Contains(nums, n) && status[n] != fsm.SlotSkipped && status[n] != fsm.SlotFailed {
			t.Fatalf("slot %d neither published nor recorded (records %v; published %v)", n, v.Runs, nums)
		}
	}
	t.Logf("%d slots published, each once (%v)", len(nums), nums)
}
