package store

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// captureHook records the origin's durable blocks and lets the test mark
// them replicated.
type captureHook struct {
	mu     sync.Mutex
	blocks map[string][]func()
	closed map[string]int
}

func (h *captureHook) BlockDurable(bucket, index string, no uint32, replicated func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.blocks == nil {
		h.blocks = map[string][]func(){}
	}
	h.blocks[bucket] = append(h.blocks[bucket], replicated)
}

func (h *captureHook) JournalClosed(bucket string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed == nil {
		h.closed = map[string]int{}
	}
	h.closed[bucket] = n
}

func (h *captureHook) markAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, fs := range h.blocks {
		for _, f := range fs {
			f()
		}
	}
}

// TestReplicaFollowsOrigin: with a hook set, an ack waits for the
// replication mark; frames sent to a replica in any order and repeated give
// a copy with the same content hash, searchable while hot and after roll.
func TestReplicaFollowsOrigin(t *testing.T) {
	hook := &captureHook{}
	origin := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 4 << 10})
	defer origin.Close()
	origin.Replicas().SetReplication(hook)
	target := mustOpen(t, Options{Dir: t.TempDir(), GUID: "B0000000-0000-4000-8000-000000000000", Searchable: true})
	defer target.Close()

	ack := appendN(t, origin, "main", 0, 2000)
	if err := origin.Flush(); err != nil {
		t.Fatal(err)
	}
	if ack.Durable() {
		t.Fatal("ack durable before its blocks were marked replicated")
	}
	hook.mu.Lock()
	var id string
	for b := range hook.blocks {
		id = b
	}
	hook.mu.Unlock()
	n, _, _ := origin.Replicas().Blocks(id)
	if n < 3 {
		t.Fatalf("want several blocks, got %d", n)
	}
	frames, err := origin.Replicas().ReadFrames(id, 0, 1<<30)
	if err != nil || len(frames) != n {
		t.Fatalf("read frames: %d, %v", len(frames), err)
	}
	// A gap is not written: the answer says where to resume.
	got, err := target.Replicas().ReplicaAppend(id, "main", true, 1, frames[1:2])
	if err != nil || got != 0 {
		t.Fatalf("gap: got %d, %v; want 0, nil", got, err)
	}
	got, err = target.Replicas().ReplicaAppend(id, "main", true, 0, frames[:2])
	if err != nil || got != 2 {
		t.Fatalf("first two: got %d, %v", got, err)
	}
	// Resend overlapping: idempotent.
	got, err = target.Replicas().ReplicaAppend(id, "main", true, 0, frames)
	if err != nil || int(got) != n {
		t.Fatalf("all: got %d, %v; want %d", got, err, n)
	}
	got, err = target.Replicas().ReplicaAppend(id, "main", true, 0, frames)
	if err != nil || int(got) != n {
		t.Fatalf("resend: got %d, %v", got, err)
	}
	// A damaged frame is refused and changes nothing.
	bad := append([]byte(nil), frames[0]...)
	bad[len(bad)-1] ^= 0xff
	if _, err := target.Replicas().ReplicaAppend(id, "main", true, 0, [][]byte{bad}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged frame: %v, want ErrCorrupt", err)
	}
	if got := len(allEvents(t, target)); got != 2000 {
		t.Fatalf("hot replica searchable events: %d, want 2000", got)
	}
	// A hot replica is not rolled on demand (it has no open block; the
	// bench's roll of every copy dereferenced nil): it follows its origin.
	if err := target.Roll(id); !errors.Is(err, ErrBucketState) {
		t.Fatalf("roll of a hot replica: %v, want ErrBucketState", err)
	}
	hook.markAll()
	waitDurable(t, ack)

	if err := origin.Roll(id); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		if _, ok := hook.closed[id]; !ok {
			return errors.New("journal not closed")
		}
		return nil
	})
	if err := target.Replicas().ReplicaRoll(id, n+1); !errors.Is(err, ErrBucketState) {
		t.Fatalf("roll past the replica's length: %v", err)
	}
	if err := target.Replicas().ReplicaRoll(id, n); err != nil {
		t.Fatal(err)
	}
	if err := target.Replicas().ReplicaRoll(id, n); err != nil {
		t.Fatalf("second roll: %v", err)
	}
	if err := origin.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	oi, ti := origin.Inventory()[0], target.Inventory()[0]
	if oi.ContentHash != ti.ContentHash || oi.Events != ti.Events || ti.State != "warm" || oi.State != "warm" {
		t.Fatalf("copies differ: origin %+v target %+v", oi, ti)
	}
	if got := len(allEvents(t, target)); got != 2000 {
		t.Fatalf("warm replica events: %d", got)
	}
	if _, err := target.Replicas().ReplicaAppend(id, "main", true, uint32(n), frames[:1]); err == nil {
		t.Fatal("a warm replica took a block")
	}
}

