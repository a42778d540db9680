package peer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer/idem"
	"github.com/quarry-dev/quarry/peer/repl"
	"github.com/quarry-dev/quarry/peer/store"
)

// A restarted origin gives up the retried requests it never acknowledged
// (DESIGN.md "Idempotent retries", "A restarted origin"). An origin killed
// after it journaled a keyed request and before any replica held those
// blocks never acknowledged it; the client's retry was then stored by
// another peer, which could not ask the dead origin. At restart, before it
// registers (so before its longer copy is rolled, fetched from or extends
// a seal), the origin asks every other peer how many blocks of each bucket
// it rolled at open they hold; past the longest of them no block was ever
// acknowledged (the ack rule needed another copy). In that tail it looks
// up each keyed request's key, and cuts its copy before the first block
// holding events that a bucket of another origin holds too. Meanwhile it
// answers lookups of those keys "pending" (idem.Index.Hold), so no other
// peer takes them as stored and answers a retry from this copy.

// Bounds of the restart check.
const (
	tailCheckTimeout = 20 * time.Second       // the whole check, before the peer registers
	tailAskTimeout   = 2 * time.Second        // one question to one peer
	tailPendingPause = 100 * time.Millisecond // before asking again about a key a peer is storing
)

// droppedBlocksCounter exports the blocks the restart check dropped.
func droppedBlocksCounter(p *Peer) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "quarry_peer_hec_idempotent_dropped_blocks_total",
		Help: "Unacknowledged blocks of keyed HEC requests this peer dropped at restart: no replica held them and another peer had stored the retried request (peer/DESIGN.md \"Idempotent retries\")."},
		func() float64 { return float64(p.droppedBlocks.Load()) })
}

// deferredAppendsCounter exports the replica appends refused for a key
// just answered unknown (idem.ErrRecentlyDenied).
func deferredAppendsCounter(p *Peer) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "quarry_peer_hec_idempotent_deferred_appends_total",
		Help: "Replica appends this peer refused for a moment because a key they carry was just answered unknown to another peer's lookup (peer/DESIGN.md \"Blocks in flight\")."},
		func() float64 { return float64(p.deferredAppends.Load()) })
}

// ErrTailUnknown: some peer did not say how much of a bucket it holds, so
// which blocks no replica holds is not known and nothing is dropped.
var ErrTailUnknown = errors.New("a peer did not say which blocks of the bucket it holds")

// beforeRegister serves key lookups and runs the restart check, before
// the registration shows the managers this peer's copies: from the first
// lookup it answers, the keys of the blocks the check may drop are held
// pending until it has decided. retry is joinCluster's (until the join
// times out).
func (p *Peer) beforeRegister(ctx context.Context, cl *cluster, subj bus.Subjects, retry func(string, func(context.Context) error) error) error {
	tails := p.holdTailKeys(p.tailCandidates())
	var err error
	if cl.keySvcs, err = p.serveKeys(cl.nc, subj); err != nil {
		p.keys.Release(nil)
		return err
	}
	if len(tails) == 0 {
		return nil
	}
	var list []fsm.PeerView
	if err := retry("peers", func(c context.Context) (err error) { list, err = cl.cp.Peers(c); return err }); err != nil {
		p.keys.Release(nil)
		return err
	}
	newTailCheck(p, cl.nc, subj, list).run(ctx, tails)
	return nil
}

// tailCandidates are the buckets this peer originated and rolled at open
// whose blocks were acknowledged only once another copy held them
// (copy.json's ack_copies ≥ 2): only there can a block no replica holds be
// known unacknowledged. A standalone peer's buckets (1) and those written
// before ack_copies existed (0) are never cut.
func (p *Peer) tailCandidates() []string {
	var out []string
	for _, id := range p.store.LastRecovery().RolledIDs {
		if _, _, guid, ok := fsmParse(id); !ok || guid != p.guid {
			continue
		}
		if p.store.AckCopies(id) < 2 {
			continue
		}
		out = append(out, id)
	}
	return out
}

// holdTailKeys makes the keys recorded in the candidates' blocks pending
// in the key index until the check releases them — it runs before this
// peer answers any lookup — and returns the candidates it could read
// whole: a bucket with a key section it cannot read is not checked (a key
// there was not held, so this peer may answer for it).
func (p *Peer) holdTailKeys(ids []string) []string {
	var out []string
	for _, id := range ids {
		bks, err := p.store.BlockKeys(id, 0)
		if err != nil {
			p.log.Warn("restart: unreplicated blocks kept: the keys of a rolled bucket cannot be read", "bucket", id, "err", err)
			continue
		}
		var recs []store.KeyRecord
		for _, bk := range bks {
			recs = append(recs, bk.Keys...)
		}
		p.keys.Hold(recs)
		out = append(out, id)
	}
	return out
}

