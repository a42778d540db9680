package store

import (
	"errors"
	"sync"
	"time"
)

// sealOpenLocked seals every open block and returns their tokens (s.mu
// held).
func (s *Store) sealOpenLocked() []*blockToken {
	var toks []*blockToken
	for _, is := range s.indexes {
		for _, b := range is.hot {
			if b.open.n > 0 {
				toks = append(toks, b.openTok)
				s.sealLocked(b)
			}
		}
	}
	return toks
}

// waitLocal waits until every block of toks is fsynced here (not for
// replication), or the store fails (its error), or, with stopOnFull, the
// disk is full (ErrDiskFull). It is woken by the writer, not by polling.
func (s *Store) waitLocal(toks []*blockToken, stopOnFull bool) error {
	for _, t := range toks {
		var full <-chan struct{} // nil: never ready
		if stopOnFull {
			full = s.space.fullSignal()
		}
		select {
		case <-t.local:
		case <-s.failedCh:
			if !t.done.Load() {
				return s.Err()
			}
		case <-full:
			if t.done.Load() {
				continue
			}
			if err := s.Err(); err != nil {
				return err
			}
			return ErrDiskFull
		}
	}
	return nil
}

// WaitIdle waits until every roll in progress has finished and every
// appended event is indexed (tests and benchmarks).
func (s *Store) WaitIdle(timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	expired := false
	for {
		wake := s.idle.signal() // before the check, so no change is missed
		if s.Stats.RollsInProgress.Load() <= 0 && s.Stats.Unindexed.Load() <= 0 {
			return nil
		}
		if err := s.Err(); err != nil {
			return err
		}
		if expired {
			return errors.New("store: not idle before the deadline")
		}
		select {
		case <-wake:
		case <-s.failedCh:
		case <-timer.C:
			expired = true
		}
	}
}

// wakeup is a broadcast to whoever waits for a change: signal returns a
// channel that the next notify closes.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

func (w *wakeup) signal() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *wakeup) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}
