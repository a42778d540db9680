package fsm

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The scale benchmarks of issue 9 item 6: a state of N buckets over 300
// peers on 3 sites (RF origin:1,total:3, SF origin:1,total:3: a searchable
// copy per site, so every site's table is served locally), every bucket warm and sealed, each with a
// primary in every site's table and in site0. They measure what a manager
// pays at that size: the heap the state holds, a snapshot (size and the time
// of Snapshot+Persist), a restore, one generation change (a peer declared
// Down and its primaries moved), and one planner pass over a settled state.
//
//	go test -run '^$' -bench BenchmarkScale -benchtime 1x -timeout 60m ./fsm/
//
// runs the sizes in QUARRY_SCALE_BUCKETS (comma-separated; default
// "100000,1000000"). `make bench-scale` runs both sizes; CI runs 100k only
// (`make test-norace`, QUARRY_SCALE_BUCKETS=100000), so the benchmark stays
// runnable in a bounded time.

const (
	scalePeers = 300
	scaleSites = 3
)

func scaleSizes(tb testing.TB) []int {
	v := os.Getenv("QUARRY_SCALE_BUCKETS")
	if v == "" {
		v = "100000,1000000"
	}
	var out []int
	for _, f := range bytes.Split([]byte(v), []byte(",")) {
		n, err := strconv.Atoi(string(bytes.TrimSpace(f)))
		if err != nil || n <= 0 {
			tb.Fatalf("QUARRY_SCALE_BUCKETS=%q: want comma-separated positive counts", v)
		}
		out = append(out, n)
	}
	return out
}

// scaleFSM is an FSM applying commands at increasing indexes, the way Raft
// hands them over (encoded log entries).
type scaleFSM struct {
	tb  testing.TB
	f   *FSM
	idx uint64
}

func (s *scaleFSM) apply(c Command) {
	data, err := Encode(c)
	if err != nil {
		s.tb.Fatal(err)
	}
	s.idx++
	if r := s.f.Apply(s.idx, data); r != nil {
		if err, ok := r.(error); ok {
			s.tb.Fatalf("apply %T: %v", c, err)
		}
	}
}

func scalePeerID(i int) string { return fmt.Sprintf("site%d-p%03d", i%scaleSites+1, i) }

// buildScale builds the state of n buckets. Bucket i has its origin on peer
// i%300 and one copy on the next peer of each other site.
func buildScale(tb testing.TB, n int) *scaleFSM {
	tb.Helper()
	s := &scaleFSM{tb: tb, f: New()}
	cfg := DefaultConfig()
	cfg.Sites = []string{"site1", "site2", "site3"}
	cfg.SiteReplicationFactor = MustParsePolicy("origin:1,total:3")
	cfg.SiteSearchFactor = MustParsePolicy("origin:1,total:3")
	s.apply(&SetConfig{Config: cfg})
	// A group of this build: snapshots in the binary form of version 3.
	s.apply(&SetClusterVersion{Version: Version})
	at := epoch
	for i := 0; i < scalePeers; i++ {
		s.apply(&RegisterPeer{ID: scalePeerID(i), GUID: guid(scalePeerID(i)), Site: fmt.Sprintf("site%d", i%scaleSites+1), At: at})
	}
	for i := 0; i < n; i++ {
		o := i % scalePeers
		origin := scalePeerID(o)
		id := BucketID("main", strconv.Itoa(i), guid(origin))
		// The next peer of each other site: o+1 and o+2 are on the two
		// other sites (peers alternate sites); the second is searchable.
		ts := []CopySpec{
			{Peer: scalePeerID((o + 1 + 3*(i/scalePeers%50)) % scalePeers), Searchable: true},
			{Peer: scalePeerID((o + 2 + 3*(i/scalePeers%50)) % scalePeers), Searchable: true},
		}
		t0 := at.UnixNano() + int64(i)*int64(time.Second)
		s.apply(&AddBucket{ID: id, Index: "main", Origin: origin, Targets: ts, Earliest: t0})
		s.apply(&RollBucket{Bucket: id, Earliest: t0, Latest: t0 + int64(time.Second), Size: 10 << 20, Events: 50000, Blocks: 40, LastChecksum: "c40"})
	}
	return s
}

