package manager

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/fsm"
)

// Delivery marks written as version-1 member-table entries are cluster
// state: they survive a snapshot round trip, and the marks of a closed
// task go with it (so they are bounded by the open tasks).
func TestDeliveryMarks(t *testing.T) {
	a := newMuxFSM(fsm.New())
	idx := uint64(0)
	apply := func(data []byte, ext []byte) any {
		idx++
		return a.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: data, Extensions: ext})
	}
	mark := func(op string, task uint64, peer string) {
		b, _ := json.Marshal(memberCommand{Op: op, Task: task, Peer: peer})
		apply(b, memberExtension)
	}
	cmd := func(c fsm.Command) any {
		b, err := fsm.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		res := apply(b, nil)
		if err, ok := res.(error); ok {
			t.Fatalf("apply %T: %v", c, err)
		}
		return res
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, p := range []string{"p1", "p2"} {
		cmd(&fsm.RegisterPeer{ID: p, GUID: "g" + p, Site: fsm.DefaultSite, At: at})
	}
	b := fsm.BucketID("main", "1", "gp1")
	cmd(&fsm.AddBucket{ID: b, Index: "main", Origin: "p1", Targets: []fsm.CopySpec{{Peer: "p2"}}})
	cmd(&fsm.RollBucket{Bucket: b, Latest: 1, Blocks: 1, LastChecksum: "c"})
	t1 := cmd(&fsm.CreateFixup{Kind: fsm.TaskMakeSearchable, Level: fsm.LevelSearch, Bucket: b, Target: "p2", Reason: "x", At: at}).(fsm.Result).Index
	t2 := cmd(&fsm.CreateFixup{Kind: fsm.TaskRemoveCopy, Level: fsm.LevelExcess, Bucket: b, Target: "p2", Reason: "y", At: at}).(fsm.Result).Index
	mark("delivered", t1, "p2")
	mark("reported", t2, "p2")
	if !a.marked("delivered", t1, "p2") || !a.marked("reported", t2, "p2") || a.marked("delivered", t2, "p2") {
		t.Fatal("marks not as applied")
	}

	// Snapshot round trip keeps them.
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	c := newMuxFSM(fsm.New())
	if err := c.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !c.marked("delivered", t1, "p2") || !c.marked("reported", t2, "p2") {
		t.Fatal("marks lost in a snapshot round trip")
	}

	// t1 closes: its mark goes in the same entry, t2's stays.
	cmd(&fsm.FixupDone{ID: t1, Reason: "done"})
	mark("delivered", t2, "p2")
	if a.marked("delivered", t1, "p2") {
		t.Fatal("the mark of a closed task was not pruned")
	}
	if !a.marked("delivered", t2, "p2") || !a.marked("reported", t2, "p2") {
		t.Fatal("marks of an open task were pruned")
	}
}