// TestReplicaReopenedAfterRestart: a target restarted mid-bucket (its hot
// replica rolled at open) takes the blocks it missed and ends identical.
func TestReplicaReopenedAfterRestart(t *testing.T) {
	hook := &captureHook{}
	origin := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 4 << 10})
	defer origin.Close()
	origin.Replicas().SetReplication(hook)
	target, tdir, tguid, id, frames := hotReplica(t, origin)
	target.Close()
	target = mustOpen(t, Options{Dir: tdir, GUID: tguid, Searchable: true})
	defer target.Close()
	if ci := target.Inventory()[0]; ci.State != "warm" {
		t.Fatalf("restarted replica is %s, want warm (rolled at open)", ci.State)
	}
	appendN(t, origin, "main", 1000, 1000)
	if err := origin.Flush(); err != nil {
		t.Fatal(err)
	}
	all, _ := origin.Replicas().ReadFrames(id, 0, 1<<30)
	n, err := target.Replicas().ReplicaAppend(id, "main", true, uint32(len(frames)), all[len(frames):])
	if err != nil || int(n) != len(all) {
		t.Fatalf("missed blocks: %d, %v; want %d", n, err, len(all))
	}
	if got := len(allEvents(t, target)); got != 2000 {
		t.Fatalf("reopened replica shows %d events, want 2000", got)
	}
	hook.markAll()
	origin.Roll(id)
	if err := origin.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := target.Replicas().ReplicaRoll(id, len(all)); err != nil {
		t.Fatal(err)
	}
	oi, ti := origin.Inventory()[0], target.Inventory()[0]
	if oi.ContentHash != ti.ContentHash || oi.Events != ti.Events || ti.State != "warm" {
		t.Fatalf("copies differ: origin %+v target %+v", oi, ti)
	}
	if err := target.Repairs().Verify(id); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaRefusesPathIDs: a bucket id that arrives from the network
// names a directory; one that is not <index>~<number>~<guid> — a path
// traversal above all — is refused with valid frames, and nothing is
// written anywhere (SPEC §11).
func TestReplicaRefusesPathIDs(t *testing.T) {
	hook := &captureHook{}
	origin := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 4 << 10})
	defer origin.Close()
	origin.Replicas().SetReplication(hook)
	appendN(t, origin, "main", 0, 200)
	if err := origin.Flush(); err != nil {
		t.Fatal(err)
	}
	hook.mu.Lock()
	var id string
	for b := range hook.blocks {
		id = b
	}
	hook.mu.Unlock()
	frames, err := origin.Replicas().ReadFrames(id, 0, 1<<30)
	if err != nil || len(frames) == 0 {
		t.Fatalf("read frames: %d, %v", len(frames), err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "data")
	target := mustOpen(t, Options{Dir: dir, GUID: "B0000000-0000-4000-8000-000000000000", Searchable: true})
	defer target.Close()
	before := tree(t, root)
	for _, bad := range []string{
		"main~7~x/../../../evil",
		"main~7~../../evil",
		"main~7~" + strings.Repeat("A", 65),
		"main~7~a\\b",
		"../main~7~G",
		"Main~7~G",
		"main~-1~G",
		"main~7~",
		"main~7",
	} {
		if _, err := target.Replicas().ReplicaAppend(bad, "main", true, 0, frames); err == nil {
			t.Errorf("bucket id %q accepted", bad)
		}
	}
	if after := tree(t, root); !slices.Equal(before, after) {
		t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
	}
}