var (
	scaleMu    sync.Mutex
	scaleCache = map[int]*scaleFSM{}
)

// scaleState builds (once per process and size) the state of n buckets;
// benchmarks that change it work on a restored copy.
func scaleState(b *testing.B, n int) *scaleFSM {
	scaleMu.Lock()
	defer scaleMu.Unlock()
	if s, ok := scaleCache[n]; ok {
		return s
	}
	t0 := time.Now()
	s := buildScale(b, n)
	b.Logf("built %d buckets over %d peers in %v (%d commands)", n, scalePeers, time.Since(t0).Round(time.Millisecond), s.idx)
	scaleCache[n] = s
	return s
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func BenchmarkScale(b *testing.B) {
	for _, n := range scaleSizes(b) {
		b.Run(fmt.Sprintf("buckets=%d", n), func(b *testing.B) {
			b.Run("memory", func(b *testing.B) {
				scaleMu.Lock()
				_, built := scaleCache[n]
				scaleMu.Unlock()
				if built {
					b.Skip("the state is already built; memory is measured by the first run")
				}
				before := heapInUse()
				s := scaleState(b, n)
				after := heapInUse()
				runtime.KeepAlive(s)
				b.ReportMetric(float64(after-before)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(after-before)/float64(n), "heap-B/bucket")
			})
			b.Run("snapshot", func(b *testing.B) {
				// Snapshot (under the FSM's read lock: Apply waits for
				// it) and Persist (concurrent with Apply) to a file the
				// way Raft's file snapshot store writes one (a CRC-64 of
				// the bytes, a 64 KiB buffer, fsync); lock-ms is the
				// first alone.
				s := scaleState(b, n)
				var size int
				var locked time.Duration
				var worst maxOf
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					snap, err := s.f.Snapshot()
					if err != nil {
						b.Fatal(err)
					}
					locked += time.Since(t0)
					n, err := persistToFile(b.TempDir(), snap)
					if err != nil {
						b.Fatal(err)
					}
					snap.Release()
					size = int(n)
					worst.add(time.Since(t0))
				}
				b.ReportMetric(float64(size)/(1<<20), "snapshot-MiB")
				b.ReportMetric(float64(locked.Milliseconds())/float64(b.N), "lock-ms")
				worst.report(b)
			})
			b.Run("restore", func(b *testing.B) {
				s := scaleState(b, n)
				data := snapshotBytes(b, s.f)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					restored(b, data)
				}
			})
			b.Run("peer-down", func(b *testing.B) {
				// One generation change: a peer declared Down, its
				// primaries moved in every table. Applied to a restored
				// copy each time, outside the timer.
				s := scaleState(b, n)
				data := snapshotBytes(b, s.f)
				victim := scalePeerID(7)
				var worst maxOf
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					f := restored(b, data)
					// A running leader's sorted bucket ids are cached (every
					// view and planner pass asks) and its copy index built
					// (the first peer state change after a start builds
					// it: ~0.3 s at 100k buckets); a fresh restore has
					// neither, which is not the command's cost.
					var gen uint64
					f.Read(func(st *State) { gen = st.CurrentGeneration(); st.bucketIDs(); st.bucketsOn("") })
					cmd, err := Encode(&PeerDown{ID: victim, Reason: "bench", At: epoch.Add(time.Hour)})
					if err != nil {
						b.Fatal(err)
					}
					runtime.GC() // the restore's garbage is not the command's cost
					b.StartTimer()
					t0 := time.Now()
					r := f.Apply(s.idx+1, cmd)
					worst.add(time.Since(t0))
					b.StopTimer()
					if err, ok := r.(error); ok {
						b.Fatal(err)
					}
					f.Read(func(st *State) {
						if st.CurrentGeneration() <= gen {
							b.Fatalf("generation %d after the peer went down, want > %d", st.CurrentGeneration(), gen)
						}
					})
					b.StartTimer()
				}
				worst.report(b)
			})
			b.Run("plan-peer-down", func(b *testing.B) {
				// The pass after a peer went Down: every bucket it held
				// (3n/300) is short of a copy and gets a replication,
				// up to the incoming throttles. The busiest pass a
				// single failure makes.
				s := scaleState(b, n)
				data := snapshotBytes(b, s.f)
				victim := scalePeerID(7)
				now := epoch.Add(time.Hour)
				hb := map[string]time.Time{}
				for i := 0; i < scalePeers; i++ {
					if id := scalePeerID(i); id != victim {
						hb[id] = now
					}
				}
				var cmds int
				var worst maxOf
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					f := restored(b, data)
					cmd, err := Encode(&PeerDown{ID: victim, Reason: "bench", At: now})
					if err != nil {
						b.Fatal(err)
					}
					f.Apply(s.idx+1, cmd)
					runtime.GC() // the restore's garbage is not the pass's cost
					b.StartTimer()
					t0 := time.Now()
					f.Read(func(st *State) {
						cmds = len(Plan(st, PlanInput{Now: now, LastHeartbeat: hb}))
					})
					worst.add(time.Since(t0))
				}
				b.ReportMetric(float64(cmds), "commands")
				worst.report(b)
			})
			b.Run("plan", func(b *testing.B) {
				// One planner pass over the settled state with every peer
				// heard from just now: the leader's steady-state cost.
				s := scaleState(b, n)
				hb := map[string]time.Time{}
				now := epoch.Add(time.Hour)
				for i := 0; i < scalePeers; i++ {
					hb[scalePeerID(i)] = now
				}
				var cmds int
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					s.f.Read(func(st *State) {
						cmds = len(Plan(st, PlanInput{Now: now, LastHeartbeat: hb}))
					})
				}
				b.ReportMetric(float64(cmds), "commands")
			})
		})
	}
}

