package integration

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestSearchRefusesACopyThatIsNotWhole reproduces issue 24's silent short
// answer: a copy that the managers list as searchable and whole, but that
// no longer holds its bucket — a replica removed and re-created from the
// first blocks of a resend (a restarted origin's resend racing a
// remove-copy task) — answered "searched" with part of the bucket's
// events, and the search came back short and marked complete. Now every
// marker names the length of the copy it searched and the head checks it
// against the table's sealed length: the bucket goes to a whole copy and
// the answer is exact, or — when no whole copy may answer — partial,
// never short.
func TestSearchRefusesACopyThatIsNotWhole(t *testing.T) {
	c := Start(t, Options{})
	raws := searchIngest(t, c, "whole", 4000)
	waitComplete(t, c)
	sh := c.StartSearchHead("sh1", "site1")
	// A warm bucket of several blocks and one of its searchable replicas.
	var bucket, victim, index string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			v, _ := s.Generation("site1", 0)
			if b.Hot || v.Buckets[b.ID].Blocks < 2 {
				continue
			}
			for _, cp := range b.Copies {
				if cp.Peer != b.Origin && cp.Searchable {
					bucket, victim, index = b.ID, cp.Peer, b.Index
					return
				}
			}
		}
	})
	if bucket == "" {
		t.Fatal("no warm bucket of 2 blocks or more with a searchable replica")
	}
	frames, err := c.Peer(victim).Store().Replicas().ReadFrames(bucket, 0, 1<<30)
	if err != nil || len(frames) < 2 {
		t.Fatalf("frames of %s on %s: %d, %v", bucket, victim, len(frames), err)
	}
	// Behind the managers' back, as the race did: the copy goes, and a
	// resend re-creates it searchable from its first block only.
	st := c.Peer(victim).Store()
	if err := st.Replicas().RemoveCopy(bucket); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Replicas().ReplicaAppend(bucket, index, true, 0, frames[:1]); err != nil || n != 1 {
		t.Fatalf("re-create %s on %s: %d blocks, %v", bucket, victim, n, err)
	}
	// Asked first, by preference, the re-created copy must not count.
	for _, q := range []string{"*", "* | stats count"} {
		a := search(t, sh.URL(), map[string]any{"query": q, "preference": "_prefer_nodes:" + victim})
		if q == "*" {
			mustExact(t, "preferring the re-created copy", a, raws)
			continue
		}
		if a.Status != 200 || a.Resp.Summary.Partial || len(a.Resp.Results) != 1 || fmt.Sprint(a.Resp.Results[0]["count"]) != fmt.Sprint(len(raws)) {
			t.Fatalf("%s preferring the re-created copy: HTTP %d, results %v, summary %+v", q, a.Status, a.Resp.Results, a.Resp.Summary)
		}
	}
	// Only the re-created copy allowed: partial, naming the bucket — never a
	// short answer marked complete. The peer that searched it reported its
	// true length, so the managers stop counting it whole and have it
	// fetched: soon the same search is exact and complete from it.
	only := map[string]any{"query": "* | stats count", "preference": "_buckets:" + bucket + "|_only_nodes:" + victim}
	var bcount int64
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			if b.ID == bucket {
				bcount = b.Events
			}
		}
	})
	healed := false
	c.WaitFor(30*time.Second, func() error {
		a := search(t, sh.URL(), only)
		switch {
		case a.Status == 400 && strings.Contains(a.Error, "no peers with criteria"):
			// While the managers have the copy fetched again it is not
			// searchable, and a preference that allows only it matches no
			// copy (Elasticsearch answers the same): not yet repaired.
			return fmt.Errorf("the copy is being repaired: %s", a.Error)
		case a.Status != 200:
			t.Fatalf("only the re-created copy: HTTP %d %s", a.Status, a.Error)
		case a.Resp.Summary.Partial:
			if a.Resp.Summary.Buckets.Failed != 1 {
				t.Fatalf("only the re-created copy, partial: summary %+v", a.Resp.Summary)
			}
			return fmt.Errorf("still partial: %+v", a.Resp.Summary.Buckets.Failures)
		case len(a.Resp.Results) != 1 || fmt.Sprint(a.Resp.Results[0]["count"]) != fmt.Sprint(bcount):
			t.Fatalf("only the re-created copy: a short answer marked complete: %v, want count %d", a.Resp.Results, bcount)
		}
		healed = true
		return nil
	})
	if !healed {
		t.Fatal("the re-created copy was never repaired")
	}
}

