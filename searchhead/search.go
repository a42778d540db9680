package searchhead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/query"
)

// Request is POST /v1/search's body (SPEC §7).
type Request struct {
	Query        string `json:"query"`
	Earliest     string `json:"earliest,omitempty"`
	Latest       string `json:"latest,omitempty"`
	Preference   string `json:"preference,omitempty"`
	Fresh        bool   `json:"fresh,omitempty"`
	AllowPartial *bool  `json:"allow_partial,omitempty"`
	Publish      string `json:"publish,omitempty"`
	// Site, when set, must be the head's own site (a search head's site is
	// fixed; the search page and `quarry search --site` send it so a
	// request meant for another site is refused, not silently served).
	Site string `json:"site,omitempty"`
	// slot is the Quarry-Slot header of a saved search's run
	// (scheduler.go); never from a client.
	slot string
}

// bucket outcomes in a search.
const (
	bPending  = iota
	bSearched // marker searched
	bSkipped  // pruned on the head or skipped by a peer
	bFailed   // every copy tried failed
	bMissing  // no copy allowed by the preference or reachable
)

type bucketRun struct {
	id       string
	info     fsm.BucketInfo
	primary  string   // primary in the default plan's table, if usable
	chain    []string // candidate peers in order
	next     int      // next candidate in chain
	stream   *peerStream
	state    int
	parts    []*query.Partial
	failures []query.Failure
	// combo: this bucket's aggregates arrived inside a combined batch; its
	// marker only counts once every bucket of the combo has one.
	combo    *combo
	markedOK bool
	scanned  int64
	// freshFallback: fresh=true, and this hot bucket's origin cannot
	// serve, so a replica the ack rule keeps whole answers (said in the
	// summary's warnings).
	freshFallback bool
	// rounds counts how often the chain was tried again from its start
	// after every candidate failed (retryRound).
	rounds int
	// unknown: a bucket a peer answered that no table the head could
	// fetch knows (adoptNewer): it cannot be proven whole.
	unknown bool
	// hotFrom and hotBlocks: a hot bucket answered by a replica (not its
	// origin) on the table's word that the replica is whole, and the
	// blocks it held; confirmHotReplicas checks that word again at the end.
	hotFrom   string
	hotBlocks int64
	// tver is the table version info came from: the copies the plan took
	// as whole were whole in it (confirmHotReplicas).
	tver uint64
}

// combo is one combined batch of a stream (api.SearchMsg.Buckets): merged
// once, when every listed bucket's marker arrived on that stream.
type combo struct {
	part    *query.Partial
	buckets []string
	dead    bool
}

// peerStream is one answer stream from one peer (a default-plan request or
// an explicit bucket list).
type peerStream struct {
	peer string
	rcv  *bus.Receiver
	// lastRecv is when its reader last received a message (unix ns): the
	// silence check reads it, so a backlog on the head is never taken for
	// a silent peer.
	lastRecv atomic.Int64
	// handing is set while its reader waits to hand a message to the
	// coordinator: the head is behind, the peer is not silent.
	handing  atomic.Bool
	finished bool
	doneSeen bool // the peer's done arrived: its reader confirms the end
	failed   bool
	cancel   context.CancelFunc // ends its reader
	sent     time.Time
	buckets  map[string]bool // buckets this stream is responsible for
	// plan: a default-plan stream (invited with the search to the
	// site's subject). The search waits for its done — which names the
	// table the peer used — before it is complete (catchUp).
	plan bool
}

// streamEvent is what a stream's reader goroutine hands the coordinator.
type streamEvent struct {
	s    *peerStream
	msg  *api.SearchMsg
	part *query.Partial // a batch's partial, decoded by the reader
	err  error
}

