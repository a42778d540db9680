//go:build !integration

package integration

// ingestN is the ingest size of the default (make test) run.
const ingestN = 20_000