// TestSearchReadsALongerCopyAsItsSeal covers the chaos suite's
// partial-while-covered searches: a copy longer than its bucket's seal (a
// restarted origin's resend or a cut-off origin's blocks, until the
// managers extend the seal or a truncate cuts them) was refused by the
// length proof, and with its sibling copy down the bucket went partial
// although the copy holds the whole sealed bucket. The peer now searches
// such a copy as its sealed prefix — hot or warm — and its marker proves
// exactly the sealed length: the answer is exact and complete.
func TestSearchReadsALongerCopyAsItsSeal(t *testing.T) {
	c := Start(t, Options{})
	searchIngest(t, c, "longer", 4000)
	waitComplete(t, c)
	sh := c.StartSearchHead("sh1", "site1")
	var bucket, other, victim, index string
	c.State(func(s *fsm.State) {
		v, _ := s.Generation("site1", 0)
		for _, b := range s.BucketList("", "") {
			if b.Hot || v.Buckets[b.ID].Blocks < 2 {
				continue
			}
			if bucket == "" {
				for _, cp := range b.Copies {
					if cp.Peer != b.Origin && cp.Searchable {
						bucket, victim, index = b.ID, cp.Peer, b.Index
					}
				}
				continue
			}
			if other == "" && b.Index == index {
				other = b.ID
			}
		}
	})
	if bucket == "" || other == "" {
		t.Fatalf("want two warm buckets of 2 blocks or more in one index, one with a searchable replica: %q %q", bucket, other)
	}
	want := search(t, sh.URL(), map[string]any{"query": "* | stats count", "preference": "_buckets:" + bucket})
	if want.Status != 200 || want.Resp.Summary.Partial || len(want.Resp.Results) != 1 {
		t.Fatalf("count of %s: HTTP %d, %+v", bucket, want.Status, want.Resp)
	}
	count := fmt.Sprint(want.Resp.Results[0]["count"])
	st := c.Peer(victim).Store()
	frames, err := st.Replicas().ReadFrames(bucket, 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := c.Peer(victim).Store().Replicas().ReadFrames(other, 0, 1<<30)
	if err != nil || len(extra) == 0 {
		// the victim may hold no copy of other: take it where it is
		for _, id := range c.PeerIDs() {
			if extra, err = c.Peer(id).Store().Replicas().ReadFrames(other, 0, 1<<30); err == nil && len(extra) > 0 {
				break
			}
		}
	}
	if len(extra) == 0 {
		t.Fatalf("no frames of %s anywhere", other)
	}
	// Behind the managers' back: the victim's copy becomes the sealed
	// copy plus one more block, first as a hot replica, then warm.
	if err := st.Replicas().RemoveCopy(bucket); err != nil {
		t.Fatal(err)
	}
	longer := append(append([][]byte(nil), frames...), renumberFrame(extra[0], uint32(len(frames))))
	if n, err := st.Replicas().ReplicaAppend(bucket, index, true, 0, longer); err != nil || int(n) != len(longer) {
		t.Fatalf("re-create %s on %s longer: %d blocks, %v", bucket, victim, n, err)
	}
	only := map[string]any{"query": "* | stats count", "preference": "_buckets:" + bucket + "|_only_nodes:" + victim}
	for _, state := range []string{"hot", "warm"} {
		if state == "warm" {
			if err := st.Replicas().ReplicaRoll(bucket, len(longer)); err != nil {
				t.Fatal(err)
			}
		}
		a := search(t, sh.URL(), only)
		if a.Status != 200 || a.Resp.Summary.Partial || len(a.Resp.Results) != 1 || fmt.Sprint(a.Resp.Results[0]["count"]) != count {
			t.Fatalf("%s copy one block longer than the seal, alone: HTTP %d %s, results %v (want count %s), summary %+v",
				state, a.Status, a.Error, a.Resp.Results, count, a.Resp.Summary)
		}
		raw := search(t, sh.URL(), map[string]any{"query": "*", "preference": "_buckets:" + bucket + "|_only_nodes:" + victim})
		if raw.Status != 200 || raw.Resp.Summary.Partial || fmt.Sprint(len(raw.Resp.Results)) != count {
			t.Fatalf("%s copy one block longer, events: HTTP %d, %d events (want %s), summary %+v", state, raw.Status, len(raw.Resp.Results), count, raw.Resp.Summary)
		}
	}
}

// renumberFrame returns a copy of a journal frame as block number n of
// another bucket (peer/DESIGN.md "Journal frame": the number at bytes
// 8–11, the CRC-32C of bytes 0–39 and what follows the header at 40–43).
func renumberFrame(frame []byte, n uint32) []byte {
	f := append([]byte(nil), frame...)
	binary.LittleEndian.PutUint32(f[8:], n)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	binary.LittleEndian.PutUint32(f[40:], crc32.Update(crc32.Checksum(f[:40], castagnoli), castagnoli, f[44:]))
	return f
}