// tree lists every path under root.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSealedReplicaStaysSealedAcrossRestart: a hot replica made warm at its
// sealed length (the managers sealed the bucket while its origin was away)
// takes no block past that length, before or after a restart of the
// target — an origin returning to a bucket sealed without it must not
// extend it, where a later truncate would cut acknowledged events (an e2e
// run found a restarted target reopening such a copy).
func TestSealedReplicaStaysSealedAcrossRestart(t *testing.T) {
	origin := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 4 << 10})
	defer origin.Close()
	target, tdir, tguid, id, frames := hotReplica(t, origin)
	if err := target.Replicas().ReplicaRoll(id, len(frames)); err != nil {
		t.Fatal(err)
	}
	appendN(t, origin, "main", 1000, 1000)
	if err := origin.Flush(); err != nil {
		t.Fatal(err)
	}
	all, _ := origin.Replicas().ReadFrames(id, 0, 1<<30)
	if len(all) <= len(frames) {
		t.Fatalf("origin holds %d blocks, want more than %d", len(all), len(frames))
	}
	if _, err := target.Replicas().ReplicaAppend(id, "main", true, uint32(len(frames)), all[len(frames):]); err == nil {
		t.Fatal("a sealed replica took blocks past its sealed length")
	}
	target.Close()
	target = mustOpen(t, Options{Dir: tdir, GUID: tguid, Searchable: true})
	defer target.Close()
	if _, err := target.Replicas().ReplicaAppend(id, "main", true, uint32(len(frames)), all[len(frames):]); err == nil {
		t.Fatal("a sealed replica took blocks past its sealed length after a restart")
	}
	if ci := target.Inventory()[0]; ci.Blocks != len(frames) || ci.State != "warm" {
		t.Fatalf("sealed replica after the refusals: %+v, want %d blocks warm", ci, len(frames))
	}
}

// hotReplica appends 1,000 events to origin and gives a new target store
// (its folder and GUID returned for reopening) the origin's blocks as a hot
// replica.
func hotReplica(t *testing.T, origin *Store) (target *Store, dir, guid, id string, frames [][]byte) {
	t.Helper()
	dir, guid = t.TempDir(), "B0000000-0000-4000-8000-000000000000"
	target = mustOpen(t, Options{Dir: dir, GUID: guid, Searchable: true})
	appendN(t, origin, "main", 0, 1000)
	if err := origin.Flush(); err != nil {
		t.Fatal(err)
	}
	id = origin.Inventory()[0].ID
	frames, _ = origin.Replicas().ReadFrames(id, 0, 1<<30)
	if _, err := target.Replicas().ReplicaAppend(id, "main", true, 0, frames); err != nil {
		t.Fatal(err)
	}
	return target, dir, guid, id, frames
}

