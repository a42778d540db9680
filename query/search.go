package query

import "time"

// Request is a search request as SPEC §7 writes it (the body of POST
// /v1/search on a peer or a search head).
type Request struct {
	Query        string `json:"query"`
	Earliest     string `json:"earliest,omitempty"`
	Latest       string `json:"latest,omitempty"`
	Preference   string `json:"preference,omitempty"`
	Fresh        bool   `json:"fresh,omitempty"`
	AllowPartial *bool  `json:"allow_partial,omitempty"`
	Publish      string `json:"publish,omitempty"`
	// Now anchors relative times (-15m, @h); the zero value means time.Now().
	Now time.Time `json:"-"`
	// Server is the splunk_server value of results (the peer's id).
	Server string `json:"-"`
	// MaxResults, when positive, caps the rows Search answers; a cut
	// says so in the summary's warnings (the caller's limit, never the
	// request's: a peer's --max-results).
	MaxResults int `json:"-"`
	// MemoryLimit is the search's memory budget in bytes (memory.go;
	// DefaultSearchMemory when 0): the caller's, a peer's --search-memory.
	MemoryLimit int64 `json:"-"`
	// Knowledge is the search-time knowledge bundle the search runs with
	// (knowledge.go); nil: none. Peers are handed the one the search
	// names by hash, so a search never runs half with another.
	Knowledge *Knowledge `json:"-"`
}

// Response is a search answer as SPEC §7 writes it.
type Response struct {
	Results []map[string]any `json:"results"`
	Fields  []string         `json:"fields"`
	Summary Summary          `json:"summary"`
	// StreamedColumns, on a search head's answer, is set when its rows
	// were streamed by bucket and Fields names the columns a | table or
	// | fields asked for: the NDJSON summary line then carries them (the
	// rows alone do not say their order). Not part of the JSON answer.
	StreamedColumns bool `json:"-"`
}

// Summary is the per-search report, like Elasticsearch's _shards.
type Summary struct {
	Buckets    BucketSummary `json:"buckets"`
	Generation uint64        `json:"generation"`
	Site       string        `json:"site,omitempty"`
	Peers      []string      `json:"peers"`
	Partial    bool          `json:"partial"`
	Warnings   []string      `json:"warnings"`
	TookMS     float64       `json:"took_ms"`
}

// BucketSummary counts the buckets a search covered.
type BucketSummary struct {
	Total      int       `json:"total"`
	Successful int       `json:"successful"`
	Skipped    int       `json:"skipped"`
	Failed     int       `json:"failed"`
	Missing    int       `json:"missing"`
	Failures   []Failure `json:"failures"`
}

// Failure names a bucket that could not be searched.
type Failure struct {
	Bucket string `json:"bucket"`
	Peer   string `json:"peer"`
	Reason string `json:"reason"`
}
