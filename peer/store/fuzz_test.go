package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
)

func sampleFrames(n int) []byte {
	var j []byte
	for k := 0; k < n; k++ {
		bb := newBlockBuilder()
		for i := 0; i < 5; i++ {
			e := testEvent("main", k*5+i)
			bb.add(&e)
		}
		j = appendFrame(j, uint32(k), 5, bb.minT, bb.maxT, bb.payload(nil))
	}
	return j
}

// FuzzScanJournal: any bytes scan without panicking, and the valid prefix
// only holds frames that verify.
func FuzzScanJournal(f *testing.F) {
	f.Add(sampleFrames(2))
	f.Add(sampleFrames(1)[:50])
	f.Add([]byte("QJB\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		res := scanJournal(bytes.NewReader(data), int64(len(data)))
		if res.validLen > int64(len(data)) {
			t.Fatalf("valid length %d beyond %d bytes", res.validLen, len(data))
		}
		for _, b := range res.blocks {
			p, err := readBlock(bytes.NewReader(data), b, nil)
			if err != nil {
				t.Fatalf("scanned block does not read: %v", err)
			}
			decodePayload(p, func(int, *decodedEvent) bool { return true })
		}
	})
}

// FuzzDecodePayload: a block payload that passed its checksum but is
// garbage must give an error, never a panic.
func FuzzDecodePayload(f *testing.F) {
	bb := newBlockBuilder()
	for i := 0; i < 3; i++ {
		e := testEvent("main", i)
		bb.add(&e)
	}
	f.Add(bb.payload(nil))
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		decodePayload(p, func(int, *decodedEvent) bool { return true })
	})
}

// FuzzReadIndex: a damaged index file is refused or read, never a panic.
func FuzzReadIndex(f *testing.F) {
	dir := f.TempDir()
	s, err := Open(Options{Dir: dir, GUID: testGUID, Searchable: true})
	if err != nil {
		f.Fatal(err)
	}
	var evs []Event
	for i := 0; i < 50; i++ {
		evs = append(evs, testEvent("main", i))
	}
	if _, err := s.Append(evs); err != nil {
		f.Fatal(err)
	}
	s.RollAll()
	s.WaitIdle(5 * time.Second)
	id := s.Inventory()[0].ID
	s.Close()
	good, _ := os.ReadFile(filepath.Join(dir, "buckets", id, indexFile))
	f.Add(good)
	f.Add(good[:len(good)/2])
	// a copy whose term "rare" is a long sparse list ('D' postings)
	dir2 := f.TempDir()
	s2, err := Open(Options{Dir: dir2, GUID: testGUID, Searchable: true})
	if err != nil {
		f.Fatal(err)
	}
	evs = evs[:0]
	for i := 0; i < 2000; i++ {
		e := testEvent("main", i)
		if i%20 == 0 {
			e.Raw = append(e.Raw, " rare"...)
		}
		evs = append(evs, e)
	}
	if _, err := s2.Append(evs); err != nil {
		f.Fatal(err)
	}
	s2.RollAll()
	s2.WaitIdle(5 * time.Second)
	id2 := s2.Inventory()[0].ID
	s2.Close()
	sparse, _ := os.ReadFile(filepath.Join(dir2, "buckets", id2, indexFile))
	f.Add(sparse)
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "index.qi")
		os.WriteFile(p, data, 0o644)
		r, err := openIndex(p)
		if err != nil {
			return
		}
		defer r.close()
		r.term("common")
		r.term("rare")
		r.termsWithPrefix("ev", func(string, *roaring.Bitmap) bool { return true })
		r.fieldValues("status", func(string, *roaring.Bitmap) bool { return true })
		r.times()
		r.getBloom()
		r.verify()
	})
}

// FuzzReplicaAppend: any bytes offered as replica frames either append
// whole, verified blocks or are refused and change nothing (no copy made).
func FuzzReplicaAppend(f *testing.F) {
	whole := sampleFrames(1)
	f.Add(whole)
	f.Add(whole[:len(whole)-3])
	bad := append([]byte(nil), whole...)
	bad[len(bad)-1] ^= 1
	f.Add(bad)
	f.Add([]byte("QJB\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Open(Options{Dir: t.TempDir(), GUID: testGUID, Searchable: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		id := BucketID("main", 0, "F0000000-0000-4000-8000-000000000000")
		n, err := s.Replicas().ReplicaAppend(id, "main", true, 0, [][]byte{data})
		inv := s.Inventory()
		if err != nil {
			if n != 0 || len(inv) != 0 {
				t.Fatalf("refused frame left %d blocks, %d copies", n, len(inv))
			}
			return
		}
		if n != 1 || len(inv) != 1 || inv[0].Blocks != 1 {
			t.Fatalf("accepted frame: %d blocks, inventory %+v", n, inv)
		}
		if err := s.Repairs().Verify(id); err != nil {
			t.Fatalf("accepted frame does not verify: %v", err)
		}
	})
}