// run is one search in progress on the head.
type run struct {
	// completed is set when every bucket has its outcome (collect),
	// before the search's context ends: a reader that sees the context
	// end without it aborts its stream instead of confirming the end.
	completed atomic.Bool
	h         *Head
	ctx       context.Context
	plan      *query.Plan
	req       Request
	pref      *Preference
	id        string
	nowNS     int64
	indexes   []string // token scope (nil: all)
	site      string   // the head's site
	tsite     string   // table site of the default plan
	// countsTop: peers bound a top's partials to their countsTop largest
	// counts (api.SearchRequest.CountsTop); 0 asks for every key.
	countsTop int
	// sole: the peer sends each dc's count and perc's value instead of
	// its set or values (api.SearchRequest.SolePartial): one peer serves
	// every bucket (servedByOne).
	sole bool

	generation, version uint64
	peers               map[string]fsm.GenerationPeer

	buckets  map[string]*bucketRun
	order    []string // bucket ids in table order
	events   chan streamEvent
	streams  []*peerStream
	failed   map[string]bool // peers that failed this search: never asked again
	answered map[string]bool
	scanned  map[string]int64 // events scanned per peer
	readers  sync.WaitGroup
	warnings []string
	// limitErr ends the search: a peer's bucket reached a limit of the
	// search (a marker coded limit_exceeded), which every copy would reach.
	limitErr error
	retries  map[string][]string // peer → buckets to send explicitly (flushed per loop)
	later    []delayed           // buckets waiting for their next round (retryRound)
	catchUps int                 // table refreshes this search made (catchUp)
	begun    time.Time           // when the search started (confirmHotReplicas)
	barrier  *barrierResult      // the managers' table version after begun (settleBarrier, confirmHotReplicas); nil: not asked yet
	// barrierWait brings the barrier a failover to a hot replica asked for
	// (hotfailover.go; nil: none under way); awaiting holds those buckets.
	barrierWait chan barrierResult
	awaiting    map[string][]string

	// onBucket is called with a bucket's partials once its marker arrived
	// (streaming output); nil when the output is built at the end.
	onBucket func(parts []*query.Partial)
}

// errNoTable: the head has no generation table yet.
var errNoTable = &RequestError{Status: 503, Code: "no_generation_table", Msg: "the search head has no generation table yet (no manager answered since it started)"}

// plan builds the search's bucket list and the first assignment from the
// table, under the table's read lock: nothing else reads the table later,
// so a generation change during the search changes nothing in it.
func (r *run) planBuckets() error {
	t := r.h.tables
	t.mu.RLock()
	defer t.mu.RUnlock()
	if !t.loaded {
		return errNoTable
	}
	own := t.own()
	r.generation, r.version = own.Generation(), t.version(r.tsite)
	r.peers = maps.Collect(own.Peers())
	var ids []string
	if len(r.pref.Buckets) > 0 {
		for _, b := range r.pref.Buckets {
			if _, ok := own.Bucket(b); !ok {
				return &RequestError{Status: 400, Code: "unknown_bucket", Msg: fmt.Sprintf("preference _buckets: no bucket [%s] in generation %d", b, own.Generation())}
			}
			if !slices.Contains(ids, b) {
				ids = append(ids, b)
			}
		}
	} else {
		ids = make([]string, 0, own.BucketCount())
		for b := range own.Buckets() {
			ids = append(ids, b)
		}
		sort.Strings(ids)
	}
	earliest, latest := r.plan.TimeRange()
	pinfo := peerInfos(t)
	planned := map[string]int{} // _adaptive: buckets of this search per peer, so it spreads
	ord := &orderer{pref: r.pref, site: r.site, peers: pinfo, rank: func(c []string) []string {
		out := r.h.adaptive.rankPlanned(c, planned)
		if len(out) > 0 {
			planned[out[0]]++
		}
		return out
	}}
	rr := int(r.h.rr.Add(1))
	for i, id := range ids {
		info, _ := own.Bucket(id)
		if !r.allowedIndex(info.Index) || !r.plan.TargetsIndex(info.Index) {
			continue
		}
		br := &bucketRun{id: id, info: info, tver: r.version}
		r.buckets[id] = br
		r.order = append(r.order, id)
		// Time-range pruning before fan-out; a hot bucket's range is
		// open-ended at both ends until it rolls: new events extend its
		// latest, and an event far from the others (a late arrival, or a
		// quarantine bucket, peer/store/placement.go) can move its earliest
		// back after the managers last heard it. The peer prunes hot
		// buckets itself, on their current range.
		if pruned(info, earliest, latest) {
			br.state = bSkipped
			continue
		}
		if err := r.planChain(br, rr+i, ord, pinfo); err != nil {
			return err
		}
	}
	return nil
}

