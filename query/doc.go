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
package query
