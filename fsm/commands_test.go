package fsm

import (
	"errors"
	"strings"
	"testing"
)

// threePeers is a single-site RF=3/SF=2 cluster with peers p1..p4 Up.
func fourPeers(t *testing.T) *harness {
	h := newHarness(t)
	h.config(singleSite(3, 2))
	for _, p := range []string{"p1", "p2", "p3", "p4"} {
		h.peer(p, "")
	}
	return h
}

func TestEncodeDecodeEveryCommand(t *testing.T) {
	cmds := []Command{
		&SetConfig{Config: DefaultConfig()}, &RegisterPeer{ID: "p1", GUID: "g"}, &PeerDown{ID: "p1"},
		&SetPeerState{ID: "p1", State: StateDetention}, &AddBucket{ID: "main~1~g", Index: "main"},
		&AddCopy{Bucket: "b", Peer: "p"}, &CopySearchable{Bucket: "b", Peer: "p", Searchable: true},
		&RemoveCopy{Bucket: "b", Peer: "p"}, &RollBucket{Bucket: "b"}, &SealBucket{Bucket: "b", Blocks: 3},
		&CreateFixup{Kind: TaskSeal, Level: LevelStreaming, Bucket: "b"}, &FixupDone{ID: 7},
		&SetMaintenance{Enabled: true}, &RebalancePrimaries{}, &PeerOffline{ID: "p1", EnforceCounts: true},
		&MarkCorrupt{Bucket: "b", Peer: "p"}, &CopyLength{Bucket: "b", Peer: "p", Blocks: 7, LastChecksum: "c7"},
		&CopyShort{Bucket: "b", Peer: "p", Short: true},
		&SetDetention{ID: "p1", Enabled: true, By: DetentionManual},
		&ExtendSeal{Bucket: "b", Peer: "p", From: 5, FromChecksum: "c5", Blocks: 7, LastChecksum: "c7"},
		&SetClusterVersion{Version: 2}, &MarkFixup{Task: 7, Peer: "p1", Kind: MarkDelivered},
		&SetBundle{Hash: "sha256:00", Files: map[string]string{"props.conf": "[x]\nTZ = UTC\n"}},
		&AddSavedSearch{Search: SavedSearch{Name: "s", Search: "index=main", Cron: "@every 1s"}, Now: 1},
		&RemoveSavedSearch{Name: "s"}, &RunSavedSearch{Name: "s", Now: 1},
		&ClaimSlot{Name: "s", Slot: 10, Head: "sh1", Now: 1, LeaseMS: 1000, Skipped: []int64{9}},
		&FinishSlot{Name: "s", Slot: 10, Head: "sh1", Attempt: 1, Status: SlotOK, Count: 3, Now: 2},
		&SetTokenKey{Key: make([]byte, TokenKeySize)},
	}
	if len(cmds) != len(registry) {
		t.Fatalf("%d commands tested, %d registered", len(cmds), len(registry))
	}
	seen := map[CommandType]bool{}
	for _, c := range cmds {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		want := versionOf(c.Type())
		if bv, ok := c.(bodyVersioned); ok {
			want, _ = bv.bodyVersion() // the lowest version that holds this body
		}
		if b[0] != byte(c.Type()) || b[1] != want {
			t.Fatalf("%T: header %v", c, b[:2])
		}
		d, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		b2, _ := Encode(d)
		if string(b) != string(b2) {
			t.Fatalf("%T: round trip %s != %s", c, b, b2)
		}
		seen[c.Type()] = true
	}
	if len(seen) != len(cmds) {
		t.Fatal("two commands share a type byte")
	}
}

func TestUnknownCommandPanics(t *testing.T) {
	for name, data := range map[string][]byte{
		"unknown type":     {200, 1, '{', '}'},
		"type zero":        {0, 1, '{', '}'},
		"newer version":    {byte(CmdSetMaintenance), bodyVersion + 1, '{', '}'},
		"newer seal":       {byte(CmdSealBucket), versionOf(CmdSealBucket) + 1, '{', '}'},
		"v1 seal, lengths": append([]byte{byte(CmdSealBucket), 1}, `{"bucket":"b","blocks":1,"last_checksum":"c","lengths":[{"peer":"p","blocks":1}]}`...),
		"undecodable body": {byte(CmdSetMaintenance), 1, '{'},
		"unknown field":    append([]byte{byte(CmdSetMaintenance), 1}, `{"enabled":true,"bogus":1}`...),
		"too short":        {byte(CmdSetMaintenance)},
	} {
		t.Run(name, func(t *testing.T) {
			f := New()
			defer func() {
				if recover() == nil {
					t.Fatal("Apply did not panic")
				}
			}()
			f.Apply(1, data)
		})
	}
}

func TestDuplicateRegistrationPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	register(CmdSetMaintenance, (*State).applySetMaintenance)
}

func TestRequestIDMakesRetryHarmless(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	first := h.must(&CreateFixup{ReqID: ReqID{"r1"}, Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p3"})
	again := h.must(&CreateFixup{ReqID: ReqID{"r1"}, Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p3"})
	if !again.Duplicate || again.Index != first.Index || len(h.s.d.Tasks) != 1 {
		t.Fatalf("retry: %+v (first %+v), %d tasks", again, first, len(h.s.d.Tasks))
	}
	// Without a request id the same work is refused as already open.
	h.refuse(&CreateFixup{Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p3"}, ErrTaskExists)
}

func TestSetConfig(t *testing.T) {
	h := newHarness(t)
	h.config(multiSite("origin:2,total:3", "origin:1,total:2", "site1", "site2"))
	if got := h.s.Config().SiteReplicationFactor.String(); got != "origin:2,total:3" {
		t.Fatal(got)
	}
	bad := multiSite("origin:2,total:3", "origin:3,total:3", "site1", "site2")
	h.refuse(&SetConfig{Config: bad}, ErrBadConfig)
	h.peer("p1", "site1")
	// Dropping a site a peer is on is refused.
	h.refuse(&SetConfig{Config: multiSite("origin:1,total:2", "origin:1,total:1", "site2", "site3")}, ErrBadConfig)
	// Adding a site creates its primary table.
	h.peer("p2", "site2")
	b := h.bucket("1", "p1", "p2", true)
	h.config(multiSite("origin:1,total:2", "origin:1,total:1", "site1", "site2", "site3"))
	h.wantPrimary(b, "site3", "p1") // fill-in: site3 has no peer
	if _, ok := h.s.Status().Sites["site3"]; !ok {
		t.Fatal("no site3 in status")
	}
}

func TestRegisterPeer(t *testing.T) {
	h := newHarness(t)
	h.config(multiSite("origin:1,total:2", "origin:1,total:1", "site1", "site2"))
	h.refuse(&RegisterPeer{ID: "p1", GUID: "g1", Site: "site0"}, ErrBadSite)
	h.refuse(&RegisterPeer{ID: "p1", GUID: "g1", Site: "site9"}, ErrBadSite)
	h.refuse(&RegisterPeer{ID: "", GUID: "g1", Site: "site1"}, nil)
	h.must(&RegisterPeer{ID: "p1", GUID: guid("p1"), Site: "site1", Host: "h1", Attrs: map[string]string{"rack": "r1"}})
	h.refuse(&RegisterPeer{ID: "p9", GUID: guid("p1"), Site: "site1"}, ErrGUIDInUse)
	h.peer("p2", "site2")
	h.peer("p3", "site2")
	b := h.warm("1", "p1", "p2", true)
	h.must(&PeerDown{ID: "p2", At: h.now})
	h.wantPrimary(b, "site2", "p1") // fill-in
	// p2 comes back holding its copy: it counts again and the fill-in moves back.
	h.must(&RegisterPeer{ID: "p2", GUID: guid("p2"), Site: "site2", Inventory: []CopyInfo{{Bucket: b, Searchable: true}}})
	h.wantPrimary(b, "site2", "p2")
	// p2 comes back having lost it: the copy is dropped.
	h.must(&RegisterPeer{ID: "p2", GUID: guid("p2"), Site: "site2"})
	if _, ok := h.b(b).Copies["p2"]; ok {
		t.Fatal("lost copy still listed")
	}
	// p3 reports a bucket nobody knew: it joins the table warm.
	other := BucketID("main", "9", "g-gone")
	h.must(&RegisterPeer{ID: "p3", GUID: guid("p3"), Site: "site2", Inventory: []CopyInfo{{Bucket: other, Searchable: true, Index: "main", Latest: 5}}})
	ob := h.b(other)
	if ob.Hot || ob.Origin != "" || ob.Primary["site2"] != "p3" || ob.Primary[Site0] != "p3" {
		t.Fatalf("rebuilt bucket %+v", ob)
	}
	// A hot copy nobody knew: from another peer it joins warm; from its
	// own origin (indexing it now) it joins hot, its primaries pinned there.
	hotOther := BucketID("main", "10", guid("p1"))
	h.must(&RegisterPeer{ID: "p3", GUID: guid("p3"), Site: "site2", Inventory: []CopyInfo{
		{Bucket: other, Searchable: true, Index: "main", Latest: 5}, {Bucket: hotOther, Searchable: true, Hot: true, Index: "main"}}})
	if hb := h.b(hotOther); hb.Hot || hb.Origin != "p1" {
		t.Fatalf("a replica's hot copy joined as %+v, want warm", hb)
	}
	hotOwn := BucketID("main", "11", guid("p1"))
	h.must(&RegisterPeer{ID: "p1", GUID: guid("p1"), Site: "site1", Host: "h1", Attrs: map[string]string{"rack": "r1"},
		Inventory: []CopyInfo{{Bucket: b, Searchable: true}, {Bucket: hotOwn, Searchable: true, Hot: true, Index: "main", Blocks: 2}}})
	if hb := h.b(hotOwn); !hb.Hot || hb.Origin != "p1" || hb.Primary["site1"] != "p1" || hb.Primary[Site0] != "p1" {
		t.Fatalf("the origin's own hot copy joined as %+v, want hot with its primaries on p1", hb)
	}
	// The origin rolled a hot bucket but its roll report was lost: its
	// inventory shows the copy warm at 5 blocks. The bucket is rolled
	// (sealed at 5), and p3's replica that reported 4 blocks is no longer a
	// usable copy (nor a primary) until fixup fetches into it.
	lost := h.bucket("12", "p1", "p3", true)
	h.must(&RegisterPeer{ID: "p3", GUID: guid("p3"), Site: "site2", Inventory: []CopyInfo{
		{Bucket: other, Searchable: true}, {Bucket: lost, Searchable: true, Hot: true, Blocks: 4}}})
	if h.primary(lost, "site2") != "p3" {
		t.Fatalf("hot bucket's site2 primary %q, want its replica p3", h.primary(lost, "site2"))
	}
	h.must(&RegisterPeer{ID: "p1", GUID: guid("p1"), Site: "site1", Host: "h1", Attrs: map[string]string{"rack": "r1"},
		Inventory: []CopyInfo{{Bucket: b, Searchable: true}, {Bucket: hotOwn, Searchable: true, Hot: true, Index: "main", Blocks: 2},
			{Bucket: lost, Searchable: true, Blocks: 5, Events: 50, Earliest: 1, Latest: 2, Size: 500}}})
	if lb := h.b(lost); lb.Hot || !lb.Sealed || lb.Blocks != 5 || lb.Events != 50 || lb.Primary["site2"] == "p3" {
		t.Fatalf("a hot bucket its origin holds warm: %+v, want rolled and sealed at 5 with no primary on the short p3", lb)
	}
	p, _ := h.s.Peer("p1")
	if p.Host != "h1" || p.Attrs["rack"] != "r1" || p.State != StateUp {
		t.Fatalf("peer %+v", p)
	}
}

func TestPeerDown(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	gen := h.s.CurrentGeneration()
	h.must(&PeerDown{ID: "p1", At: h.now})
	h.wantPrimary(b, Site0, "p2")
	if h.s.CurrentGeneration() == gen || h.s.CurrentGeneration() != h.idx {
		t.Fatalf("generation %d after peer down at %d", h.s.CurrentGeneration(), h.idx)
	}
	h.refuse(&PeerDown{ID: "nope"}, ErrUnknownPeer)
	if p, _ := h.s.Peer("p1"); p.State != StateDown {
		t.Fatal(p.State)
	}
}

func TestSetPeerState(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	h.refuse(&SetPeerState{ID: "p1", State: "Sleeping"}, ErrBadState)
	// Detention keeps serving: the primary stays.
	h.must(&SetPeerState{ID: "p1", State: StateDetention})
	h.wantPrimary(b, Site0, "p1")
	if _, err := h.s.ChooseTargets("p1", "main"); !errors.Is(err, ErrPeerNotUp) {
		t.Fatalf("detention peer took new data: %v", err)
	}
	h.must(&SetPeerState{ID: "p1", State: StateRemoved})
	if _, ok := h.b(b).Copies["p1"]; ok {
		t.Fatal("removed peer's copy listed")
	}
	h.wantPrimary(b, Site0, "p2")
	h.refuse(&SetPeerState{ID: "p1", State: StateUp}, ErrBadState)
}

func TestAddBucket(t *testing.T) {
	h := fourPeers(t)
	gen := h.s.CurrentGeneration()
	b := h.bucket("1", "p1", "p2", true, "p3", false)
	if h.s.CurrentGeneration() != gen {
		t.Fatal("a new bucket started a generation")
	}
	if h.s.TableVersion() != h.idx {
		t.Fatal("table version not bumped")
	}
	h.wantPrimary(b, Site0, "p1")
	h.refuse(&AddBucket{ID: b, Index: "main", Origin: "p1"}, ErrBucketExists)
	h.refuse(&AddBucket{ID: "bad", Index: "main", Origin: "p1"}, ErrBadBucketID)
	h.refuse(&AddBucket{ID: BucketID("main", "2", "other"), Index: "main", Origin: "p1"}, ErrBadBucketID)
	h.refuse(&AddBucket{ID: BucketID("web", "2", guid("p1")), Index: "web", Origin: "p1"}, ErrUnknownIndex)
	h.refuse(&AddBucket{ID: BucketID("main", "2", guid("p1")), Index: "main", Origin: "p1", Targets: []CopySpec{{Peer: "p1"}}}, ErrCopyExists)
	h.refuse(&AddBucket{ID: BucketID("main", "2", guid("p1")), Index: "main", Origin: "p1", Targets: []CopySpec{{Peer: "p2"}, {Peer: "p2"}}}, ErrCopyExists)
	h.must(&PeerDown{ID: "p4"})
	h.refuse(&AddBucket{ID: BucketID("main", "2", guid("p1")), Index: "main", Origin: "p1", Targets: []CopySpec{{Peer: "p4"}}}, ErrPeerNotUp)
}

func TestAddCopy(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", false)
	h.must(&AddCopy{Bucket: b, Peer: "p4", Searchable: true})
	if c := h.b(b).Copies["p4"]; c == nil || !c.Searchable {
		t.Fatal("copy not added")
	}
	h.refuse(&AddCopy{Bucket: b, Peer: "p4"}, ErrCopyExists)
	h.refuse(&AddCopy{Bucket: "x", Peer: "p4"}, ErrUnknownBucket)
	h.refuse(&AddCopy{Bucket: b, Peer: "p9"}, ErrUnknownPeer)
}

func TestCopySearchable(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", false)
	h.must(&PeerDown{ID: "p1"})
	h.wantPrimary(b, Site0, "")
	h.must(&CopySearchable{Bucket: b, Peer: "p2", Searchable: true})
	h.wantPrimary(b, Site0, "p2")
	hot := h.bucket("2", "p2", "p3", true)
	h.refuse(&CopySearchable{Bucket: hot, Peer: "p2", Searchable: false}, ErrHotOrigin)
	h.refuse(&CopySearchable{Bucket: hot, Peer: "p4", Searchable: true}, ErrUnknownCopy)
}

func TestRemoveCopy(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true)
	h.must(&RemoveCopy{Bucket: b, Peer: "p1"})
	h.wantPrimary(b, Site0, "p2")
	hot := h.bucket("2", "p2", "p3", true)
	h.refuse(&RemoveCopy{Bucket: hot, Peer: "p2"}, ErrHotOrigin)
	h.refuse(&RemoveCopy{Bucket: b, Peer: "p1"}, ErrUnknownCopy)
}

func TestRollBucket(t *testing.T) {
	h := fourPeers(t)
	b := h.bucket("1", "p1", "p2", true)
	gen := h.s.CurrentGeneration()
	h.must(&RollBucket{Bucket: b, Earliest: 10, Latest: 20, Size: 300, Events: 3, Blocks: 2, LastChecksum: "x"})
	bb := h.b(b)
	if bb.Hot || bb.Earliest != 10 || bb.Latest != 20 || bb.Size != 300 || bb.Events != 3 || !bb.Sealed || bb.Blocks != 2 {
		t.Fatalf("rolled bucket %+v", bb)
	}
	if h.s.CurrentGeneration() != gen {
		t.Fatal("a roll started a generation")
	}
	h.refuse(&RollBucket{Bucket: b, Earliest: 10, Latest: 20}, ErrBucketNotHot)
	h.refuse(&RollBucket{Bucket: "x"}, ErrUnknownBucket)
}

func TestSealBucket(t *testing.T) {
	h := fourPeers(t)
	b := h.bucket("1", "p1", "p2", true, "p3", false)
	h.must(&PeerDown{ID: "p1"})
	h.must(&SealBucket{Bucket: b, Blocks: 7, LastChecksum: "c7", Latest: 99})
	bb := h.b(b)
	if bb.Hot || !bb.Sealed || bb.Blocks != 7 || bb.LastChecksum != "c7" || bb.Latest != 99 {
		t.Fatalf("sealed %+v", bb)
	}
	h.must(&SealBucket{Bucket: b, Blocks: 7, LastChecksum: "c7"}) // same length again: harmless
	h.refuse(&SealBucket{Bucket: b, Blocks: 8, LastChecksum: "c8"}, ErrBucketNotHot)
}

func TestCreateFixup(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	r := h.must(&CreateFixup{Kind: TaskReplicate, Level: LevelReplication, Bucket: b, Source: "p1", Target: "p4", Reason: "rf"})
	task := h.s.d.Tasks[r.Index]
	if task == nil || task.ID != h.idx || task.Destructive {
		t.Fatalf("task %+v", task)
	}
	r = h.must(&CreateFixup{Kind: TaskRemoveCopy, Level: LevelExcess, Bucket: b, Target: "p3"})
	if !h.s.d.Tasks[r.Index].Destructive {
		t.Fatal("remove_copy not destructive")
	}
	h.refuse(&CreateFixup{Kind: TaskReplicate, Level: LevelReplication, Bucket: b, Source: "p1", Target: "p4"}, ErrTaskExists)
	h.refuse(&CreateFixup{Kind: TaskReplicate, Level: LevelReplication, Bucket: b, Source: "p1", Target: "p2"}, ErrBadTask)
	h.refuse(&CreateFixup{Kind: "teleport", Level: LevelReplication, Bucket: b}, ErrBadTask)
	if _, err := Encode(&CreateFixup{Kind: TaskSeal, Level: 99, Bucket: b}); err == nil {
		t.Fatal("encoded an unknown level")
	}
	h.refuse(&CreateFixup{Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p4"}, ErrUnknownCopy)
	h.refuse(&CreateFixup{Kind: TaskSeal, Level: LevelStreaming, Bucket: "x"}, ErrUnknownBucket)
}

func TestFixupDone(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	rep := h.must(&CreateFixup{Kind: TaskReplicate, Level: LevelReplication, Bucket: b, Source: "p1", Target: "p4", Searchable: true}).Index
	ms := h.must(&CreateFixup{Kind: TaskMakeSearchable, Level: LevelSearch, Bucket: b, Target: "p3"}).Index
	rm := h.must(&CreateFixup{Kind: TaskRemoveCopy, Level: LevelExcess, Bucket: b, Target: "p2"}).Index
	h.must(&FixupDone{ID: rep})
	h.must(&FixupDone{ID: ms, Failed: true, Reason: "disk full"})
	h.must(&FixupDone{ID: rm})
	bb := h.b(b)
	if c := bb.Copies["p4"]; c == nil || !c.Searchable {
		t.Fatal("replicate had no effect")
	}
	if bb.Copies["p3"].Searchable {
		t.Fatal("a failed task had an effect")
	}
	if _, ok := bb.Copies["p2"]; ok {
		t.Fatal("remove_copy had no effect")
	}
	if len(h.s.d.Tasks) != 0 {
		t.Fatal("tasks left open")
	}
	h.refuse(&FixupDone{ID: rep}, ErrUnknownTask)
	fr := h.must(&CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: b}).Index
	h.must(&FixupDone{ID: fr})
	if _, ok := h.s.d.Buckets[b]; ok {
		t.Fatal("frozen bucket still listed")
	}
}

func TestSetMaintenance(t *testing.T) {
	h := fourPeers(t)
	h.must(&SetMaintenance{Enabled: true})
	if !h.s.Maintenance() || !h.s.Status().Maintenance {
		t.Fatal("maintenance not on")
	}
	h.must(&SetMaintenance{Enabled: false})
	if h.s.Maintenance() {
		t.Fatal("maintenance still on")
	}
}

func TestRebalancePrimaries(t *testing.T) {
	h := fourPeers(t)
	var bs []string
	for i := range 4 {
		bs = append(bs, h.warm(string(rune('a'+i)), "p1", "p2", true))
	}
	// All four have p1 as primary (origin while hot, kept when warm).
	for _, b := range bs {
		h.wantPrimary(b, Site0, "p1")
	}
	gen := h.s.CurrentGeneration()
	h.must(&RebalancePrimaries{})
	n := map[string]int{}
	for _, b := range bs {
		n[h.primary(b, Site0)]++
	}
	if n["p1"] != 2 || n["p2"] != 2 {
		t.Fatalf("after rebalance %v", n)
	}
	if h.s.CurrentGeneration() == gen {
		t.Fatal("rebalance moved primaries without a new generation")
	}
	// Balanced already: a second rebalance moves nothing.
	gen = h.s.CurrentGeneration()
	h.must(&RebalancePrimaries{})
	if h.s.CurrentGeneration() != gen {
		t.Fatal("idle rebalance started a generation")
	}
}

func TestPeerOffline(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	h.must(&PeerOffline{ID: "p1", At: h.now})
	if p, _ := h.s.Peer("p1"); p.State != StateRestarting {
		t.Fatal(p.State)
	}
	h.wantPrimary(b, Site0, "p2")
	h.refuse(&PeerOffline{ID: "p1"}, ErrBadState)
	h.must(&PeerOffline{ID: "p2", EnforceCounts: true, At: h.now})
	if p, _ := h.s.Peer("p2"); p.State != StateDecommissioning {
		t.Fatal(p.State)
	}
	h.wantPrimary(b, Site0, "")
	h.refuse(&PeerOffline{ID: "p9"}, ErrUnknownPeer)
}

func TestMarkCorrupt(t *testing.T) {
	h := fourPeers(t)
	b := h.warm("1", "p1", "p2", true)
	h.must(&MarkCorrupt{Bucket: b, Peer: "p1", Reason: "checksum"})
	h.wantPrimary(b, Site0, "p2")
	st := h.s.Status()
	if len(st.Fixups) != 1 || st.Fixups[0].Level != LevelCorruption {
		t.Fatalf("fixups %+v", st.Fixups)
	}
	h.refuse(&MarkCorrupt{Bucket: b, Peer: "p4"}, ErrUnknownCopy)
	if !strings.Contains(st.Fixups[0].Reason, "corrupt") {
		t.Fatal(st.Fixups[0].Reason)
	}
}

// TestTokenDefaultsNeedTheirVersion: a config whose HEC tokens carry
// host/source/sourcetype defaults is appended only by a group at
// TokenDefaultsVersion (an older manager would refuse the field names when
// it decodes the entry); a config without them by any group.
func TestTokenDefaultsNeedTheirVersion(t *testing.T) {
	c := DefaultConfig()
	c.HECTokens = []HECToken{{Token: "t", Ack: true}}
	if v := NeedsClusterVersion(&SetConfig{Config: c}); v != 1 {
		t.Fatalf("a config without token defaults needs cluster version %d, want 1", v)
	}
	c.HECTokens[0].Sourcetype = "syslog"
	if v := NeedsClusterVersion(&SetConfig{Config: c}); v != TokenDefaultsVersion {
		t.Fatalf("a config with token defaults needs cluster version %d, want %d", v, TokenDefaultsVersion)
	}
}
