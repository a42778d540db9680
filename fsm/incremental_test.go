package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// checkedPlan is Plan checked against the reference: the same commands as
// planFull (a deep copy, every level over every bucket), and neither
// changes the state it plans on (Plan shares its bucket records with its
// private copy).
func checkedPlan(t fatalf, s *State, in PlanInput) []Command {
	before, err := s.Marshal()
	if err != nil {
		t.Fatalf("%v", err)
	}
	got := Plan(s, in)
	after, _ := s.Marshal()
	if !bytes.Equal(before, after) {
		t.Fatalf("Plan changed the state it planned on")
	}
	want := planFull(s, in)
	if g, w := encodeAll(t, got), encodeAll(t, want); !slices.Equal(g, w) {
		t.Fatalf("incremental plan differs from the full pass:\n  got  %q\n  want %q", g, w)
	}
	checkIncremental(t, s)
	return got
}

func encodeAll(t fatalf, cmds []Command) []string {
	var out []string
	for _, c := range cmds {
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("encode %T: %v", c, err)
		}
		out = append(out, string(b))
	}
	return out
}

// checkIncremental: the planner's derived records (the unsettled set, the
// retention index) equal a rebuild from the encoded state, and the
// unsettled set is exactly the buckets that are not settled.
func checkIncremental(t fatalf, s *State) {
	c := roundTrip(s)
	for id, b := range s.d.Buckets {
		// The map-free count agrees with tallyOf's.
		n, tl := s.needsOf(b), s.tallyOf(b)
		if want := tl.total <= n.rfTotal && n.rfMet(tl) && n.sfMet(tl); s.policyExact(b, n) != want {
			t.Fatalf("bucket %s: policyExact %v, tallyOf says %v (%+v, needs %+v)", id, !want, want, tl, n)
		}
		_, in := s.unsettled[id]
		if in == s.settled(b) {
			t.Fatalf("bucket %s: in the unsettled set %v, settled %v: %+v", id, in, s.settled(b), b)
		}
		if b.held != c.d.Buckets[id].held {
			t.Fatalf("bucket %s: retention holds %+v, rebuilt %+v", id, b.held, c.d.Buckets[id].held)
		}
	}
	if set := s.ownIDSet(); set != nil {
		var ids []string
		set.each(func(k idKey) bool { ids = append(ids, string(k)); return true })
		if want := sortedKeys(s.d.Buckets); !slices.Equal(ids, want) {
			t.Fatalf("ordered bucket ids %v, want %v", ids, want)
		}
	}
	if !slices.Equal(s.bucketIDs(), sortedKeys(s.d.Buckets)) {
		t.Fatalf("bucketIDs %v, want %v", s.bucketIDs(), sortedKeys(s.d.Buckets))
	}
	if !maps.Equal(s.unsettled, c.unsettled) {
		t.Fatalf("unsettled %v, rebuilt %v", sortedKeys(s.unsettled), sortedKeys(c.unsettled))
	}
	flat := func(r *retention) map[string]string {
		out := map[string]string{}
		if r == nil {
			return out
		}
		for k, ir := range r.idx {
			if ir.size == 0 && ir.warm.len() == 0 {
				continue
			}
			var keys []warmKey
			ir.warm.each(func(k warmKey) bool { keys = append(keys, k); return true })
			if !slices.IsSortedFunc(keys, func(a, b warmKey) int {
				if a.less(b) {
					return -1
				}
				return 1
			}) {
				t.Fatalf("retention index of %s out of order: %v", k, keys)
			}
			out[k] = fmt.Sprint(ir.size, keys)
		}
		return out
	}
	if a, b := flat(s.ret), flat(c.ret); !maps.Equal(a, b) {
		t.Fatalf("retention index %v, rebuilt %v", a, b)
	}
}

// TestOrderedWarm: the chunked ordered set against a sorted slice, through
// chunk splits and emptied chunks.
func TestOrderedWarm(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var o orderedWarm
		set := map[warmKey]bool{}
		for range rapid.IntRange(0, 3000).Draw(t, "ops") {
			k := warmKey{int64(rapid.IntRange(0, 300).Draw(t, "latest")), fmt.Sprint(rapid.IntRange(0, 9).Draw(t, "id"))}
			if rapid.IntRange(0, 2).Draw(t, "remove") == 0 {
				o.remove(k)
				delete(set, k)
			} else {
				o.insert(k)
				set[k] = true
			}
		}
		var want []warmKey
		for k := range set {
			want = append(want, k)
		}
		slices.SortFunc(want, func(a, b warmKey) int {
			if a.less(b) {
				return -1
			}
			return 1
		})
		var got []warmKey
		o.each(func(k warmKey) bool { got = append(got, k); return true })
		if !slices.Equal(got, want) {
			t.Fatalf("ordered set %v, want %v", got, want)
		}
		for _, c := range o.chunks {
			if len(c) == 0 || len(c) > 2*setChunk {
				t.Fatalf("chunk of %d keys", len(c))
			}
		}
	})
}

// TestIncrementalPlanRetention: retention over the ordered index equals the
// full pass with both rules, open freezes, streaming buckets and buckets
// rolled out of order (the property test draws the configurations too).
func TestIncrementalPlanRetention(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, idx := NewState(), uint64(0)
		must := func(c Command) {
			idx++
			if err, ok := s.ApplyCommand(idx, c).(error); ok {
				t.Fatalf("apply %T %+v: %v", c, c, err)
			}
		}
		must(&SetConfig{Config: singleSite(2, 1)})
		peers := []string{"p1", "p2", "p3", "p4"}
		for _, p := range peers {
			must(&RegisterPeer{ID: p, GUID: guid(p), At: epoch})
		}
		n := rapid.IntRange(1, 40).Draw(t, "buckets")
		for i := range n {
			o := peers[i%4]
			id := BucketID("main", fmt.Sprint(i), guid(o))
			must(&AddBucket{ID: id, Index: "main", Origin: o, Targets: []CopySpec{{Peer: peers[(i+1)%4], Searchable: true}}})
			if rapid.IntRange(0, 4).Draw(t, "hot") > 0 {
				latest := int64(rapid.IntRange(0, 50).Draw(t, "latest")) * int64(time.Hour)
				must(&RollBucket{Bucket: id, Earliest: 0, Latest: latest, Size: int64(rapid.IntRange(0, 100).Draw(t, "size"))})
			}
		}
		ic := IndexConfig{Name: "main"}
		if rapid.Bool().Draw(t, "period") {
			ic.FrozenTimePeriod = time.Duration(rapid.IntRange(1, 60).Draw(t, "hours")) * time.Hour
		}
		if rapid.Bool().Draw(t, "max") {
			ic.MaxTotalBytes = int64(rapid.IntRange(0, 2000).Draw(t, "maxBytes"))
		}
		cfg := singleSite(2, 1)
		cfg.Indexes = []IndexConfig{ic}
		must(&SetConfig{Config: cfg})
		now := epoch.Add(50 * time.Hour)
		hb := map[string]time.Time{}
		for _, p := range peers {
			hb[p] = now
		}
		in := PlanInput{Now: now, LastHeartbeat: hb}
		for range 3 {
			for _, c := range checkedPlan(t, s, in) {
				must(c)
			}
			// Some tasks finish, some stay open (a freeze in flight, a
			// replication streaming).
			for _, id := range sortedTaskIDs(s.d.Tasks) {
				if rapid.Bool().Draw(t, "finish") {
					must(&FixupDone{ID: id})
				}
			}
			checkIncremental(t, s)
		}
	})
}
