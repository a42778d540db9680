package store

import (
	"bytes"
	"github.com/RoaringBitmap/roaring/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "index.qi")
		os.WriteFile(p, data, 0o644)
		r, err := openIndex(p)
		if err != nil {
			return
		}
		defer r.close()
		r.term("common")
		r.termsWithPrefix("ev", func(string, *roaring.Bitmap) bool { return true })
		r.fieldValues("status", func(string, *roaring.Bitmap) bool { return true })
		r.times()
		r.getBloom()
		r.verify()
	})
}