// planChain sets a bucket's candidate copies in order (and its primary in
// the default plan) from the table t, read-locked by the caller.
func (r *run) planChain(br *bucketRun, rr int, ord *orderer, pinfo map[string]peerInfo) error {
	t, id, info := r.h.tables, br.id, br.info
	if pinfo == nil {
		pinfo = peerInfos(t)
	}
	copies := searchableCopies(t, info)
	site0 := t.primary(fsm.Site0, id)
	switch {
	case r.req.Fresh && info.Hot && info.Origin != "":
		// fresh: a hot bucket is read from its origin copy; when the
		// origin cannot serve (Down), from a replica — the ack rule
		// made every acknowledged block durable on each copy of the
		// replication set — and the summary says which (freshFrom).
		br.chain, br.freshFallback = freshChain(info, copies)
	case !r.pref.Explicit():
		// Default plan: the primary of the head's table, then the
		// other copies, local first, as failover.
		// A primary on a peer that is not Up, or that failed a recent
		// search (suspect), is not waited for: its bucket goes to
		// another copy by explicit list from the start.
		prim := t.primary(r.tsite, id)
		if p, ok := t.own().Peer(prim); !ok || !servesSearches(p.State) || r.h.suspect(prim) {
			prim = ""
		}
		dflt := &orderer{pref: &Preference{}, site: r.site, peers: pinfo}
		rest, _ := dflt.order(orderInput{Bucket: id, Copies: without(copies, prim), RR: rr})
		var good, bad []string
		for _, c := range rest {
			if r.h.suspect(c) {
				bad = append(bad, c)
			} else {
				good = append(good, c)
			}
		}
		rest = append(good, bad...)
		if prim != "" {
			br.primary = prim
			br.chain = append([]string{prim}, rest...)
		} else {
			br.chain = rest
		}
	default:
		chain, err := ord.order(orderInput{Bucket: id, Copies: copies, Primary: site0, RR: rr})
		if err != nil {
			return err
		}
		br.chain = chain
	}
	if len(br.chain) == 0 {
		br.state = bMissing
		reason := "no searchable copy on a peer that serves searches (Up or Detention)"
		if r.pref.Explicit() && len(copies) > 0 {
			reason = fmt.Sprintf("no copy allowed by preference [%s]", r.pref.Raw)
		}
		br.failures = append(br.failures, query.Failure{Bucket: id, Reason: reason})
	}
	return nil
}

// peerInfos is the table's peers as the orderer sees them.
func peerInfos(t *tables) map[string]peerInfo {
	pinfo := map[string]peerInfo{}
	for id, p := range t.own().Peers() {
		pinfo[id] = peerInfo{ID: id, Site: p.Site, Host: p.Attrs["host"], Attrs: p.Attrs}
	}
	return pinfo
}

// servesSearches reports whether a peer in this state answers searches:
// Up, and Detention — a detained peer takes no new data but keeps serving
// searches (SPEC §3).
func servesSearches(st fsm.PeerState) bool {
	return st == fsm.StateUp || st == fsm.StateDetention
}

// searchableCopies lists a bucket's searchable copies on peers that serve
// searches, sorted.
func searchableCopies(t *tables, info fsm.BucketInfo) []string {
	var copies []string
	for _, c := range info.SearchableOn {
		if p, ok := t.own().Peer(c); ok && servesSearches(p.State) {
			copies = append(copies, c)
		}
	}
	sort.Strings(copies)
	return copies
}

func without(xs []string, x string) []string {
	out := make([]string, 0, len(xs))
	for _, y := range xs {
		if y != x {
			out = append(out, y)
		}
	}
	return out
}

func (r *run) allowedIndex(ix string) bool {
	return r.indexes == nil || slices.Contains(r.indexes, ix)
}

