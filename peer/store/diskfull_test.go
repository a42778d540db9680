package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestDiskFullRecoversWithoutRestart: journal writes failing with ENOSPC
// (Options.WriteFault) fail the requests whose blocks they hold — Wait and
// Append answer ErrDiskFull, the store is Busy — but never the store; once
// there is room the waiting blocks are written, new appends are taken; a
// restart while the disk is still full opens (the hot copies it cannot roll
// wait on disk), and the next restart with room has every acknowledged
// event.
func TestDiskFullRecoversWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	var faults atomic.Int64
	opts := Options{Dir: dir, Searchable: true, BlockInterval: 10 * time.Millisecond, WriteFault: func() error {
		if full.Load() {
			faults.Add(1)
			return fmt.Errorf("write: %w", syscall.ENOSPC)
		}
		return nil
	}}
	s := mustOpen(t, opts)
	a1 := appendN(t, s, "main", 0, 100)
	waitDurable(t, a1)

	full.Store(true)
	a2 := appendN(t, s, "main", 100, 100) // taken: the disk is not known full yet
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := s.Wait(ctx, a2)
	cancel()
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("wait on a full disk: %v, want ErrDiskFull", err)
	}
	if !s.Busy() || !s.DiskFull() || s.Err() != nil {
		t.Fatalf("full disk: busy %v, full %v, err %v; want busy, full, no store error", s.Busy(), s.DiskFull(), s.Err())
	}
	if _, err := s.Append([]Event{testEvent("main", 999)}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append on a full disk: %v, want ErrDiskFull", err)
	}

	full.Store(false)
	waitDurable(t, a2) // the waiting group is written: no restart
	testutil.WaitFor(t, 5*time.Second, func() error {
		if s.Busy() || s.DiskFull() {
			return errors.New("still busy")
		}
		return nil
	})
	a3 := appendN(t, s, "main", 200, 100)
	waitDurable(t, a3)
	if s.Err() != nil || faults.Load() == 0 {
		t.Fatalf("after the disk had room: err %v, faults %d", s.Err(), faults.Load())
	}

	// Full again, with blocks waiting: Close does not hang, and a restart
	// on the still-full disk opens every acknowledged event.
	full.Store(true)
	a4, err := s.Append([]Event{testEvent("main", 300)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if !s.DiskFull() {
			return errors.New("not full yet")
		}
		return nil
	})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on a full disk")
	}
	if a4.Durable() {
		t.Fatal("a block written on a full disk")
	}
	// The restart on the full disk opens: the hot copies it cannot roll
	// stay on disk unopened (Deferred); nothing is lost or rewritten.
	s2 := mustOpen(t, opts)
	if len(s2.LastRecovery().Deferred) == 0 {
		t.Fatalf("restart on a full disk rolled its hot copies: %+v", s2.LastRecovery())
	}
	if err := s2.Close(); err != nil && !errors.Is(err, ErrDiskFull) {
		t.Fatal(err)
	}
	// With room again, the next open rolls them: every acknowledged event.
	full.Store(false)
	s3 := mustOpen(t, opts)
	defer s3.Close()
	if r := s3.LastRecovery(); len(r.Deferred) != 0 || r.Rolled == 0 {
		t.Fatalf("restart with room: %+v", r)
	}
	got := allEvents(t, s3)
	for i := 0; i < 300; i++ {
		if _, ok := got[fmt.Sprintf("ev%dx", i)]; !ok {
			t.Fatalf("acknowledged event %d missing after the restarts (%d events)", i, len(got))
		}
	}
	waitDurable(t, appendN(t, s3, "main", 400, 10))
}
