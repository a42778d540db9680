package api

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/quarry-dev/quarry/bus/wire"
	"github.com/quarry-dev/quarry/fsm"
)

// Search protocol (SPEC §5, §6): a search head sends a SearchRequest on
// <prefix>.search.<site> (the default plan: every peer of that site
// answers for its primaries of (Generation, TableSite)) or on
// <prefix>.search.<site>.<peer> (an explicit bucket list: retries,
// preference, fresh). The request carries one stream invite per peer the
// head expects; a peer with something to answer opens a bus stream to its
// invite and sends SearchMsg values, one per stream message, in this order
// per bucket: zero or more "batch" messages (for an aggregating search, one
// batch at the end combining every bucket the peer searched, see
// SearchMsg.Buckets), then exactly one "marker"
// ("searched" or "skipped"; an explicit bucket the peer cannot search gets
// a "marker" with Error set). "beat" messages come at least every second of
// a long scan; the last message is "done" naming the table version the
// peer resolved primaries with. A peer that refuses the whole request (an
// unresolvable generation, a bad query) sends one "error" message instead.
// A peer with no primaries for the request stays silent (no stream).
//
// Both ends use exactly these types: the head decodes what the peer
// encodes, the rules are in this comment and nowhere else.

// SearchRequest is what a search head asks peers.
type SearchRequest struct {
	V int `json:"v"`
	// ID identifies the search (logs, cancellation, metrics).
	ID string `json:"id"`
	// Head is the search head's id.
	Head  string `json:"head"`
	Query string `json:"query"`
	// Earliest and Latest are the request's time range as the user wrote
	// it (absolute or relative); NowNS is the head's "now" (unix ns), so
	// every peer resolves relative times (-15m, @h, earliest= in the query)
	// to the same instants.
	Earliest string `json:"earliest,omitempty"`
	Latest   string `json:"latest,omitempty"`
	NowNS    int64  `json:"now_ns"`
	// Generation and TableVersion pin the default plan: the peer answers for
	// the buckets whose primary in TableSite's table at Generation is itself,
	// using a table at least as new as TableVersion.
	Generation   uint64 `json:"generation"`
	TableVersion uint64 `json:"table_version"`
	// TableSite is the primary table used: the head's site or "site0".
	TableSite string `json:"table_site"`
	// Buckets, when set, is an explicit bucket list (the request is then
	// addressed to one peer): search exactly these, whatever the primaries.
	Buckets []string `json:"buckets,omitempty"`
	// Sealed gives, for listed buckets the head's table has sealed, the
	// sealed length (blocks and last checksum): a copy longer than it is
	// searched as its sealed prefix, so its marker proves exactly the
	// length the head checks (SPEC §5 "Completeness"). A default-plan
	// request needs none: the peer takes the lengths from the generation
	// table. An addition to SPEC §5's request.
	Sealed map[string]CopyLength `json:"sealed,omitempty"`
	// CountsBinary: the head reads a count-only partial's keys front-coded
	// (query.Partial.EncodeCounts); a peer sends them so only then. A head
	// of an older build leaves it out and gets the JSON lists it reads. An
	// addition to SPEC §5's request.
	CountsBinary bool `json:"counts_binary,omitempty"`
	// CountsTop > 0: the search is a top the head merges from bounded
	// partials (query.Plan.SetCountsTop): a peer may list only a
	// partial's CountsTop largest counts with their bound. A peer of an
	// older build sends every key, which the head merges exactly too. An
	// addition to SPEC §5's request.
	CountsTop int `json:"counts_top,omitempty"`
	// SetsBinary: the head reads dc/values sets front-coded
	// (query.Plan.SetBinarySets); a peer sends them so only then. An
	// addition to SPEC §5's request.
	SetsBinary bool `json:"sets_binary,omitempty"`
	// NumsBinary: the head reads perc/median values packed
	// (query.Plan.SetBinaryNums); a peer sends them so only then. An
	// addition to SPEC §5's request.
	NumsBinary bool `json:"nums_binary,omitempty"`
	// SolePartial: the head asks each dc's count and perc's value instead
	// of its set or values (query.Plan.SetSolePartial). It does so only
	// for a stats search whose buckets all go to this peer in this
	// request; the peer then sends one batch for them all, which nothing
	// merges. A peer of an older build sends sets and values (in a batch
	// per worker), which merge exactly too. An addition to SPEC §5's
	// request.
	SolePartial bool `json:"sole_partial,omitempty"`
	// Framed: the head reads the stream's messages framed
	// (EncodeSearchMsg): a batch's partial after a JSON header, not
	// inside it, and consecutive markers as one message (SearchMarkers).
	// An addition to SPEC §5's request.
	Framed bool `json:"framed,omitempty"`
	// Indexes limits the search to these indexes (the search token's
	// scope); empty means every index. A peer never answers a bucket of an
	// index outside it, whatever Buckets says.
	Indexes []string `json:"indexes,omitempty"`
	// Invites maps a peer id to the stream it answers on.
	Invites map[string]wire.Invite `json:"invites"`
	// TimeoutMs is how long the head waits at most; the peer stops
	// scanning after it.
	TimeoutMs int64 `json:"timeout_ms"`
	// BeatMs is how often the peer sends a progress beat while it scans
	// (0: every second, SPEC §5); the head asks for at least three beats
	// per search_peer_timeout.
	BeatMs int64 `json:"beat_ms,omitempty"`
	// Knowledge names the search-time knowledge bundle the search runs
	// with (its content hash; "": none): a peer fetches it by that hash
	// from the search heads (<prefix>.bundle.<hex>) and runs the search
	// with exactly it, or refuses.
	Knowledge string `json:"knowledge,omitempty"`
}