// dispatchFirst sends the first requests: the default plan to each peer
// expected to answer (its own subject, its own invite), and explicit
// lists for buckets without a primary, for fresh hot buckets and for every
// bucket of a preferred search.
func (r *run) dispatchFirst() error {
	expected := map[string][]string{}
	for _, id := range r.order {
		br := r.buckets[id]
		if br.state != bPending {
			continue
		}
		first := br.chain[0]
		br.next = 1
		if r.byDefaultPlan(br) {
			expected[first] = append(expected[first], id)
		} else {
			r.retries[first] = append(r.retries[first], id)
		}
	}
	if len(expected) > 0 {
		// Receivers are made in parallel: each costs a round trip to the
		// bus (subscribe + flush).
		peers := slices.Sorted(maps.Keys(expected))
		rcvs := make([]*bus.Receiver, len(peers))
		errs := make([]error, len(peers))
		var wg sync.WaitGroup
		for i := range peers {
			wg.Add(1)
			go func() { defer wg.Done(); rcvs[i], errs[i] = r.newReceiver() }()
		}
		wg.Wait()
		invites := map[string]bus.Invite{}
		for i := range peers {
			if errs[i] != nil {
				for _, x := range rcvs {
					if x != nil {
						x.Close(errs[i])
					}
				}
				return errs[i]
			}
		}
		// Each peer gets its own invite on its own subject
		// (search.<site>.<peer>, which only it may subscribe): the stream
		// inbox in it is known to that peer alone, so no other peer can
		// answer, forge or abort that peer's stream (SECURITY.md, M4).
		subjs := make([]string, len(peers))
		for i, p := range peers {
			pv, ok := r.peers[p]
			var err error
			if ok {
				subjs[i], err = r.h.subj.SearchPeer(pv.Site, p)
			}
			if !ok || err != nil {
				for _, x := range rcvs {
					x.Close(fmt.Errorf("peer %s: no search subject (in table %v): %v", p, ok, err))
				}
				return fmt.Errorf("default plan: peer %s: no search subject (in table %v): %v", p, ok, err)
			}
		}
		for i, p := range peers {
			s, err := r.openStream(p, expected[p], rcvs[i])
			if err != nil {
				return err
			}
			s.plan = true
			invites[p] = s.rcv.Invite()
		}
		for i, p := range peers {
			if err := bus.Publish(r.h.nc, subjs[i], r.request(map[string]bus.Invite{p: invites[p]}, nil)); err != nil {
				return fmt.Errorf("publish search to %s: %w", subjs[i], err)
			}
		}
	}
	return r.flushRetries()
}

// openStream makes a receiver for one peer's answer and starts its reader.
func (r *run) newReceiver() (*bus.Receiver, error) {
	return bus.NewReceiver(r.h.nc, 0, bus.StreamOptions{Window: 32, IdleTimeout: r.h.cfg.PeerTimeout, Heartbeat: r.h.cfg.PeerTimeout / 3,
		MaxMessage: int(maxMessage(r.h.searchMemory())), InviteOnSameConn: true})
}

