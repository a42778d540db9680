//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterMaintenanceKeepsTarget: in maintenance mode a dead target
// does not make the origin roll; acks go on with the copies that have the
// blocks (≥ min(2, RF)); the restarted target gets the blocks it missed
// and its copy ends identical to the origin's; the managers open no
// replication or make-searchable task meanwhile.
func TestClusterMaintenanceKeepsTarget(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 256 << 20})
	c.SetMaintenance(true)
	origin := "site1-p1"
	c.WaitFor(10*time.Second, func() error {
		ok, err := c.Peer(origin).MaintenanceMode()
		if !ok {
			return fmt.Errorf("origin not in maintenance yet (%v)", err)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ctx, origin, Batches("a", 2000, 200), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest before the kill: %v, %d unacked", err, len(un))
	}
	ts := hotTargets(c, origin)
	if len(ts) != 2 {
		t.Fatalf("hot targets %v, want 2", ts)
	}
	victim := ts[0]
	rolls := c.Peer(origin).Store().Stats.Rolls.Load()
	c.KillPeer(victim)
	acked, un, err := c.IngestAcked(ctx, origin, Batches("b", 4000, 200), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest with a target down: %v, %d unacked", err, len(un))
	}
	var worst time.Duration
	for _, a := range acked {
		worst = max(worst, a.Waited)
	}
	if limit := c.Opts.TargetTimeout + time.Second; worst > limit && (!raceEnabled || worst > limit+10*time.Second) {
		t.Errorf("an ack waited %v with a target down in maintenance", worst)
	}
	if got := c.Peer(origin).Store().Stats.Rolls.Load(); got != rolls {
		t.Errorf("origin rolled %d times in maintenance mode, want 0", got-rolls)
	}
	c.StartPeer(victim)
	c.WaitPeersUp(victim)
	guid := c.Peer(origin).GUID()
	c.WaitFor(30*time.Second, func() error {
		own := c.Inventory(origin)
		for b, oc := range own {
			if !strings.HasSuffix(b, "~"+guid) || oc.State != "hot" {
				continue
			}
			vc, ok := c.Inventory(victim)[b]
			if !ok {
				return fmt.Errorf("%s not on %s", b, victim)
			}
			if vc.Blocks != oc.Blocks || vc.ContentHash != oc.ContentHash {
				return fmt.Errorf("%s on %s: %d blocks, origin %d", b, victim, vc.Blocks, oc.Blocks)
			}
			return nil
		}
		return errors.New("origin has no hot bucket")
	})
	var tasks []fsm.Task
	c.State(func(s *fsm.State) { tasks = s.Tasks() })
	for _, tk := range tasks {
		if tk.Kind == fsm.TaskReplicate || tk.Kind == fsm.TaskMakeSearchable {
			t.Errorf("maintenance mode opened a %s task: %+v", tk.Kind, tk)
		}
	}
	moved := func() int {
		n := 0
		for _, id := range c.PeerIDs() {
			if p := c.Peer(id); p != nil {
				for _, k := range p.Transfers() {
					n += k
				}
			}
		}
		return n
	}
	if n := moved(); n != 0 {
		t.Errorf("%d fixup transfers in maintenance mode, want 0", n)
	}
	// Disabling maintenance resumes fixup: with a peer gone for good, the
	// cluster becomes complete again without it.
	gone := ts[1] // a holder of the origin's bucket
	c.KillPeer(gone)
	c.SetMaintenance(false)
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			p.Store().RollAll()
		}
	}
	c.WaitFor(120*time.Second, func() error {
		var st fsm.Status
		c.State(func(s *fsm.State) { st = s.Status() })
		if p, _ := c.stateOf(gone); p != fsm.StateDown {
			return fmt.Errorf("%s is %s", gone, p)
		}
		if !st.Complete {
			return fmt.Errorf("not complete after maintenance: %v", st.Fixups)
		}
		return nil
	})
	if moved() == 0 {
		t.Errorf("complete again without any fixup transfer, though %s held a copy", gone)
	}
	t.Logf("after maintenance: %d fixup transfers", moved())
}
