//go:build integration

package integration

// ingestN is the acceptance ingest size: issue 5's 200k events (make
// integration).
const ingestN = 200_000

// churnSearches is how many searches the churn test runs (issue 8: at
// least 300).
const churnSearches = 300