// openStream starts the reader of one peer's answer stream (rcv nil: a
// new receiver).
func (r *run) openStream(peer string, buckets []string, rcv *bus.Receiver) (*peerStream, error) {
	if rcv == nil {
		var err error
		if rcv, err = r.newReceiver(); err != nil {
			return nil, err
		}
	}
	s := &peerStream{peer: peer, rcv: rcv, sent: time.Now(), buckets: map[string]bool{}}
	s.lastRecv.Store(time.Now().UnixNano())
	for _, b := range buckets {
		s.buckets[b] = true
		r.buckets[b].stream = s
	}
	r.streams = append(r.streams, s)
	r.h.adaptive.begin(peer)
	// The reader outlives the search when the peer still owes its done
	// and end: it reads to the end and confirms it (so the peer's Close
	// returns and nothing is counted as cancelled), bounded by sctx —
	// cancelled when the stream is given up, or a few seconds after the
	// search ended (closeStreams).
	sctx, scancel := context.WithCancel(context.Background())
	s.cancel = scancel
	deliver := func(ev streamEvent) bool {
		s.handing.Store(true)
		defer s.handing.Store(false)
		select {
		case r.events <- ev:
			s.lastRecv.Store(time.Now().UnixNano())
			return true
		case <-r.ctx.Done():
			// The search is over: keep reading to the end when it
			// completed (the peer's done is confirmed); an abandoned
			// search aborts the stream, so the peer stops scanning.
			if !r.completed.Load() {
				rcv.Close(errors.New("search abandoned"))
			}
			return false
		}
	}
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		defer scancel()
		for {
			b, err := rcv.Next(sctx)
			if errors.Is(err, io.EOF) {
				if r.ctx.Err() != nil && !r.completed.Load() {
					// The search was abandoned (client gone, time or
					// result limit) before every bucket had its outcome:
					// the end is not confirmed, the peer counts the
					// search as cancelled.
					rcv.Close(errors.New("search abandoned"))
					return
				}
				rcv.Close(nil) // confirms the end to the peer
				return
			}
			if err != nil {
				deliver(streamEvent{s: s, err: err})
				return
			}
			s.lastRecv.Store(time.Now().UnixNano())
			var part *query.Partial
			m, err := api.DecodeSearchMsg(b)
			if err == nil && m.Kind == api.SearchBatch {
				// Decoded here, in parallel across peers, not on the
				// coordinator.
				if part, err = query.DecodePartial(m.Partial); err == nil {
					err = r.plan.CheckPartial(part)
				}
				if err != nil {
					err = fmt.Errorf("bucket %s: %w", m.Bucket, err)
				}
			}
			m.Partial = nil // decoded, or not a batch's (it may alias b)
			if err != nil {
				err = fmt.Errorf("undecodable search message: %w", err)
				rcv.Close(err)
				deliver(streamEvent{s: s, err: err})
				return
			}
			if m.Kind == api.SearchMarkers {
				// consecutive markers sent as one (api.SearchMarkers): each
				// read as if it came alone (DecodeSearchMsg checked them)
				for i := range m.Markers {
					x := m.Markers[i]
					x.Peer = m.Peer
					deliver(streamEvent{s: s, msg: &x})
				}
				continue
			}
			deliver(streamEvent{s: s, msg: &m, part: part})
		}
	}()
	return s, nil
}

// flushRetries sends the explicit bucket lists collected so far.
func (r *run) flushRetries() error {
	for _, p := range slices.Sorted(maps.Keys(r.retries)) {
		ids := r.retries[p]
		delete(r.retries, p) // before the gate: its failovers may queue more
		ids = r.gateHotReplicas(p, ids)
		if len(ids) == 0 {
			continue
		}
		peer, ok := r.peers[p]
		if !ok {
			for _, id := range ids {
				r.failover(r.buckets[id], p, "peer not in the generation table")
			}
			continue
		}
		s, err := r.openStream(p, ids, nil)
		if err != nil {
			return err
		}
		subj, err := r.h.subj.SearchPeer(peer.Site, p)
		if err != nil {
			return err
		}
		if err := bus.Publish(r.h.nc, subj, r.request(map[string]bus.Invite{p: s.rcv.Invite()}, ids)); err != nil {
			return fmt.Errorf("publish search to %s: %w", subj, err)
		}
	}
	if len(r.retries) > 0 { // failover above queued more
		return r.flushRetries()
	}
	return nil
}

// failover gives a bucket to its next candidate that has not failed in
// this search, or fails it when none is left.
func (r *run) failover(br *bucketRun, peer, reason string) {
	if br == nil || br.state != bPending {
		return
	}
	br.failures = append(br.failures, query.Failure{Bucket: br.id, Peer: peer, Reason: reason})
	if c := br.combo; c != nil {
		// The combined batch cannot be split: every bucket in it that this
		// stream still owes goes elsewhere too.
		c.dead = true
		for _, id := range c.buckets {
			if o := r.buckets[id]; o != nil {
				o.combo, o.markedOK = nil, false
			}
		}
		for _, id := range c.buckets {
			if o := r.buckets[id]; o != nil && o != br && o.stream == br.stream && o.state == bPending {
				defer r.failover(o, peer, reason)
			}
		}
	}
	if br.stream != nil {
		delete(br.stream.buckets, br.id)
		br.stream = nil
	}
	br.parts = nil
	if c := r.nextCandidate(br, peer); c != "" {
		r.h.metrics.retries.Inc()
		r.retries[c] = append(r.retries[c], br.id)
		return
	}
	if !r.retryRound(br) {
		br.state = bFailed
	}
}

