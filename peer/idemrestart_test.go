package peer

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/peer/store"
)

// TestRetriedElsewhere: an unreplicated block's key record counts as
// stored elsewhere only on an answer for the same request (body), holding
// some of the record's ordinals, from a peer that says (origins version 1)
// that blocks of an origin other than this peer hold them; an answer
// still being stored is pending, and an older peer's answer (no origins
// version) or one whose only origin is this peer proves nothing.
func TestRetriedElsewhere(t *testing.T) {
	const self, other = "SELF-GUID", "OTHER-GUID"
	body := sha256.Sum256([]byte("body"))
	rec := store.KeyRecord{Key: "k", BodyHash: body, Total: 10, First: 4, Count: 3}
	known := func(origins []string, spans ...[2]uint32) api.KeyAnswer {
		return api.KeyAnswer{V: 1, Known: true, BodyHash: hex.EncodeToString(body[:]), Total: 10, Spans: spans,
			OriginsV: api.KeyOriginsVersion, Origins: origins}
	}
	otherBody := known([]string{other}, [2]uint32{0, 10})
	otherBody.BodyHash = hex.EncodeToString(make([]byte, 32))
	old := known([]string{other}, [2]uint32{0, 10})
	old.OriginsV, old.Origins = 0, nil
	pending := known([]string{other}, [2]uint32{0, 10})
	pending.Pending = true
	for _, tc := range []struct {
		name         string
		answers      []api.KeyAnswer
		dup, pending bool
	}{
		{"nobody knows it", []api.KeyAnswer{{V: 1}, {V: 1}}, false, false},
		{"another origin stored all of it", []api.KeyAnswer{{V: 1}, known([]string{other}, [2]uint32{0, 10})}, true, false},
		{"another origin stored the record's ordinals", []api.KeyAnswer{known([]string{other}, [2]uint32{5, 1})}, true, false},
		{"another origin stored other ordinals only", []api.KeyAnswer{known([]string{other}, [2]uint32{0, 4}, [2]uint32{7, 3})}, false, false},
		{"only replicas of this origin's blocks", []api.KeyAnswer{known([]string{self}, [2]uint32{0, 10})}, false, false},
		{"a peer that only heard of it", []api.KeyAnswer{known(nil, [2]uint32{0, 10})}, false, false},
		{"this origin and another", []api.KeyAnswer{known([]string{other, self}, [2]uint32{0, 10})}, true, false},
		{"another body", []api.KeyAnswer{otherBody}, false, false},
		{"an older peer", []api.KeyAnswer{old}, false, false},
		{"being stored", []api.KeyAnswer{pending}, false, true},
		{"being stored on one, stored on another", []api.KeyAnswer{pending, known([]string{other}, [2]uint32{4, 3})}, true, false},
	} {
		dup, pend := retriedElsewhere(rec, self, tc.answers)
		if dup != tc.dup || pend != tc.pending {
			t.Errorf("%s: dup %v pending %v, want %v %v", tc.name, dup, pend, tc.dup, tc.pending)
		}
	}
}

// TestFirstRetried: the cut is the first block of the tail holding a
// record stored elsewhere; none when no record is, or when a record before
// it could not be decided (everything from there is kept).
func TestFirstRetried(t *testing.T) {
	tail := []store.BlockKeys{
		{Block: 3},
		{Block: 4, Keys: []store.KeyRecord{{Key: "a"}, {Key: "b"}}},
		{Block: 5, Keys: []store.KeyRecord{{Key: "c"}}},
	}
	verdicts := func(dup, undecided string) func(store.KeyRecord) (bool, bool) {
		return func(r store.KeyRecord) (bool, bool) {
			if r.Key == undecided {
				return false, false
			}
			return r.Key == dup, true
		}
	}
	for _, tc := range []struct {
		dup, undecided string
		want           int
	}{
		{"", "", -1},
		{"b", "", 4},
		{"c", "", 5},
		{"c", "a", -1},
		{"a", "c", 4},
	} {
		if got := firstRetried(tail, verdicts(tc.dup, tc.undecided)); got != tc.want {
			t.Errorf("dup %q undecided %q: cut at %d, want %d", tc.dup, tc.undecided, got, tc.want)
		}
	}
}