// TestScaleStateSettled checks the benchmark's premise at a small size: the
// built state is valid and complete (every bucket has a primary in every
// table), so the planner's pass measures steady state, not fixup work.
func TestScaleStateSettled(t *testing.T) {
	s := buildScale(t, 3000)
	now := epoch.Add(time.Hour)
	hb := map[string]time.Time{}
	for i := 0; i < scalePeers; i++ {
		hb[scalePeerID(i)] = now
	}
	s.f.Read(func(st *State) {
		for id, b := range st.d.Buckets {
			for _, table := range st.tables() {
				if b.Primary[table] == "" {
					t.Fatalf("bucket %s has no primary in table %s", id, table)
				}
			}
		}
		if cmds := Plan(st, PlanInput{Now: now, LastHeartbeat: hb}); len(cmds) != 0 {
			t.Fatalf("the planner has %d commands for the built state, want 0 (first %T %+v)", len(cmds), cmds[0], cmds[0])
		}
	})
}

// persistToFile writes a snapshot as hashicorp/raft's FileSnapshotSink
// does (the manager's store): through a CRC-64 (ECMA) and a 64 KiB buffer
// into a file, then fsync. It returns the bytes written.
func persistToFile(dir string, snap *Snapshot) (int64, error) {
	f, err := os.CreateTemp(dir, "state-*.bin")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	crc := crc64.New(crc64.MakeTable(crc64.ECMA))
	buf := bufio.NewWriterSize(f, 64<<10)
	cw := &countWriter{w: io.MultiWriter(buf, crc)}
	if err := snap.Write(cw); err != nil {
		return 0, err
	}
	if err := buf.Flush(); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return cw.n, f.Close()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// maxOf is the slowest of a benchmark's iterations (max-ms): the targets
// bound every run, not the mean ns/op reports.
type maxOf time.Duration

func (m *maxOf) add(d time.Duration) { *m = max(*m, maxOf(d)) }

func (m maxOf) report(b *testing.B) {
	b.ReportMetric(float64(time.Duration(m).Microseconds())/1000, "max-ms")
}
