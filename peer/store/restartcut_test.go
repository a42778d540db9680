package store

import (
	"testing"
	"time"
)

// ackRuleHook is a replication hook whose ack rule needs n copies.
type ackRuleHook struct {
	captureHook
	n int
}

func (h *ackRuleHook) AckCopies() int { return h.n }

// TestAckCopiesRecorded: a new origin bucket records the ack rule it was
// written under in copy.json — 1 on a standalone store, the hook's
// AckRule in a cluster, 0 (not recorded) for a hook that does not say or
// a replica — and a restart reads it back.
func TestAckCopiesRecorded(t *testing.T) {
	for _, tc := range []struct {
		name string
		hook ReplicationHook
		want int
	}{
		{"standalone", nil, 1},
		{"ack rule of two copies", &ackRuleHook{n: 2}, 2},
		{"hook without an ack rule", &captureHook{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, Options{Dir: dir, Searchable: true})
			if tc.hook != nil {
				s.Replicas().SetReplication(tc.hook)
			}
			appendN(t, s, "main", 0, 3)
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			id := s.Inventory()[0].ID
			if got := s.AckCopies(id); got != tc.want {
				t.Fatalf("ack copies %d, want %d", got, tc.want)
			}
			frames, err := s.Replicas().ReadFrames(id, 0, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = mustOpen(t, Options{Dir: dir, Searchable: true})
			defer s.Close()
			if got := s.AckCopies(id); got != tc.want {
				t.Fatalf("after a restart: ack copies %d, want %d", got, tc.want)
			}
			replica := mustOpen(t, Options{Dir: t.TempDir(), GUID: "fedcba9876543210fedcba9876543210", Searchable: true})
			defer replica.Close()
			if _, err := replica.Replicas().ReplicaAppend(id, "main", true, 0, frames); err != nil {
				t.Fatal(err)
			}
			if got := replica.AckCopies(id); got != 0 {
				t.Fatalf("a replica records ack copies %d, want 0", got)
			}
		})
	}
}

// TestBlockKeysFromABlock: BlockKeys lists every block from the one asked
// for, with its events and the key records of the requests it holds, each
// with the bucket's origin GUID; a restart rolls the copy and the records
// read the same.
func TestBlockKeysFromABlock(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true, BlockInterval: time.Hour})
	appendN(t, s, "main", 0, 4) // no key
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	evs := []Event{testEvent("main", 10), testEvent("main", 11), testEvent("main", 12)}
	if _, err := s.AppendKeyed(evs, nil, testRequestKey("k-1", 3, nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendKeyed(evs[:1], nil, testRequestKey("k-2", 5, []uint32{4})); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		id := s.Inventory()[0].ID
		all, err := s.BlockKeys(id, 0)
		if err != nil || len(all) != 3 {
			t.Fatalf("block keys from 0: %d blocks, %v; want 3", len(all), err)
		}
		if len(all[0].Keys) != 0 || all[0].Events != 4 {
			t.Fatalf("block 0: %+v, want 4 events and no key", all[0])
		}
		tail, err := s.BlockKeys(id, 1)
		if err != nil || len(tail) != 2 || tail[0].Block != 1 || tail[1].Block != 2 {
			t.Fatalf("block keys from 1: %+v %v", tail, err)
		}
		r := tail[0].Keys
		if len(r) != 1 || r[0].Key != "k-1" || r[0].First != 0 || r[0].Count != 3 || r[0].Total != 3 || r[0].Origin != testGUID {
			t.Fatalf("block 1 records %+v, want k-1 events 0+3 of 3 from origin %s", r, testGUID)
		}
		r = tail[1].Keys
		if len(r) != 1 || r[0].Key != "k-2" || r[0].First != 4 || r[0].Count != 1 || tail[1].Events != 1 {
			t.Fatalf("block 2 %+v, want k-2 event 4 of 5", tail[1])
		}
		if none, err := s.BlockKeys(id, 3); err != nil || len(none) != 0 {
			t.Fatalf("block keys past the last block: %+v %v", none, err)
		}
		if _, err := s.BlockKeys(id, 4); err == nil {
			t.Fatal("block keys from past the end: no error")
		}
	}
	check(s)
	s.Close()
	s = mustOpen(t, Options{Dir: dir, Searchable: true})
	defer s.Close()
	check(s)
	if _, err := s.BlockKeys("main~9~"+testGUID, 0); err == nil {
		t.Fatal("block keys of an unknown copy: no error")
	}
}

// TestTruncateToNothing: a warm copy cut to 0 blocks stays a copy — no
// event, searchable, its local id kept — and reopens as such.
func TestTruncateToNothing(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Searchable: true})
	appendN(t, s, "main", 0, 5)
	s.RollAll()
	if err := s.WaitIdle(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	id := s.Inventory()[0].ID
	if err := s.Repairs().Truncate(id, 0); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		inv := s.Inventory()
		if len(inv) != 1 || inv[0].ID != id || inv[0].Blocks != 0 || inv[0].Events != 0 || inv[0].State != string(StateWarm) {
			t.Fatalf("after cutting to nothing: %+v", inv)
		}
		if got := len(allEvents(t, s)); got != 0 {
			t.Fatalf("read %d events, want none", got)
		}
	}
	check(s)
	s.Close()
	s = mustOpen(t, Options{Dir: dir, Searchable: true})
	defer s.Close()
	check(s)
	appendN(t, s, "main", 10, 1)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, c := range s.Inventory() {
		if c.ID != id && c.ID != BucketID("main", 1, testGUID) {
			t.Fatalf("a new bucket took id %s, want main~1 (the empty copy keeps main~0)", c.ID)
		}
	}
}
