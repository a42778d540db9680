// Package query owns quarry's search language: the SPL subset of SPEC §5, its
// parser, and the two halves of a pipeline — the peer half that filters,
// extracts and partially aggregates over Segments, and the head half that
// merges and reduces partial results from many peers and buckets.
//
// It imports no role (peer, manager, searchhead) and no bus: a peer hands it
// its searchable bucket copies through the Segment interface, and the
// tokenizer here is the single definition of what a term is, shared by the
// indexer (which builds postings with it) and the searcher (which looks them
// up with it).
//
// Entry points: Search (single-peer search over local segments); Compile,
// Plan.RunSegment (the peer half, one Partial per bucket), Partial.Encode /
// DecodePartial (the versioned wire form) and Plan.Merge (the head half)
// for distributed search; Parse and SyntaxError for early validation.
// The naive oracle of the tests and the bench is query/querytest. Files:
// parse.go, parsecmd.go (the per-command parsers), expr.go, funcs.go (the
// functions of eval), timemod.go (language); match.go, extract.go, value.go
// (semantics); plan.go, peer.go, agg.go, finalize.go (aggregates into
// rows), commands.go, head.go, wire.go (execution); colmodel.go (the column model and builder), colplan.go
// (planning and running from columns), fastagg.go (aggregation over
// dictionary ids), numblocks.go (numeric comparisons over column blocks);
// memseg.go (an in-memory Segment). DESIGN.md explains the decisions.
package query
