package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

func testRequestKey(key string, total uint32, ords []uint32) *RequestKey {
	return &RequestKey{Token: sha256.Sum256([]byte("tok")), BodyHash: sha256.Sum256([]byte(key)), Key: key,
		Arrival: time.Now().UnixNano(), Total: total, Ords: ords}
}

// coverage sums the records of each key into the request ordinals they
// name, failing on an ordinal named twice.
func coverage(t *testing.T, recs []KeyRecord) map[string][]uint32 {
	t.Helper()
	out := map[string][]uint32{}
	for _, r := range recs {
		for o := r.First; o < r.First+r.Count; o++ {
			if slices.Contains(out[r.Key], o) {
				t.Fatalf("key %s: ordinal %d recorded twice", r.Key, o)
			}
			out[r.Key] = append(out[r.Key], o)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

func keyRecordsOf(s *Store) []KeyRecord {
	var recs []KeyRecord
	s.Keys().KeyRecords(time.Now().Add(-time.Hour), func(r KeyRecord) { recs = append(recs, r) })
	return recs
}

// TestKeysRecordedWithTheirEvents: a keyed request spread over several
// blocks and two indexes records exactly its ordinals (a partial one only
// those it appended), in version 2 frames; an unkeyed block stays a
// version 1 frame; the records survive a restart; a replica learns them as
// its append makes the blocks durable, and a frame whose key section is
// damaged (checksum recomputed) is refused with nothing written.
func TestKeysRecordedWithTheirEvents(t *testing.T) {
	dir := t.TempDir()
	hook := &captureHook{}
	s := mustOpen(t, Options{Dir: dir, Searchable: true, BlockBytes: 2 << 10})
	s.Replicas().SetReplication(hook)
	plain := appendN(t, s, "main", 0, 3) // no key: version 1 frames
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	evs := make([]Event, 0, 200)
	for i := 0; i < 200; i++ {
		ix := "main"
		if i%3 == 0 {
			ix = "web"
		}
		evs = append(evs, testEvent(ix, 100+i))
	}
	a, err := s.AppendKeyed(evs, nil, testRequestKey("k-full", 200, nil))
	if err != nil {
		t.Fatal(err)
	}
	part := []Event{testEvent("main", 900), testEvent("main", 901)}
	b, err := s.AppendKeyed(part, nil, testRequestKey("k-part", 10, []uint32{3, 7}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendKeyed(part, nil, testRequestKey("k-bad", 10, []uint32{3})); err == nil {
		t.Fatal("ordinals that do not match the events were taken")
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// The write hook may see a block after Flush returns (the writer
	// hands it over after its fsync): mark what it has until every ack
	// is durable.
	testutil.WaitFor(t, 10*time.Second, func() error {
		hook.markAll()
		for _, ack := range []*Ack{plain, a, b} {
			if !ack.Durable() {
				return errors.New("not durable")
			}
		}
		return nil
	})
	want := map[string][]uint32{"k-part": {3, 7}}
	for i := uint32(0); i < 200; i++ {
		want["k-full"] = append(want["k-full"], i)
	}
	recs := keyRecordsOf(s)
	if got := coverage(t, recs); !equalCoverage(got, want) {
		t.Fatalf("recorded coverage %v, want %v", got, want)
	}
	if len(recs) < 3 {
		t.Fatalf("a request over several blocks and two indexes made %d records", len(recs))
	}
	frames := map[string][][]byte{}
	versions := map[byte]int{}
	for _, ci := range s.Inventory() {
		fr, err := s.Replicas().ReadFrames(ci.ID, 0, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		frames[ci.ID] = fr
		for _, f := range fr {
			versions[f[3]]++
		}
	}
	if versions[1] == 0 || versions[2] == 0 {
		t.Fatalf("frame versions %v: want unkeyed blocks in version 1 and keyed ones in version 2", versions)
	}
	// A replica learns the keys with the blocks.
	var mu sync.Mutex
	var learned []KeyRecord
	r := mustOpen(t, Options{Dir: t.TempDir(), GUID: "B0000000-0000-4000-8000-000000000000", Searchable: true,
		KeysLearned: func(k []KeyRecord) { mu.Lock(); learned = append(learned, k...); mu.Unlock() }})
	defer r.Close()
	for id, fr := range frames {
		index, _, _, _ := parseBucketDir(id)
		if _, err := r.Replicas().ReplicaAppend(id, index, true, 0, fr); err != nil {
			t.Fatalf("replica append %s: %v", id, err)
		}
	}
	mu.Lock()
	if got := coverage(t, learned); !equalCoverage(got, want) {
		t.Fatalf("replica learned %v, want %v", got, want)
	}
	mu.Unlock()
	badKeyFrameRefused(t, frames)
	// The records survive a restart (the hot copies roll at open).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Options{Dir: dir, Searchable: true})
	defer s.Close()
	if got := coverage(t, keyRecordsOf(s)); !equalCoverage(got, want) {
		t.Fatalf("after a restart: %v, want %v", got, want)
	}
	// A journal last written before the window is not read.
	for _, ci := range s.Inventory() {
		old := time.Now().Add(-2 * time.Hour)
		os.Chtimes(filepath.Join(dir, "buckets", ci.ID, journalFile), old, old)
	}
	if recs := keyRecordsOf(s); len(recs) != 0 {
		t.Fatalf("journals older than the window gave %d records", len(recs))
	}
}

// badKeyFrameRefused: a damaged key section (its own CRC and the frame's
// recomputed, so only the content is wrong) is refused by a replica append
// and nothing is written.
func badKeyFrameRefused(t *testing.T, frames map[string][][]byte) {
	t.Helper()
	var keyed []byte
	var keyedID string
	for id, fr := range frames {
		if fr[0][3] == frameVersionKeys {
			keyed, keyedID = append([]byte(nil), fr[0]...), id
		}
	}
	fh, _ := parseFrameHeader(keyed)
	sec := keyed[frameHeaderLen : frameHeaderLen+fh.keysLen]
	recs0, _ := decodeKeySection(sec, fh.events)
	recs0[0].First, recs0[0].Count = recs0[0].Total, 1 // past the request's end
	bad := appendFrameKeys(nil, 0, fh.events, fh.minT, fh.maxT, encodeKeySection(recs0), mustPayload(t, keyed))
	other := mustOpen(t, Options{Dir: t.TempDir(), GUID: "C0000000-0000-4000-8000-000000000000", Searchable: true})
	defer other.Close()
	index, _, _, _ := parseBucketDir(keyedID)
	if _, err := other.Replicas().ReplicaAppend(keyedID, index, true, 0, [][]byte{bad}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a frame with a bad key record: %v, want ErrCorrupt", err)
	}
	if n := len(other.Inventory()); n != 0 {
		t.Fatalf("a refused frame left %d copies", n)
	}
}

func mustPayload(t *testing.T, frame []byte) []byte {
	t.Helper()
	_, p, err := decodeFrame(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(p)
}

func equalCoverage(a, b map[string][]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// FuzzKeySection: no input makes the key section decoder panic, and what
// it accepts encodes back to the same bytes.
func FuzzKeySection(f *testing.F) {
	k := testRequestKey("seed-key", 5, nil)
	f.Add(encodeKeySection([]KeyRecord{{Token: k.Token, BodyHash: k.BodyHash, Key: k.Key, Arrival: 7, Total: 5, First: 1, Count: 3}}), uint32(4))
	f.Add([]byte{1, 0, 0, 0, 0, 0}, uint32(1))
	f.Fuzz(func(t *testing.T, p []byte, events uint32) {
		recs, err := decodeKeySection(p, events)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeKeySection(recs), p) && len(recs) > 0 {
			t.Fatalf("decoded %d records that encode differently", len(recs))
		}
	})
}
