package store

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Replication support (SPEC §4). The store knows nothing of the network:
//
//   - On an origin, a ReplicationHook (set once, before the first Append)
//     hears of every block of a hot bucket once it is durable here, with a
//     function that marks the block replicated. While a hook is set an Ack
//     is Durable only when its blocks are durable here AND marked
//     replicated, so HEC's ack rule needs no other change. The hook also
//     hears when a rolled bucket's journal is closed (its last block durable).
//   - ReadFrames hands out whole journal frames (checksummed, numbered) of
//     any copy, to send them on; a frame is exactly what the journal holds.
//   - On a target, ReplicaAppend appends frames to a replica copy (created
//     on the first block), verifying each frame's checksum and number,
//     idempotently: a frame it already holds with the same checksum is
//     skipped, a gap is refused by answering how many blocks it has. A
//     searchable replica indexes each block as it lands, so it is
//     searchable while hot. ReplicaRoll makes it warm at the origin's length.

// ReplicationHook is called by the store's writer goroutine; it must not
// block.
type ReplicationHook interface {
	// BlockDurable: block no of a hot bucket (origin copy) is durable here.
	// replicated marks it as held by enough copies (the ack rule).
	BlockDurable(bucket, index string, no uint32, replicated func())
	// JournalClosed: a rolled origin bucket has all its blocks durable and
	// takes no more.
	JournalClosed(bucket string, blocks int)
}

// AckRule is what a ReplicationHook may also tell the store: how many
// copies, the origin's included, a block must be on before the hook marks
// it replicated (min(2, RF) in a cluster). The store records it in every
// new bucket's copy.json (ack_copies), so a restarted origin knows whether
// a block no other copy holds can have been acknowledged (AckCopies).
type AckRule interface {
	AckCopies() int
}

// ackCopiesLocked is what a new origin bucket records as its ack_copies:
// the hook's AckRule, 1 without a hook (a standalone peer acknowledges a
// durable block alone), 0 (not recorded) for a hook that does not say.
// s.mu held.
func (s *Store) ackCopiesLocked() int {
	switch h := s.repl.hook.(type) {
	case nil:
		return 1
	case AckRule:
		return h.AckCopies()
	}
	return 0
}

