package manager

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/fsm"
)

func TestParseBootstrap(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Server
		err  bool
	}{
		{"", nil, false},
		{"m1=127.0.0.1:7001", []Server{{"m1", "127.0.0.1:7001"}}, false},
		{"m1=127.0.0.1:7001,m2=h2:7002,m3=[::1]:7003", []Server{{"m1", "127.0.0.1:7001"}, {"m2", "h2:7002"}, {"m3", "[::1]:7003"}}, false},
		{"m1", nil, true},
		{"m1=", nil, true},
		{"=127.0.0.1:7001", nil, true},
		{"m1=127.0.0.1", nil, true},
		{"m1=127.0.0.1:7001,", nil, true},
	} {
		got, err := ParseBootstrap(tc.in)
		if (err != nil) != tc.err || (!tc.err && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("ParseBootstrap(%q) = %+v, %v; want %+v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParseBootstrap(f *testing.F) {
	for _, s := range []string{"", "m1=127.0.0.1:7001", "m1=a:1,m2=b:2", "m1", "=:", ",,,", "m1=[::1]:7001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseBootstrap(s)
		if err != nil {
			return
		}
		for _, sv := range got {
			if sv.ID == "" || sv.RaftAddr == "" || strings.Contains(sv.ID, ",") {
				t.Fatalf("ParseBootstrap(%q) accepted %+v", s, sv)
			}
		}
	})
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, canceled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.canceled = true; return nil }

// The manager's snapshot carries the member table and the cluster state;
// restoring it into fresh FSMs gives back both, byte for byte.
func TestMuxSnapshotRoundTrip(t *testing.T) {
	a := newMuxFSM(fsm.New())
	idx := uint64(0)
	applyMember := func(c memberCommand) {
		idx++
		b, _ := json.Marshal(c)
		a.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: b, Extensions: memberExtension})
	}
	applyFSM := func(c fsm.Command) {
		idx++
		b, err := fsm.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if res := a.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: b}); res != nil {
			if err, ok := res.(error); ok {
				t.Fatalf("apply %T: %v", c, err)
			}
		}
	}
	applyMember(memberCommand{Op: "set", Member: Member{ID: "m1", Site: "site1", RaftAddr: "127.0.0.1:7001", HTTPAddr: "127.0.0.1:8001"}})
	applyFSM(&fsm.SetMaintenance{Enabled: true})
	applyMember(memberCommand{Op: "set", Member: Member{ID: "m2", RaftAddr: "127.0.0.1:7002", HTTPAddr: "127.0.0.1:8002"}})
	applyMember(memberCommand{Op: "seeded"})
	applyFSM(&fsm.RegisterPeer{ID: "p1", GUID: "g1", Site: fsm.DefaultSite})

	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v (closed %v)", err, sink.closed)
	}
	inner := fsm.New()
	b := newMuxFSM(inner)
	if err := b.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !reflect.DeepEqual(a.memberList(), b.memberList()) || !b.seeded() {
		t.Fatalf("member table after restore %+v (seeded %v), want %+v", b.memberList(), b.seeded(), a.memberList())
	}
	wa, _ := a.inner.Marshal()
	wb, _ := inner.Marshal()
	if !bytes.Equal(wa, wb) {
		t.Fatal("cluster state differs after snapshot round trip")
	}
	// A foreign snapshot is refused and changes nothing.
	if err := b.Restore(io.NopCloser(strings.NewReader("quarry-fsm\n{}"))); err == nil {
		t.Fatal("restore of a foreign snapshot succeeded")
	}
	if len(b.memberList()) != 2 {
		t.Fatal("refused restore changed the member table")
	}
}
