package fsm

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

const sec = int64(time.Second)

func addSaved(h *harness, name string) {
	h.t.Helper()
	h.must(&AddSavedSearch{Search: SavedSearch{Name: name, Search: "index=web | stats count", Cron: "@every 1s"}, Now: 100 * sec})
}

func claim(h *harness, name string, slot int64, head string, now int64, skipped ...int64) SlotGrant {
	h.t.Helper()
	r := h.apply(&ClaimSlot{Name: name, Slot: slot, Head: head, Now: now, LeaseMS: 10_000, Skipped: skipped})
	g, ok := r.(SlotGrant)
	if !ok {
		h.t.Fatalf("claim %s/%d by %s: %v", name, slot, head, r)
	}
	return g
}

func finish(h *harness, name string, slot int64, head string, attempt int, status string, now int64) any {
	return h.apply(&FinishSlot{Name: name, Slot: slot, Head: head, Attempt: attempt, Status: status, Count: 4, DurationMS: 5, Now: now})
}

func savedOf(h *harness, name string) SavedSearchState {
	h.t.Helper()
	ss, ok := SavedSearchNamed(h.s, name)
	if !ok {
		h.t.Fatalf("no saved search %s", name)
	}
	return ss
}

func TestSavedSearchAddRemove(t *testing.T) {
	h := newHarness(t)
	addSaved(h, "errors-5m")
	if ss := savedOf(h, "errors-5m"); ss.Created != 100 || ss.Cron != "@every 1s" {
		t.Fatalf("added: %+v", ss)
	}
	h.refuse(&AddSavedSearch{Search: SavedSearch{Name: "errors-5m", Search: "x", Cron: "@every 1s"}}, ErrSavedSearchExists)
	for _, bad := range []SavedSearch{{Name: "a.b", Search: "x", Cron: "c"}, {Name: "", Search: "x", Cron: "c"}, {Name: "ok", Cron: "c"}, {Name: "ok", Search: "x"}} {
		h.refuse(&AddSavedSearch{Search: bad}, ErrBadSavedSearch)
	}
	h.refuse(&RemoveSavedSearch{Name: "nope"}, ErrUnknownSavedSearch)
	h.must(&RemoveSavedSearch{Name: "errors-5m"})
	if got := SavedSearches(h.s); len(got) != 0 {
		t.Fatalf("after remove: %+v", got)
	}
}

func TestSavedSearchCap(t *testing.T) {
	h := newHarness(t)
	for i := range MaxSavedSearches {
		addSaved(h, fmt.Sprintf("s%d", i))
	}
	h.refuse(&AddSavedSearch{Search: SavedSearch{Name: "one-more", Search: "x", Cron: "@every 1s"}}, ErrBadSavedSearch)
}

func TestClaimSlotRules(t *testing.T) {
	h := newHarness(t)
	addSaved(h, "s")
	now := 200 * sec
	if g := claim(h, "s", 200, "sh1", now); !g.Granted || g.Attempt != 1 {
		t.Fatalf("first claim: %+v", g)
	}
	if g := claim(h, "s", 200, "sh2", now+sec); g.Granted {
		t.Fatalf("double claim granted: %+v", g)
	}
	if g := claim(h, "s", 200, "sh1", now+sec); !g.Granted || g.Attempt != 1 {
		t.Fatalf("the holder's retried claim: %+v", g)
	}
	// The lease (10 s) ends: another head takes the slot, attempt 2; the
	// first head's late finish is refused.
	if g := claim(h, "s", 200, "sh2", now+11*sec); !g.Granted || g.Attempt != 2 {
		t.Fatalf("claim after the lease: %+v", g)
	}
	h.refuse(&FinishSlot{Name: "s", Slot: 200, Head: "sh1", Attempt: 1, Status: SlotOK, Now: now + 12*sec}, ErrSlotNotHeld)
	if r := finish(h, "s", 200, "sh2", 2, SlotOK, now+12*sec); r.(Result).Index == 0 {
		t.Fatalf("finish: %v", r)
	}
	// Finished ok: never granted again, by anyone, at any time.
	for _, head := range []string{"sh1", "sh2", "sh3"} {
		if g := claim(h, "s", 200, head, now+100*sec); g.Granted {
			t.Fatalf("finished slot granted again to %s: %+v", head, g)
		}
	}
	if g := claim(h, "s", 199, "sh3", now+100*sec); g.Granted {
		t.Fatalf("a slot before the last one granted: %+v", g)
	}
	ss := savedOf(h, "s")
	if len(ss.Open) != 0 || len(ss.Runs) != 1 || ss.Runs[0].Status != SlotOK || ss.Runs[0].Head != "sh2" || ss.Runs[0].Count != 4 {
		t.Fatalf("state: %+v", ss)
	}
}