// CopyCreated is when copy id's copy.json was written: the copy's
// creation (it is written once, before the first block).
func (s *Store) CopyCreated(id string) (time.Time, error) {
	b := s.bucket(id)
	if b == nil {
		return time.Time{}, fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	st, err := os.Stat(filepath.Join(b.dir, copyFile))
	if err != nil {
		return time.Time{}, err
	}
	return st.ModTime(), nil
}

// AckCopies is the ack_copies recorded in copy id's copy.json: on an
// origin's copy, the copies the ack rule required of its blocks (1:
// the origin alone could acknowledge them); 0 when not recorded (a
// replica, a copy written before the field existed, an unknown copy).
func (s *Store) AckCopies(id string) int {
	b := s.bucket(id)
	if b == nil {
		return 0
	}
	return b.ackCopies
}

type replState struct {
	hook ReplicationHook // set under Store.mu before the first Append
	mu   sync.Mutex      // serialises replica writes
}

// Replicas is the store's replication side: the origin's hook, the frames
// a copy sends on, a target's replica copies (append, roll, reopen), seal
// extension, and the length and last checksum of any copy.
type Replicas struct{ s *Store }

// Replicas returns the store's replication side.
func (s *Store) Replicas() Replicas { return Replicas{s} }

// SetReplication installs the origin-side hook. Call it right after Open,
// before any Append.
func (rs Replicas) SetReplication(h ReplicationHook) {
	s := rs.s
	s.mu.Lock()
	s.repl.hook = h
	s.mu.Unlock()
}

func (rs Replicas) replBlockDurable(sb *sealedBlock) {
	s := rs.s
	h := s.repl.hook
	if h == nil || sb.b.replica {
		return
	}
	tok := sb.tok
	h.BlockDurable(sb.b.id, sb.b.index, sb.no, func() { tok.repl.Store(true); tok.settle() })
}

func (rs Replicas) replJournalClosed(b *Bucket) {
	s := rs.s
	h := s.repl.hook
	if h == nil || b.replica {
		return
	}
	b.mu.RLock()
	n := len(b.blocks)
	b.mu.RUnlock()
	h.JournalClosed(b.id, n)
}

// ReadFrames returns up to maxBytes (at least one frame) of whole journal
// frames of a copy, starting at block from; fewer when the copy has fewer
// durable blocks. Each frame carries its number and checksum.
func (rs Replicas) ReadFrames(id string, from uint32, maxBytes int) ([][]byte, error) {
	s := rs.s
	b := s.bucket(id)
	if b == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.state == StateRemoved || b.state == StateCorrupt || b.rd == nil {
		return nil, fmt.Errorf("%w: %s is %s", ErrBucketState, id, b.state)
	}
	var out [][]byte
	size := 0
	for i := int(from); i < len(b.blocks); i++ {
		bl := b.blocks[i]
		if len(out) > 0 && size+int(bl.frameLen) > maxBytes {
			break
		}
		f := make([]byte, bl.frameLen)
		if _, err := b.rd.ReadAt(f, bl.off); err != nil {
			return nil, fmt.Errorf("read block %d of %s: %w", i, id, err)
		}
		out = append(out, f)
		size += len(f)
	}
	return out, nil
}

// Blocks reports how many durable blocks a copy has and whether it is hot.
func (rs Replicas) Blocks(id string) (n int, state State, ok bool) {
	s := rs.s
	b := s.bucket(id)
	if b == nil {
		return 0, "", false
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.blocks), b.state, true
}

// ErrReplicaConflict: a frame differs from the block the replica already
// holds under that number (the copies diverged; the manager must decide).
var ErrReplicaConflict = errors.New("replica block conflicts with the copy's block")

// ReplicaAppend appends frames (numbered first, first+1, …) to the replica
// copy id of index, creating it (searchable or not) on its first block, and
// returns the number of blocks the copy holds durably afterwards. Frames it
// already holds are skipped when their checksum matches (idempotent
// resend); a frame past the copy's end stops the append (the answer tells
// the sender where to resume).
func (rs Replicas) ReplicaAppend(id, index string, searchable bool, first uint32, frames [][]byte) (uint32, error) {
	return rs.replicaAppend(id, index, searchable, first, frames, false)
}

// ErrSealHold: the managers are sealing the bucket at the lengths its
// holders reported, and this replica reported its own (HoldForSeal): it
// takes no more blocks from its origin's stream.
var ErrSealHold = errors.New("the managers are sealing this bucket at the length this copy reported; it takes no more blocks from its origin")

// OriginAppend is ReplicaAppend for the blocks an origin streams to its
// targets: refused with ErrSealHold once the copy answered a seal
// (HoldForSeal) while it is hot. Fetches and pushes of a fixup task use
// ReplicaAppend.
func (rs Replicas) OriginAppend(id, index string, searchable bool, first uint32, frames [][]byte) (uint32, error) {
	return rs.replicaAppend(id, index, searchable, first, frames, true)
}

// HoldForSeal answers a seal task (peer/CLUSTER.md "Sealing"): from now on
// the hot replica id takes no more blocks from its origin's stream
// (OriginAppend refuses them), and its length is read after any append in
// progress ended — so no block lands on it after it answered. Without the
// hold a block in flight could land after the answer and be acknowledged
// by the origin (this copy was a target the managers did not know short),
// and then cut by a final seal at the reported length: an acknowledged
// event lost (issue 24's chaos suite, a cut between the sites). The hold
// lasts while the copy is hot (a roll or the seal makes it warm); a
// restart forgets it (the copy is then rolled at open). A warm replica
// that a restart rolled (reopenable: its origin may still send it the
// blocks it missed) is held too: it is no longer reopened by the origin's
// stream, since blocks it took past the length it answered would be
// acknowledged and then cut by a final seal — the 500-fault chaos run of
// stop 28 lost 2 acknowledged requests so (a target restarted during a
// cut, answered the seal at 5 blocks, was reopened by the origin after the
// heal and took blocks 6–7, which the origin acknowledged; the seal at 5
// was final). ok is false when there is no copy.
func (rs Replicas) HoldForSeal(id string) (ok bool) {
	s := rs.s
	s.repl.mu.Lock()
	defer s.repl.mu.Unlock()
	b := s.bucket(id)
	if b == nil {
		return false
	}
	b.mu.Lock()
	if b.state == StateHot && b.replica {
		b.sealHold = true
	}
	if b.state == StateWarm {
		b.reopenable = false
	}
	b.mu.Unlock()
	return true
}

func (rs Replicas) replicaAppend(id, index string, searchable bool, first uint32, frames [][]byte, fromOrigin bool) (uint32, error) {
	s := rs.s
	if !ValidIndexName(index) {
		return 0, fmt.Errorf("%w: %q", ErrBadIndex, index)
	}
	bi, localID, _, ok := parseBucketDir(id)
	if !ok || bi != index {
		return 0, fmt.Errorf("replica %q of index %q: not a bucket id of that index", id, index)
	}
	payloads, scratch, err := verifyReplicaFrames(id, first, frames)
	if err != nil {
		return 0, err
	}
	s.repl.mu.Lock()
	defer s.repl.mu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	b := s.bucket(id)
	if b == nil {
		if first != 0 {
			return 0, nil // the sender resumes from 0
		}
		var err error
		if b, err = rs.createReplica(id, index, localID, searchable); err != nil {
			if !isNoSpace(err) && !isFDError(err) {
				s.fail(err)
			}
			return 0, err
		}
	}
	if err := rs.reopenReplica(b, first); err != nil {
		return 0, err
	}
	b.mu.RLock()
	have := uint32(len(b.blocks))
	state := b.state
	held := b.sealHold && state == StateHot
	crcs := make([]uint32, 0, len(frames))
	for i := range frames {
		no := first + uint32(i)
		if no < have {
			crcs = append(crcs, b.blocks[no].crc)
		}
	}
	b.mu.RUnlock()
	var adds []replicaBlock
	next := have
	for i, fr := range frames {
		no := first + uint32(i)
		fh, err := checkFrame(fr)
		if err != nil {
			return have, fmt.Errorf("replica %s block %d: %w", id, no, err)
		}
		if fh.block != no {
			return have, fmt.Errorf("%w: replica %s: frame %d carries block number %d", ErrCorrupt, id, no, fh.block)
		}
		if no < have {
			if crcs[i] != fh.crc {
				return have, fmt.Errorf("%w: %s block %d", ErrReplicaConflict, id, no)
			}
			continue
		}
		if no > next {
			break // a gap: answer where to resume
		}
		if state != StateHot || !b.replica {
			return have, fmt.Errorf("%w: %s is %s here; it takes no more blocks", ErrBucketState, id, state)
		}
		if held && fromOrigin {
			return have, fmt.Errorf("%w: %s at %d blocks", ErrSealHold, id, have)
		}
		adds = append(adds, replicaBlock{fh: fh, fr: fr, p: payloads[i]})
		next++
	}
	if len(adds) == 0 {
		return have, nil
	}
	// Write and fsync, then publish (blocks, events, hash), then index.
	n, h, err := rs.writeReplicaBlocks(b, adds)
	if err != nil {
		return have, fmt.Errorf("replica %s: %w", id, err)
	}
	s.Stats.BlocksWritten.Add(int64(len(adds)))
	rs.learnKeys(id, adds)
	if h != nil {
		if err := indexReplicaBlocks(h, adds, scratch); err != nil {
			return n, fmt.Errorf("index replica %s: %w", id, err)
		}
	}
	return n, nil
}

// verifyReplicaFrames verifies every frame whole — checksum, number,
// declared sizes, key section, payload — before anything is created or
// written: bad input changes nothing. Frames decode with the replica
// decoders (replicaFrames), each within its declared size and
// maxReplicaBlockRaw; payloads are kept for indexing up to
// replicaKeepBytes a call, the rest decoded again into one scratch buffer
// when indexed, so a call holds a bounded amount of memory however many
// frames it carries.
func verifyReplicaFrames(id string, first uint32, frames [][]byte) (payloads [][]byte, scratch []byte, err error) {
	payloads = make([][]byte, len(frames))
	kept := 0
	for i, fr := range frames {
		no := first + uint32(i)
		var dst []byte
		keep := kept+frameRawLen(fr) <= replicaKeepBytes
		if !keep {
			dst = scratch
		}
		fh, p, err := replicaFrames.decode(fr, dst)
		if err != nil {
			return nil, nil, fmt.Errorf("replica %s block %d: %w", id, no, err)
		}
		if fh.block != no {
			return nil, nil, fmt.Errorf("%w: replica %s: frame %d carries block number %d", ErrCorrupt, id, no, fh.block)
		}
		n := 0
		if err := decodePayload(p, func(int, *decodedEvent) bool { n++; return true }); err != nil {
			return nil, nil, fmt.Errorf("replica %s block %d: %w", id, no, err)
		}
		if n != int(fh.events) {
			return nil, nil, fmt.Errorf("%w: replica %s block %d holds %d events, its header says %d", ErrCorrupt, id, no, n, fh.events)
		}
		if keep {
			payloads[i] = p
			kept += len(p)
		} else {
			scratch = p
		}
	}
	return payloads, scratch, nil
}

// writeReplicaBlocks writes a replica's new blocks, fsyncs them once and
// publishes them (blocks, events, content hash); it returns the blocks the
// copy holds and its hot index (nil when not searchable).
func (rs Replicas) writeReplicaBlocks(b *Bucket, adds []replicaBlock) (uint32, *hotIndex, error) {
	s := rs.s
	off := b.jsize
	var firstOrd uint32
	b.mu.RLock()
	firstOrd = b.events
	b.mu.RUnlock()
	for i := range adds {
		a := &adds[i]
		if f := s.opts.WriteFault; f != nil {
			if err := f(); err != nil {
				return 0, nil, fmt.Errorf("write: %w", err)
			}
		}
		if _, err := b.jf.WriteAt(a.fr, off); err != nil {
			return 0, nil, fmt.Errorf("write: %w", err)
		}
		a.bl = blockInfo{off: off, frameLen: int64(len(a.fr)), firstOrd: firstOrd, events: a.fh.events,
			minT: a.fh.minT, maxT: a.fh.maxT, crc: a.fh.crc}
		firstOrd += a.fh.events
		off += int64(len(a.fr))
		s.Stats.BytesWritten.Add(int64(len(a.fr)))
	}
	if err := b.jf.Sync(); err != nil {
		return 0, nil, fmt.Errorf("fsync: %w", err)
	}
	s.Stats.Fsyncs.Add(1)
	b.jsize = off
	b.mu.Lock()
	for _, a := range adds {
		b.blocks = append(b.blocks, a.bl)
		b.events += a.bl.events
		b.journalBytes = a.bl.off + a.bl.frameLen
		var c [4]byte
		binary.LittleEndian.PutUint32(c[:], a.bl.crc)
		b.hash.Write(c[:])
	}
	n := uint32(len(b.blocks))
	h := b.hidx
	b.mu.Unlock()
	return n, h, nil
}

// replicaBlock is one frame a replica append writes.
type replicaBlock struct {
	bl blockInfo
	fh frameHeader
	fr []byte
	p  []byte // its payload, when kept from the verification
}

// learnKeys hands the key records of blocks made durable here to
// Options.KeysLearned.
func (rs Replicas) learnKeys(id string, adds []replicaBlock) {
	s := rs.s
	learn := s.opts.KeysLearned
	if learn == nil {
		return
	}
	_, _, origin, _ := parseBucketDir(id)
	var recs []KeyRecord
	for _, a := range adds {
		r, _ := frameKeys(a.fr, a.fh) // checked by checkFrame
		for i := range r {
			r[i].Origin = origin
		}
		recs = append(recs, r...)
	}
	if len(recs) > 0 {
		learn(recs)
	}
}

// indexReplicaBlocks indexes a searchable hot replica's new blocks.
func indexReplicaBlocks(h *hotIndex, adds []replicaBlock, scratch []byte) error {
	for _, a := range adds {
		p := a.p
		if p == nil { // not kept: decode it again (it verified above)
			var err error
			if _, p, err = replicaFrames.decode(a.fr, scratch); err != nil {
				return err
			}
			scratch = p
		}
		h.mu.Lock()
		err := decodePayload(p, func(_ int, e *decodedEvent) bool {
			h.addLocked(e)
			return true
		})
		h.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// replicaKeepBytes bounds the decoded payloads one ReplicaAppend keeps
// between verifying its frames and indexing them. A full 4 MiB message of
// ordinary logs (about 7:1 in the journal) decodes to some 30 MiB: its
// first 16 MiB are kept, the rest decoded a second time — decompression
// costs a fraction of what indexing the same events does.
var replicaKeepBytes = 16 << 20 // a variable so that a test can lower it

// frameRawLen is the decompressed length a frame's header declares (0 when
// the header is cut short; the decode refuses it then).
func frameRawLen(fr []byte) int {
	if len(fr) < frameHeaderLen {
		return 0
	}
	return int(binary.LittleEndian.Uint32(fr[16:]))
}

// EmptyReplica makes copy id of index here a warm copy with no block: the
// copy of a bucket its origin rolled at 0 blocks (a restarted origin that
// gave up every block no replica held, peer/DESIGN.md "Idempotent
// retries"). A copy already here is left as it is.
func (rs Replicas) EmptyReplica(id, index string, searchable bool) error {
	s := rs.s
	bi, localID, _, ok := parseBucketDir(id)
	if !ok || bi != index || !ValidIndexName(index) {
		return fmt.Errorf("empty replica %q of index %q: not a bucket id of that index", id, index)
	}
	s.repl.mu.Lock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed || s.bucket(id) != nil {
		s.repl.mu.Unlock()
		if closed {
			return ErrClosed
		}
		return nil
	}
	_, err := rs.createReplica(id, index, localID, searchable)
	s.repl.mu.Unlock()
	if err != nil {
		return err
	}
	return rs.ReplicaRoll(id, 0)
}

func (rs Replicas) createReplica(id, index string, localID uint64, searchable bool) (*Bucket, error) {
	s := rs.s
	dir := filepath.Join(s.dir, id)
	if err := os.MkdirAll(dir, DirPerm); err != nil {
		return nil, err
	}
	if err := syncDir(s.dir); err != nil {
		return nil, err
	}
	ci := copyInfo{Version: 1, ID: id, Index: index, LocalID: localID, Searchable: searchable}
	if err := writeJSONAtomic(dir, copyFile, ci, "copy"); err != nil {
		return nil, err
	}
	jf, err := os.OpenFile(filepath.Join(dir, journalFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, FilePerm)
	if err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		jf.Close()
		return nil, err
	}
	b := &Bucket{s: s, id: id, index: index, localID: localID, dir: dir, searchable: searchable,
		state: StateHot, jf: jf, rd: s.files.handle(filepath.Join(dir, journalFile)), hash: sha256.New(), journalClosed: make(chan struct{}), replica: true}
	if searchable {
		b.hidx = newHotIndex()
	}
	s.putBucket(b)
	return b, nil
}

// ReplicaRoll makes a hot replica warm once it holds exactly blocks blocks
// (the origin's final length): its journal is closed, its index written
// (searchable copies), its metadata made durable. A warm copy of that
// length is left as it is (idempotent); a shorter copy is refused (it must
// fetch the missing blocks first).
func (rs Replicas) ReplicaRoll(id string, blocks int) error {
	s := rs.s
	s.repl.mu.Lock()
	defer s.repl.mu.Unlock()
	b := s.bucket(id)
	if b == nil {
		return fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	state, have := b.state, len(b.blocks)
	b.mu.RUnlock()
	if have < blocks {
		return fmt.Errorf("%w: replica %s holds %d of %d blocks", ErrBucketState, id, have, blocks)
	}
	if state == StateWarm {
		if have > blocks {
			return s.Repairs().Truncate(id, blocks)
		}
		b.mu.Lock()
		b.reopenable = false // at its final length: nothing may extend it
		b.mu.Unlock()
		return nil
	}
	if state != StateHot {
		return fmt.Errorf("%w: replica %s is %s", ErrBucketState, id, state)
	}
	b.mu.Lock()
	b.state = StateRolling
	jf := b.jf
	b.jf = nil
	allBlocks := append([]blockInfo(nil), b.blocks...)
	h := b.hidx
	b.mu.Unlock()
	if jf != nil {
		if err := jf.Close(); err != nil {
			return err
		}
	}
	close(b.journalClosed)
	all := allBlocks
	if err := s.makeWarm(b, h, all, sumEvents(all), b.jsize, contentHash(all), b.searchable); err != nil {
		return err
	}
	if have > blocks {
		return s.Repairs().Truncate(id, blocks)
	}
	return nil
}

// IsReplica reports whether this store holds id as a copy it did not
// originate (hot or warm), judged by the GUID in the id.
func (rs Replicas) IsReplica(id string) bool {
	s := rs.s
	_, _, guid, ok := parseBucketDir(id)
	return ok && guid != s.opts.GUID
}

// reopenReplica turns a warm replica back into a hot one when its origin
// sends it more blocks: a target that restarted (its hot copies were rolled
// at open) takes the blocks it missed (maintenance mode, SPEC §4). Only a
// copy this peer did not originate, rolled by this process's open (never
// one made warm by a seal or a roll: past its sealed length nothing may be
// added), with no truncation pending, is reopened, and only for blocks past
// its end. meta.json goes first (durably),
// so on disk the copy is hot from then on and a crash recovers it as one.
func (rs Replicas) reopenReplica(b *Bucket, first uint32) error {
	s := rs.s
	b.mu.RLock()
	state, replica, nb, pending, reopenable := b.state, b.replica, uint32(len(b.blocks)), b.meta.PendingTruncate, b.reopenable
	b.mu.RUnlock()
	if state != StateWarm || replica || !reopenable || !rs.IsReplica(b.id) || pending >= 0 || first+1 <= nb {
		return nil
	}
	if first > nb {
		return nil // a gap: the answer says where to resume
	}
	if err := rs.reopenHot(b); err != nil {
		return err
	}
	s.log.Info("replica reopened to take the blocks it missed", "bucket", b.id, "blocks", nb)
	return nil
}

// reopenHot turns a warm copy into a hot replica that ReplicaAppend
// extends: meta.json goes first (durably), so on disk the copy is hot from
// then on and a crash recovers it as one (rolled at open, at the blocks it
// holds).
func (rs Replicas) reopenHot(b *Bucket) error {
	if err := os.Remove(filepath.Join(b.dir, metaFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	os.Remove(filepath.Join(b.dir, indexFile))
	os.Remove(filepath.Join(b.dir, columnsFile))
	if err := syncDir(b.dir); err != nil {
		return err
	}
	jf, err := os.OpenFile(filepath.Join(b.dir, journalFile), os.O_WRONLY, FilePerm)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var h *hotIndex
	if b.searchable {
		if h, err = indexJournal(b.rd, b.blocks); err != nil {
			jf.Close()
			return err
		}
	}
	hs := sha256.New()
	for _, bl := range b.blocks {
		var c [4]byte
		binary.LittleEndian.PutUint32(c[:], bl.crc)
		hs.Write(c[:])
	}
	if b.widx != nil {
		b.widx.close()
		b.widx = nil
	}
	b.jf, b.jsize, b.hash, b.hidx = jf, b.journalBytes, hs, h
	b.state, b.replica, b.contentHash, b.reopenable = StateHot, true, "", false
	b.journalClosed = make(chan struct{})
	b.meta = metaInfo{}
	return nil
}

// ErrSealDiverged: a copy longer than its bucket's sealed length whose
// block at the sealed length does not carry the sealed checksum — it is
// not the sealed copy plus more blocks, so its blocks past the seal cannot
// extend it (the copies diverged; the longer one is truncated).
var ErrSealDiverged = errors.New("copy diverges from the sealed length")

// SealPrefix checks a copy longer than its bucket's sealed length (sealed
// blocks, the last one's checksum sum) before the managers extend the seal
// to it (SPEC §4, fsm.ExtendSeal): its block sealed-1 must carry sum, so
// the copy is the sealed copy followed by more blocks of the same origin
// (each block's CRC-32C covers its number and payload). Nothing is cut: a
// hot replica is made warm at the blocks it holds (its origin rolled or is
// gone), a warm copy stays as it is, and both take no block past that
// length from then on. It answers the copy's length and last checksum —
// the length the seal moves to. A copy at or below the sealed length
// answers its length unchanged; an origin's own hot bucket is refused
// (ErrBucketState: it rolls first); a mismatch or an unknown sealed
// checksum is ErrSealDiverged, and the copy is left whole (truncating it is
// the caller's decision).
func (rs Replicas) SealPrefix(id string, sealed int, sum string) (int, string, error) {
	s := rs.s
	b := s.bucket(id)
	if b == nil {
		return 0, "", fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	n, state, replica := len(b.blocks), b.state, b.replica
	var got string
	if sealed > 0 && sealed <= n {
		got = fmt.Sprintf("%08x", b.blocks[sealed-1].crc)
	}
	b.mu.RUnlock()
	if n <= sealed {
		return n, rs.LastChecksum(id, n), nil
	}
	if sealed <= 0 || sum == "" || got != sum {
		return n, rs.LastChecksum(id, n), fmt.Errorf("%w: %s block %d checksum %q, sealed at %d blocks with %q",
			ErrSealDiverged, id, sealed-1, got, sealed, sum)
	}
	switch {
	case state == StateHot && replica:
		if err := rs.ReplicaRoll(id, n); err != nil {
			return n, "", err
		}
	case state == StateWarm:
		b.mu.Lock()
		b.reopenable = false // at its final length: the seal moves to it
		b.mu.Unlock()
	default:
		return n, "", fmt.Errorf("%w: %s is %s here", ErrBucketState, id, state)
	}
	return n, rs.LastChecksum(id, n), nil
}

// ExtendTo readies a warm copy shorter than its bucket's sealed length to
// take the missing blocks (a fetch after the managers extended the seal,
// fsm.ExtendSeal): it becomes a hot replica again, ReplicaAppend adds the
// blocks, and ReplicaRoll(sealed) makes it warm at the new length. A hot
// replica, or a copy already at least sealed blocks long, is left as it
// is; a copy with a truncation pending is refused.
func (rs Replicas) ExtendTo(id string, sealed int) error {
	s := rs.s
	s.repl.mu.Lock()
	defer s.repl.mu.Unlock()
	b := s.bucket(id)
	if b == nil {
		return fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	state, replica, n, pending := b.state, b.replica, len(b.blocks), b.meta.PendingTruncate
	b.mu.RUnlock()
	if n >= sealed || state == StateHot && replica {
		return nil
	}
	if state != StateWarm || pending >= 0 {
		return fmt.Errorf("%w: %s is %s (pending truncate %d); it cannot take blocks to %d", ErrBucketState, id, state, pending, sealed)
	}
	if err := rs.reopenHot(b); err != nil {
		return err
	}
	s.log.Info("copy reopened to take the blocks of an extended seal", "bucket", id, "blocks", n, "sealed", sealed)
	return nil
}

// LastChecksum is the CRC-32C (hex, 8 digits) of block n-1 of a copy, the
// form a sealed length's last checksum takes; "" when the copy has fewer
// than n blocks or n is 0.
func (rs Replicas) LastChecksum(id string, n int) string {
	s := rs.s
	b := s.bucket(id)
	if b == nil || n <= 0 {
		return ""
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if len(b.blocks) < n {
		return ""
	}
	return fmt.Sprintf("%08x", b.blocks[n-1].crc)
}

// RemoveCopy deletes a copy (a destructive fixup task, confirmed by the
// caller against the managers' committed state): it leaves the inventory
// and its folder is removed. Removing a copy that is not here is a no-op.
// A hot copy this peer originates cannot be removed.
func (rs Replicas) RemoveCopy(id string) error {
	s := rs.s
	s.repl.mu.Lock()
	defer s.repl.mu.Unlock()
	b := s.bucket(id)
	if b == nil {
		return nil
	}
	b.mu.Lock()
	if (b.state == StateHot || b.state == StateRolling) && !b.replica {
		b.mu.Unlock()
		return fmt.Errorf("%w: %s is this peer's hot bucket", ErrBucketState, id)
	}
	b.state = StateRemoved
	if b.jf != nil {
		b.jf.Close()
		b.jf = nil
	}
	if b.widx != nil {
		b.widx.close()
		b.widx = nil
	}
	if b.rd != nil {
		b.rd.Close()
	}
	b.hidx = nil
	b.mu.Unlock()
	s.dropBucket(id)
	// copy.json goes first: a folder without it is removed at open, so a
	// crash half-way never leaves a copy that looks whole.
	os.Remove(filepath.Join(b.dir, copyFile))
	if err := syncDir(b.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(b.dir); err != nil {
		return err
	}
	return syncDir(s.dir)
}
