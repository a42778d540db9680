package store

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// roller finishes rolls: waits for the journal to be closed, writes the
// index (searchable copies) and the metadata, and makes the bucket warm.
func (s *Store) roller() {
	defer s.wg.Done()
	for {
		select {
		case b := <-s.rollCh:
			select {
			case <-b.journalClosed:
			case <-s.stop:
				return
			}
			if s.Err() == nil {
				err := s.retryFDs(func() error { return s.finishRoll(b) })
				if err != nil && (isFDError(err) || isNoSpace(err)) {
					// Out of descriptors: the bucket stays rolling (hot
					// and searchable) and the roll is tried again.
					s.retryRollLater(b, err)
					continue
				}
				if err != nil {
					s.fail(fmt.Errorf("roll %s: %w", b.id, err))
				} else {
					s.Stats.Rolls.Add(1)
				}
			}
			s.Stats.RollsInProgress.Add(-1)
			s.idle.notify()
		case <-s.stop:
			return
		}
	}
}

// retryRollLater hands a roll that found no file descriptor back to the
// roller after a pause (doubling, up to 5 s): want of descriptors delays
// a roll, it never fails the store.
func (s *Store) retryRollLater(b *Bucket, err error) {
	b.rollRetry = min(max(2*b.rollRetry, 50*time.Millisecond), 5*time.Second)
	s.log.Warn("roll waits for file descriptors", "bucket", b.id, "retry_in", b.rollRetry, "err", err)
	time.AfterFunc(b.rollRetry, func() {
		select {
		case s.rollCh <- b:
		case <-s.stop:
		}
	})
}

func (s *Store) finishRoll(b *Bucket) error {
	crashPoint("roll")
	b.mu.RLock()
	blocks := append([]blockInfo(nil), b.blocks...)
	events, jbytes := b.events, b.journalBytes
	hashHex := hex.EncodeToString(b.hash.Sum(nil))
	b.mu.RUnlock()
	if events == 0 {
		// Nothing was ever written: the bucket goes away.
		b.mu.Lock()
		b.state = StateRemoved
		b.mu.Unlock()
		s.dropBucket(b.id)
		b.rd.Close()
		return os.RemoveAll(b.dir)
	}
	return s.makeWarm(b, b.hidx, blocks, events, jbytes, hashHex, b.searchable)
}

// makeWarm writes the index (when searchable) and the metadata of a bucket
// whose journal is complete and durable, then switches it to warm.
func (s *Store) makeWarm(b *Bucket, h *hotIndex, blocks []blockInfo, events uint32, jbytes int64, hashHex string, searchable bool) error {
	if f := s.opts.WriteFault; f != nil {
		if err := f(); err != nil {
			return err
		}
	}
	var err error
	if searchable && h == nil {
		if h, err = indexJournal(b.rd, blocks); err != nil {
			return err
		}
	}
	m := metaInfo{Version: 1, ID: b.id, Index: b.index, LocalID: b.localID, Searchable: searchable, Quarantine: b.quarantine,
		Events: events, Blocks: len(blocks), JournalBytes: jbytes, ContentHash: hashHex, PendingTruncate: -1,
		Earliest: 0, Latest: -1}
	for i, bl := range blocks {
		if i == 0 || bl.minT < m.Earliest {
			m.Earliest = bl.minT
		}
		if i == 0 || bl.maxT > m.Latest {
			m.Latest = bl.maxT
		}
	}
	var r *indexReader
	if searchable {
		data := buildIndex(h, blocks)
		if err := writeFileAtomic(b.dir, indexFile, data, "index"); err != nil {
			return err
		}
		m.IndexBytes = int64(len(data))
		cols := buildColumns(h)
		if err := writeFileAtomic(b.dir, columnsFile, cols, "columns"); err != nil {
			return err
		}
		m.ColumnBytes = int64(len(cols))
		if r, err = openIndexIn(s.files, filepath.Join(b.dir, indexFile)); err != nil {
			return err
		}
		if r.cols, err = openColumnsIn(s.files, filepath.Join(b.dir, columnsFile)); err != nil {
			r.close()
			return err
		}
	}
	if err := writeJSONAtomic(b.dir, metaFile, m, "meta"); err != nil {
		if r != nil {
			r.close()
		}
		return err
	}
	b.mu.Lock()
	old := b.widx
	b.meta = m
	b.state = StateWarm
	b.searchable = searchable
	b.widx = r
	b.hidx = nil
	b.blocks = blocks
	b.events = events
	b.journalBytes = jbytes
	b.contentHash = hashHex
	b.mu.Unlock()
	if old != nil {
		old.close()
	}
	return nil
}

// indexJournal builds a hot index by decoding every block of a journal.
func indexJournal(rd io.ReaderAt, blocks []blockInfo) (*hotIndex, error) {
	h := newHotIndex()
	h.mu.Lock()
	defer h.mu.Unlock()
	var buf []byte
	for _, bl := range blocks {
		p, err := readBlock(rd, bl, buf)
		if err != nil {
			return nil, err
		}
		buf = p
		if err := decodePayload(p, func(_ int, e *decodedEvent) bool {
			h.addLocked(e)
			return true
		}); err != nil {
			return nil, fmt.Errorf("block at %d: %w", bl.off, err)
		}
	}
	return h, nil
}