// tailCheck runs the restart check with the peer's bus connection and the
// managers' peer list (every other peer but removed ones).
type tailCheck struct {
	p     *Peer
	nc    *nats.Conn
	subj  bus.Subjects
	peers []fsm.PeerView
	log   *slog.Logger
}

func newTailCheck(p *Peer, nc *nats.Conn, subj bus.Subjects, list []fsm.PeerView) *tailCheck {
	tc := &tailCheck{p: p, nc: nc, subj: subj, log: p.log}
	for _, pv := range list {
		if pv.ID != p.cfg.ID && pv.State != fsm.StateRemoved {
			tc.peers = append(tc.peers, pv)
		}
	}
	return tc
}

// run checks the candidates and releases the held keys, forgetting those
// of the blocks it dropped.
func (tc *tailCheck) run(ctx context.Context, ids []string) {
	var dropped []store.KeyRecord
	defer func() { tc.p.keys.Release(dropped) }()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, tailCheckTimeout)
	defer cancel()
	held, youngest, err := tc.replicaLengths(ctx, ids)
	if err != nil {
		tc.log.Warn("restart: unreplicated blocks kept: which blocks the replicas hold is not known", "buckets", len(ids), "err", err)
		return
	}
	for _, id := range ids {
		created, err := tc.p.store.CopyCreated(id)
		if err != nil || youngest.born >= created.UnixNano() {
			// A peer whose disk is newer than the bucket may have lost a
			// copy of it with its old disk: what the replicas hold does
			// not say what was acknowledged.
			tc.log.Warn("restart: unreplicated blocks kept: a peer's data directory is newer than the bucket",
				"bucket", id, "peer", youngest.peer, "err", err)
			continue
		}
		dropped = append(dropped, tc.bucket(ctx, id, held[id])...)
	}
}

// peerBorn is a peer and when its identity (data directory) was created.
type peerBorn struct {
	peer string
	born int64
}

// bucket cuts one copy before the first block past the replicas' longest
// copy (held) that holds events another origin stored too, and returns
// the key records of the blocks it dropped.
func (tc *tailCheck) bucket(ctx context.Context, id string, held int) []store.KeyRecord {
	st := tc.p.store
	n, _, ok := st.Replicas().Blocks(id)
	if !ok || held >= n {
		return nil
	}
	tail, err := st.BlockKeys(id, held)
	if err != nil {
		tc.log.Warn("restart: unreplicated blocks kept: their keys cannot be read", "bucket", id, "from", held, "err", err)
		return nil
	}
	cut := firstRetried(tail, tc.resolver(ctx))
	if cut < 0 {
		return nil
	}
	var (
		recs   []store.KeyRecord
		keys   = map[string]bool{}
		events uint32
	)
	for _, bk := range tail {
		if bk.Block < cut {
			continue
		}
		events += bk.Events
		for _, r := range bk.Keys {
			recs = append(recs, r)
			keys[hex.EncodeToString(r.Token[:])+"/"+r.Key] = true
		}
	}
	if err := st.Repairs().Truncate(id, cut); err != nil {
		// The cut may still be finished at the next open (pending_truncate):
		// the keys of those blocks are forgotten all the same, so this peer
		// never answers for them (a retry may then be stored again, never
		// lost).
		tc.log.Error("restart: could not drop the unacknowledged blocks of a retried request", "bucket", id, "cut", cut, "err", err)
		return recs
	}
	tc.p.droppedBlocks.Add(int64(n - cut))
	tc.log.Warn("restart: dropped unacknowledged blocks whose retried request another peer stored",
		"bucket", id, "blocks", n-cut, "from_block", cut, "replicated_blocks", held, "keys", len(keys), "events", events)
	return recs
}

// firstRetried is the first block of tail (in order) holding a key record
// that retried reports stored by another origin; -1 when none is, or when
// a key could not be decided before one is found (the blocks from there on
// are kept).
func firstRetried(tail []store.BlockKeys, retried func(store.KeyRecord) (dup, decided bool)) int {
	for _, bk := range tail {
		for _, r := range bk.Keys {
			dup, decided := retried(r)
			if !decided {
				return -1
			}
			if dup {
				return bk.Block
			}
		}
	}
	return -1
}

// retriedElsewhere decides one record from the peers' answers about its
// key: dup when a peer holds events of the same request, some of the
// record's ordinals among them, in blocks of an origin other than self;
// pending when none does and a peer is storing the key now.
func retriedElsewhere(r store.KeyRecord, self string, answers []api.KeyAnswer) (dup, pending bool) {
	body := hex.EncodeToString(r.BodyHash[:])
	span := idem.Span{First: r.First, Count: r.Count}
	for _, a := range answers {
		if !a.Known || a.BodyHash != body {
			continue
		}
		if a.Pending {
			pending = true
			continue
		}
		if a.OriginsV < api.KeyOriginsVersion || !slices.ContainsFunc(a.Origins, func(o string) bool { return o != self }) {
			continue
		}
		var spans []idem.Span
		for _, s := range a.Spans {
			spans = append(spans, idem.Span{First: s[0], Count: s[1]})
		}
		if idem.Overlaps(spans, span) {
			return true, false
		}
	}
	return false, pending
}

