package searchhead

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/query"
)

// Coverage rules of a search beyond the first plan (SPEC §5 step 3–4 and
// "Completeness"). A bucket counts as complete only from a marker of the
// copy the plan assigned it to, and only when that copy proves it is whole
// (proof); a table newer than the one the search planned with adds its
// buckets to the search (catchUp); a bucket whose every copy failed is
// tried again from the start of its chain a bounded number of times before
// it is given up (retryRound), so a peer that was paused or slow for a
// moment gets its chance again.

// Completeness-violation reasons (the metric's label).
const (
	unprovenShort       = "short"
	unprovenNoLength    = "no_length"
	unprovenNoBatch     = "no_batch"
	unprovenUnknown     = "unknown"
	unprovenProvisional = "provisional"
)

// proof checks a searched or skipped marker's copy against what the table
// says the bucket holds. It returns "" when the copy is whole, else the
// reason and its metric label:
//   - a sealed bucket (warm): the copy holds exactly the sealed blocks, and
//     the sealed last checksum when the table knows it — unless the seal
//     is provisional (fsm.BucketInfo.Provisional: sealed from copies all
//     known short), which no copy can prove whole;
//   - a hot bucket: the origin copy holds every acknowledged block; a
//     replica in the table's searchable set is in the replication set
//     (the ack rule makes every acknowledged block durable on it before any
//     ack, and one that misses acknowledged blocks is marked short and
//     leaves the set), so its length is taken as it reports it, the lag of
//     at most a block interval SPEC §5 step 6 allows;
//   - a warm bucket without a sealed length (a roll reported without
//     one): a copy in the table's searchable set, as for a hot replica;
//   - a searched marker that says how many batches came before it
//     (api.SearchMsg.Batches) is whole only if that many arrived; one that
//     does not say (an older peer) only if at least one did (the results
//     of the bucket never arrived).
func (r *run) proof(br *bucketRun, peer string, m *api.SearchMsg) (reason, label string) {
	if m.Outcome == api.MarkerSearched && br.combo == nil {
		if m.Batches != nil && *m.Batches != len(br.parts) {
			return fmt.Sprintf("peer %s marked bucket %s searched after %d batches, and %d arrived", peer, br.id, *m.Batches, len(br.parts)), unprovenNoBatch
		}
		if m.Batches == nil && len(br.parts) == 0 {
			return fmt.Sprintf("peer %s marked bucket %s searched without sending its results", peer, br.id), unprovenNoBatch
		}
	}
	l := m.Length
	if l == nil {
		return fmt.Sprintf("peer %s did not say how much of bucket %s its copy holds: the copy cannot be proven whole", peer, br.id), unprovenNoLength
	}
	info := br.info
	switch {
	case br.unknown:
		return "", "" // judged at the end (summary): no table knows it
	case info.Sealed && info.Provisional:
		return fmt.Sprintf("bucket %s was sealed at %d blocks while every copy known to hold all its acknowledged events was unreachable: it may lack some until one of them returns",
			br.id, info.Blocks), unprovenProvisional
	case info.Sealed:
		if l.Blocks != info.Blocks || (info.Checksum != "" && l.Checksum != info.Checksum) {
			return fmt.Sprintf("the copy of bucket %s on peer %s holds %d blocks (last checksum %q); the bucket is sealed at %d blocks (%q)",
				br.id, peer, l.Blocks, l.Checksum, info.Blocks, info.Checksum), unprovenShort
		}
	case info.Hot:
		if peer != info.Origin && l.Blocks < info.Blocks {
			return fmt.Sprintf("the hot copy of bucket %s on peer %s holds %d blocks, fewer than the %d the managers know",
				br.id, peer, l.Blocks, info.Blocks), unprovenShort
		}
		if peer != info.Origin {
			br.hotFrom, br.hotBlocks = peer, l.Blocks
		}
		if r.req.Fresh && peer != info.Origin {
			r.warn(fmt.Sprintf("fresh: hot bucket %s was read from replica %s, which holds every acknowledged event (its origin %s could not serve)", br.id, peer, info.Origin))
		}
	}
	// A warm bucket the managers know no sealed length of (a roll
	// reported without one, e.g. after a restart) has only the copies'
	// standing in the table to go by, as a hot replica does: a copy in its
	// searchable set is taken as it reports (chaos: refusing them made
	// searches partial with nothing known to be short).
	return "", ""
}

