package fsm

import (
	"crypto/sha256"
	"fmt"
	"io"
	"testing"
)

// benchState builds a state of n warm buckets over 12 peers on two sites,
// three copies each (two searchable), directly in the state's maps: the
// benchmarks measure snapshotting, not applying.
func benchState(b *testing.B, n int) *FSM {
	b.Helper()
	f := New()
	s := f.state
	s.d.Config = multiSite("origin:2,total:3", "origin:1,total:2", "site1", "site2")
	var peers []string
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("p%02d", i)
		site := "site1"
		if i%2 == 1 {
			site = "site2"
		}
		s.d.Peers[id] = &Peer{ID: id, GUID: guid(id), Site: site, State: StateUp, Registered: 1}
		peers = append(peers, id)
	}
	for i := 0; i < n; i++ {
		o := peers[i%len(peers)]
		id := BucketID("main", fmt.Sprintf("%08d", i), guid(o))
		bk := &Bucket{ID: id, Index: "main", Origin: o, OriginSite: s.d.Peers[o].Site, Earliest: int64(i) * 1e9,
			Latest: int64(i+1) * 1e9, Size: 1 << 20, Events: 10000, Sealed: true, Blocks: 8, LastChecksum: "abcdef01",
			Created: uint64(i + 2), Version: uint64(i + 2), Copies: map[string]*Copy{}, Primary: map[string]string{}}
		for k := 0; k < 3; k++ {
			p := peers[(i+k)%len(peers)]
			bk.Copies[p] = &Copy{Peer: p, Searchable: k < 2, Blocks: 8, LastChecksum: "abcdef01", LengthKnown: true}
		}
		bk.Primary["site1"], bk.Primary["site2"], bk.Primary[Site0] = peers[i%len(peers)], peers[(i+1)%len(peers)], peers[i%len(peers)]
		s.d.Buckets[id] = bk
	}
	s.rebuildDerived()
	return f
}

// discardSink is a snapshot sink writing nowhere.
type discardSink struct{ n int }

func (d *discardSink) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

var _ io.Writer = (*discardSink)(nil)

// BenchmarkSnapshotPersist is what Raft does at a snapshot: Snapshot (under
// the FSM's lock) then Persist (outside it). BenchmarkSnapshotLocked times
// the part that holds the lock only.
func BenchmarkSnapshotPersist(b *testing.B) {
	f := benchState(b, 100_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		if err := snap.Write(&discardSink{}); err != nil {
			b.Fatal(err)
		}
		snap.Release()
	}
}

func BenchmarkSnapshotLocked(b *testing.B) {
	f := benchState(b, 100_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		snap.Release()
	}
}

// BenchmarkStateHash is the manager's /v1/state/hash: the deterministic
// encoding's SHA-256.
func BenchmarkStateHash(b *testing.B) {
	f := benchState(b, 100_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := f.Hash(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlannerCopy is the copy the leader takes under the lock before
// each planning pass.
func BenchmarkPlannerCopy(b *testing.B) {
	f := benchState(b, 100_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var c *State
		f.Read(func(s *State) { c = s.Clone() })
		_ = c
	}
}

var _ = sha256.Sum256
