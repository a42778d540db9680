package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/quarry-dev/quarry/peer/store"
)

// A replica's blocks race a retry's lookup (peer/DESIGN.md "Idempotent
// retries", "Blocks in flight"). An origin killed while its blocks travel
// to a replica leaves them in flight: the client's retry reaches another
// peer B, whose lookup can reach the replica before the blocks do, find
// nothing, and store the request; then the blocks land, the replica holds
// them, the restarted origin's check finds its tail held elsewhere and
// keeps it — the request is stored twice. Two rules close the race:
//
//   - Arrive marks a replica append's keys pending from before its write
//     until after it is learned (Learn): a lookup meanwhile answers
//     pending (B answers 503 and the client retries), never unknown.
//   - A lookup answered unknown to a peer, or a claim this peer takes to
//     store a request itself, is remembered for Config.DenialHold;
//     a replica append from another origin that carries that key within
//     the hold is refused (ErrRecentlyDenied) and nothing is written. A
//     dead origin's blocks then never land, so its restart check (no
//     replica holds the tail) cuts them; a live origin resends after its
//     usual 200 ms pause and the append is taken once the hold is over.
//
// The hold is short: it only has to outlast a message already on its way
// when the lookup was answered. A block that arrives later than that (a
// paused origin) is taken, and the request stays stored twice, as
// DESIGN.md's limits say.

// DefaultDenialHold is how long a lookup answered unknown keeps a replica
// append of that key from another origin out (Config.DenialHold). It is
// below the replication target_timeout (2 s), so a live origin's resend is
// taken before it would report the replica failed.
const DefaultDenialHold = time.Second

// selfAsker is the asker noted when this peer itself takes a claim on a
// key it found unknown (Begin): it is storing the request, so a replica
// append of that key from another origin is the same race.
const selfAsker = "\x00self"

// maxDenials bounds the remembered denials; past it the oldest is
// forgotten (a forgotten denial lets its key's append in, as before).
const maxDenials = 65536

// ErrRecentlyDenied: a replica append carries a key this peer answered
// unknown to another peer's lookup, or claimed itself, within
// Config.DenialHold.
var ErrRecentlyDenied = errors.New("a key of the append was answered unknown to another peer just now")

type denialKey struct {
	token [32]byte
	key   string
}

type denial struct {
	asker string
	at    time.Time
}

// denials is Index's memory of recent unknown answers. Index.mu guards it.
type denials struct {
	m map[denialKey]denial
	q []queuedDenial // in answer order
}

type queuedDenial struct {
	k  denialKey
	at time.Time
}

// note remembers that key was answered unknown to asker at now.
func (d *denials) note(k denialKey, asker string, now time.Time, hold time.Duration) {
	if d.m == nil {
		d.m = map[denialKey]denial{}
	}
	d.prune(now, hold)
	for len(d.m) >= maxDenials && len(d.q) > 0 {
		d.pop()
	}
	d.m[k] = denial{asker: asker, at: now}
	d.q = append(d.q, queuedDenial{k, now})
}

// prune forgets the denials older than hold.
func (d *denials) prune(now time.Time, hold time.Duration) {
	for len(d.q) > 0 && now.Sub(d.q[0].at) >= hold {
		d.pop()
	}
}

// pop forgets the oldest queued denial, unless the key was answered
// unknown again since (its map entry is newer than this slot).
func (d *denials) pop() {
	h := d.q[0]
	if v, ok := d.m[h.k]; ok && v.at.Equal(h.at) {
		delete(d.m, h.k)
	}
	d.q[0] = queuedDenial{}
	d.q = d.q[1:]
	if len(d.q) == 0 {
		d.q = nil
	}
}

// LookupFrom is Lookup for another peer's question: an unknown answer is
// remembered for Config.DenialHold with the asker (a peer id), under the
// same lock as the lookup, so no Arrive slips in between the answer and
// its record.
func (x *Index) LookupFrom(tok [32]byte, key, asker string) (Entry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.lookupLocked(tok, key)
	if !ok && asker != "" {
		x.denied.note(denialKey{tok, key}, asker, x.cfg.Now(), x.cfg.DenialHold)
	}
	return e, ok
}

// Arrive is called before a replica append from origin (the sending
// peer's id) writes blocks carrying recs. It refuses the append with
// ErrRecentlyDenied when a key of recs was answered unknown to a peer
// other than origin (or claimed by this peer) within Config.DenialHold;
// otherwise it marks every key of
// recs pending until the returned release is called (after Learn, or after
// a failed write).
func (x *Index) Arrive(origin string, recs []store.KeyRecord) (release func(), err error) {
	if len(recs) == 0 {
		return func() {}, nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.cfg.Now()
	x.denied.prune(now, x.cfg.DenialHold)
	for i := range recs {
		r := &recs[i]
		if d, ok := x.denied.m[denialKey{r.Token, r.Key}]; ok && d.asker != origin && now.Sub(d.at) < x.cfg.DenialHold {
			return nil, fmt.Errorf("%w: key %q (asked by %s %s ago)", ErrRecentlyDenied, r.Key, d.asker, now.Sub(d.at).Round(time.Millisecond))
		}
	}
	floor := now.Add(-x.cfg.Window).UnixNano()
	var marked []*entry
	for i := range recs {
		e := x.recordEntry(&recs[i], floor)
		if e == nil {
			continue
		}
		if e.arriving == 0 {
			e.arrived = make(chan struct{})
		}
		e.arriving++
		marked = append(marked, e)
	}
	return func() { x.arrived(marked) }, nil
}

// arrived ends Arrive's marks: a key left with nothing stored (the write
// failed) is forgotten again.
func (x *Index) arrived(marked []*entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, e := range marked {
		e.arriving--
		if e.arriving > 0 {
			continue
		}
		close(e.arrived)
		e.arrived = nil
		if len(e.spans) == 0 && e.claim == nil && !e.held {
			x.kill(e)
		}
	}
}