// Validate checks a request as a peer receives it.
func (r *SearchRequest) Validate() error {
	if err := CheckVersion("search request", r.V); err != nil {
		return err
	}
	if r.ID == "" || r.Query == "" {
		return fmt.Errorf("search request: id and query are required")
	}
	if len(r.Invites) == 0 {
		return fmt.Errorf("search request %s: no stream invites", r.ID)
	}
	if r.Buckets == nil && r.TableSite == "" {
		return fmt.Errorf("search request %s: a default-plan request needs table_site", r.ID)
	}
	for _, b := range r.Buckets {
		if err := ValidBucketID(b); err != nil {
			return fmt.Errorf("search request %s: %w", r.ID, err)
		}
	}
	return nil
}

// ValidBucketID checks a bucket id that came from the network:
// fsm.ValidBucketID, the one validator of ids (<index>~<decimal local
// id>~<origin GUID>, each part of a closed alphabet, never a path).
func ValidBucketID(id string) error {
	_, _, _, err := fsm.ValidBucketID(id)
	return err
}

// Search message kinds.
const (
	SearchBatch  = "batch"
	SearchMarker = "marker"
	// SearchMarkers carries consecutive markers in Markers, in order: only
	// to a head that reads framed messages (SearchRequest.Framed).
	SearchMarkers = "markers"
	SearchBeat    = "beat"
	SearchDone    = "done"
	SearchError   = "error"
)

// Marker outcomes.
const (
	MarkerSearched = "searched"
	MarkerSkipped  = "skipped"
)

