package testutil

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	WaitFor(t, 5*time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	notYet := errors.New("not yet")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := Poll(ctx, time.Millisecond, func() error { return notYet })
	if !errors.Is(err, notYet) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll = %v, want cond's error and the deadline", err)
	}
}

func TestListeningOn(t *testing.T) {
	out := "starting\npeer p1 (guid x, standalone) listening on http://127.0.0.1:4321\nlistening on http://other\n"
	addr, drained := ListeningOn(strings.NewReader(out))
	<-drained
	if got := <-addr; got != "http://127.0.0.1:4321" {
		t.Fatalf("ListeningOn = %q", got)
	}
}