func TestClaimSlotRetriesThenFails(t *testing.T) {
	h := newHarness(t)
	addSaved(h, "s")
	now := 300 * sec
	for attempt := 1; attempt <= MaxSlotAttempts; attempt++ {
		head := fmt.Sprintf("sh%d", attempt)
		if g := claim(h, "s", 300, head, now); !g.Granted || g.Attempt != attempt {
			t.Fatalf("attempt %d: %+v", attempt, g)
		}
		if err, isErr := finish(h, "s", 300, head, attempt, SlotFailed, now+sec).(error); isErr {
			t.Fatalf("finish failed: %v", err)
		}
		now += 2 * sec
		want := SlotRetrying
		if attempt == MaxSlotAttempts {
			want = SlotFailed
		}
		if ss := savedOf(h, "s"); ss.Runs[0].Status != want || ss.Runs[0].Attempts != attempt {
			t.Fatalf("after attempt %d: %+v", attempt, ss.Runs)
		}
	}
	if g := claim(h, "s", 300, "sh9", now); g.Granted {
		t.Fatalf("failed slot granted a 4th time: %+v", g)
	}
}

func TestClaimSlotExpiredThreeTimes(t *testing.T) {
	h := newHarness(t)
	addSaved(h, "s")
	now := 400 * sec
	for i := range MaxSlotAttempts {
		if g := claim(h, "s", 400, "sh1", now); !g.Granted {
			t.Fatalf("attempt %d: %+v", i+1, g)
		}
		now += 11 * sec // the lease ends without a finish
	}
	if g := claim(h, "s", 400, "sh2", now); g.Granted {
		t.Fatalf("granted a 4th time: %+v", g)
	}
	if ss := savedOf(h, "s"); len(ss.Open) != 0 || ss.Runs[0].Status != SlotFailed {
		t.Fatalf("state: %+v", ss)
	}
}

func TestClaimSlotSkipped(t *testing.T) {
	h := newHarness(t)
	addSaved(h, "s")
	claim(h, "s", 500, "sh1", 500*sec)
	// Down for 4 slots: the latest runs, the others are recorded skipped.
	if g := claim(h, "s", 505, "sh1", 505*sec, 501, 502, 503, 504, 500, 506); !g.Granted {
		t.Fatalf("claim: %+v", g)
	}
	ss := savedOf(h, "s")
	var skipped []int64
	for _, r := range ss.Runs {
		if r.Status == SlotSkipped {
			skipped = append(skipped, r.Slot)
		}
	}
	if fmt.Sprint(skipped) != "[501 502 503 504]" || ss.LastSlot != 505 {
		t.Fatalf("skipped %v, last %d", skipped, ss.LastSlot)
	}
}

func TestRunSavedSearchManual(t *testing.T) {
	h := newHarness(t)
	addSaved(h, "s")
	q1 := h.apply(&RunSavedSearch{Name: "s", Now: 600 * sec}).(SlotQueued)
	q2 := h.apply(&RunSavedSearch{Name: "s", Now: 600 * sec}).(SlotQueued)
	if q1.Slot != 600 || q2.Slot != 601 {
		t.Fatalf("manual slots %d, %d", q1.Slot, q2.Slot)
	}
	if g := h.apply(&ClaimSlot{Name: "s", Slot: 600, Manual: true, Head: "sh1", Now: 600 * sec, LeaseMS: 1000}).(SlotGrant); !g.Granted {
		t.Fatalf("manual claim: %+v", g)
	}
	if g := h.apply(&ClaimSlot{Name: "s", Slot: 602, Manual: true, Head: "sh1", Now: 600 * sec, LeaseMS: 1000}).(SlotGrant); g.Granted {
		t.Fatalf("claim of a manual slot never queued: %+v", g)
	}
	// A manual slot does not move the schedule.
	if g := claim(h, "s", 600, "sh2", 600*sec); !g.Granted {
		t.Fatalf("the scheduled slot of the same second: %+v", g)
	}
	h.refuse(&RunSavedSearch{Name: "nope", Now: 1}, ErrUnknownSavedSearch)
}

