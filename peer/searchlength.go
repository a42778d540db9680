package peer

import (
	"context"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/peer/store"
)

// A search that finds its copy of a sealed bucket at another length than
// the generation table's — shorter (blocks lost or a copy re-created from
// a resend's first blocks) or diverging from the seal — tells the managers
// the copy's true length (api.EventLength, as a fetch or truncate does),
// so the copy stops being listed whole and searchable (fsm usable) and the
// planner fetches or truncates it. Without it the table keeps offering the
// copy, and every search that reaches it must fail over or go partial
// until some other path notices.

// mismatchEvery bounds reports per bucket: one per interval at most.
const mismatchEvery = 30 * time.Second

// mismatches remembers when each bucket's mismatch was last reported.
type mismatches struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// reportMismatch reports a copy's length l that differs from the sealed
// length, in the background (never on the search's path), at most once
// per mismatchEvery per bucket.
func (s *searchService) reportMismatch(id string, sealed sealedLength, l store.CopyLength) {
	if s.mc == nil {
		return
	}
	// A hot local copy is reported too: the bucket is sealed, so blocks it
	// still receives only bring it to the seal, and the seal watch
	// (sealOwn) then reports the sealed length, which makes it whole
	// again.
	now := time.Now()
	s.mis.mu.Lock()
	if s.mis.last == nil {
		s.mis.last = map[string]time.Time{}
	}
	if t, ok := s.mis.last[id]; ok && now.Sub(t) < mismatchEvery {
		s.mis.mu.Unlock()
		return
	}
	s.mis.last[id] = now
	for b, t := range s.mis.last {
		if now.Sub(t) >= mismatchEvery {
			delete(s.mis.last, b)
		}
	}
	s.mis.mu.Unlock()
	s.runMu.Lock()
	if s.closing {
		s.runMu.Unlock()
		return
	}
	s.wg.Add(1)
	s.runMu.Unlock()
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		s.p.log.Warn("search found a copy of a sealed bucket at another length than its seal: reported to the managers",
			"bucket", id, "blocks", l.Blocks, "checksum", l.Checksum, "sealed", sealed.blocks, "sealed_checksum", sealed.checksum)
		_, err := s.mc.BucketEvent(ctx, api.BucketEvent{V: api.WireVersion, Kind: api.EventLength, Bucket: id, Peer: s.p.cfg.ID,
			Blocks: l.Blocks, LastBlockChecksum: l.Checksum})
		if err != nil {
			s.p.log.Warn("could not report a copy length", "bucket", id, "err", err)
		}
	}()
}
