package peer

// The peer's half of distributed search (SPEC §5, api/search.go): it serves
// <prefix>.search.<site> (the default plan: answer for its primaries of the
// request's generation and table) and <prefix>.search.<site>.<peer>
// (explicit bucket lists), streaming per-bucket partial results to the
// search head under the head's credits.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/query"
)

// searchBatchRows is the most events one batch message carries; a bucket
// with more matching events is sent as several batches before its marker.
const searchBatchRows = 2000

// maxPeerSearches bounds the searches a peer runs at once; more wait for a
// slot (their heads see beats only once they start, and retry elsewhere
// after search_peer_timeout).
const maxPeerSearches = 16

// SearchStats are the peer's distributed-search counters.
type SearchStats struct {
	Requests  atomic.Int64 // requests this peer answered (opened a stream for)
	Buckets   atomic.Int64 // buckets searched (markers sent as searched)
	Skipped   atomic.Int64 // buckets skipped by time range
	Scanned   atomic.Int64 // events decoded
	Cancelled atomic.Int64 // searches stopped because the head went away or timed out
	Refused   atomic.Int64 // requests refused (unresolvable generation, bad query)
	Running   atomic.Int64 // searches running now
}

// searchService is a cluster peer's search endpoint.
type searchService struct {
	p    *Peer
	nc   *nats.Conn
	mc   *mgrclient.ManagerClient
	subs []*nats.Subscription
	gens *genCache
	// newest is the newest generation-table version this peer heard of
	// (heartbeat replies): a search's done names it, so a head whose
	// table is older catches up (SPEC §5 step 3).
	newest atomic.Uint64
	sem    chan struct{}
	mis    mismatches // copies found at another length than their seal
	// subj names the bus subjects; know caches knowledge bundles by hash
	// (knowledge.go).
	subj bus.Subjects
	know knowledgeCache

	ctx    context.Context
	cancel context.CancelFunc
	// runMu orders wg.Add against close: a request the subscription
	// delivers after close began is dropped, never added to a WaitGroup
	// that is being waited on.
	runMu   sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

// startSearch subscribes this peer's search subject under its site (and
// under the default site, as replication does, for single-site clusters).
func (p *Peer) startSearch(nc *nats.Conn, subj bus.Subjects) (*searchService, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &searchService{p: p, nc: nc, mc: newManagerClient(nc, subj, p.cfg.ID), sem: make(chan struct{}, maxPeerSearches),
		ctx: ctx, cancel: cancel, subj: subj}
	s.gens = newGenCache(p.cfg.ID, s.mc)
	sites := []string{p.site()}
	if p.site() != fsm.DefaultSite {
		sites = append(sites, fsm.DefaultSite)
	}
	for _, site := range sites {
		// Only this peer's own subject: a search head sends each peer its
		// own request and invite (SECURITY.md, M4), so no peer sees the
		// stream inboxes of another.
		sb, err := subj.SearchPeer(site, p.cfg.ID)
		if err != nil {
			s.close(0)
			return nil, err
		}
		sub, err := nc.Subscribe(sb, s.onRequest)
		if err != nil {
			s.close(0)
			return nil, fmt.Errorf("peer: subscribe %s: %w", sb, err)
		}
		_ = sub.SetPendingLimits(-1, 64<<20)
		s.subs = append(s.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		s.close(0)
		return nil, err
	}
	return s, nil
}

// cancelled counts a search stopped because its head went away or timed
// out (quarry_peer_searches_cancelled_total, shared with the HTTP API).
func (s *searchService) cancelled() {
	s.p.searchStats.Cancelled.Add(1)
	if s.p.searchCancelled != nil {
		s.p.searchCancelled.Inc()
	}
}

// searchDrain bounds how long a peer that is stopping gracefully (SIGTERM,
// a rolling restart) lets the searches it already accepted finish before
// it cancels them. A search that finishes here is one the search head does
// not have to re-dispatch after search_peer_timeout of silence.
const searchDrain = 5 * time.Second

// close unsubscribes, then waits up to drain for the searches already
// running (0: cancels them at once, as a crash would) and cancels what is
// left.
func (s *searchService) close(drain time.Duration) {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.runMu.Lock()
	s.closing = true
	s.runMu.Unlock()
	s.p.drainingOnce.Do(func() { close(s.p.draining) })
	finished := make(chan struct{})
	go func() { s.wg.Wait(); close(finished) }()
	if drain > 0 {
		t := time.NewTimer(drain)
		select {
		case <-finished:
		case <-t.C:
			s.p.log.Warn("stopping: cancelling searches still running after the drain", "drain", drain, "running", s.p.searchStats.Running.Load())
		}
		t.Stop()
	}
	s.cancel()
	<-finished
}

func (s *searchService) onRequest(m *nats.Msg) {
	var req api.SearchRequest
	if err := bus.Decode(m, &req); err != nil {
		s.p.log.Warn("search request: undecodable", "subject", m.Subject, "err", err)
		return
	}
	inv, ok := req.Invites[s.p.cfg.ID]
	if !ok {
		return // not addressed to this peer
	}
	s.runMu.Lock()
	if s.closing {
		s.runMu.Unlock()
		return // arrived after close began: the head re-dispatches it
	}
	s.wg.Add(1)
	s.runMu.Unlock()
	go func() {
		defer s.wg.Done()
		s.run(&req, inv)
	}()
}

// run answers one request. Every path that opened the stream ends it.
func (s *searchService) run(req *api.SearchRequest, inv bus.Invite) {
	st := &s.p.searchStats
	start := time.Now()
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if timeout <= 0 || timeout > 10*time.Minute {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	queue := int(st.Running.Load())
	if err := req.Validate(); err != nil {
		s.refuse(ctx, inv, api.SearchCodeBadRequest, err)
		return
	}
	know, err := s.knowledgeFor(ctx, req.Knowledge)
	if err != nil {
		s.refuse(ctx, inv, api.SearchCodeInternal, err)
		return
	}
	plan, err := query.Compile(query.Request{Query: req.Query, Earliest: req.Earliest, Latest: req.Latest,
		Now: time.Unix(0, req.NowNS), Server: s.p.cfg.ID, Knowledge: know})
	if err != nil {
		s.refuse(ctx, inv, api.SearchCodeBadRequest, err)
		return
	}
	plan.SetMemoryLimit(s.p.cfg.SearchMemory)
	plan.SetBinaryCounts(req.CountsBinary)
	plan.SetCountsTop(req.CountsTop)
	plan.SetBinarySets(req.SetsBinary)
	plan.SetBinaryNums(req.NumsBinary)
	plan.SetSolePartial(req.SolePartial)
	plan.SetBlobs(req.Framed)
	st.Running.Add(1)
	defer st.Running.Add(-1)
	// The stream opens and beats before the request resolves its buckets
	// (a generation table may have to come from the managers, slow while
	// the leader is paused) and before it waits for a search slot: such a
	// peer is busy, not silent, and the head does not take it for a
	// stalled one (search_peer_timeout). A default-plan peer that finds it
	// has nothing to answer sends its done (naming its table) at once.
	snd, err := bus.NewSender(ctx, s.nc, inv)
	if err != nil {
		s.cancelled()
		return
	}
	st.Requests.Add(1)
	out := &answerStream{snd: snd, ctx: ctx, cancel: cancel, peer: s.p.cfg.ID, framed: req.Framed}
	var done atomic.Int64
	stopBeats := s.beat(ctx, req, out, &done)
	items, version, code, rerr := s.resolve(ctx, req, plan)
	if rerr != nil {
		// Refused on the open stream: the head re-dispatches the buckets
		// it expected here by explicit list.
		stopBeats()
		st.Refused.Add(1)
		if out.send(api.SearchMsg{Kind: api.SearchError, Code: code, Error: rerr.Error()}) != nil {
			snd.Abort(rerr)
			return
		}
		out.close()
		return
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-ctx.Done():
		stopBeats()
		s.cancelled()
		snd.Abort(errors.New("search cancelled while queued"))
		return
	}
	s.scan(ctx, plan, items, out, &done)
	stopBeats()
	if ctx.Err() != nil || out.failed() {
		s.cancelled()
		snd.Abort(errors.New("search cancelled"))
		return
	}
	if err := out.send(api.SearchMsg{Kind: api.SearchDone, TableVersion: version, Newest: max(version, s.newest.Load()), Done: int(done.Load()),
		ServiceMs: float64(time.Since(start).Microseconds()) / 1000, Queue: queue}); err != nil {
		s.cancelled()
		snd.Abort(err)
		return
	}
	if !out.close() {
		// The head went away before confirming the end.
		s.cancelled()
	}
}

// refuse sends one error message on a fresh stream.
func (s *searchService) refuse(ctx context.Context, inv bus.Invite, code string, err error) {
	s.p.searchStats.Refused.Add(1)
	snd, serr := bus.NewSender(ctx, s.nc, inv)
	if serr != nil {
		return
	}
	b, _ := api.EncodeSearchMsg(api.SearchMsg{Kind: api.SearchError, Peer: s.p.cfg.ID, Code: code, Error: err.Error()}, false)
	if serr := snd.Send(ctx, b); serr != nil {
		snd.Abort(serr)
		return
	}
	_ = snd.Close(ctx)
}

// answerStream is one request's answer stream: messages are sent one at a
// time; the first failure (the head went away) cancels the request.
type answerStream struct {
	snd    *bus.Sender
	ctx    context.Context
	cancel context.CancelFunc
	peer   string
	framed bool // the head reads framed messages (api.EncodeSearchMsg)
	mu     sync.Mutex
	// pending markers, for a head that reads framed messages (send)
	pending      []api.SearchMsg
	pendingSince time.Time
	err          error
}

func (a *answerStream) send(m api.SearchMsg) error {
	m.Peer = a.peer
	var b []byte
	if !a.framed || m.Kind != api.SearchMarker {
		var err error
		if b, err = api.EncodeSearchMsg(m, a.framed); err != nil { // outside the lock
			return err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if b == nil {
		// Markers wait to travel together (api.SearchMarkers), in order:
		// until the next other message, maxMarkerList of them, or the
		// first has waited markerListAge (checked as markers come; the
		// next beat or the done sends the rest).
		if len(a.pending) == 0 {
			a.pendingSince = time.Now()
		}
		a.pending = append(a.pending, m)
		if len(a.pending) < maxMarkerList && time.Since(a.pendingSince) < markerListAge {
			return nil
		}
		return a.flushLocked()
	}
	if err := a.flushLocked(); err != nil {
		return err
	}
	return a.sendLocked(b)
}

// Marker lists: at most maxMarkerList markers per message, the first
// waiting at most about markerListAge for the others.
const (
	maxMarkerList = 256
	markerListAge = 20 * time.Millisecond
)

// flushLocked sends the markers waiting, as one message.
func (a *answerStream) flushLocked() error {
	if len(a.pending) == 0 {
		return nil
	}
	m := api.SearchMsg{Kind: api.SearchMarkers, Peer: a.peer, Markers: a.pending}
	if len(a.pending) == 1 {
		m = a.pending[0]
	}
	a.pending = nil
	b, err := api.EncodeSearchMsg(m, a.framed)
	if err != nil {
		return err
	}
	return a.sendLocked(b)
}

func (a *answerStream) sendLocked(b []byte) error {
	if err := a.snd.Send(a.ctx, b); err != nil {
		a.err = err
		a.cancel() // the head is gone: stop scanning
		return err
	}
	return nil
}

func (a *answerStream) failed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err != nil
}

// close ends the stream, waiting a bounded time for the head to confirm.
func (a *answerStream) close() bool {
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	return a.snd.Close(cctx) == nil
}

// beat sends a progress beat at the request's interval (at most every
// second) until the returned stop is called or ctx ends.
func (s *searchService) beat(ctx context.Context, req *api.SearchRequest, out *answerStream, done *atomic.Int64) (stop func()) {
	beatStop := make(chan struct{})
	var beatWG sync.WaitGroup
	beatWG.Add(1)
	go func() {
		defer beatWG.Done()
		every := time.Second
		if b := time.Duration(req.BeatMs) * time.Millisecond; b > 0 && b < every {
			every = max(b, 10*time.Millisecond)
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-beatStop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if f := s.p.cfg.SearchBeats; f != nil && !f() {
					continue
				}
				_ = out.send(api.SearchMsg{Kind: api.SearchBeat, Done: int(done.Load())})
			}
		}
	}()
	return func() {
		close(beatStop)
		beatWG.Wait()
	}
}

// searchItem is one bucket a request asks this peer for: its segment and
// the length it covers, or why it cannot be searched here.
type searchItem struct {
	bucket string
	seg    query.Segment
	length *api.CopyLength
	err    string
}

// resolve lists what to search: an explicit list as asked; the default
// plan's primaries of (table site, generation) from the generation cache —
// which may have to fetch a table from the managers, so it runs once the
// stream is open and beating.
func (s *searchService) resolve(ctx context.Context, req *api.SearchRequest, plan *query.Plan) (items []searchItem, version uint64, code string, err error) {
	allowed := func(index string) bool { return len(req.Indexes) == 0 || slices.Contains(req.Indexes, index) }
	if req.Buckets != nil {
		for _, b := range req.Buckets {
			sl := req.Sealed[b]
			seg, l := s.segment(b, sealedLength{sl.Blocks, sl.Checksum})
			switch {
			case seg == nil:
				items = append(items, searchItem{bucket: b, err: fmt.Sprintf("no searchable copy of bucket %s on peer %s", b, s.p.cfg.ID)})
			case !allowed(seg.Index()):
				items = append(items, searchItem{bucket: b, err: fmt.Sprintf("bucket %s is in index %s, which this search may not read", b, seg.Index())})
			default:
				items = append(items, searchItem{bucket: b, seg: seg, length: l})
			}
		}
		return items, 0, "", nil
	}
	gctx, gcancel := context.WithTimeout(ctx, genFetchTimeout)
	defer gcancel()
	mine, sealed, ver, err := s.gens.primaries(gctx, req.TableSite, req.Generation, req.TableVersion)
	if err != nil {
		code := api.SearchCodeInternal
		if bus.IsRemote(err, api.CodeGeneration) {
			code = api.SearchCodeGeneration
		}
		return nil, 0, code, fmt.Errorf("peer %s cannot resolve generation %d of %s: %w", s.p.cfg.ID, req.Generation, req.TableSite, err)
	}
	for _, b := range mine {
		seg, l := s.segment(b, sealed[b])
		if seg == nil {
			items = append(items, searchItem{bucket: b, err: fmt.Sprintf("peer %s is primary for bucket %s but holds no searchable copy", s.p.cfg.ID, b)})
			continue
		}
		if !allowed(seg.Index()) || !plan.TargetsIndex(seg.Index()) {
			continue
		}
		items = append(items, searchItem{bucket: b, seg: seg, length: l})
	}
	return items, ver, "", nil
}

// scan searches the items on up to GOMAXPROCS workers. An aggregating
// search combines the partials of the buckets each worker searched into
// one batch per worker, sent when the worker is done
// (api.SearchMsg.Buckets): combining and encoding stay parallel.
func (s *searchService) scan(ctx context.Context, plan *query.Plan, items []searchItem, out *answerStream, done *atomic.Int64) {
	work := make(chan searchItem)
	var wg sync.WaitGroup
	// A head that takes final dc counts and perc values (query/sole.go) gets one batch for
	// every bucket: final forms of two batches could not be merged.
	var shared *combiner
	if plan.Aggregating() && plan.SolePartial() {
		shared = &combiner{}
	}
	for w := 0; w < min(runtime.GOMAXPROCS(0), len(items)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comb := shared
			if comb == nil && plan.Aggregating() {
				comb = &combiner{}
			}
			for it := range work {
				s.searchBucket(ctx, plan, it.bucket, it.seg, it.length, it.err, out, comb)
				done.Add(1)
			}
			if comb != nil && shared == nil && ctx.Err() == nil {
				s.sendCombined(plan, comb, out)
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case work <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if shared != nil && ctx.Err() == nil {
		s.sendCombined(plan, shared, out)
	}
}

// searchBucket runs the peer half over one bucket and sends its batches
// and marker.
func (s *searchService) searchBucket(ctx context.Context, plan *query.Plan, bucket string, seg query.Segment, length *api.CopyLength,
	problem string, out *answerStream, comb *combiner) {
	st := &s.p.searchStats
	if problem != "" {
		_ = out.send(api.SearchMsg{Kind: api.SearchMarker, Bucket: bucket, Error: problem})
		return
	}
	if h := s.p.cfg.BeforeSearchBucket; h != nil {
		h(ctx, bucket)
	}
	part, err := plan.RunSegment(ctx, seg)
	if err != nil {
		if ctx.Err() == nil {
			m := api.SearchMsg{Kind: api.SearchMarker, Bucket: bucket, Error: err.Error()}
			if query.IsLimitError(err) {
				m.Code = api.SearchCodeLimit
				s.p.searchLimitHits.WithLabelValues(query.LimitName(err)).Inc()
			}
			_ = out.send(m)
		}
		return
	}
	st.Scanned.Add(part.Scanned)
	if comb != nil {
		// Held until the worker's combined batch is sent: charged to the
		// search's memory budget (query/memory.go). Past it the bucket
		// ends the search with limit_exceeded, as any copy would.
		est := part.MemoryEstimate()
		if err := plan.Charge(est, "the partial results held on peer "+s.p.cfg.ID); err != nil {
			plan.Release(est)
			s.p.searchLimitHits.WithLabelValues("search_memory").Inc()
			_ = out.send(api.SearchMsg{Kind: api.SearchMarker, Bucket: bucket, Error: err.Error(), Code: api.SearchCodeLimit})
			return
		}
		comb.add(bucket, part, length, est)
		return
	}
	// A head that reads framed messages gets no batch for a bucket with no
	// events: the marker says how many batches came before it (Batches).
	batches := splitPartial(part)
	if out.framed && part.Kind == "events" && len(part.Events) == 0 {
		batches = nil
	}
	for _, b := range batches {
		enc, err := plan.EncodePartial(b)
		if err != nil {
			_ = out.send(api.SearchMsg{Kind: api.SearchMarker, Bucket: bucket, Error: fmt.Sprintf("encode: %v", err)})
			return
		}
		if out.send(api.SearchMsg{Kind: api.SearchBatch, Bucket: bucket, Partial: enc}) != nil {
			return
		}
	}
	outcome := api.MarkerSearched
	if part.Skipped {
		outcome = api.MarkerSkipped
		st.Skipped.Add(1)
	} else {
		st.Buckets.Add(1)
	}
	n := len(batches)
	_ = out.send(api.SearchMsg{Kind: api.SearchMarker, Bucket: bucket, Outcome: outcome, Scanned: part.Scanned, Length: length, Batches: &n})
}

// segment is a bucket's segment with the length it covers, for the
// marker's proof of a whole copy (api.SearchMsg.Length). For a bucket the
// table has sealed (sealed.blocks > 0), a longer copy is searched as its
// sealed prefix (store.SegmentPrefix); a copy that is shorter or diverges
// is reported to the managers (reportMismatch) and searched as it is —
// the head refuses its marker and tries another copy.
func (s *searchService) segment(id string, sealed sealedLength) (query.Segment, *api.CopyLength) {
	seg, l := s.p.store.SegmentPrefix(id, sealed.blocks, sealed.checksum)
	if seg == nil {
		return nil, nil
	}
	if sealed.blocks > 0 && (l.Blocks != sealed.blocks || l.Checksum != sealed.checksum) {
		s.reportMismatch(id, sealed, l)
	}
	return seg, &api.CopyLength{Blocks: l.Blocks, Checksum: l.Checksum, Hot: l.Hot}
}

// combiner collects an aggregating search's per-bucket partials.
type combiner struct {
	mu      sync.Mutex
	buckets []string
	parts   []*query.Partial
	lengths []*api.CopyLength
	charged int64 // bytes charged to the search's memory budget
}

func (c *combiner) add(bucket string, p *query.Partial, l *api.CopyLength, charged int64) {
	c.mu.Lock()
	c.buckets = append(c.buckets, bucket)
	c.parts = append(c.parts, p)
	c.lengths = append(c.lengths, l)
	c.charged += charged
	c.mu.Unlock()
}

// sendCombined sends one batch combining the searched buckets' aggregates,
// then every collected bucket's marker.
func (s *searchService) sendCombined(plan *query.Plan, c *combiner, out *answerStream) {
	defer plan.Release(c.charged)
	st := &s.p.searchStats
	var searched []string
	var keep []*query.Partial
	for i, p := range c.parts {
		if !p.Skipped {
			searched = append(searched, c.buckets[i])
			keep = append(keep, p)
		}
	}
	if len(searched) > 0 {
		enc, err := plan.EncodePartial(plan.Combine(keep))
		if err != nil {
			for _, b := range searched {
				_ = out.send(api.SearchMsg{Kind: api.SearchMarker, Bucket: b, Error: fmt.Sprintf("encode: %v", err)})
			}
			searched = nil
		} else if out.send(api.SearchMsg{Kind: api.SearchBatch, Buckets: searched, Partial: enc}) != nil {
			return
		}
	}
	for i, p := range c.parts {
		b := c.buckets[i]
		if p.Skipped {
			st.Skipped.Add(1)
			_ = out.send(api.SearchMsg{Kind: api.SearchMarker, Bucket: b, Outcome: api.MarkerSkipped, Length: c.lengths[i]})
			continue
		}
		if !slices.Contains(searched, b) {
			continue
		}
		st.Buckets.Add(1)
		_ = out.send(api.SearchMsg{Kind: api.SearchMarker, Bucket: b, Outcome: api.MarkerSearched, Scanned: p.Scanned, Length: c.lengths[i]})
	}
}

// splitPartial cuts an events partial into batches of searchBatchRows.
func splitPartial(p *query.Partial) []*query.Partial {
	if len(p.Events) <= searchBatchRows {
		return []*query.Partial{p}
	}
	var out []*query.Partial
	for i := 0; i < len(p.Events); i += searchBatchRows {
		q := *p
		q.Events = p.Events[i:min(i+searchBatchRows, len(p.Events))]
		if i > 0 {
			q.Scanned = 0
		}
		out = append(out, &q)
	}
	return out
}

// genCache resolves "the buckets this peer is primary for in (table site,
// generation)" from generation tables fetched from the managers on a miss
// and kept by (site, generation), with the table version they reflect.
type genCache struct {
	me string
	mc *mgrclient.ManagerClient

	mu      sync.Mutex
	entries map[genKey]*genEntry
}

type genKey struct {
	site string
	gen  uint64
}

type genEntry struct {
	mu sync.Mutex // one fetch at a time per key
	// version is the newest table version the entry was answered at: a
	// whole table fetched for its generation may come from a manager
	// behind the one that answered before, and the entry keeps the newer
	// number.
	version uint64
	// table keeps, of the (site, generation) table, the buckets this peer
	// is primary for and the sealed length of every bucket the table
	// fixed one for (fsm.BucketInfo Sealed/Blocks/Checksum): a longer
	// copy is searched as its sealed prefix (store.SegmentPrefix).
	table  *fsm.GenerationTable[sealedLength]
	loaded bool
}

// sealedLength is a sealed bucket's length as the generation table
// carries it.
type sealedLength struct {
	blocks   int64
	checksum string
}

// genFetchTimeout bounds a search's wait for a generation table from the
// managers: past it the peer refuses the request and the head sends the
// buckets by explicit list, which needs no table.
const genFetchTimeout = 3 * time.Second

// genCacheSize is how many (site, generation) tables a peer keeps.
const genCacheSize = 8

func newGenCache(me string, mc *mgrclient.ManagerClient) *genCache {
	return &genCache{me: me, mc: mc, entries: map[genKey]*genEntry{}}
}

// primaries returns the buckets this peer is primary for, sorted, with
// the sealed lengths the table gives them, and the table version they
// reflect (at least version).
func (c *genCache) primaries(ctx context.Context, site string, gen, version uint64) ([]string, map[string]sealedLength, uint64, error) {
	k := genKey{site, gen}
	c.mu.Lock()
	e := c.entries[k]
	if e == nil {
		e = &genEntry{}
		c.entries[k] = e
		if len(c.entries) > genCacheSize {
			var oldest *genKey
			for kk := range c.entries {
				if kk != k && (oldest == nil || kk.gen < oldest.gen) {
					kk := kk
					oldest = &kk
				}
			}
			delete(c.entries, *oldest)
		}
	}
	c.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.loaded || e.version < version {
		if err := c.refresh(ctx, site, gen, e); err != nil {
			return nil, nil, 0, err
		}
	}
	out := make([]string, 0, e.table.PrimaryCount())
	lengths := make(map[string]sealedLength, e.table.PrimaryCount())
	for b := range e.table.Primaries() {
		out = append(out, b)
		if l, ok := e.table.Bucket(b); ok {
			lengths[b] = l
		}
	}
	slices.Sort(out)
	return out, lengths, e.version, nil
}

func (c *genCache) refresh(ctx context.Context, site string, gen uint64, e *genEntry) error {
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if e.loaded {
		// Changes since what we hold, if the table is still at gen.
		v, err := c.mc.FetchGeneration(fctx, site, e.version, 0)
		if err != nil {
			return err
		}
		if v.Generation == gen {
			c.apply(e, v)
			return nil
		}
	}
	v, err := c.mc.FetchGeneration(fctx, site, 0, gen)
	if err != nil {
		return err
	}
	if v.Generation != gen {
		return bus.Errorf(api.CodeGeneration, "generation %d: the managers answered generation %d", gen, v.Generation)
	}
	e.table, e.loaded = c.newTable(), true
	c.apply(e, v)
	return nil
}

// newTable is an empty table that keeps this peer's primaries and the
// sealed lengths.
func (c *genCache) newTable() *fsm.GenerationTable[sealedLength] {
	return fsm.NewGenerationTableOf(func(p string) bool { return p == c.me }, func(info fsm.BucketInfo) (sealedLength, bool) {
		return sealedLength{info.Blocks, info.Checksum}, info.Sealed && info.Blocks > 0 && info.Checksum != ""
	})
}

// apply applies a view to an entry's table (fsm.GenerationTable's delta
// rule).
func (c *genCache) apply(e *genEntry, v fsm.GenerationView) {
	e.table.Apply(v)
	e.version = max(e.version, v.Version)
}

// newManagerClient is a manager client that sends as peer id
// (quarry.mgr.<op>.<id>).
func newManagerClient(nc *nats.Conn, subj bus.Subjects, id string) *mgrclient.ManagerClient {
	mc := mgrclient.NewManagerClient(nc, subj)
	mc.Sender = id
	return mc
}

// heard records a table version the managers announced.
func (s *searchService) heard(v uint64) {
	for {
		cur := s.newest.Load()
		if v <= cur || s.newest.CompareAndSwap(cur, v) {
			return
		}
	}
}