// SearchMsg is one message of a peer's answer stream.
type SearchMsg struct {
	Kind string `json:"kind"`
	Peer string `json:"peer"`
	// Bucket is set on batch and marker.
	Bucket string `json:"bucket,omitempty"`
	// Buckets, on a batch instead of Bucket, says the partial combines the
	// aggregates of all these buckets (an aggregating search: the peer
	// merges what it searched before sending). The head merges it only once
	// every listed bucket's marker arrived on the same stream; if the
	// stream fails first, every listed bucket is re-dispatched.
	Buckets []string `json:"buckets,omitempty"`
	// Partial is a batch's content: query.Partial's wire form (a bucket's
	// events, a part of them, or its partial aggregates).
	Partial json.RawMessage `json:"partial,omitempty"`
	// Outcome of a marker: searched or skipped; Error set when the bucket
	// could not be searched here (the head re-dispatches it).
	Outcome string `json:"outcome,omitempty"`
	// Scanned is the events this peer decoded for the bucket (marker).
	Scanned int64 `json:"scanned,omitempty"`
	// Length, on a searched or skipped marker, is how much of the bucket
	// the copy the peer searched holds (SPEC §5 "Completeness"): the head
	// counts the bucket complete only when it matches what its table says
	// the bucket holds; a marker without it proves nothing.
	Length *CopyLength `json:"length,omitempty"`
	Error  string      `json:"error,omitempty"`
	// Code is a stable id for an error message: "unknown_generation",
	// "bad_request", "internal"; on a marker, "limit_exceeded": the bucket
	// reached a limit of the search (query.ErrLimit) — the same query fails
	// the same way on every copy, so the head ends the search with it
	// instead of re-dispatching the bucket.
	Code string `json:"code,omitempty"`
	// Batches, on a marker of a bucket searched alone (not combined), is
	// how many batches the peer sent for it before the marker: the head
	// proves the results arrived by counting them. A peer of this build
	// sends no batch for a bucket without events to a head that reads
	// framed messages; without Batches (an older peer) a searched marker
	// needs at least one batch before it.
	Batches *int `json:"batches,omitempty"`
	// Markers (kind markers) are markers sent together, in the order they
	// were made; each is read as if it came alone.
	Markers []SearchMsg `json:"markers,omitempty"`
	// Done: the table version the peer used; beats: buckets done so far.
	TableVersion uint64 `json:"table_version,omitempty"`
	// Newest (done) is the newest table version the peer has heard of
	// (at least TableVersion): a head whose table is older fetches it and
	// adds the buckets it lacks, which may sit on peers it did not invite.
	Newest uint64 `json:"newest_version,omitempty"`
	Done   int    `json:"done,omitempty"`
	// ServiceMs is the peer's time spent on the request (done), for the
	// adaptive replica selection's service-time figure; Queue is its
	// searches running when it started this one.
	ServiceMs float64 `json:"service_ms,omitempty"`
	Queue     int     `json:"queue,omitempty"`
}

// CopyLength is the length of a searched copy: the journal blocks its
// search covered and the last one's checksum (CRC-32C, 8 hex digits, the
// form of a sealed length's checksum); Hot says the copy was hot.
type CopyLength struct {
	Blocks   int64  `json:"blocks"`
	Checksum string `json:"checksum,omitempty"`
	Hot      bool   `json:"hot,omitempty"`
}

// RoleHeader names the role of the process that answered an HTTP request
// (RolePeer, RoleSearchHead): a peer's single-peer POST /v1/search and a
// search head's share their shape, so a client tells them apart by it
// (`quarry search --searchhead` refuses a peer's answer).
const RoleHeader = "X-Quarry-Role"

// Roles named by RoleHeader.
const (
	RolePeer       = "peer"
	RoleSearchHead = "searchhead"
)

// Search error codes of a SearchMsg.
const (
	SearchCodeGeneration = "unknown_generation"
	SearchCodeBadRequest = "bad_request"
	SearchCodeInternal   = "internal"
	SearchCodeLimit      = "limit_exceeded"
)

// KnowledgeFetch is a search-time knowledge bundle as a search head
// answers it on <prefix>.bundle.<hex> (BundleToken of its hash): its files
// by name, which hash to it.
type KnowledgeFetch struct {
	Hash  string            `json:"hash"`
	Files map[string][]byte `json:"files"`
}

// BundleToken is the subject token of a bundle hash: its hex part.
func BundleToken(hash string) string { return strings.TrimPrefix(hash, "sha256:") }
