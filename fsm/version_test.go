package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

type fatalf interface{ Fatalf(string, ...any) }

// checkClone: Clone encodes like the original and shares no map, slice
// backing array or pointer with it (a field added to stateData and not to
// Clone is shared, and fails here).
func checkClone(t fatalf, s *State) {
	c := s.Clone()
	b1, _ := s.Marshal()
	b2, _ := c.Marshal()
	if !bytes.Equal(b1, b2) {
		t.Fatalf("clone encodes differently:\n%s\n%s", b1, b2)
	}
	if err := shared(reflect.ValueOf(s).Elem(), reflect.ValueOf(c).Elem(), "State"); err != nil {
		t.Fatalf("clone shares memory with the state: %v", err)
	}
}

func shared(a, b reflect.Value, path string) error {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return fmt.Errorf("%s: same pointer", path)
		}
		return shared(a.Elem(), b.Elem(), path)
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return fmt.Errorf("%s: same map", path)
		}
		it := a.MapRange()
		for it.Next() {
			if err := shared(it.Value(), b.MapIndex(it.Key()), fmt.Sprintf("%s[%v]", path, it.Key())); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if a.Cap() == 0 || b.Cap() == 0 {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return fmt.Errorf("%s: same slice array", path)
		}
		for i := 0; i < a.Len() && i < b.Len(); i++ {
			if err := shared(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if err := shared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// richState has something in every part of the state: multisite config
// with tokens, peers with attributes, buckets, tasks, marks, a frozen
// tombstone, history and request ids.
func richState(t *testing.T) *harness {
	h := newHarness(t)
	c := multiSite("origin:2,total:3", "origin:1,total:2", "site1", "site2")
	c.HECTokens = []HECToken{{Token: "t1", Indexes: []string{"main"}, Ack: true}}
	c.SearchTokens = []SearchToken{{Token: "s1", Indexes: []string{"main"}}}
	h.config(c)
	for i, p := range []string{"p1", "p2", "p3", "p4"} {
		h.must(&RegisterPeer{ReqID: ReqID{"reg-" + p}, ID: p, GUID: guid(p), Site: []string{"site1", "site2"}[i%2],
			Attrs: map[string]string{"rack": "r" + p}, At: h.now})
	}
	b := h.warm("1", "p1", "p2", true, "p3", false)
	h.warm("2", "p2", "p1", true, "p4", false)
	r := h.must(&CreateFixup{Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p3", Reason: "sf"})
	h.must(&SetClusterVersion{Version: 2})
	h.must(&MarkFixup{Task: r.Index, Peer: "p3", Kind: MarkDelivered})
	fz := h.warm("3", "p3", "p1", true, "p2", true)
	h.must(&PeerDown{ID: "p2", At: h.now})
	f := h.must(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: fz, At: h.now})
	h.must(&FixupDone{ID: f.Index})
	return h
}

func TestCloneIsDeep(t *testing.T) {
	h := richState(t)
	if len(h.s.d.Frozen) == 0 || len(h.s.d.Marks) == 0 || len(h.s.d.Requests) == 0 || len(h.s.d.History) == 0 {
		t.Fatalf("rich state lacks a part: frozen %d marks %d requests %d history %d",
			len(h.s.d.Frozen), len(h.s.d.Marks), len(h.s.d.Requests), len(h.s.d.History))
	}
	checkClone(t, h.s)
	// A clone changed does not change the original.
	before, _ := h.s.Marshal()
	c := h.s.Clone()
	c.ApplyCommand(h.idx+1, &RegisterPeer{ID: "p5", GUID: guid("p5"), Site: "site1", At: h.now})
	c.d.Config.HECTokens[0].Indexes[0] = "changed"
	c.d.Peers["p1"].Attrs["rack"] = "changed"
	after, _ := h.s.Marshal()
	if !bytes.Equal(before, after) {
		t.Fatal("changing the clone changed the original")
	}
}

// TestSnapshotIsTakenAtSnapshot: Persist, run after more entries were
// applied, writes the state as it was at Snapshot (the copy is private).
func TestSnapshotIsTakenAtSnapshot(t *testing.T) {
	f := New()
	apply := func(idx uint64, c Command) {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		f.Apply(idx, b)
	}
	apply(1, &SetConfig{Config: singleSite(2, 1)})
	apply(2, &RegisterPeer{ID: "p1", GUID: "g1", At: epoch})
	want, _ := f.Marshal()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	apply(3, &RegisterPeer{ID: "p2", GUID: "g2", At: epoch})
	apply(4, &SetMaintenance{Enabled: true})
	sink := &memSink{}
	if err := snap.Write(sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatalf("persisted %s\nwant %s", sink.Bytes(), want)
	}
}

// TestBinarySnapshotIsTakenAtSnapshot: the binary snapshot is encoded at
// Snapshot, under the read lock; entries applied before Persist are not in
// it, and Persist writes the same bytes however late it runs.
func TestBinarySnapshotIsTakenAtSnapshot(t *testing.T) {
	f := New()
	idx := uint64(0)
	apply := func(c Command) {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		idx++
		if err, ok := f.Apply(idx, b).(error); ok {
			t.Fatal(err)
		}
	}
	apply(&SetConfig{Config: singleSite(2, 1)})
	apply(&SetClusterVersion{Version: Version})
	apply(&RegisterPeer{ID: "p1", GUID: guid("p1"), At: epoch})
	apply(&RegisterPeer{ID: "p2", GUID: guid("p2"), At: epoch})
	apply(&AddBucket{ID: BucketID("main", "1", guid("p1")), Index: "main", Origin: "p1", Targets: []CopySpec{{Peer: "p2", Searchable: true}}})
	want, _ := f.Marshal()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	apply(&RollBucket{Bucket: BucketID("main", "1", guid("p1")), Latest: 5, Size: 10, Blocks: 2, LastChecksum: "c"})
	apply(&RegisterPeer{ID: "p3", GUID: guid("p3"), At: epoch})
	apply(&SetMaintenance{Enabled: true})
	sink := &memSink{}
	if err := snap.Write(sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(sink.Bytes(), []byte(binSnapshotMagic)) {
		t.Fatalf("snapshot at cluster version %d is not binary", Version)
	}
	got, _ := restored(t, sink.Bytes()).Marshal()
	if !bytes.Equal(got, want) {
		t.Fatalf("restored %s\nwant %s", got, want)
	}
}

func TestSetClusterVersion(t *testing.T) {
	h := newHarness(t)
	if v := h.s.ClusterVersion(); v != 1 {
		t.Fatalf("a new state has cluster version %d, want 1", v)
	}
	h.must(&SetClusterVersion{Version: 1}) // the same version: no-op
	h.must(&SetClusterVersion{Version: 2})
	if v := h.s.ClusterVersion(); v != 2 {
		t.Fatalf("cluster version %d, want 2", v)
	}
	h.refuse(&SetClusterVersion{Version: 1}, ErrClusterVersion)
	// The version survives a snapshot.
	if v := roundTrip(h.s).ClusterVersion(); v != 2 {
		t.Fatalf("restored cluster version %d, want 2", v)
	}
	// A build that supports less stops rather than follow.
	old := NewAt(1).state
	mustPanic(t, "needs cluster version 2", func() { old.ApplyCommand(1, &SetClusterVersion{Version: 2}) })
	mustPanic(t, fmt.Sprintf("supports up to %d", Version), func() { h.s.ApplyCommand(h.idx+1, &SetClusterVersion{Version: Version + 1}) })
}

// TestOlderBuildPanicsOnNewCommand: an FSM playing a version-1 build meets
// every version-2 command as an unknown one (a panic, never a skip), and
// applies every version-1 command.
func TestOlderBuildPanicsOnNewCommand(t *testing.T) {
	for typ, v := range clusterVersions {
		h := registry[typ]
		c := h.new()
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		f := NewAt(v - 1)
		mustPanic(t, "needs cluster version", func() {
			f.Apply(1, b)
		})
	}
	if MinClusterVersion(CmdSetDetention) != 1 || MinClusterVersion(CmdMarkFixup) != 2 {
		t.Fatal("cluster versions of the command types moved")
	}
	for typ := range registry {
		if MinClusterVersion(typ) > Version {
			t.Fatalf("command type %d needs cluster version %d, above this build's %d", typ, MinClusterVersion(typ), Version)
		}
	}
}

func mustPanic(t *testing.T, want string, fn func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one saying %q", want)
		}
		if !strings.Contains(fmt.Sprint(r), want) {
			t.Fatalf("panic %v, want one saying %q", r, want)
		}
	}()
	fn()
}

func TestMarkFixup(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	r := h.must(&CreateFixup{Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p3", Reason: "sf"})
	h.refuse(&MarkFixup{Task: r.Index + 100, Peer: "p3", Kind: MarkDelivered}, ErrUnknownTask)
	h.refuse(&MarkFixup{Task: r.Index, Peer: "p3", Kind: "seen"}, ErrBadTask)
	h.refuse(&MarkFixup{Task: r.Index, Kind: MarkDelivered}, ErrBadTask)
	h.must(&MarkFixup{Task: r.Index, Peer: "p3", Kind: MarkDelivered})
	h.must(&MarkFixup{Task: r.Index, Peer: "p2", Kind: MarkReported})
	h.must(&MarkFixup{Task: r.Index, Peer: "p1", Kind: MarkReported})
	before, _ := h.s.Marshal()
	h.must(&MarkFixup{Task: r.Index, Peer: "p3", Kind: MarkDelivered}) // again: no change
	if after, _ := h.s.Marshal(); !bytes.Equal(stripApplied(before), stripApplied(after)) {
		t.Fatal("a repeated mark changed the state")
	}
	if !h.s.Marked(MarkDelivered, r.Index, "p3") || h.s.Marked(MarkReported, r.Index, "p3") ||
		!h.s.Marked(MarkReported, r.Index, "p1") || h.s.Marked(MarkDelivered, r.Index, "p1") {
		t.Fatalf("marks %+v", h.s.d.Marks[r.Index])
	}
	if got := h.s.d.Marks[r.Index].Reported; fmt.Sprint(got) != "[p1 p2]" {
		t.Fatalf("reported %v, want sorted [p1 p2]", got)
	}
	// In the snapshot, restored alike.
	if c := roundTrip(h.s); !c.Marked(MarkReported, r.Index, "p2") {
		t.Fatal("mark lost in a snapshot round trip")
	}
	// The task closes: its marks go in the same entry.
	h.must(&FixupDone{ID: r.Index})
	if h.s.d.Marks != nil || h.s.Marked(MarkDelivered, r.Index, "p3") {
		t.Fatalf("marks of a closed task kept: %+v", h.s.d.Marks)
	}
}

// TestImportMarks reads the marks an older build kept in the manager's
// member table ("<task>/<peer>" keys), dropping those of closed tasks.
func TestImportMarks(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	r := h.must(&CreateFixup{Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p3", Reason: "sf"})
	if err := h.s.ImportMarks(MarkDelivered, []string{fmt.Sprintf("%d/p3", r.Index), "99999/p1"}); err != nil {
		t.Fatal(err)
	}
	if !h.s.Marked(MarkDelivered, r.Index, "p3") || len(h.s.d.Marks) != 1 {
		t.Fatalf("marks %+v", h.s.d.Marks)
	}
	if err := h.s.ImportMarks(MarkReported, []string{"nonsense"}); err == nil {
		t.Fatal("an unreadable key imported")
	}
	// ApplyLegacyMark: the member-table entry of a version-1 log.
	f := New()
	f.state = h.s
	f.ApplyLegacyMark(h.idx+1, MarkReported, r.Index, "p2")
	f.ApplyLegacyMark(h.idx+2, MarkReported, 424242, "p2") // closed task: nothing, no error
	if !h.s.Marked(MarkReported, r.Index, "p2") || h.s.AppliedIndex() != h.idx+2 {
		t.Fatalf("legacy mark: marks %+v applied %d", h.s.d.Marks, h.s.AppliedIndex())
	}
}
