// Package searchhead will own the search head (SPEC §1, §5): the search API
// and page, the plan (generation + site, or preference), fan-out over NATS,
// the coverage check and re-dispatch, the merge through query's head half,
// and publishing results. It is not built yet; no issue has asked for it.
// Until then `quarry search --peer` searches one peer's searchable copies.
package searchhead
