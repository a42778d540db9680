// Package repl holds the peer↔peer replication wire messages (SPEC §4, §6):
// what an origin sends a target on quarry.repl.<site>.<target>.<origin>
// (the last token is the sender, bound to its NATS user). A target takes
// blocks and rolls only from the bucket's origin, or from the source of an
// open fixup copy (Task) the managers confirm; a roll never cuts a copy.
// Blocks travel as whole journal frames — each carries its block number and
// a CRC-32C, so a target verifies every frame and a resend is idempotent.
package repl

// Version of these messages; a target refuses others.
const Version = 1

// Ops of a Request.
const (
	// OpBlocks appends Frames (numbered First, First+1, …) to the target's
	// replica of Bucket, creating it on block 0.
	OpBlocks = "blocks"
	// OpRoll tells the target the bucket rolled at Blocks blocks: its copy
	// becomes warm at exactly that length.
	OpRoll = "roll"
	// OpLength asks how many blocks the target's copy holds.
	OpLength = "length"
	// OpFetch asks a peer for frames of its copy from block First on (a
	// shorter copy fetching up to the sealed length); the Reply carries
	// them, at most about 4 MiB per answer.
	OpFetch = "fetch"
)

// Request is one origin → target message.
type Request struct {
	V          int      `json:"v"`
	Op         string   `json:"op"`
	Bucket     string   `json:"bucket"`
	Index      string   `json:"index"`
	Origin     string   `json:"origin"`
	Searchable bool     `json:"searchable,omitempty"`
	First      uint32   `json:"first,omitempty"`
	Frames     [][]byte `json:"frames,omitempty"`
	Blocks     int      `json:"blocks,omitempty"`
	// Sealed (OpBlocks of a fetch task's push): the bucket's sealed
	// length the frames fill the target's copy up to. A warm copy shorter
	// than it — sealed before the managers extended the seal — takes them.
	Sealed int `json:"sealed,omitempty"`
	// Task (a fixup copy: a replicate or fetch task pushed by its source,
	// which is not the bucket's origin): the task the target confirms
	// with the managers before it takes blocks or a roll from the sender.
	Task uint64 `json:"task,omitempty"`
}

// Reply answers a Request: the blocks the target's copy holds durably
// (fsynced) after it, and its state.
type Reply struct {
	Bucket string   `json:"bucket"`
	Blocks uint32   `json:"blocks"`
	State  string   `json:"state,omitempty"`
	Frames [][]byte `json:"frames,omitempty"` // OpFetch
	// Born (OpLength): when the answering peer's identity — its GUID and
	// data directory — was created, unix ns; a copy it lost with an
	// earlier disk cannot be younger. 0 from a peer that predates it.
	Born int64 `json:"born,omitempty"`
}
