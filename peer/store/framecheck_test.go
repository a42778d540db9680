package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// rawFrame wraps any compressed bytes in a journal frame header with a
// valid checksum, as a peer that lies about its blocks would send it.
func rawFrame(block, events, rawLen uint32, comp []byte) []byte {
	f := make([]byte, frameHeaderLen, frameHeaderLen+len(comp))
	copy(f[0:4], frameMagic[:])
	f[4] = codecZstd
	binary.LittleEndian.PutUint32(f[8:], block)
	binary.LittleEndian.PutUint32(f[12:], events)
	binary.LittleEndian.PutUint32(f[16:], rawLen)
	binary.LittleEndian.PutUint32(f[20:], uint32(len(comp)))
	f = append(f, comp...)
	crc := crc32.Update(crc32.Checksum(f[:40], castagnoli), castagnoli, f[frameHeaderLen:])
	binary.LittleEndian.PutUint32(f[40:], crc)
	return f
}

// zstdZeros compresses n zero bytes as one streamed zstd frame without
// holding them: with declare, the frame's Frame_Content_Size says n.
func zstdZeros(t testing.TB, n int64, declare bool) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
	if err != nil {
		t.Fatal(err)
	}
	if declare {
		enc.ResetContentSize(&out, n)
	} else {
		enc.Reset(&out)
	}
	zeros := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(zeros)) {
		if _, err := enc.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// allocated runs fn and returns the bytes the process allocated meanwhile.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestEncoderDeclaresContentSize pins what the existing data looks like: the
// journal encoder writes Frame_Content_Size for every payload of 256 bytes
// or more (klauspost/compress EncodeAll), so the size check reads every
// frame this store ever wrote, through both decoders.
func TestEncoderDeclaresContentSize(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{1, 100, 255, 256, 1000, 1024, 1025, 64 << 10, 128 << 10, 1 << 20} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = "abcdefgh 0123456789"[rng.Intn(19)]
		}
		frame := appendFrame(nil, 0, 1, 0, 0, payload)
		var zh zstd.Header
		if err := zh.Decode(frame[frameHeaderLen:]); err != nil {
			t.Fatalf("%d bytes: zstd header: %v", n, err)
		}
		if n >= noFCSMax && (!zh.HasFCS || zh.FrameContentSize != uint64(n)) {
			t.Fatalf("%d bytes: frame declares content size %v/%d", n, zh.HasFCS, zh.FrameContentSize)
		}
		for name, d := range map[string]*frameDecoder{"local": localFrames, "replica": replicaFrames} {
			_, p, err := d.decode(frame, nil)
			if err != nil || !bytes.Equal(p, payload) {
				t.Fatalf("%d bytes, %s decoder: %v", n, name, err)
			}
		}
	}
}

// TestReplicaRefusesZstdBombs: frames from another peer whose zstd data
// would decompress to far more than they declare (or than a block may hold)
// are refused before they are decoded — ErrCorrupt with a message naming
// the problem — no copy is created, and the refusal allocates next to
// nothing (a 6 KB frame used to decode to 200 MiB).
func TestReplicaRefusesZstdBombs(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), GUID: testGUID, Searchable: true})
	defer s.Close()
	id := BucketID("main", 0, "F0000000-0000-4000-8000-000000000000")
	bomb := zstdZeros(t, 200<<20, true) // declares 200 MiB
	big := zstdZeros(t, 60<<20, true)   // declares 60 MiB: a frame header may say so, a block may not
	undeclared := zstdZeros(t, 200<<20, false)
	small := appendFrame(nil, 0, 1, 0, 0, []byte("hello"))[frameHeaderLen:] // no content size: < 256 bytes
	t.Logf("compressed: 200 MiB bomb %d bytes, 60 MiB %d bytes, undeclared %d bytes", len(bomb), len(big), len(undeclared))
	cases := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"declared size differs from the header", rawFrame(0, 1, 1000, bomb), "zstd frame declares 209715200 bytes, its header 1000"},
		{"over the replica block limit", rawFrame(0, 1, 60<<20, big), "declares 62914560 decompressed bytes, over the 16777216-byte block limit"},
		{"no declared size", rawFrame(0, 1, 1000, undeclared), "zstd frame declares no content size"},
		{"small undeclared frame that keeps going", rawFrame(0, 1, 100, undeclared), "does not decompress"},
		{"second frame after an honest one", rawFrame(0, 1, 5, append(append([]byte(nil), small...), undeclared...)), "does not decompress"},
		{"skippable frame", rawFrame(0, 1, 5, []byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4}), "skippable zstd frame"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var n uint32
			var err error
			alloc := allocated(func() { n, err = s.Replicas().ReplicaAppend(id, "main", true, 0, [][]byte{c.frame}) })
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrCorrupt with %q", err, c.want)
			}
			t.Logf("refused (%v) allocating %d KiB", err, alloc>>10)
			if n != 0 || len(s.Inventory()) != 0 {
				t.Fatalf("refused frame left %d blocks, inventory %+v", n, s.Inventory())
			}
			if alloc > 4<<20 {
				t.Fatalf("refusing a %d-byte frame allocated %d bytes", len(c.frame), alloc)
			}
		})
	}
	// The same frames in this peer's own journal (a damaged disk) are
	// refused by the search path's decoder too, as cheaply.
	for _, fr := range [][]byte{rawFrame(0, 1, 1000, bomb), rawFrame(0, 1, 100, undeclared)} {
		var err error
		alloc := allocated(func() { _, _, err = decodeFrame(fr, nil) })
		if !errors.Is(err, ErrCorrupt) || alloc > 4<<20 {
			t.Fatalf("local decode: %v, %d bytes allocated", err, alloc)
		}
	}
	// An honest frame still appends.
	if n, err := s.Replicas().ReplicaAppend(id, "main", true, 0, [][]byte{sampleFrames(1)}); err != nil || n != 1 {
		t.Fatalf("honest frame: %d, %v", n, err)
	}
}

