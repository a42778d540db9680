package fsm

import (
	"strings"
	"testing"
)

// TestRollOnlyByOrigin (issue 25 N2, SPEC §11): a RollBucket naming its
// sender is applied only when the sender is the bucket's origin; any other
// peer — a replica holding a copy, a peer holding none, an unknown name —
// is refused with ErrNotOrigin and the state is unchanged (the bucket stays
// hot, no copy's length is set). A roll naming no sender (written by a
// group below RollOriginVersion) applies as it always did.
func TestRollOnlyByOrigin(t *testing.T) {
	cases := []struct {
		name   string
		sender string
		want   error
	}{
		{"the origin", "p1", nil},
		{"a replica holding a copy", "p2", ErrNotOrigin},
		{"a peer holding no copy", "p4", ErrNotOrigin},
		{"a peer nobody knows", "p9", ErrNotOrigin},
		{"no sender named (an older group)", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := fourPeers(t)
			b := h.bucket("1", "p1", "p2", true, "p3", false)
			roll := &RollBucket{Bucket: b, Earliest: 0, Latest: 1, Size: 10, Events: 1, Blocks: 1, LastChecksum: "0badc0de", Origin: tc.sender}
			if tc.want != nil {
				h.refuse(roll, tc.want) // refuse also checks the state did not change
				if bb := h.b(b); !bb.Hot || bb.Sealed {
					t.Fatalf("refused roll left the bucket %+v", bb)
				}
				return
			}
			h.must(roll)
			if bb := h.b(b); bb.Hot || !bb.Sealed || bb.Blocks != 1 || bb.Copies["p1"].Blocks != 1 {
				t.Fatalf("rolled bucket %+v, origin copy %+v", bb, bb.Copies["p1"])
			}
		})
	}
	h := fourPeers(t)
	h.refuse(&RollBucket{Bucket: BucketID("main", "9", guid("p1")), Origin: "p1"}, ErrUnknownBucket)
}

// TestRollOriginNeedsVersion4: a RollBucket naming its sender is body
// version 2 and needs cluster version RollOriginVersion; one naming none
// is still body version 1, which every older build reads. A version 1 body
// that carries an origin is refused, and a build of version 3 meets a roll
// naming its sender as a command it cannot read (a panic, never a skip).
func TestRollOriginNeedsVersion4(t *testing.T) {
	old := &RollBucket{Bucket: "b"}
	named := &RollBucket{Bucket: "b", Origin: "p1"}
	for _, tc := range []struct {
		c       *RollBucket
		body    byte
		cluster int
	}{{old, 1, 1}, {named, 2, RollOriginVersion}} {
		b, err := Encode(tc.c)
		if err != nil {
			t.Fatal(err)
		}
		if b[1] != tc.body || NeedsClusterVersion(tc.c) != tc.cluster {
			t.Fatalf("%+v: body version %d, cluster version %d; want %d, %d", tc.c, b[1], NeedsClusterVersion(tc.c), tc.body, tc.cluster)
		}
	}
	b, _ := Encode(named)
	b[1] = 1
	if _, err := Decode(b); err == nil || !strings.Contains(err.Error(), "origin needs body version 2") {
		t.Fatalf("a version 1 body with an origin: %v", err)
	}
	if RollOriginVersion > Version {
		t.Fatalf("RollOriginVersion %d above this build's %d", RollOriginVersion, Version)
	}
	f := NewAt(RollOriginVersion - 1)
	h := &harness{t: t, s: f.state, now: epoch}
	h.config(singleSite(2, 1))
	h.peer("p1", "")
	h.peer("p2", "")
	id := h.bucket("1", "p1", "p2", true)
	enc, _ := Encode(&RollBucket{Bucket: id, Latest: 1, Origin: "p1"})
	mustPanic(t, "needs cluster version 4", func() { f.Apply(h.idx+1, enc) })
	h.must(&RollBucket{Bucket: id, Latest: 1})
}