// failStream: the peer failed or went silent: every bucket it still owes
// goes elsewhere, and the peer is not asked again in this search.
func (r *run) failStream(s *peerStream, reason string) {
	if s.finished {
		return
	}
	s.finished, s.failed = true, true
	r.failed[s.peer] = true
	r.h.markSuspect(s.peer)
	r.h.adaptive.end(s.peer, 0, 0, 0, false)
	if s.rcv != nil { // nil only in the coordinator's unit tests
		s.rcv.Close(errors.New(reason))
	}
	s.cancel()
	r.failOwed(s, func(string) string { return reason })
}

// failOwed fails over every bucket stream s still owes. A bucket that a
// combined answer's failover already moved elsewhere while this loop ran
// is not this stream's any more and is left alone (failing it over again
// would send it to two copies).
func (r *run) failOwed(s *peerStream, reason func(bucket string) string) {
	for _, b := range slices.Sorted(maps.Keys(s.buckets)) {
		if br := r.buckets[b]; br != nil && br.stream == s {
			r.failover(br, s.peer, reason(b))
		}
	}
}

// pending counts buckets still waiting for a marker, and default-plan
// streams still owing their done: a peer's done may name a newer table,
// whose new buckets join the search (catchUp), so the search is not
// complete before every invited peer said which table it used.
func (r *run) pending() int {
	n := 0
	for _, br := range r.buckets {
		if br.state == bPending {
			n++
		}
	}
	for _, s := range r.streams {
		if s.plan && !s.finished {
			n++
		}
	}
	return n
}

// collect runs until every bucket has an outcome or the search's context
// ends. It returns the context's error in the latter case.
func (r *run) collect() error {
	check := time.NewTicker(max(r.h.cfg.PeerTimeout/4, 50*time.Millisecond))
	defer check.Stop()
	for r.pending() > 0 {
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case ev := <-r.events:
			r.handle(ev)
			if r.limitErr != nil {
				return r.limitErr
			}
		case b := <-r.barrierWait:
			r.takeBarrier(b)
		case <-check.C:
			now := time.Now()
			for _, s := range r.streams {
				// A dead or cut-off peer is caught by its stream's idle
				// timeout (search_peer_timeout: no frame at all, not even
				// the stream's heartbeat); a live peer that makes no
				// progress (no batch, marker or beat) is caught here after
				// the same search_peer_timeout (SPEC §5 step 4).
				if stall := r.h.cfg.PeerTimeout; !s.finished && len(s.buckets) > 0 && !s.handing.Load() &&
					now.Sub(time.Unix(0, s.lastRecv.Load())) > stall {
					r.failStream(s, fmt.Sprintf("peer %s sent no progress for %s", s.peer, stall))
				}
			}
			r.releaseRounds(now)
		}
		if err := r.flushRetries(); err != nil {
			return err
		}
	}
	r.completed.Store(true)
	return nil
}

