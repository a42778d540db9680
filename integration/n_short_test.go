//go:build !integration

package integration

// ingestN is the ingest size of the default (make test) run.
const ingestN = 20_000

// churnSearches is how many searches the churn test runs in make test.
const churnSearches = 60
