package manager

import (
	"context"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// TestNATSSavedSearchOp: the heads' mgr.savedsearch operation lists,
// claims (one head per slot) and finishes; a body naming another head
// than the sender, and a sender that is a registered peer, are refused.
func TestNATSSavedSearchOp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := startTestBusWith(t, []string{"sh1", "sh2"})
	g := newGroup(t, 1, func(c *Config) { c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw" })
	l := g.leader()
	waitClusterVersion(t, l, fsm.SavedSearchVersion)
	head := func(id string) *mgrclient.ManagerClient {
		c := mgrclient.NewManagerClient(b.connect(t, id, id+"-pw"), b.subj)
		c.Sender = id
		return c
	}
	sh1, sh2 := head("sh1"), head("sh2")
	created := time.Now().Add(-10 * time.Second)
	g.apply(&fsm.AddSavedSearch{Search: fsm.SavedSearch{Name: "s", Search: "index=main | stats count", Cron: "@every 1s"}, Now: created.UnixNano()})
	list, err := sh1.SavedSearches(ctx)
	if err != nil || len(list.Searches) != 1 || list.Searches[0].Name != "s" || list.Now == 0 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	slot := created.Unix() + 5
	grant, err := sh1.ClaimSlot(ctx, fsm.ClaimSlot{Name: "s", Slot: slot, LeaseMS: 60_000, Head: "forged", Now: 1})
	if err != nil || !grant.Granted || grant.Attempt != 1 || grant.LeaseUntil < time.Now().UnixNano() {
		t.Fatalf("sh1's claim: %+v, %v (the leader sets the head and the clock)", grant, err)
	}
	if g2, err := sh2.ClaimSlot(ctx, fsm.ClaimSlot{Name: "s", Slot: slot, LeaseMS: 60_000}); err != nil || g2.Granted {
		t.Fatalf("sh2's claim of the slot sh1 holds: %+v, %v", g2, err)
	}
	if err := sh2.FinishSlot(ctx, fsm.FinishSlot{Name: "s", Slot: slot, Attempt: 1, Status: fsm.SlotOK}); !bus.IsRemote(err, "slot_not_held") {
		t.Fatalf("sh2 finishing sh1's slot: %v, want slot_not_held", err)
	}
	if err := sh1.FinishSlot(ctx, fsm.FinishSlot{Name: "s", Slot: slot, Attempt: 1, Status: fsm.SlotOK, Count: 1, DurationMS: 3}); err != nil {
		t.Fatalf("sh1's finish: %v", err)
	}
	list, _ = sh2.SavedSearches(ctx)
	if r := list.Searches[0].Runs; len(r) != 1 || r[0].Status != fsm.SlotOK || r[0].Head != "sh1" || r[0].Slot != slot {
		t.Fatalf("records %+v", r)
	}

	// The admin user may publish anywhere: only the manager's checks stop
	// a body naming another head, or a registered peer calling.
	admin := b.connect(t, "admin", "admin-pw")
	call := func(sender, head string) error {
		subj, _ := b.subj.MgrOp(api.OpSavedSearch, sender)
		_, err := bus.Request[api.SavedSearchRequest, api.SavedSearchReply](ctx, admin, subj,
			api.SavedSearchRequest{V: api.WireVersion, Head: head, Action: api.SavedList})
		return err
	}
	if err := call("sh1", "sh2"); !bus.IsRemote(err, api.CodeBadRequest) {
		t.Fatalf("sh2 named by sh1's subject: %v, want bad_request", err)
	}
	g.apply(&fsm.RegisterPeer{ID: "p1", GUID: "guid-p1", Site: "", At: time.Now()})
	if err := call("p1", "p1"); !bus.IsRemote(err, api.CodeRefused) {
		t.Fatalf("a registered peer calling: %v, want refused", err)
	}
}