func (r *run) handle(ev streamEvent) {
	s := ev.s
	if ev.err != nil {
		if errors.Is(ev.err, bus.ErrMessageTooLarge) {
			// One message past twice the budget (maxMessage): every
			// copy's would be, so the search ends as when the held
			// partials pass the budget.
			n := maxMessage(r.h.searchMemory()) + 1
			err := r.plan.Charge(n, "the partial results held on search head "+r.h.cfg.ID+" (one message from peer "+s.peer+")")
			r.plan.Release(n)
			r.limitErr = r.h.limitRefusal(err)
			return
		}
		if !s.finished {
			r.failStream(s, fmt.Sprintf("peer %s: %v", s.peer, ev.err))
		}
		return
	}
	if s.failed {
		return // late messages of a stream given up on
	}
	m := ev.msg
	if r.h.cfg.OnMessage != nil {
		r.h.cfg.OnMessage(s.peer, m.Kind, m.Bucket)
	}
	switch m.Kind {
	case api.SearchBeat:
	case api.SearchBatch:
		if len(m.Buckets) > 0 {
			r.takeCombo(s, m.Buckets, ev.part)
			return
		}
		br := r.buckets[m.Bucket]
		if br == nil && !r.pref.Explicit() && !s.buckets[m.Bucket] {
			// A bucket newer than the head's table (adoptNewer).
			br = r.adoptNewer(s, m.Bucket)
		}
		if br == nil || br.state != bPending || br.stream != s {
			return
		}
		br.parts = append(br.parts, ev.part)
	case api.SearchMarker:
		br := r.buckets[m.Bucket]
		if br == nil && !r.pref.Explicit() && m.Error == "" {
			br = r.adoptNewer(s, m.Bucket)
		}
		if br == nil || br.state != bPending || br.stream != s {
			return
		}
		if m.Error != "" && m.Code == api.SearchCodeLimit {
			r.h.metrics.limitHit("peer")
			r.limitErr = &RequestError{Status: 400, Code: "limit_exceeded", Msg: fmt.Sprintf("peer %s, bucket %s: %s", s.peer, br.id, m.Error)}
			return
		}
		if m.Error != "" {
			r.failover(br, s.peer, m.Error)
			return
		}
		if why, label := r.proof(br, s.peer, m); why != "" {
			r.h.metrics.unproven.WithLabelValues(label).Inc()
			r.h.log.Warn("search: a copy could not prove it is whole; its bucket goes to another copy", "search", r.id, "bucket", br.id, "peer", s.peer, "reason", why)
			r.failover(br, s.peer, why)
			return
		}
		if br.combo != nil && m.Outcome == api.MarkerSearched {
			br.markedOK, br.scanned = true, m.Scanned
			r.completeCombo(s, br.combo)
			return
		}
		delete(s.buckets, br.id)
		r.answered[s.peer] = true
		r.scanned[s.peer] += m.Scanned
		if m.Outcome == api.MarkerSkipped {
			br.state = bSkipped
			br.parts = nil
			return
		}
		br.state = bSearched
		if r.onBucket != nil {
			r.onBucket(br.parts)
			br.parts = nil
		}
	case api.SearchDone:
		s.finished, s.doneSeen = true, true
		r.answered[s.peer] = true
		r.h.adaptive.end(s.peer, time.Since(s.sent), time.Duration(m.ServiceMs*float64(time.Millisecond)), m.Queue, true)
		r.failOwed(s, func(b string) string { return fmt.Sprintf("peer %s finished without bucket %s", s.peer, b) })
		if v := max(m.TableVersion, m.Newest); v > r.version {
			// The peer used or heard of a newer table: its buckets new
			// to the head may sit on peers this search did not invite.
			r.catchUp(v, nil)
		}
	case api.SearchError:
		reason := fmt.Sprintf("peer %s refused the search: %s", s.peer, m.Error)
		if m.Code == api.SearchCodeBadRequest {
			r.warn(reason)
		}
		r.failStream(s, reason)
	}
}

// takeCombo attaches a combined batch to its buckets, which must all be
// pending on this stream (a peer never combines a bucket it reported an
// error for); otherwise the batch cannot be split, and the buckets still
// owed by this stream are re-dispatched.
func (r *run) takeCombo(s *peerStream, ids []string, part *query.Partial) {
	c := &combo{part: part, buckets: ids}
	ok := true
	for _, id := range ids {
		br := r.buckets[id]
		if br == nil && !r.pref.Explicit() {
			br = r.adoptNewer(s, id)
		}
		if br == nil || br.state != bPending || br.stream != s || br.combo != nil {
			ok = false
		}
	}
	if !ok {
		for _, id := range ids {
			if br := r.buckets[id]; br != nil && br.stream == s {
				r.failover(br, s.peer, fmt.Sprintf("peer %s: a combined answer overlapped a bucket it does not own", s.peer))
			}
		}
		return
	}
	for _, id := range ids {
		r.buckets[id].combo = c
	}
}