// TestSealExtensionDoesNotTruncate: a copy longer than its bucket's sealed
// length whose block at the sealed length carries the sealed checksum (the
// sealed copy plus more blocks of its origin, fsm.ExtendSeal) is checked by
// SealPrefix without losing a block — a hot replica made warm at its own
// length — and a copy that diverges is reported, still whole. The shorter,
// sealed copy then takes the rest (ExtendTo, ReplicaAppend, ReplicaRoll)
// and ends identical to the longer one.
func TestSealExtensionDoesNotTruncate(t *testing.T) {
	origin := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 4 << 10})
	defer origin.Close()
	long, _, _, id, frames := hotReplica(t, origin)
	defer long.Close()
	n := len(frames)
	if n < 3 {
		t.Fatalf("want several blocks, got %d", n)
	}
	sealed := n / 2
	short := mustOpen(t, Options{Dir: t.TempDir(), GUID: "C0000000-0000-4000-8000-000000000000", Searchable: true})
	defer short.Close()
	if _, err := short.Replicas().ReplicaAppend(id, "main", true, 0, frames[:sealed]); err != nil {
		t.Fatal(err)
	}
	if err := short.Replicas().ReplicaRoll(id, sealed); err != nil {
		t.Fatal(err)
	}
	sum := short.Replicas().LastChecksum(id, sealed)
	before := len(allEvents(t, long))

	// Diverged (another checksum at the sealed length): refused, whole.
	if _, _, err := long.Replicas().SealPrefix(id, sealed, "00000000"); !errors.Is(err, ErrSealDiverged) {
		t.Fatalf("mismatching prefix: %v, want ErrSealDiverged", err)
	}
	if _, _, err := long.Replicas().SealPrefix(id, sealed, ""); !errors.Is(err, ErrSealDiverged) {
		t.Fatalf("unknown sealed checksum: %v, want ErrSealDiverged", err)
	}
	if got, state, _ := long.Replicas().Blocks(id); got != n || state != StateHot {
		t.Fatalf("after the refusals: %d blocks %s, want %d hot", got, state, n)
	}
	// Matching: the length the seal moves to, nothing cut, warm.
	got, last, err := long.Replicas().SealPrefix(id, sealed, sum)
	if err != nil || got != n || last != long.Replicas().LastChecksum(id, n) || last == "" {
		t.Fatalf("SealPrefix: %d %q %v; want %d blocks", got, last, err, n)
	}
	if b, state, _ := long.Replicas().Blocks(id); b != n || state != StateWarm {
		t.Fatalf("extending copy: %d blocks %s, want %d warm", b, state, n)
	}
	if after := len(allEvents(t, long)); after != before || after != 1000 {
		t.Fatalf("extending copy holds %d events, had %d", after, before)
	}
	// Again (a retried task): the same answer.
	if got, _, err := long.Replicas().SealPrefix(id, sealed, sum); err != nil || got != n {
		t.Fatalf("second SealPrefix: %d, %v", got, err)
	}
	// At or under the seal: its length, nothing to check.
	if got, _, err := short.Replicas().SealPrefix(id, sealed, sum); err != nil || got != sealed {
		t.Fatalf("SealPrefix at the seal: %d, %v", got, err)
	}

	// The sealed copy fills up to the extended length.
	if _, err := short.Replicas().ReplicaAppend(id, "main", true, uint32(sealed), frames[sealed:]); err == nil {
		t.Fatal("a sealed copy took blocks before ExtendTo")
	}
	if err := short.Replicas().ExtendTo(id, n); err != nil {
		t.Fatal(err)
	}
	if got, err := short.Replicas().ReplicaAppend(id, "main", true, uint32(sealed), frames[sealed:]); err != nil || int(got) != n {
		t.Fatalf("append after ExtendTo: %d, %v", got, err)
	}
	if err := short.Replicas().ReplicaRoll(id, n); err != nil {
		t.Fatal(err)
	}
	li, si := long.Inventory()[0], short.Inventory()[0]
	if li.ContentHash != si.ContentHash || si.Events != 1000 || si.State != "warm" || si.Blocks != n {
		t.Fatalf("copies differ: long %+v short %+v", li, si)
	}
	if got := len(allEvents(t, short)); got != 1000 {
		t.Fatalf("extended copy: %d events searchable, want 1000", got)
	}
	// At its length now: ExtendTo is a no-op, the copy takes no more.
	if err := short.Replicas().ExtendTo(id, n); err != nil {
		t.Fatal(err)
	}
}