// resolver decides records by asking the other peers about their keys,
// each key once (answers of a key being stored are asked again until they
// settle or ctx ends).
func (tc *tailCheck) resolver(ctx context.Context) func(store.KeyRecord) (bool, bool) {
	seen := map[string]*[]api.KeyAnswer{}
	return func(r store.KeyRecord) (bool, bool) {
		id := hex.EncodeToString(r.Token[:]) + "/" + r.Key
		for {
			answers, ok := seen[id]
			if !ok {
				a := tc.askKey(ctx, r)
				answers = &a
				seen[id] = answers
			}
			dup, pending := retriedElsewhere(r, tc.p.guid, *answers)
			if !pending || dup {
				return dup, true
			}
			delete(seen, id)
			select {
			case <-ctx.Done():
				tc.log.Warn("restart: a peer is still storing a key of an unreplicated block; kept from there", "key", r.Key, "err", ctx.Err())
				return false, false
			case <-time.After(tailPendingPause):
			}
		}
	}
}

// askKey asks every other peer about r's key at once; a peer that does not
// answer says nothing.
func (tc *tailCheck) askKey(ctx context.Context, r store.KeyRecord) []api.KeyAnswer {
	req := api.KeyLookup{V: api.WireVersion, Token: hex.EncodeToString(r.Token[:]), Key: r.Key}
	var (
		mu  sync.Mutex
		out []api.KeyAnswer
		wg  sync.WaitGroup
	)
	for _, pv := range tc.peers {
		subject, err := tc.subj.Idem(pv.Site, pv.ID, tc.p.cfg.ID)
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, tailAskTimeout)
			defer cancel()
			a, err := bus.Request[api.KeyLookup, api.KeyAnswer](rctx, tc.nc, subject, req)
			if err == nil {
				err = a.Validate()
			}
			if err != nil {
				return
			}
			mu.Lock()
			out = append(out, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// replicaLengths asks every other peer how many blocks of each bucket it
// holds, twice (a copy moving from one peer to another between two answers
// is found by the second round), and returns the longest per bucket and
// the peer whose identity is the youngest. Every peer must answer every
// time: one that cannot be asked may hold the blocks (ErrTailUnknown).
func (tc *tailCheck) replicaLengths(ctx context.Context, ids []string) (map[string]int, peerBorn, error) {
	longest := map[string]int{}
	var youngest peerBorn
	for round := 0; round < 2; round++ {
		var (
			mu   sync.Mutex
			errs []error
			wg   sync.WaitGroup
		)
		for _, pv := range tc.peers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, born, err := tc.lengthsOn(ctx, pv, ids)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("peer %s (%s): %w", pv.ID, pv.State, err))
					return
				}
				for id, n := range got {
					longest[id] = max(longest[id], n)
				}
				if born > youngest.born {
					youngest = peerBorn{peer: pv.ID, born: born}
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			return nil, peerBorn{}, fmt.Errorf("%w: %w", ErrTailUnknown, errors.Join(errs...))
		}
	}
	return longest, youngest, nil
}

// lengthsOn asks one peer for its copy's length of each bucket (0 when it
// holds none) and when its identity was created. A corrupt copy there may
// hold blocks it cannot tell; a peer that does not say when it was born
// (older than the question) cannot be judged.
func (tc *tailCheck) lengthsOn(ctx context.Context, pv fsm.PeerView, ids []string) (map[string]int, int64, error) {
	subject, err := tc.subj.Repl(pv.Site, pv.ID, tc.p.cfg.ID)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]int{}
	var born int64
	for _, id := range ids {
		index, _, _, _ := fsmParse(id)
		rctx, cancel := context.WithTimeout(ctx, tailAskTimeout)
		rep, err := bus.Request[repl.Request, repl.Reply](rctx, tc.nc, subject, repl.Request{V: repl.Version, Op: repl.OpLength,
			Bucket: id, Index: index, Origin: tc.p.cfg.ID})
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if rep.State == string(store.StateCorrupt) {
			return nil, 0, fmt.Errorf("its copy of %s is corrupt", id)
		}
		if rep.Born <= 0 {
			return nil, 0, errors.New("it does not say when its data directory was created (an older peer)")
		}
		out[id], born = int(rep.Blocks), rep.Born
	}
	return out, born, nil
}
