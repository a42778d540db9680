//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterMiddleDamageRepaired (issue 9 item 9): an origin dies with a
// hot bucket of many acknowledged blocks, and block 1 of its journal is
// damaged while it is down. On restart the journal is not cut at the
// damage (which dropped every intact block after it, and then the seal
// cut the replicas back to the origin's length): the copy is kept and
// reported corrupt, the bucket is sealed from the replicas and the copy
// replaced, and every acknowledged event is searchable exactly once.
func TestClusterMiddleDamageRepaired(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 64 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	origin := "site1-p1"
	acked, un, err := c.IngestAcked(ctx, origin, Batches("dmg", 3000, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v, %d unacknowledged", err, len(un))
	}
	var raws []string
	for _, a := range acked {
		raws = append(raws, a.Raws...)
	}
	var bucket string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", origin) {
			if b.Hot && b.Origin == origin {
				bucket = b.ID
			}
		}
	})
	if bucket == "" {
		t.Fatal("no hot bucket of the origin")
	}
	c.KillPeer(origin)
	jp := filepath.Join(c.peerCfgs[origin].DataDir, "buckets", bucket, "journal.qj")
	j, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	// Block 1's payload: frames are 44-byte headers and their compressed
	// payload (peer/store/journal.go); block 0's length is in its header.
	const hdr = 44
	first := hdr + int(uint32(j[20])|uint32(j[21])<<8|uint32(j[22])<<16|uint32(j[23])<<24)
	if first+hdr+8 >= len(j) {
		t.Fatalf("journal of %d bytes holds one block: the test needs several", len(j))
	}
	j[first+hdr+4] ^= 0x5a
	if err := os.WriteFile(jp, j, 0o644); err != nil {
		t.Fatal(err)
	}
	c.StartPeer(origin)
	c.WaitPeersUp(origin)
	c.WaitFor(90*time.Second, func() error {
		var st fsm.Status
		var hot, corrupt bool
		c.State(func(s *fsm.State) {
			st = s.Status()
			if v, ok := findBucketView(s, bucket); ok {
				hot = v.Hot
				for _, cp := range v.Copies {
					corrupt = corrupt || cp.Corrupt
				}
			}
		})
		if hot || corrupt || !st.Complete {
			return fmt.Errorf("bucket hot %v, a copy corrupt %v, complete %v: %v", hot, corrupt, st.Complete, st.Fixups)
		}
		return nil
	})
	seen := primaryUnion(t, c)
	lost, dup := 0, 0
	for _, r := range raws {
		switch seen[r] {
		case 0:
			lost++
		case 1:
		default:
			dup++
		}
	}
	if lost > 0 || dup > 0 {
		t.Fatalf("%d acknowledged events: %d lost, %d more than once", len(raws), lost, dup)
	}
	t.Logf("%d acknowledged events of a journal damaged at block 1 all searchable once after the repair", len(raws))
}