// completeCombo merges a combo once every bucket in it has its marker.
func (r *run) completeCombo(s *peerStream, c *combo) {
	if c.dead {
		return
	}
	for _, id := range c.buckets {
		if br := r.buckets[id]; br == nil || !br.markedOK || br.combo != c {
			return
		}
	}
	for _, id := range c.buckets {
		br := r.buckets[id]
		delete(s.buckets, id)
		r.answered[s.peer] = true
		r.scanned[s.peer] += br.scanned
		br.state = bSearched
	}
	if r.onBucket != nil {
		r.onBucket([]*query.Partial{c.part})
	}
	c.part = nil
}

func (r *run) warn(w string) {
	if !slices.Contains(r.warnings, w) {
		r.warnings = append(r.warnings, w)
	}
}

// closeStreams ends the streams of a search that is over. A stream that
// owes nothing more (every bucket it had got its marker, or its done
// arrived) is left to its reader, which confirms the end when the peer
// closes — within streamLinger, then the reader is stopped; any other
// stream is aborted (the peer stops scanning).
func (r *run) closeStreams(reason error) {
	for _, s := range r.streams {
		owes := len(s.buckets) > 0 && !s.failed
		if !s.finished {
			s.finished = true
			r.h.adaptive.end(s.peer, 0, 0, 0, false)
		}
		if (s.doneSeen || !owes) && !s.failed {
			time.AfterFunc(streamLinger, s.cancel)
			continue
		}
		s.rcv.Close(reason)
		s.cancel()
	}
}

// streamLinger bounds how long a finished search's reader waits for its
// peer's end.
const streamLinger = 5 * time.Second

// summary computes the response summary by SPEC §5's counting rules.
func (r *run) summary() query.Summary {
	sum := query.BucketSummary{Failures: []query.Failure{}}
	var unknown []string
	for _, id := range r.order {
		br := r.buckets[id]
		sum.Total++
		if br.unknown && (br.state == bSearched || br.state == bSkipped) {
			unknown = append(unknown, id)
		}
		switch br.state {
		case bSearched:
			sum.Successful++
		case bSkipped:
			sum.Successful++
			sum.Skipped++
		case bFailed, bPending:
			sum.Failed++
			sum.Failures = append(sum.Failures, lastFailure(br))
		case bMissing:
			sum.Missing++
			sum.Failures = append(sum.Failures, lastFailure(br))
		}
	}
	out := query.Summary{Buckets: sum, Generation: r.generation, Site: r.h.cfg.Site, Peers: slices.Sorted(maps.Keys(r.answered)), Warnings: r.warnings}
	if out.Peers == nil {
		out.Peers = []string{} // "peers": [], not null
	}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	for _, id := range unknown {
		out.Partial = true
		r.h.metrics.unproven.WithLabelValues(unprovenUnknown).Inc()
		out.Warnings = append(out.Warnings, fmt.Sprintf("bucket %s was answered but no generation table the search head could fetch knows it: its copy cannot be proven whole", id))
	}
	if sum.Failed > 0 || sum.Missing > 0 {
		out.Partial = true
		for _, f := range sum.Failures {
			out.Warnings = append(out.Warnings, fmt.Sprintf("bucket %s not searched: %s", f.Bucket, f.Reason))
		}
	}
	return out
}

func lastFailure(br *bucketRun) query.Failure {
	if len(br.failures) == 0 {
		return query.Failure{Bucket: br.id, Reason: "no answer before the search ended"}
	}
	f := br.failures[len(br.failures)-1]
	if len(br.failures) > 1 {
		var rs []string
		for _, x := range br.failures {
			if !slices.Contains(rs, x.Reason) { // a round may repeat one
				rs = append(rs, x.Reason)
			}
		}
		f.Reason = strings.Join(rs, "; ")
	}
	return f
}

// maxMessage caps one stream message from a peer at twice the head's
// budget for a search (review M1: bus.Receiver.Next held any message
// whole). Twice, not once: a message is decoded and then cut (a sort's
// rows past --max-results, SortKeep) before its rows are charged, so a
// message somewhat over the budget may still leave the search within it.
func maxMessage(budget int64) int64 { return 2 * budget }
