// Package searchhead owns the search head (SPEC §1, §5): the search API
// (POST /v1/search, JSON or NDJSON), the generation table it keeps current
// from the managers' notices and deltas, the plan (generation + site, or a
// preference), the fan-out over NATS, the coverage check and re-dispatch of
// whatever a failed, silent or finished-without-it peer left, the merge
// through query's head half, search tokens and limits, publishing results
// on NATS, and a subset of Splunk's search REST API (login, search jobs,
// export) over that same search path. See DESIGN.md.
package searchhead