// TestSealHoldStopsTheOriginStream: once a hot replica answered a seal task
// (HoldForSeal), the origin's stream adds nothing to it — a block in flight
// cannot land after the length it reported — while a fixup fetch
// (ReplicaAppend) still can; a copy that is not there answers false.
func TestSealHoldStopsTheOriginStream(t *testing.T) {
	origin := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 4 << 10})
	defer origin.Close()
	target, _, _, id, frames := hotReplica(t, origin)
	defer target.Close()
	if target.Replicas().HoldForSeal("main~9~B0000000-0000-4000-8000-000000000009") {
		t.Fatal("a seal hold of a bucket with no copy here answered true")
	}
	if !target.Replicas().HoldForSeal(id) {
		t.Fatal("no copy to hold")
	}
	held := target.Inventory()[0].Blocks
	appendN(t, origin, "main", 1000, 1000)
	if err := origin.Flush(); err != nil {
		t.Fatal(err)
	}
	all, _ := origin.Replicas().ReadFrames(id, 0, 1<<30)
	n, err := target.Replicas().OriginAppend(id, "main", true, uint32(len(frames)), all[len(frames):])
	if !errors.Is(err, ErrSealHold) || int(n) != held {
		t.Fatalf("the origin's next blocks after the seal answer: %d blocks, %v; want %d and ErrSealHold", n, err, held)
	}
	if got := target.Inventory()[0].Blocks; got != held {
		t.Fatalf("the held copy grew to %d blocks from %d", got, held)
	}
	// Resent blocks it already holds are still answered (idempotent).
	if n, err := target.Replicas().OriginAppend(id, "main", true, 0, frames); err != nil || int(n) != held {
		t.Fatalf("a resend of held blocks: %d, %v", n, err)
	}
	// A fetch under a fixup task (an extended seal) is not the stream.
	if n, err := target.Replicas().ReplicaAppend(id, "main", true, uint32(len(frames)), all[len(frames):]); err != nil || int(n) != len(all) {
		t.Fatalf("a fetch into the held copy: %d, %v; want %d", n, err, len(all))
	}
}

// TestSealHoldStopsAReopen: a target restarted mid-bucket (its hot replica
// rolled at open, so its origin could reopen it with the blocks it missed)
// that answered a seal task takes no more blocks from its origin's stream:
// the length it answered is final input to the seal (stop 28's chaos run
// lost 2 acknowledged requests when such a copy was reopened after its
// answer and the origin acknowledged the blocks it then took).
func TestSealHoldStopsAReopen(t *testing.T) {
	origin := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, BlockBytes: 4 << 10})
	defer origin.Close()
	target, tdir, tguid, id, frames := hotReplica(t, origin)
	target.Close()
	target = mustOpen(t, Options{Dir: tdir, GUID: tguid, Searchable: true})
	defer target.Close()
	if ci := target.Inventory()[0]; ci.State != "warm" {
		t.Fatalf("restarted replica is %s, want warm (rolled at open)", ci.State)
	}
	if !target.Replicas().HoldForSeal(id) {
		t.Fatal("no copy to hold")
	}
	held := target.Inventory()[0].Blocks
	appendN(t, origin, "main", 1000, 1000)
	if err := origin.Flush(); err != nil {
		t.Fatal(err)
	}
	all, _ := origin.Replicas().ReadFrames(id, 0, 1<<30)
	n, err := target.Replicas().OriginAppend(id, "main", true, uint32(len(frames)), all[len(frames):])
	if err == nil || int(n) > held {
		t.Fatalf("the origin's missed blocks after the seal answer: %d blocks, %v; want a refusal at %d", n, err, held)
	}
	if ci := target.Inventory()[0]; ci.Blocks != held || ci.State != "warm" {
		t.Fatalf("the held copy is %s at %d blocks, was warm at %d", ci.State, ci.Blocks, held)
	}
}
