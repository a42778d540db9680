package peer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/idem"
	"github.com/quarry-dev/quarry/peer/store"
)

// Idempotency keys across the cluster (DESIGN.md "Idempotent retries"):
// this peer's key index is fed by its own requests (peer/hec), by the key
// records of the blocks it receives as a replica (store.Options.KeysLearned)
// and, at start, by the key records of every copy it holds (loadKeys); it
// answers other peers' lookups on <p>.idem.<site>.<peer>.* and asks them
// (keyPeers) about a key it does not hold.

// newKeyIndex builds the peer's key index with its window; guid is the
// origin it records for the requests it stores.
func newKeyIndex(cfg Config, guid string) *idem.Index {
	return idem.New(idem.Config{Window: cfg.IdempotencyWindow, Self: guid, DenialHold: cfg.KeyDenialHold})
}

// loadKeys rebuilds the key index from the key records of every copy on
// this peer within the window, oldest first (so the caps keep the newest).
func loadKeys(st *store.Store, keys *idem.Index) int {
	var recs []store.KeyRecord
	st.Keys().KeyRecords(time.Now().Add(-keys.Window()), func(r store.KeyRecord) { recs = append(recs, r) })
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Arrival < recs[j].Arrival })
	keys.Learn(recs)
	return len(recs)
}

// serveKeys subscribes this peer's key lookups: under its site, and under
// the default site too, since a single-site cluster lists every peer under
// it (as replication does, cluster.go).
func (p *Peer) serveKeys(nc *nats.Conn, subj bus.Subjects) ([]*bus.Service, error) {
	sites := []string{p.site()}
	if p.site() != fsm.DefaultSite {
		sites = append(sites, fsm.DefaultSite)
	}
	var out []*bus.Service
	for _, site := range sites {
		subject, err := subj.IdemTo(site, p.cfg.ID)
		if err == nil {
			var svc *bus.Service
			if svc, err = bus.Serve(nc, subject, bus.ServeOptions{MaxConcurrent: 16, Logger: p.log}, p.answerKey); err == nil {
				out = append(out, svc)
				continue
			}
		}
		for _, svc := range out {
			svc.Stop(context.Background())
		}
		return nil, err
	}
	return out, nil
}

// answerKey answers one lookup from this peer's key index.
func (p *Peer) answerKey(ctx context.Context, l api.KeyLookup) (api.KeyAnswer, error) {
	if err := l.Validate(); err != nil {
		return api.KeyAnswer{}, err
	}
	if !store.ValidKey(l.Key) {
		return api.KeyAnswer{}, bus.Errorf(api.CodeBadRequest, "key lookup: key %q is not printable ASCII", l.Key)
	}
	var tok [32]byte
	hex.Decode(tok[:], []byte(l.Token)) // checked by Validate
	e, ok := p.keys.LookupFrom(tok, l.Key, bus.SubjectSender(bus.RequestSubject(ctx)))
	if !ok {
		return api.KeyAnswer{V: api.WireVersion}, nil
	}
	a := api.KeyAnswer{V: api.WireVersion, Known: true, BodyHash: hex.EncodeToString(e.BodyHash[:]), Total: e.Total, Pending: e.Pending,
		OriginsV: api.KeyOriginsVersion, Origins: e.Origins}
	for _, s := range e.Spans {
		a.Spans = append(a.Spans, [2]uint32{s.First, s.Count})
	}
	return a, nil
}

// keyPeers asks the cluster's other live peers about a key (hec.KeyPeers).
type keyPeers struct {
	p    *Peer
	nc   *nats.Conn
	subj bus.Subjects
}

// downLookupWait bounds the question to a peer the managers count Down: a
// dead one answers "no responders" at once, a restarted origin that has
// not registered yet answers in milliseconds (it holds the keys of the
// blocks it may drop, idemrestart.go), and a paused one costs this much.
const downLookupWait = 250 * time.Millisecond

// LookupKey asks every other live peer at once, each request bounded by
// ctx; a peer that does not serve the subject (gone) is skipped at once.
// Peers the managers count Down are asked too, for at most downLookupWait,
// and their silence is no error. The answers merge: any other body is a
// mismatch, any pending is pending, the spans add up. An error says some
// live peer did not answer; the merged answers of the others come with it.
func (k *keyPeers) LookupKey(ctx context.Context, tok [32]byte, key string, body [32]byte) (hec.RemoteKey, error) {
	live, down := k.p.cl.repl.lookupPeers(k.p.cfg.ID)
	req := api.KeyLookup{V: api.WireVersion, Token: hex.EncodeToString(tok[:]), Key: key}
	var (
		mu   sync.Mutex
		out  hec.RemoteKey
		errs []error
		wg   sync.WaitGroup
	)
	for i, pv := range append(live, down...) {
		subject, err := k.subj.Idem(pv.Site, pv.ID, k.p.cfg.ID)
		if err != nil {
			continue
		}
		isDown := i >= len(live)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx := ctx
			if isDown {
				var cancel context.CancelFunc
				rctx, cancel = context.WithTimeout(ctx, downLookupWait)
				defer cancel()
			}
			a, err := bus.Request[api.KeyLookup, api.KeyAnswer](rctx, k.nc, subject, req)
			if err == nil {
				err = a.Validate()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, bus.ErrNoResponders):
			case err != nil && isDown:
			case err != nil:
				errs = append(errs, fmt.Errorf("peer %s: %w", pv.ID, err))
			case a.Known && a.BodyHash != hex.EncodeToString(body[:]):
				out.Mismatch = true
			case a.Known:
				out.Pending = out.Pending || a.Pending
				for _, s := range a.Spans {
					out.Spans = append(out.Spans, idem.Span{First: s[0], Count: s[1]})
				}
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// lookupPeers lists, but me, the peers the managers last counted alive —
// Up, in detention (which still holds and serves its copies),
// decommissioning or restarting — and the others but removed ones (Down,
// pending, shut down). A peer of the second list is asked only briefly: a
// paused one would cost every keyed request the lookup timeout.
func (r *replicator) lookupPeers(me string) (live, others []fsm.PeerView) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pv := range r.peers {
		if pv.ID == me {
			continue
		}
		switch pv.State {
		case fsm.StateUp, fsm.StateDetention, fsm.StateDecommissioning, fsm.StateRestarting:
			live = append(live, pv)
		case fsm.StateRemoved:
		default:
			others = append(others, pv)
		}
	}
	return live, others
}
