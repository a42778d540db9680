package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Report is what recovery did when the store opened.
type Report struct {
	Opened       int      // copies opened as they were
	Rolled       int      // hot copies rolled (their index rebuilt from the journal)
	RolledIDs    []string // their bucket ids
	TornTails    int      // journals cut back to their last whole block
	DroppedBytes int64    // bytes cut off torn tails
	Rebuilt      int      // warm indexes rebuilt (missing or damaged)
	Removed      int      // folders with no block ever written, removed
	Corrupt      []string // copies that could not be opened, with why
	// Deferred are hot copies left on disk as they are, unopened, because
	// rolling them found no room (diskfull.go): the next open with room
	// rolls them.
	Deferred []string
}

// Clean reports whether recovery found nothing to repair.
func (r Report) Clean() bool {
	return r.Rolled == 0 && r.TornTails == 0 && r.Rebuilt == 0 && r.Removed == 0 && len(r.Corrupt) == 0
}

// LastRecovery returns what the last Open repaired.
func (s *Store) LastRecovery() Report { return s.report }

// recovery opens every copy on disk as Open starts, repairing what a crash
// left (its findings go to Store.report).
type recovery struct{ s *Store }

func (rc recovery) recover() error {
	s := rc.s
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(s.dir, name)
		if !e.IsDir() {
			if strings.HasSuffix(name, tmpSuffix) {
				os.Remove(path)
			}
			continue
		}
		index, localID, guid, ok := parseBucketDir(name)
		if !ok {
			s.log.Warn("ignoring a folder that is not a bucket", "dir", path)
			continue
		}
		_ = guid
		removeTemps(path)
		var ci copyInfo
		if err := readJSON(filepath.Join(path, copyFile), &ci); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// copy.json is made durable before the first block is
				// written, so no event was ever stored here.
				s.log.Info("removing a bucket folder that never held a block", "dir", path)
				if err := os.RemoveAll(path); err != nil {
					return err
				}
				s.report.Removed++
				continue
			}
			rc.addCorrupt(&Bucket{s: s, id: name, index: index, localID: localID, dir: path}, err)
			continue
		}
		b := &Bucket{s: s, id: ci.ID, index: ci.Index, localID: ci.LocalID, dir: path, searchable: ci.Searchable,
			quarantine: ci.Quarantine, ackCopies: ci.AckCopies, journalClosed: make(chan struct{})}
		close(b.journalClosed)
		if ci.Version != formatVersion {
			b.id = name
			rc.addCorrupt(b, fmt.Errorf("%w: copy.json format version %d (this peer reads %d)", ErrUnsupported, ci.Version, formatVersion))
			continue
		}
		if b.id != name {
			rc.addCorrupt(b, fmt.Errorf("%w: copy.json names %q", ErrCorrupt, ci.ID))
			continue
		}
		if _, err := os.Stat(filepath.Join(path, journalFile)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				os.RemoveAll(path)
				s.report.Removed++
				continue
			}
			return err
		}
		b.rd = s.files.handle(filepath.Join(path, journalFile))
		var m metaInfo
		merr := readJSON(filepath.Join(path, metaFile), &m)
		switch {
		case merr == nil && m.Version != formatVersion:
			err = fmt.Errorf("%w: meta.json format version %d (this peer reads %d)", ErrUnsupported, m.Version, formatVersion)
		case merr == nil:
			err = rc.openWarm(b, m)
		case errors.Is(merr, fs.ErrNotExist):
			err = rc.recoverHot(b)
		default:
			s.log.Warn("metadata unreadable; rebuilding the bucket from its journal", "bucket", b.id, "err", merr)
			err = rc.recoverHot(b)
		}
		if err != nil {
			if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported) {
				rc.addCorrupt(b, err)
				continue
			}
			if isNoSpace(err) {
				s.deferRoll(b, err)
				continue
			}
			return fmt.Errorf("open bucket %s: %w", b.id, err)
		}
		if b.state == StateRemoved {
			continue
		}
		// The descriptors recovery used go back: the first search opens
		// what it reads (the cache would only keep the last copies opened).
		b.dropFiles()
		s.putBucket(b)
	}
	return nil
}