func TestSavedSearchVersionGate(t *testing.T) {
	for _, c := range []Command{&AddSavedSearch{}, &RemoveSavedSearch{}, &RunSavedSearch{}, &ClaimSlot{}, &FinishSlot{}} {
		if v := NeedsClusterVersion(c); v != SavedSearchVersion {
			t.Errorf("%T needs cluster version %d, want %d", c, v, SavedSearchVersion)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a build of version 7 applied a saved-search command")
		}
	}()
	f := NewAt(SavedSearchVersion - 1)
	b, _ := Encode(&AddSavedSearch{Search: SavedSearch{Name: "s", Search: "x", Cron: "@every 1s"}})
	f.Apply(1, b)
}

func TestSavedSearchSnapshot(t *testing.T) {
	f := New()
	cmds := []Command{
		&SetClusterVersion{Version: Version},
		&AddSavedSearch{Search: SavedSearch{Name: "s", Search: "index=web", Cron: "@every 1s", AlertIf: "count > 0"}, Now: 10 * sec},
		&ClaimSlot{Name: "s", Slot: 11, Head: "sh1", Now: 11 * sec, LeaseMS: 5000},
		&FinishSlot{Name: "s", Slot: 11, Head: "sh1", Attempt: 1, Status: SlotOK, Count: 2, Now: 12 * sec},
		&RunSavedSearch{Name: "s", Now: 13 * sec},
	}
	for i, c := range cmds {
		b, _ := Encode(c)
		if r, ok := f.Apply(uint64(i+1), b).(error); ok {
			t.Fatal(r)
		}
	}
	f2 := restored(t, snapshotBytes(t, f))
	if string(marshal(t, f)) != string(marshal(t, f2)) {
		t.Fatal("restored state differs")
	}
	f2.Read(func(s *State) {
		if ss, ok := SavedSearchNamed(s, "s"); !ok || len(ss.Runs) != 1 || len(ss.Open) != 1 {
			t.Fatalf("restored: %+v", ss)
		}
	})
}

// slotModel is what the property test remembers of one slot.
type slotModel struct {
	okDone     int
	head       string
	leaseUntil int64
}

// savedSteps are the property test's saved-search steps: add, claim,
// finish and manual runs by random heads at the model's clock, checking
// after each that a slot is finished ok at most once and never granted to
// two heads at once.
func savedSteps(m *model) map[string]func(*rapid.T) {
	slots := map[string]*slotModel{}
	names := []string{"a", "b"}
	heads := []string{"sh1", "sh2", "sh3"}
	key := func(n string, slot int64, manual bool) string { return fmt.Sprintf("%s/%d/%v", n, slot, manual) }
	get := func(k string) *slotModel {
		if slots[k] == nil {
			slots[k] = &slotModel{}
		}
		return slots[k]
	}
	pick := func(t *rapid.T) (string, int64, bool) {
		n := rapid.SampledFrom(names).Draw(t, "saved")
		manual := rapid.IntRange(0, 4).Draw(t, "manual") == 0
		slot := m.now.Unix() - int64(rapid.IntRange(0, 6).Draw(t, "back"))
		return n, slot, manual
	}
	return map[string]func(*rapid.T){
		"savedAdd": func(t *rapid.T) {
			n := rapid.SampledFrom(names).Draw(t, "saved")
			m.apply(t, &AddSavedSearch{Search: SavedSearch{Name: n, Search: "index=x", Cron: "@every 1s"}, Now: m.now.UnixNano()})
		},
		"savedRun": func(t *rapid.T) {
			m.apply(t, &RunSavedSearch{Name: rapid.SampledFrom(names).Draw(t, "saved"), Now: m.now.UnixNano()})
		},
		"claim": func(t *rapid.T) {
			n, slot, manual := pick(t)
			head := rapid.SampledFrom(heads).Draw(t, "head")
			lease := int64(rapid.IntRange(1, 4).Draw(t, "lease")) * 1000
			now := m.now.Add(time.Second).UnixNano() // the clock apply sets
			g, ok := m.apply(t, &ClaimSlot{Name: n, Slot: slot, Manual: manual, Head: head, Now: now, LeaseMS: lease}).(SlotGrant)
			if !ok || !g.Granted {
				return
			}
			sm := get(key(n, slot, manual))
			if sm.okDone > 0 {
				t.Fatalf("slot %s/%d granted to %s after it finished ok", n, slot, head)
			}
			if sm.head != "" && sm.head != head && now < sm.leaseUntil {
				t.Fatalf("slot %s/%d granted to %s while %s holds it until %d", n, slot, head, sm.head, sm.leaseUntil)
			}
			sm.head, sm.leaseUntil = head, g.LeaseUntil
		},
		"finish": func(t *rapid.T) {
			n, slot, manual := pick(t)
			var open SlotClaim
			ss, ok := SavedSearchNamed(m.s, n)
			if i := ss.openAt(slot, manual); ok && i >= 0 && rapid.IntRange(0, 3).Draw(t, "honest") > 0 {
				open = ss.Open[i]
			} else {
				open = SlotClaim{Head: rapid.SampledFrom(heads).Draw(t, "head"), Attempt: rapid.IntRange(1, 3).Draw(t, "attempt")}
			}
			status := rapid.SampledFrom([]string{SlotOK, SlotFailed}).Draw(t, "status")
			r := m.apply(t, &FinishSlot{Name: n, Slot: slot, Manual: manual, Head: open.Head, Attempt: open.Attempt, Status: status, Now: m.now.Add(time.Second).UnixNano()})
			if _, failed := r.(error); failed || status != SlotOK {
				if !failed {
					get(key(n, slot, manual)).head = ""
				}
				return
			}
			sm := get(key(n, slot, manual))
			if sm.okDone++; sm.okDone > 1 {
				t.Fatalf("slot %s/%d finished ok twice", n, slot)
			}
		},
	}
}

