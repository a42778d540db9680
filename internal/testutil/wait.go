// Package testutil holds what quarry's tests and test harnesses share:
// WaitFor, the one way a test waits for a condition (STYLE.md: poll a
// condition, never sleep as synchronisation), and Poll, the same loop for
// callers that wait under a context (devcluster, the end-to-end tests).
package testutil

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Every is how often WaitFor checks its condition.
const Every = 10 * time.Millisecond

// WaitFor calls cond every Every until it returns nil; when d passes first,
// it fails t with cond's last error.
func WaitFor(t testing.TB, d time.Duration, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := Poll(ctx, Every, cond); err != nil {
		t.Fatalf("condition not met within %v: %v", d, err)
	}
}

// Poll calls cond at once and then every interval until it returns nil
// (Poll returns nil) or ctx ends (Poll returns cond's last error wrapped
// with ctx's: errors.Is finds both).
func Poll(ctx context.Context, every time.Duration, cond func() error) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-t.C:
		}
	}
}
