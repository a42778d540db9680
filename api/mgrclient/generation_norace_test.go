//go:build !race

package mgrclient

import "testing"

// A table of a million buckets transfers (issue 8): far over the bus's max
// payload, streamed under credits. Not under -race (minutes there).
func TestFetchGenerationMillionBuckets(t *testing.T) {
	if testing.Short() {
		t.Skip("a million buckets: skipped with -short")
	}
	testFetch(t, 1_000_000)
}