// TestReplicaAppendManyFramesReindexed: a call whose frames decode to more
// than replicaKeepBytes keeps only the first payloads and decodes the rest
// again to index them; the copy ends whole and searchable.
func TestReplicaAppendManyFramesReindexed(t *testing.T) {
	defer func(k int) { replicaKeepBytes = k }(replicaKeepBytes)
	replicaKeepBytes = 32 << 10
	origin := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 8 << 10})
	defer origin.Close()
	var evs []Event
	for i := 0; i < 2000; i++ {
		e := testEvent("main", i)
		e.Raw = append(e.Raw, bytes.Repeat([]byte(" pad"), 20)...)
		evs = append(evs, e)
	}
	if _, err := origin.Append(evs); err != nil {
		t.Fatal(err)
	}
	if err := origin.Flush(); err != nil {
		t.Fatal(err)
	}
	id := origin.Inventory()[0].ID
	frames, err := origin.Replicas().ReadFrames(id, 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	raw := 0
	for _, f := range frames {
		raw += frameRawLen(f)
	}
	if raw <= replicaKeepBytes {
		t.Fatalf("frames decode to %d bytes, want more than %d", raw, replicaKeepBytes)
	}
	target := mustOpen(t, Options{Dir: t.TempDir(), GUID: "B0000000-0000-4000-8000-000000000000", Searchable: true})
	defer target.Close()
	n, err := target.Replicas().ReplicaAppend(id, "main", true, 0, frames)
	if err != nil || int(n) != len(frames) {
		t.Fatalf("append %d frames: %d, %v", len(frames), n, err)
	}
	var hits uint64
	for _, seg := range target.Segments() {
		if bm, _ := seg.Term("pad"); bm != nil {
			hits += bm.GetCardinality()
		}
	}
	if hits != uint64(len(evs)) {
		t.Fatalf("replica finds %d events by term, want %d", hits, len(evs))
	}
}

// FuzzZstdFrameCheck: any compressed bytes with any declared length, in a
// frame with a valid checksum, are refused or decode to exactly the
// declared length, within the replica block limit.
func FuzzZstdFrameCheck(f *testing.F) {
	payload := bytes.Repeat([]byte("GET /index.html 200 "), 100)
	good := appendFrame(nil, 0, 1, 0, 0, payload)[frameHeaderLen:]
	f.Add(uint32(len(payload)), good)
	f.Add(uint32(5), appendFrame(nil, 0, 1, 0, 0, []byte("hello"))[frameHeaderLen:])
	f.Add(uint32(1000), zstdZeros(f, 1<<20, true))
	f.Add(uint32(100), zstdZeros(f, 1<<20, false))
	f.Add(uint32(0), []byte{})
	f.Add(uint32(12), []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x0c})
	f.Fuzz(func(t *testing.T, rawLen uint32, comp []byte) {
		frame := rawFrame(0, 1, rawLen, comp)
		_, p, err := replicaFrames.decode(frame, nil)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("refusal is not ErrCorrupt: %v", err)
			}
			return
		}
		if len(p) != int(rawLen) || rawLen > maxReplicaBlockRaw {
			t.Fatalf("decoded %d bytes, declared %d", len(p), rawLen)
		}
		// An accepted frame decodes the same through the local decoder.
		if _, q, err := decodeFrame(frame, nil); err != nil || !bytes.Equal(p, q) {
			t.Fatalf("local decoder disagrees: %v", err)
		}
	})
}