// savedCommand is the determinism log's saved-search command: adds,
// removals, manual runs, claims and finishes of slots near the log's
// clock by three heads, many of them refused.
func (g *logGen) savedCommand(req ReqID) Command {
	name := []string{"a", "b"}[g.r.IntN(2)]
	head := []string{"sh1", "sh2", "sh3"}[g.r.IntN(3)]
	now := g.now.UnixNano()
	slot := g.now.Unix() - int64(g.r.IntN(5))
	manual := g.r.IntN(5) == 0
	switch g.r.IntN(6) {
	case 0:
		return &AddSavedSearch{ReqID: req, Search: SavedSearch{Name: name, Search: "index=main", Cron: "@every 1s"}, Now: now}
	case 1:
		if g.r.IntN(4) == 0 {
			return &RemoveSavedSearch{ReqID: req, Name: name}
		}
		return &RunSavedSearch{ReqID: req, Name: name, Now: now}
	case 2, 3:
		return &ClaimSlot{ReqID: req, Name: name, Slot: slot, Manual: manual, Head: head, Now: now,
			LeaseMS: int64(1000 + g.r.IntN(4000)), Skipped: []int64{slot - 2, slot - 1}}
	}
	status := []string{SlotOK, SlotFailed}[g.r.IntN(2)]
	return &FinishSlot{ReqID: req, Name: name, Slot: slot, Manual: manual, Head: head, Attempt: 1 + g.r.IntN(2),
		Status: status, DurationMS: int64(g.r.IntN(900)), Count: int64(g.r.IntN(9)), Now: now}
}

// TestOpenSlotsBounded: past maxOpenSlots the oldest other open slot is
// abandoned (recorded failed), never the one just added, whatever order
// manual and scheduled slots come in.
func TestOpenSlotsBounded(t *testing.T) {
	h := newHarness(t)
	addSaved(h, "s")
	for i := range maxOpenSlots + 2 { // manual slots from 1000 on, no head takes them
		h.apply(&RunSavedSearch{Name: "s", Now: (1000 + int64(i)) * sec})
	}
	// A scheduled slot older than every open manual one.
	if g := claim(h, "s", 500, "sh1", 1100*sec); !g.Granted {
		t.Fatalf("scheduled claim with the open slots full: %+v", g)
	}
	ss := savedOf(h, "s")
	if len(ss.Open) != maxOpenSlots || ss.Open[0].Slot != 500 || ss.Open[0].Head != "sh1" {
		t.Fatalf("open slots %+v", ss.Open)
	}
	abandoned := 0
	for _, r := range ss.Runs {
		if r.Status == SlotFailed && r.Manual {
			abandoned++
		}
	}
	if abandoned != 3 {
		t.Fatalf("%d manual slots abandoned, want 3: %+v", abandoned, ss.Runs)
	}
}

// TestSavedSearchProperties runs the saved-search steps alone (in
// TestProperties they are a few among many), with the model's checks
// after every step.
func TestSavedSearchProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &model{s: NewState(), now: epoch}
		t.Repeat(savedSteps(m))
	})
}
