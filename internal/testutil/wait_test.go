package testutil

import (
	"context"
	"errors"
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
