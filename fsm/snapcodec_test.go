package fsm

import (
	"bytes"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// randomFSM is an FSM after n steps of the random log, at cluster version
// v (SetClusterVersion last, so the snapshot format is v's).
func randomFSM(t testing.TB, seed uint64, n int, v int) (*FSM, *logGen) {
	f := New()
	g := newLogGen(rand.New(rand.NewPCG(seed, seed+1)))
	for i := 1; i <= n; i++ {
		applyLog(f, uint64(i), g.next(f))
	}
	cmd, err := Encode(&SetClusterVersion{Version: v})
	if err != nil {
		t.Fatal(err)
	}
	// A random log may have raised the version past v already.
	applyLog(f, uint64(n+1), cmd)
	return f, g
}

// TestBinarySnapshotRoundTrip: at cluster version 3 a snapshot is binary
// (buckets as records) and restores to the same state, byte for byte in
// its deterministic encoding, which then applies the same log identically;
// before version 3 it is the JSON an older build reads.
func TestBinarySnapshotRoundTrip(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		f, g := randomFSM(t, seed, 400, BinarySnapshotVersion)
		b := snapshotBytes(t, f)
		if !bytes.HasPrefix(b, []byte(binSnapshotMagic)) {
			t.Fatalf("seed %d: snapshot at cluster version %d is not binary: %q", seed, f.state.ClusterVersion(), b[:20])
		}
		var n int
		f.Read(func(s *State) { n = len(s.d.Buckets) })
		var nh int
		f.Read(func(s *State) { nh = len(s.d.History) })
		if n == 0 || nh == 0 {
			t.Fatalf("seed %d: %d buckets, %d deltas: the test would not see the records", seed, n, nh)
		}
		f2 := restored(t, b)
		if !bytes.Equal(marshal(t, f), marshal(t, f2)) {
			t.Fatalf("seed %d: restored state differs", seed)
		}
		for i := uint64(402); i <= 500; i++ {
			c := g.next(f)
			applyLog(f, i, c)
			applyLog(f2, i, c)
		}
		if !bytes.Equal(marshal(t, f), marshal(t, f2)) {
			t.Fatalf("seed %d: states diverge after restore", seed)
		}
	}
	f := New()
	if b := snapshotBytes(t, f); !bytes.HasPrefix(b, []byte(snapshotMagic)) {
		t.Fatalf("snapshot at cluster version 1 is not the JSON an older build reads: %q", b[:20])
	}
}

// TestBinarySnapshotCutRefused: a binary snapshot cut anywhere, or with
// bytes after its end, is refused with an error; nothing panics.
func TestBinarySnapshotCutRefused(t *testing.T) {
	f, _ := randomFSM(t, 7, 300, BinarySnapshotVersion)
	b := snapshotBytes(t, f)
	r := rand.New(rand.NewPCG(3, 4))
	cuts := []int{len(binSnapshotMagic), len(binSnapshotMagic) + 1, len(b) - 1, len(b) - len(binSnapshotEnd)}
	for range 200 {
		cuts = append(cuts, r.IntN(len(b)))
	}
	for _, n := range cuts {
		if err := New().Restore(io.NopCloser(bytes.NewReader(b[:n]))); err == nil {
			t.Fatalf("a snapshot cut at %d of %d bytes was restored", n, len(b))
		}
	}
	if err := New().Restore(io.NopCloser(bytes.NewReader(append(bytes.Clone(b), 'x')))); err == nil || !strings.Contains(err.Error(), "end marker") {
		t.Fatalf("trailing bytes: %v", err)
	}
}

// TestSnapshotCodecCoversEveryField: the binary record writes every field
// of Bucket and Copy. A field added to either fails here until the codec
// (snapcodec.go) writes and reads it.
func TestSnapshotCodecCoversEveryField(t *testing.T) {
	if got := structFields(reflect.TypeFor[Bucket]()); !reflect.DeepEqual(got, bucketFields) {
		t.Fatalf("Bucket fields %v, the binary snapshot writes %v", got, bucketFields)
	}
	if got := structFields(reflect.TypeFor[Copy]()); !reflect.DeepEqual(got, copyFields) {
		t.Fatalf("Copy fields %v, the binary snapshot writes %v", got, copyFields)
	}
	if got := structFields(reflect.TypeFor[Delta]()); !reflect.DeepEqual(got, deltaFields) {
		t.Fatalf("Delta fields %v, the binary snapshot writes %v", got, deltaFields)
	}
}

// FuzzReadSnapshot: no input makes the snapshot reader panic, and what it
// accepts encodes to a state that restores the same.
func FuzzReadSnapshot(f *testing.F) {
	fs, _ := randomFSM(f, 9, 120, BinarySnapshotVersion)
	f.Add(snapshotBytes(f, fs))
	f.Add(snapshotBytes(f, New()))
	f.Add([]byte(binSnapshotMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := readSnapshot(b)
		if err != nil {
			return
		}
		if _, err := s.Marshal(); err != nil {
			t.Fatalf("accepted state does not encode: %v", err)
		}
	})
}

// TestSnapshotEncodedInParts: the snapshot encoded by several goroutines
// is byte for byte the one encoded by one, and restores to the same state.
func TestSnapshotEncodedInParts(t *testing.T) {
	defer func(n int) { minBucketsPerWorker = n }(minBucketsPerWorker)
	minBucketsPerWorker = 10
	s := buildScale(t, 301)
	var want []byte
	s.f.Read(func(st *State) {
		var err error
		if want, err = st.appendBinary(nil); err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{2, 3, 7, 64} {
			parts, err := st.encodeBinary(nil, workers)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Join(parts, nil); !bytes.Equal(got, want) {
				t.Fatalf("%d workers: %d bytes in %d parts differ from the %d bytes of one", workers, len(got), len(parts), len(want))
			}
		}
	})
	if got := snapshotBytes(t, s.f); !bytes.Equal(got, want) {
		t.Fatalf("Snapshot wrote %d bytes, want the %d of appendBinary", len(got), len(want))
	}
	a, _ := s.f.Marshal()
	b, _ := restored(t, want).Marshal()
	if !bytes.Equal(a, b) {
		t.Fatal("the restored state encodes differently")
	}
}