// hotConfirmWait bounds the table confirmation at a search's end: long
// enough to outlast an election (a leader killed or paused: Raft's 1 s
// heartbeat and election timeouts, a new leader in 1–3 s) and a leader
// whose bus node was cut off (its client gives that connection up after
// two unanswered pings, 4–6 s, bus.StalePingInterval, then reconnects to
// another node: the e2e site2 cut saw a search give up at 5 s while the
// leader, on the witness, was still reconnecting), so those searches come
// back complete, a few seconds late; a head cut off from the managers for
// longer answers partial. hotConfirmTry bounds one attempt, so a paused
// leader's silence does not use up the whole wait.
const (
	hotConfirmWait = 10 * time.Second
	hotConfirmTry  = time.Second
)

// confirmHotReplicas checks again, at the search's end, the word of the
// table that made each hot replica's answer whole. A replica leaves a hot
// bucket's searchable set the moment the managers learn it is short — and
// only then does its origin acknowledge without it — but a head that cannot
// hear the managers (a cut between the sites, issue 24's chaos suite: 49
// searches short yet complete) plans on a table from before that, with
// nothing to tell it is stale until its next poll fails. So a search that
// took any hot bucket from a replica needs a barrier: the table version
// the managers' leader held at some moment after the search began
// (tables.barrierSince; taken before the search is sent when its plan
// reads a hot bucket from a replica, settleBarrier, which plans again on
// the newer table; else taken at the end). Then, per bucket:
//
//   - the managers could not be reached: the bucket fails;
//   - with LeftAt recorded (fsm.BucketInfo.LeftAt, cluster version 6): the
//     replica fails only if it left the bucket's searchable set after the
//     table the plan took it from and no later than the barrier. A leave
//     after the barrier was committed after the search began, so every
//     block acknowledged without the replica was acknowledged after the
//     search began too — events a search need not hold — and it held every
//     block acknowledged before (the ack rule). This holds whether the
//     bucket is still hot or was sealed meanwhile past what it held;
//   - without LeftAt (below cluster version 6): the replica fails when it
//     is not in the hot bucket's searchable set now, or when the bucket was
//     sealed meanwhile past the blocks it held.
//
// A failed bucket makes the search partial, naming it — never short and
// complete. The origin's own copy needs no confirmation: it holds every
// acknowledged block.
func (r *run) confirmHotReplicas() {
	var ids []string
	for _, id := range r.order {
		if br := r.buckets[id]; br.hotFrom != "" && (br.state == bSearched || br.state == bSkipped) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	if r.barrier == nil {
		v, err := r.barrierAfterBegin()
		r.barrier = &barrierResult{v, err}
	}
	b := *r.barrier
	for _, id := range ids {
		br := r.buckets[id]
		info, known, from := r.h.tables.bucketSince(id)
		why := hotReplicaDoubt(br, info, known, from, b)
		if why == "" {
			continue
		}
		r.h.metrics.unproven.WithLabelValues(unprovenShort).Inc()
		r.h.log.Warn("search: a hot replica's answer could not be confirmed whole", "search", r.id, "bucket", id, "peer", br.hotFrom, "reason", why)
		br.state = bFailed
		br.failures = append(br.failures, query.Failure{Bucket: id, Peer: br.hotFrom, Reason: why})
	}
}

// barrierResult is a search's barrier: the managers' table version after
// the search began, or why it could not be had.
type barrierResult struct {
	version uint64
	err     error
}

// settleBarrier takes the barrier before a search that plans to read a hot
// bucket from a replica is sent, and plans again when it moved the table
// on: every copy the plan then takes as whole was whole in a table at
// least as new as the barrier, so no leave can fall between the plan and
// the barrier — a leave after it was committed after the search began
// (confirmHotReplicas) — and such a search is complete whenever the
// managers answer. It costs one round trip to the managers' leader before
// the search (shared by the searches waiting for it, none when a refresh
// begun after the search already succeeded). When the managers cannot be
// reached the first plan stays and the barrier's error fails the hot
// replicas' buckets at the end, as before.
func (r *run) settleBarrier() error {
	v, err := r.barrierAfterBegin()
	r.barrier = &barrierResult{v, err}
	if err != nil || v <= r.version {
		return nil
	}
	r.buckets, r.order = map[string]*bucketRun{}, nil
	return r.planBuckets()
}

// readsHotReplica reports whether the first plan reads a hot bucket from a
// replica (the barrier is then started with the search).
func (r *run) readsHotReplica() bool {
	for _, id := range r.order {
		if br := r.buckets[id]; br.state == bPending && br.info.Hot && len(br.chain) > 0 && br.chain[0] != br.info.Origin {
			return true
		}
	}
	return false
}

// barrierAfterBegin has the managers answer a table refresh begun after the
// search began, retried within hotConfirmWait: an election (a leader
// killed or paused) answers "no responders" or times out for a second or
// two.
func (r *run) barrierAfterBegin() (uint64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, hotConfirmWait)
	defer cancel()
	for {
		try, stop := context.WithTimeout(ctx, hotConfirmTry)
		v, err := r.h.tables.barrierSince(try, r.begun)
		stop()
		if err == nil || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// hotReplicaDoubt is why a hot bucket read from replica br.hotFrom cannot
// be counted whole by the table held after the barrier b (info, known;
// LeftAt recorded from table version from), or "" when it can
// (confirmHotReplicas).
func hotReplicaDoubt(br *bucketRun, info fsm.BucketInfo, known bool, from uint64, b barrierResult) string {
	id, peer := br.id, br.hotFrom
	tracked := from != 0 && from <= br.tver
	left := info.LeftAt[peer]
	switch {
	case b.err != nil:
		return fmt.Sprintf("hot bucket %s was read from replica %s, and the managers could not confirm that copy holds every acknowledged event (%v)", id, peer, b.err)
	case !known:
		return "" // gone from the table (frozen, removed): nothing to miss
	case tracked && left > br.tver && left <= b.version:
		return fmt.Sprintf("hot bucket %s was read from replica %s, which left the bucket's searchable set at table version %d, after the version %d this search planned with and before the search's barrier %d: it may lack acknowledged events",
			id, peer, left, br.tver, b.version)
	case tracked:
		return ""
	case info.Hot && !slices.Contains(info.SearchableOn, peer):
		return fmt.Sprintf("hot bucket %s was read from replica %s, which the managers count short now: it may lack acknowledged events", id, peer)
	case info.Sealed && (info.Provisional || br.hotBlocks < info.Blocks):
		return fmt.Sprintf("hot bucket %s was read from replica %s at %d blocks; it was sealed at %d blocks meanwhile, and the managers keep no record of whether that copy stayed whole (cluster version below %d)",
			id, peer, br.hotBlocks, info.Blocks, fsm.LeftAtVersion)
	}
	return ""
}

// freshChain is a fresh search's chain for a hot bucket: its origin copy,
// then — for an origin that fails during the search — the replicas; when
// the origin cannot serve at all (Down), the replicas only (fallback set).
func freshChain(info fsm.BucketInfo, copies []string) (chain []string, fallback bool) {
	rest := without(copies, info.Origin)
	if len(rest) == len(copies) { // the origin is not among the serving copies
		return rest, true
	}
	return append([]string{info.Origin}, rest...), false
}

// catchUpWait bounds how long a search waits for the table a peer named.
const catchUpWait = 2 * time.Second

// maxCatchUps bounds table refreshes per search.
const maxCatchUps = 3

// catchUp brings a default-plan search up to a table at least as new as
// version v (a peer's done named it; 0: any newer, for a bucket a peer
// answered that the head does not know). The buckets the newer table has
// and the search lacks join it: those whose primary in the new table is
// the peer of stream s (still answering, same generation) are left to that
// stream — its default-plan answer covers them — and the others are sent by
// explicit list to their chain's first copy. The search's table version
// becomes the newer one.
func (r *run) catchUp(v uint64, s *peerStream) {
	if r.pref.Explicit() || r.catchUps >= maxCatchUps || (v != 0 && v <= r.version) {
		return
	}
	r.catchUps++
	ctx, cancel := context.WithTimeout(r.ctx, catchUpWait)
	err := r.h.tables.refreshNow(ctx, max(v, r.version+1))
	cancel()
	if err != nil {
		r.h.log.Debug("search: the newer generation table could not be fetched", "search", r.id, "want", v, "err", err)
	}
	t := r.h.tables
	t.mu.RLock()
	defer t.mu.RUnlock()
	own := t.own()
	nv := t.version(r.tsite)
	if nv <= r.version {
		return
	}
	for id, p := range own.Peers() {
		r.peers[id] = p
	}
	ids := make([]string, 0)
	for id, info := range own.Buckets() {
		if _, ok := r.buckets[id]; !ok && r.allowedIndex(info.Index) && r.plan.TargetsIndex(info.Index) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	earliest, latest := r.plan.TimeRange()
	rr := int(r.h.rr.Add(1))
	for i, id := range ids {
		info, _ := own.Bucket(id)
		br := &bucketRun{id: id, info: info, tver: nv}
		r.buckets[id] = br
		r.order = append(r.order, id)
		if pruned(br.info, earliest, latest) {
			br.state = bSkipped
			continue
		}
		_ = r.planChain(br, rr+i, nil, nil) // the default plan never fails
		if br.state != bPending {
			continue
		}
		br.next = 1
		if s != nil && !s.finished && own.Generation() == r.generation && br.primary == s.peer {
			br.stream = s
			s.buckets[id] = true
			continue
		}
		r.retries[br.chain[0]] = append(r.retries[br.chain[0]], id)
	}
	r.h.log.Debug("search: caught up with a newer generation table", "search", r.id, "from", r.version, "to", nv, "added", len(ids))
	r.version = nv
}

// pruned reports whether the head prunes a bucket by its time range
// (planBuckets' rule: never a hot bucket, whose range is open).
func pruned(info fsm.BucketInfo, earliest, latest int64) bool {
	known := info.Earliest != 0 || info.Latest != 0
	return known && !info.Hot && (info.Earliest >= latest || info.Latest < earliest)
}

// adoptNewer handles a default-plan answer for a bucket the search does
// not have: the head catches up with the newer table first; if the table
// then gives the bucket to this stream, the answer counts. A bucket no
// fetched table knows is accepted as SPEC §5 step 3 says (one primary per
// bucket, site and generation) but cannot be proven whole: it is marked
// unknown, and the summary says so unless a later table proves it.
func (r *run) adoptNewer(s *peerStream, id string) *bucketRun {
	if _, ok := r.buckets[id]; ok || api.ValidBucketID(id) != nil || r.pref.Explicit() {
		return nil
	}
	ix, _, _ := strings.Cut(id, "~")
	if !r.allowedIndex(ix) || !r.plan.TargetsIndex(ix) {
		return nil
	}
	r.catchUp(0, s)
	if br, ok := r.buckets[id]; ok {
		return br
	}
	br := &bucketRun{id: id, chain: []string{s.peer}, next: 1, stream: s, unknown: true}
	r.buckets[id] = br
	r.order = append(r.order, id)
	s.buckets[id] = true
	return br
}

// maxRounds is how often a bucket's chain is tried again from its start
// after every candidate failed; roundPause is the pause before each new
// round (a paused peer may resume, a slow one finish its backlog).
const maxRounds = 2

func (r *run) roundPause() time.Duration { return r.h.cfg.PeerTimeout / 2 }

// retryRound schedules another pass over a bucket's chain when every
// candidate failed, if rounds are left and the search has time for one
// (a pause and a peer timeout). Candidates the current table no longer
// lets serve searches are skipped then (nextCandidate).
func (r *run) retryRound(br *bucketRun) bool {
	if br.rounds >= maxRounds || len(br.chain) == 0 {
		return false
	}
	need := r.roundPause() + r.h.cfg.PeerTimeout
	if time.Until(deadlineOf(r.ctx)) < need {
		return false
	}
	br.rounds++
	br.next = 0
	r.later = append(r.later, delayed{at: time.Now().Add(r.roundPause()), bucket: br.id})
	return true
}

// delayed is a bucket waiting for its next round.
type delayed struct {
	at     time.Time
	bucket string
}

// releaseRounds queues the buckets whose pause is over.
func (r *run) releaseRounds(now time.Time) {
	due := r.later
	r.later = nil // retryRound below appends the next rounds here
	for _, d := range due {
		br := r.buckets[d.bucket]
		if br == nil || br.state != bPending {
			continue
		}
		if now.Before(d.at) {
			r.later = append(r.later, d)
			continue
		}
		if c := r.nextCandidate(br, ""); c != "" {
			r.h.metrics.retries.Inc()
			r.retries[c] = append(r.retries[c], br.id)
			continue
		}
		if !r.retryRound(br) {
			br.state = bFailed
		}
	}
}

// nextCandidate advances a bucket's chain to its next usable copy: in the
// first round, one that has not failed in this search and is not the peer
// that just failed; in later rounds, any copy whose peer the head's
// current table lets serve searches. "" when the chain is used up.
func (r *run) nextCandidate(br *bucketRun, failedPeer string) string {
	for br.next < len(br.chain) {
		c := br.chain[br.next]
		br.next++
		if br.rounds == 0 {
			if r.failed[c] || c == failedPeer {
				continue
			}
			return c
		}
		if r.h.tables.peerServes(c) {
			return c
		}
	}
	return ""
}
