package fsm

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// harness applies commands to a State at increasing Raft indexes.
type harness struct {
	t   testing.TB
	s   *State
	idx uint64
	now time.Time
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newHarness(t testing.TB) *harness {
	t.Helper()
	return &harness{t: t, s: NewState(), now: epoch}
}

// apply applies c at the next index and returns the response.
func (h *harness) apply(c Command) any {
	h.idx++
	return h.s.ApplyCommand(h.idx, c)
}

// must applies c and fails the test on a business error.
func (h *harness) must(c Command) Result {
	h.t.Helper()
	r := h.apply(c)
	if err, ok := r.(error); ok {
		h.t.Fatalf("apply %T %+v: %v", c, c, err)
	}
	res, ok := r.(Result)
	if !ok {
		h.t.Fatalf("apply %T: response %T, want Result", c, r)
	}
	return res
}

// refuse applies c and fails unless it returns an error wrapping want; it
// also checks the state did not change.
func (h *harness) refuse(c Command, want error) error {
	h.t.Helper()
	before, _ := h.s.Marshal()
	r := h.apply(c)
	err, ok := r.(error)
	if !ok {
		h.t.Fatalf("apply %T %+v: got %v, want error %v", c, c, r, want)
	}
	if want != nil && !errors.Is(err, want) {
		h.t.Fatalf("apply %T: error %v, want %v", c, err, want)
	}
	after, _ := h.s.Marshal()
	if string(stripApplied(before)) != string(stripApplied(after)) {
		h.t.Fatalf("apply %T: refused with %v but changed the state", c, err)
	}
	return err
}

// stripApplied zeroes the applied index, which every entry advances.
func stripApplied(b []byte) []byte {
	s, err := Unmarshal(b)
	if err != nil {
		panic(err)
	}
	s.d.Applied = 0
	out, _ := s.Marshal()
	return out
}

func (h *harness) config(c Config) {
	h.t.Helper()
	h.must(&SetConfig{Config: c})
}

func guid(peer string) string { return "g-" + peer }

func (h *harness) peer(id, site string) {
	h.t.Helper()
	h.must(&RegisterPeer{ID: id, GUID: guid(id), Site: site, At: h.now})
}

// bucket adds a hot bucket of index main from origin with targets (the
// boolean after each peer id is its searchability).
func (h *harness) bucket(local, origin string, targets ...any) string {
	h.t.Helper()
	id := BucketID("main", local, guid(origin))
	var ts []CopySpec
	for i := 0; i < len(targets); i += 2 {
		ts = append(ts, CopySpec{Peer: targets[i].(string), Searchable: targets[i+1].(bool)})
	}
	h.must(&AddBucket{ID: id, Index: "main", Origin: origin, Targets: ts, Earliest: h.now.UnixNano()})
	return id
}

// warm adds a bucket and rolls it.
func (h *harness) warm(local, origin string, targets ...any) string {
	h.t.Helper()
	id := h.bucket(local, origin, targets...)
	h.must(&RollBucket{Bucket: id, Earliest: h.now.UnixNano(), Latest: h.now.UnixNano() + 1, Size: 100, Events: 10, Blocks: 4, LastChecksum: "c4"})
	return id
}

func (h *harness) b(id string) *Bucket {
	h.t.Helper()
	b, ok := h.s.d.Buckets[id]
	if !ok {
		h.t.Fatalf("no bucket %s", id)
	}
	return b
}

func (h *harness) primary(bucket, table string) string { return h.b(bucket).Primary[table] }

func (h *harness) wantPrimary(bucket, table, want string) {
	h.t.Helper()
	if got := h.primary(bucket, table); got != want {
		h.t.Fatalf("bucket %s: primary for %s is %q, want %q (copies %s)", bucket, table, got, want, h.copies(bucket))
	}
}

func (h *harness) copies(bucket string) string {
	b := h.b(bucket)
	out := ""
	for _, p := range sortedKeys(b.Copies) {
		c := b.Copies[p]
		out += fmt.Sprintf("%s(%s,srch=%v) ", p, h.s.stateOf(p), c.Searchable)
	}
	return out
}

func singleSite(rf, sf int) Config {
	c := DefaultConfig()
	c.ReplicationFactor, c.SearchFactor = rf, sf
	return c
}

func multiSite(rf, sf string, sites ...string) Config {
	c := DefaultConfig()
	c.Sites = sites
	c.SiteReplicationFactor = MustParsePolicy(rf)
	c.SiteSearchFactor = MustParsePolicy(sf)
	return c
}

// roundTrip is s through its snapshot encoding: a restored state, with the
// derived counters rebuilt.
func roundTrip(s *State) *State {
	b, err := s.Marshal()
	if err != nil {
		panic(err)
	}
	c, err := Unmarshal(b)
	if err != nil {
		panic(err)
	}
	c.supports = s.supports
	return c
}
