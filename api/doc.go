// Package api owns the versioned wire messages that a peer (and a search
// head) and the managers exchange over NATS (SPEC §3, §6), the manager
// operations' names and the rules each message obeys (Validate,
// CheckVersion): data and codecs only. It imports fsm (for the types the
// messages carry) and bus/wire (the remote error and stream invite that
// travel inside messages), neither of which imports a transport, so
// `go list -deps ./api` shows no NATS, HTTP or Raft package. The one client
// that sends these messages is api/mgrclient; never a role package, so
// both sides of the protocol depend on api and not on each other.
//
// # Subjects
//
//	<prefix>.mgr.register      Register      → RegisterReply    (leader only)
//	<prefix>.mgr.heartbeat     Heartbeat     → HeartbeatReply   (leader only)
//	<prefix>.mgr.targets       TargetsRequest → TargetsReply    (leader only)
//	<prefix>.mgr.bucket        BucketEvent   → BucketEventReply (leader only)
//	<prefix>.mgr.generation    GenerationRequest → GenerationReply (leader only)
//	<prefix>.mgr.config        ConfigRequest → PeerConfig       (leader only)
//	<prefix>.mgr.confirm       ConfirmRequest → ConfirmReply    (leader only, after VerifyLeader)
//	<prefix>.mgr.fixup-result  FixupResult   → FixupResultReply (leader only)
//	<prefix>.mgr.buckets       BucketsRequest → BucketsReply    (leader only; ≤ 256 ids)
//	<prefix>.mgr.savedsearch   SavedSearchRequest → SavedSearchReply (leader only; search heads)
//	<prefix>.results.<name>    a search's NDJSON rows (a saved search's with the Quarry-Slot header)
//	<prefix>.alerts.<name>     Alert (a saved search's, when its condition holds)
//	<prefix>.gen               Notice (published by the leader, no reply)
//	<prefix>.fixup.<site>.<peer>  FixupTask → FixupAck (manager → peer)
//
// The manager subscribes the mgr subjects only while it is the Raft leader:
// during an election a request gets bus.ErrNoResponders at once, and the
// caller retries shortly (mgrclient.ManagerClient does, until its context
// ends). Every mgr subject ends in the sender's token,
// <prefix>.mgr.<op>.<sender>, which the bus's permissions bind to the
// sender's NATS user.
// Config changes (indexes, HEC tokens, roll limits, maintenance) ride on
// the same <prefix>.gen subject as generation changes, as a Notice whose
// ConfigID changed (the manager role may publish only gen, fixup and mgr
// subjects; SPEC §6 lists no config subject): a peer that sees a ConfigID
// it does not hold asks mgr.config. Heartbeat replies carry the same three
// values, so a peer that missed a notice (core NATS is at most once)
// catches up within one heartbeat.
//
// # Versions and compatibility
//
// Every message carries V, the wire version of its type (WireVersion, now
// 1; a multi-part Register carries WireVersionParts, 2, and this build reads
// up to MaxWireVersion, 2). The rule: within one V, fields are only ever added, never renamed,
// retyped or given a new meaning; a receiver ignores fields it does not know
// (plain encoding/json) and treats a missing field as its zero value, which
// must always mean "not said" (so every addition has a zero value that is
// the old behaviour). A change that an older receiver would misread bumps V;
// a receiver refuses a V newer than it speaks (CheckVersion: the reply is a
// bus remote error with code CodeVersion), and a V of 0 is read as 1 (a
// sender that forgot to set it). Managers of one group may run two adjacent
// versions during a rolling upgrade, so a manager answers in the version the
// request carried when it still speaks it.
//
// # Sizes
//
// No message travels bigger than the bus's max payload (1 MiB by default):
// generation tables stream (mgrclient FetchGeneration, over a bus stream;
// a peer's heartbeat asks only the peer list, GenerationRequest.PeersOnly),
// bucket records are asked by at most MaxBucketsPerRequest ids, and a
// Register whose inventory would not fit one message is sent in parts
// (Register.Parts; the manager registers the whole inventory in one FSM
// command when the last part arrives, and refuses a last part it lacks
// the others of with CodeUploadIncomplete, after which ManagerClient sends
// the upload again).
//
// # Fixup delivery
//
// A FixupTask's ID is the Raft index of the task record; the task record in
// the managers' state is the source of truth. Delivery is a request with a
// deadline; the peer answers FixupAck at once (Accepted) and reports the
// outcome later with FixupResult. An unanswered delivery is retried on the
// next planner round, and a new leader re-delivers what its predecessor did
// not get acknowledged, so a peer may see one task id more than once: it
// must treat an id it already accepted or executed as accepted (answer
// Accepted again, do the work once). A destructive task (Destructive) runs
// only after ConfirmRequest answered Confirmed. See manager/DESIGN.md,
// "NATS service".
package api
