//go:build integration

package integration

// ingestN is the acceptance ingest size: issue 5's 200k events (make
// integration).
const ingestN = 200_000
