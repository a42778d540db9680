package peer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestTargetsTimeoutNeverChoosesLocally: a targets request that timed out
// may have been applied, so the managers may hold copies the origin never
// heard of. When the next attempt finds no manager at all, the origin must
// not fall back to its last targets for that bucket (issue 24's chaos run:
// the managers sealed such a bucket final at 0 blocks from the committed,
// empty copies while the origin had acknowledged events on others). It
// asks again, and replicates to what was committed; acks wait meanwhile.
func TestTargetsTimeoutNeverChoosesLocally(t *testing.T) {
	cp, ps := startFakeCluster(t, "p1", "p2", "p3")
	cp.mu.Lock()
	cp.targets["p1"] = []fsm.CopySpec{{Peer: "p2", Searchable: true}}
	cp.mu.Unlock()
	first, err := ps["p1"].Store().Append(testEvents(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !first.Durable() {
			return errors.New("first bucket not acknowledged")
		}
		return nil
	})
	ps["p1"].Store().RollAll() // the origin's last targets are now [p2]
	old := map[string]bool{}
	for _, c := range ps["p1"].Store().Inventory() {
		old[c.ID] = true
	}

	// The managers commit p3 for the next bucket, but the first answer is
	// lost (a timeout) and the next two attempts find no manager.
	cp.mu.Lock()
	cp.targets["p1"] = []fsm.CopySpec{{Peer: "p3", Searchable: true}}
	cp.targetErr = []error{context.DeadlineExceeded, bus.ErrNoResponders, bus.ErrNoResponders}
	cp.mu.Unlock()
	ack, err := ps["p1"].Store().Append(testEvents(100, 100))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !ack.Durable() {
			return errors.New("second bucket not acknowledged")
		}
		return nil
	})
	var bucket string
	for _, c := range ps["p1"].Store().Inventory() {
		if !old[c.ID] {
			bucket = c.ID
		}
	}
	if bucket == "" {
		t.Fatal("no new bucket on the origin")
	}
	if c, ok := copyOf(ps["p2"], bucket); ok {
		t.Fatalf("the origin replicated to its last target p2 after an ambiguous timeout: %+v", c)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if c, ok := copyOf(ps["p3"], bucket); !ok || c.Events < 100 {
			return fmt.Errorf("p3 (the committed target) holds %+v", c)
		}
		return nil
	})
	cp.mu.Lock()
	left := len(cp.targetErr)
	cp.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d scripted answers not consumed", left)
	}
}