func removeTemps(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func (rc recovery) addCorrupt(b *Bucket, err error) {
	s := rc.s
	s.log.Error("bucket copy is corrupt; it is kept but not served", "bucket", b.id, "err", err)
	b.state = StateCorrupt
	b.problem = err.Error()
	s.report.Corrupt = append(s.report.Corrupt, b.id+": "+err.Error())
	s.putBucket(b)
}

func contentHash(blocks []blockInfo) string {
	h := sha256.New()
	var c [4]byte
	for _, b := range blocks {
		binary.LittleEndian.PutUint32(c[:], b.crc)
		h.Write(c[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sumEvents(blocks []blockInfo) uint32 {
	n := uint32(0)
	for _, b := range blocks {
		n += b.events
	}
	return n
}

// scanAndRepair scans a copy's journal and cuts a torn tail.
func (rc recovery) scanAndRepair(b *Bucket) (scanResult, error) {
	s := rc.s
	st, err := os.Stat(filepath.Join(b.dir, journalFile)) // no descriptor needed
	if err != nil {
		return scanResult{}, err
	}
	res := scanJournal(b.rd, st.Size())
	if err := unreadable(res); err != nil {
		// Not a torn tail: the blocks after the one that could not be
		// read may be whole and acknowledged, so nothing is cut. The copy
		// is kept, reported corrupt and not served; the managers repair it
		// from another copy (corruption first).
		return res, err
	}
	if res.problem != nil && s.opts.KeepDamaged {
		if at, ok := wholeFrameAfter(b.rd, res.validLen, res.fileLen, uint32(len(res.blocks))); ok {
			return res, fmt.Errorf("%w: block %d at offset %d is damaged and a whole block follows at offset %d: kept, nothing cut: %v",
				ErrCorrupt, len(res.blocks), res.validLen, at, res.problem)
		}
	}
	if res.problem != nil {
		s.log.Warn("journal tail is torn; cutting it back to the last whole block", "bucket", b.id,
			"valid_bytes", res.validLen, "file_bytes", res.fileLen, "why", res.problem)
		if err := truncateFile(filepath.Join(b.dir, journalFile), res.validLen); err != nil {
			return res, err
		}
		s.report.TornTails++
		s.report.DroppedBytes += res.fileLen - res.validLen
		s.Stats.Repairs.Add(1)
	}
	return res, nil
}

// unreadable turns a scan that stopped at a read error (the disk failed
// to return bytes the file holds, as opposed to bytes that are cut short
// or fail their checksum) into an ErrCorrupt error; nil otherwise. Cutting
// there, as a torn tail is cut, would drop every intact block after it.
func unreadable(res scanResult) error {
	if res.problem == nil || errors.Is(res.problem, ErrCorrupt) {
		return nil
	}
	return fmt.Errorf("%w: journal unreadable at offset %d, nothing cut: %v", ErrCorrupt, res.validLen, res.problem)
}

// wholeFrameAfter looks past a damaged frame at from for a whole frame of
// a later block (magic, header and checksum all valid) before size, and
// returns its offset. A torn tail has none.
func wholeFrameAfter(f io.ReaderAt, from, size int64, damaged uint32) (int64, bool) {
	if size-from <= frameHeaderLen {
		return 0, false
	}
	rest := make([]byte, size-from)
	if n, err := f.ReadAt(rest, from); err != nil && n < len(rest) {
		rest = rest[:n]
	}
	for i := 1; i+frameHeaderLen <= len(rest); {
		j := bytes.Index(rest[i:], frameMagic[:3]) // either version
		if j < 0 {
			return 0, false
		}
		i += j
		if fh, err := parseFrameHeader(rest[i:]); err == nil && fh.block > damaged {
			if end := i + frameHeaderLen + int(fh.compLen); end <= len(rest) {
				if _, err := checkFrame(rest[i:end]); err == nil {
					return from + int64(i), true
				}
			}
		}
		i++
	}
	return 0, false
}

// recoverHot recovers a copy that was hot when the peer stopped: cut the
// torn tail, then roll it (its index is rebuilt from the journal).
func (rc recovery) recoverHot(b *Bucket) error {
	s := rc.s
	res, err := rc.scanAndRepair(b)
	if err != nil {
		return err
	}
	if len(res.blocks) == 0 {
		b.rd.Close()
		b.state = StateRemoved
		s.report.Removed++
		return os.RemoveAll(b.dir)
	}
	s.report.Rolled++
	s.report.RolledIDs = append(s.report.RolledIDs, b.id)
	b.reopenable = true // a replica's origin may send it the blocks it missed
	return s.makeWarm(b, nil, res.blocks, sumEvents(res.blocks), res.validLen, contentHash(res.blocks), b.searchable)
}

// openWarm opens a warm copy, finishing an interrupted truncation and
// rebuilding a missing or damaged index.
func (rc recovery) openWarm(b *Bucket, m metaInfo) error {
	s := rc.s
	if m.PendingTruncate >= 0 {
		return s.Repairs().finishTruncate(b, m)
	}
	st, err := os.Stat(filepath.Join(b.dir, journalFile)) // no descriptor needed
	if err != nil {
		return err
	}
	if st.Size() < m.JournalBytes {
		return fmt.Errorf("%w: journal holds %d bytes, metadata says %d", ErrCorrupt, st.Size(), m.JournalBytes)
	}
	if st.Size() > m.JournalBytes {
		if err := truncateFile(filepath.Join(b.dir, journalFile), m.JournalBytes); err != nil {
			return err
		}
		s.report.TornTails++
	}
	b.meta = m
	b.searchable = m.Searchable
	b.events = m.Events
	b.journalBytes = m.JournalBytes
	b.contentHash = m.ContentHash
	b.state = StateWarm
	if m.Searchable {
		r, err := openIndexIn(s.files, filepath.Join(b.dir, indexFile))
		if err == nil && (r.events != m.Events || r.size != m.IndexBytes || len(r.blocks) != m.Blocks) {
			r.close()
			err = fmt.Errorf("%w: index does not match the metadata", ErrCorrupt)
		}
		if err == nil {
			// A copy written before columns existed (no column_bytes) is
			// rebuilt too: index and columns come from one pass.
			r.cols, err = openColumnsIn(s.files, filepath.Join(b.dir, columnsFile))
			if err == nil && (r.cols.events != m.Events || r.cols.size != m.ColumnBytes) {
				err = fmt.Errorf("%w: columns do not match the metadata", ErrCorrupt)
			}
			if err != nil {
				r.close()
			}
		}
		if err == nil {
			b.widx = r
			b.blocks = r.blocks
			s.report.Opened++
			return nil
		}
		s.log.Warn("index missing or damaged; rebuilding it from the journal", "bucket", b.id, "err", err)
		s.report.Rebuilt++
	}
	res := scanJournal(b.rd, m.JournalBytes)
	if res.problem != nil || len(res.blocks) != m.Blocks {
		return fmt.Errorf("%w: warm journal: %v (%d of %d blocks)", ErrCorrupt, res.problem, len(res.blocks), m.Blocks)
	}
	if !m.Searchable {
		// An index left by a make-searchable that crashed before its
		// metadata was written is not trusted: the copy is journal-only.
		os.Remove(filepath.Join(b.dir, indexFile))
		os.Remove(filepath.Join(b.dir, columnsFile))
		b.blocks = res.blocks
		s.report.Opened++
		return nil
	}
	return s.makeWarm(b, nil, res.blocks, m.Events, m.JournalBytes, m.ContentHash, true)
}

// Repairs are the repairs the managers' fixup tasks ask of a warm copy:
// make it searchable, cut it to a sealed length, verify it whole.
type Repairs struct{ s *Store }

// Repairs returns the store's repairs of warm copies.
func (s *Store) Repairs() Repairs { return Repairs{s} }

// MakeSearchable turns a journal-only warm copy into a searchable one by
// rebuilding its index from the journal (no network copy).
func (rp Repairs) MakeSearchable(id string) error {
	s := rp.s
	b := s.bucket(id)
	if b == nil {
		return fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	state, searchable := b.state, b.searchable
	blocks, events, jb, hash := b.blocks, b.events, b.journalBytes, b.contentHash
	b.mu.RUnlock()
	if state != StateWarm {
		return fmt.Errorf("%w: %s is %s; only a warm copy can be made searchable", ErrBucketState, id, state)
	}
	if searchable {
		return nil
	}
	return s.makeWarm(b, nil, blocks, events, jb, hash, true)
}

// Truncate cuts a warm copy to its first n blocks (SPEC §4's
// PendingTruncate), rebuilding its index and metadata. The decision is made
// durable first, so a crash half-way is finished by the next Open.
func (rp Repairs) Truncate(id string, n int) error {
	s := rp.s
	b := s.bucket(id)
	if b == nil {
		return fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	state, m, nb := b.state, b.meta, len(b.blocks)
	b.mu.RUnlock()
	if state != StateWarm {
		return fmt.Errorf("%w: %s is %s; roll it before truncating", ErrBucketState, id, state)
	}
	if n < 0 || n > nb {
		return fmt.Errorf("truncate %s to %d blocks: it has %d", id, n, nb)
	}
	// Cut to a sealed length (or confirmed there): nothing may extend it.
	b.mu.Lock()
	b.reopenable = false
	b.mu.Unlock()
	if n == nb {
		return nil
	}
	m.PendingTruncate = n
	if err := writeJSONAtomic(b.dir, metaFile, m, "meta"); err != nil {
		return err
	}
	return rp.finishTruncate(b, m)
}

func (rp Repairs) finishTruncate(b *Bucket, m metaInfo) error {
	s := rp.s
	st, err := os.Stat(filepath.Join(b.dir, journalFile)) // no descriptor needed
	if err != nil {
		return err
	}
	res := scanJournal(b.rd, st.Size())
	if len(res.blocks) < m.PendingTruncate {
		return fmt.Errorf("%w: truncating to %d blocks but only %d are whole", ErrCorrupt, m.PendingTruncate, len(res.blocks))
	}
	blocks := res.blocks[:m.PendingTruncate]
	length := int64(0)
	if len(blocks) > 0 {
		last := blocks[len(blocks)-1]
		length = last.off + last.frameLen
	}
	if err := truncateFile(filepath.Join(b.dir, journalFile), length); err != nil {
		return err
	}
	b.mu.Lock() // a live store's Truncate races with Inventory readers
	b.state = StateWarm
	b.mu.Unlock()
	return s.makeWarm(b, nil, blocks, sumEvents(blocks), length, contentHash(blocks), m.Searchable)
}

// Verify reads a copy whole and checks every checksum: each journal block
// and, for a searchable copy, the index file. It reports the first problem.
func (rp Repairs) Verify(id string) error {
	s := rp.s
	b := s.bucket(id)
	if b == nil {
		return fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.state == StateCorrupt {
		return fmt.Errorf("%w: %s", ErrCorrupt, b.problem)
	}
	res := scanJournal(b.rd, b.journalBytes)
	if res.problem != nil {
		return fmt.Errorf("bucket %s journal: %w", id, res.problem)
	}
	if len(res.blocks) != len(b.blocks) {
		return fmt.Errorf("%w: bucket %s journal holds %d blocks, want %d", ErrCorrupt, id, len(res.blocks), len(b.blocks))
	}
	if b.widx != nil {
		if err := b.widx.verify(); err != nil {
			return fmt.Errorf("bucket %s index: %w", id, err)
		}
		if b.widx.cols != nil {
			if err := b.widx.cols.verify(); err != nil {
				return fmt.Errorf("bucket %s columns: %w", id, err)
			}
		}
	}
	return nil
}
