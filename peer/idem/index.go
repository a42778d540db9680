// Package idem owns a peer's index of idempotency keys (HEC's
// Idempotency-Key header, peer/DESIGN.md "Idempotent retries"): per HEC
// token (by its digest, never its secret), which keys were used within the
// window, with the hash of the body they came with and which of the
// request's events are stored. It is bounded (keys per token and in all)
// and forgets keys past the window. It is fed by the requests this peer
// stores (Begin, Claim.Commit) and by the key records of the blocks its
// copies hold (Learn: replica appends as they land, every copy's journal
// at start); it answers other peers' questions (Lookup). It does no I/O.
package idem

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quarry-dev/quarry/peer/store"
)

// Defaults of Config.
const (
	DefaultWindow      = 24 * time.Hour
	DefaultMaxPerToken = 100_000
	DefaultMaxKeys     = 250_000
)

// Config bounds an Index.
type Config struct {
	// Window: a key used longer ago than this (by its arrival at the peer
	// that first stored it) is forgotten; a request carrying it again is
	// stored again (default 24 h).
	Window time.Duration
	// MaxPerToken and MaxKeys cap the keys kept for one token and in all
	// (defaults 100,000 and 250,000); past a cap the oldest key (of that
	// token, or of any) is forgotten first.
	MaxPerToken int
	MaxKeys     int
	Now         func() time.Time
	// DenialHold: how long a lookup answered unknown (or a request this
	// peer took a claim for) keeps a replica append of that key from
	// another origin out (arrive.go; default DefaultDenialHold).
	DenialHold time.Duration
	// Self is this peer's GUID: the origin recorded for the requests it
	// stores itself (Claim.Commit), as the bucket's origin GUID is for the
	// records it learns (store.KeyRecord.Origin).
	Self string
}

// Span is a run of a request's event ordinals: [First, First+Count).
type Span struct{ First, Count uint32 }

// Kind is what Begin found.
type Kind int

// What Begin finds.
const (
	// Unknown: the key is not known here; the caller holds a Claim.
	Unknown Kind = iota
	// Known: every event of the request is stored (Found.Ack is the
	// original's durability, nil when learned from a copy's blocks).
	Known
	// Mismatch: the key was used with another body.
	Mismatch
	// Busy: a request with this key is being stored on this peer now;
	// wait for Found.Wait, then Begin again.
	Busy
	// Partial: some of the request's events are stored (Found.Spans); the
	// caller holds a Claim and stores only the others.
	Partial
)

// Found is Begin's answer.
type Found struct {
	Kind  Kind
	Ack   *store.Ack
	Spans []Span
	Total uint32
	Wait  <-chan struct{}
}

// Index is the key index. Safe for concurrent use.
type Index struct {
	cfg    Config
	mu     sync.Mutex
	tokens map[[32]byte]*tokenKeys
	queue  fifo // every kept entry in the order it was added (≈ arrival)
	n      int  // kept entries
	// origins interns one-origin lists: most keys have one, shared here.
	origins map[string][]string
	// held are the entries Hold made pending until Release; holdDone is
	// closed by Release (a Begin that found a held key waits on it).
	held     []*entry
	holdDone chan struct{}
	// denied remembers recent unknown answers to other peers (arrive.go).
	denied denials

	// Evicted counts keys forgotten at a cap, Expired those forgotten
	// past the window (metrics).
	Evicted, Expired atomic.Int64
}

type tokenKeys struct {
	keys  map[string]*entry
	queue fifo
}

type entry struct {
	token   [32]byte
	key     string
	body    [32]byte
	arrival int64
	total   uint32
	spans   []Span     // stored ordinals, sorted, merged
	ack     *store.Ack // the request this peer stored; nil when learned from blocks
	claim   chan struct{}
	// origins: the origin GUIDs of the blocks here that hold events of
	// the key (at most MaxOrigins; often an interned list).
	origins []string
	queued  bool // in the queues (counted in n)
	dead    bool
	held    bool // pending until Release (Hold)
	// arriving counts replica appends writing blocks with the key now
	// (Arrive); arrived is closed when the last ends.
	arriving int
	arrived  chan struct{}
}

// fifo is a queue of entries with lazy removal (dead entries are skipped).
type fifo struct {
	q    []*entry
	head int
}

func (f *fifo) push(e *entry) { f.q = append(f.q, e) }

func (f *fifo) front() *entry {
	for f.head < len(f.q) && f.q[f.head].dead {
		f.pop()
	}
	if f.head == len(f.q) {
		return nil
	}
	return f.q[f.head]
}

func (f *fifo) pop() {
	f.q[f.head] = nil
	f.head++
	if f.head > 1024 && f.head*2 > len(f.q) {
		f.q = append(f.q[:0:0], f.q[f.head:]...)
		f.head = 0
	}
}

// New returns an empty index.
func New(cfg Config) *Index {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxPerToken <= 0 {
		cfg.MaxPerToken = DefaultMaxPerToken
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DenialHold <= 0 {
		cfg.DenialHold = DefaultDenialHold
	}
	return &Index{cfg: cfg, tokens: map[[32]byte]*tokenKeys{}, origins: map[string][]string{}}
}

// Window is the key window.
func (x *Index) Window() time.Duration { return x.cfg.Window }

// Len is the number of keys kept.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.n
}

// get returns the live entry of (token, key), forgetting it when it is past
// the window. x.mu held.
func (x *Index) get(tok [32]byte, key string) *entry {
	tk := x.tokens[tok]
	if tk == nil {
		return nil
	}
	e := tk.keys[key]
	if e != nil && e.claim == nil && x.expired(e) {
		x.kill(e)
		x.Expired.Add(1)
		return nil
	}
	return e
}

func (x *Index) expired(e *entry) bool {
	return e.arrival < x.cfg.Now().Add(-x.cfg.Window).UnixNano()
}

// kill forgets an entry. x.mu held.
func (x *Index) kill(e *entry) {
	if e.dead {
		return
	}
	e.dead = true
	if e.queued {
		x.n--
	}
	tk := x.tokens[e.token]
	if tk != nil && tk.keys[e.key] == e {
		delete(tk.keys, e.key)
		if len(tk.keys) == 0 {
			delete(x.tokens, e.token)
		}
	}
}

// insert adds a new entry to its token's map. x.mu held.
func (x *Index) insert(e *entry) {
	tk := x.tokens[e.token]
	if tk == nil {
		tk = &tokenKeys{keys: map[string]*entry{}}
		x.tokens[e.token] = tk
	}
	tk.keys[e.key] = e
}

// enqueue counts an entry in the queues and applies the window and the
// caps, oldest first. x.mu held.
func (x *Index) enqueue(e *entry) {
	if e.queued || e.dead {
		return
	}
	e.queued = true
	x.n++
	x.queue.push(e)
	tk := x.tokens[e.token]
	tk.queue.push(e)
	for f := x.queue.front(); f != nil && f != e && f.claim == nil && x.expired(f); f = x.queue.front() {
		x.kill(f)
		x.Expired.Add(1)
	}
	for len(tk.keys) > x.cfg.MaxPerToken {
		if !x.evictFront(&tk.queue) {
			break
		}
	}
	for x.n > x.cfg.MaxKeys {
		if !x.evictFront(&x.queue) {
			break
		}
	}
}

// evictFront forgets the oldest entry of a queue. x.mu held.
func (x *Index) evictFront(q *fifo) bool {
	f := q.front()
	if f == nil {
		return false
	}
	q.pop()
	x.kill(f)
	x.Evicted.Add(1)
	return true
}

// Begin looks a request's key up before it is stored. With Unknown or
// Partial the caller holds the returned Claim and must end it (Commit or
// Abort); meanwhile a second request with the same key finds Busy.
func (x *Index) Begin(tok [32]byte, key string, body [32]byte, total uint32, arrival time.Time) (Found, *Claim) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.get(tok, key)
	if e == nil {
		e = &entry{token: tok, key: key, body: body, arrival: arrival.UnixNano(), total: total, claim: make(chan struct{})}
		x.insert(e)
		x.denied.note(denialKey{tok, key}, selfAsker, x.cfg.Now(), x.cfg.DenialHold)
		return Found{Kind: Unknown, Total: total}, &Claim{x: x, e: e}
	}
	switch {
	case e.body != body:
		return Found{Kind: Mismatch}, nil
	case e.claim != nil:
		return Found{Kind: Busy, Wait: e.claim}, nil
	case e.held:
		return Found{Kind: Busy, Wait: x.holdDone}, nil
	case e.arriving > 0:
		return Found{Kind: Busy, Wait: e.arrived}, nil
	case covered(e.spans) >= int64(e.total):
		return Found{Kind: Known, Ack: e.ack, Total: e.total}, nil
	}
	e.claim = make(chan struct{})
	x.denied.note(denialKey{tok, key}, selfAsker, x.cfg.Now(), x.cfg.DenialHold)
	return Found{Kind: Partial, Spans: slices.Clone(e.spans), Total: e.total}, &Claim{x: x, e: e}
}

// Claim is the right to store a request's key: one request at a time.
type Claim struct {
	x    *Index
	e    *entry
	done bool
}

// Merge adds what another peer said it holds of the claimed request.
func (c *Claim) Merge(spans []Span) Found {
	c.x.mu.Lock()
	defer c.x.mu.Unlock()
	for _, s := range spans {
		c.e.spans = addSpan(c.e.spans, s)
	}
	k := Partial
	if covered(c.e.spans) >= int64(c.e.total) {
		k = Known
	} else if len(c.e.spans) == 0 {
		k = Unknown
	}
	return Found{Kind: k, Spans: slices.Clone(c.e.spans), Total: c.e.total, Ack: c.e.ack}
}

// Commit records that the claimed request's events (ordinals in stored)
// were appended with durability ack (nil: nothing appended here), and lets
// waiting requests in. A key stored here in parts keeps the durability of
// every part.
func (c *Claim) Commit(ack *store.Ack, stored []Span) {
	c.end(func(e *entry) {
		for _, s := range stored {
			e.spans = addSpan(e.spans, s)
		}
		if len(stored) > 0 && c.x.cfg.Self != "" {
			c.x.addOrigin(e, c.x.cfg.Self)
		}
		e.ack = e.ack.Join(ack)
	})
}

// Abort ends a claim that stored nothing: a key with nothing stored is
// forgotten, and waiting requests try again.
func (c *Claim) Abort() { c.end(nil) }

func (c *Claim) end(fn func(*entry)) {
	x := c.x
	x.mu.Lock()
	defer x.mu.Unlock()
	if c.done {
		return
	}
	c.done = true
	e := c.e
	if fn != nil {
		fn(e)
	}
	close(e.claim)
	e.claim = nil
	if len(e.spans) == 0 {
		if e.arriving == 0 { // else arrived decides once the append ends
			x.kill(e)
		}
		return
	}
	if e.dead { // forgotten at a cap while claimed: kept again
		e.dead, e.queued = false, false
		x.insert(e)
	}
	x.enqueue(e)
}

// Learn adds the key records of blocks held on this peer (durable here).
// Records past the window are ignored; a record whose body hash differs
// from the key's known one is ignored (the first body stays).
func (x *Index) Learn(recs []store.KeyRecord) {
	x.mu.Lock()
	defer x.mu.Unlock()
	floor := x.cfg.Now().Add(-x.cfg.Window).UnixNano()
	for i := range recs {
		r := &recs[i]
		e := x.recordEntry(r, floor)
		if e == nil {
			continue
		}
		e.spans = addSpan(e.spans, Span{First: r.First, Count: r.Count})
		if r.Origin != "" {
			x.addOrigin(e, r.Origin)
		}
		if e.claim == nil {
			x.enqueue(e)
		}
	}
}

// recordEntry is the entry a key record from a copy's blocks belongs to,
// made when the key is new; nil when the record arrived before floor (past
// the window) or the key is known with another body or total (the first
// stays). x.mu held.
func (x *Index) recordEntry(r *store.KeyRecord, floor int64) *entry {
	if r.Arrival < floor {
		return nil
	}
	e := x.get(r.Token, r.Key)
	if e == nil {
		e = &entry{token: r.Token, key: r.Key, body: r.BodyHash, arrival: r.Arrival, total: r.Total}
		x.insert(e)
	}
	if e.body != r.BodyHash || e.total != r.Total {
		return nil
	}
	return e
}

// MaxOrigins bounds the origins kept per key (api.MaxKeyOrigins): an asker
// only needs to know whether one is not its own.
const MaxOrigins = 4

// addOrigin notes that blocks of origin hold events of e's key. x.mu held.
func (x *Index) addOrigin(e *entry, origin string) {
	if slices.Contains(e.origins, origin) || len(e.origins) >= MaxOrigins {
		return
	}
	if len(e.origins) == 0 {
		one := x.origins[origin]
		if one == nil {
			one = []string{origin}
			x.origins[origin] = one
		}
		e.origins = one[:1:1] // shared: an append copies it
		return
	}
	out := append(e.origins[:len(e.origins):len(e.origins)], origin)
	slices.Sort(out)
	e.origins = out
}

// Hold makes the keys of recs pending until Release: Lookup answers them
// pending (another peer that takes a request with one of them answers 503
// and the client retries) and Begin waits. A restarted origin holds the
// keys of the blocks it may drop while it decides (peer/DESIGN.md
// "Idempotent retries"), so no other peer treats them as stored meanwhile.
func (x *Index) Hold(recs []store.KeyRecord) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range recs {
		e := x.get(recs[i].Token, recs[i].Key)
		if e == nil || e.held {
			continue
		}
		if x.holdDone == nil {
			x.holdDone = make(chan struct{})
		}
		e.held = true
		x.held = append(x.held, e)
	}
}

// Release ends Hold, first forgetting the events of dropped (records of
// blocks this peer no longer holds): their ordinals leave their keys'
// stored spans, and a key left with none is forgotten.
func (x *Index) Release(dropped []store.KeyRecord) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range dropped {
		r := &dropped[i]
		e := x.get(r.Token, r.Key)
		if e == nil || e.body != r.BodyHash || e.total != r.Total {
			continue
		}
		e.spans = removeSpan(e.spans, Span{First: r.First, Count: r.Count})
		if len(e.spans) == 0 && e.claim == nil && e.arriving == 0 {
			x.kill(e)
		}
	}
	for _, e := range x.held {
		e.held = false
	}
	x.held = nil
	if x.holdDone != nil {
		close(x.holdDone)
		x.holdDone = nil
	}
}

// Entry is what Lookup tells another peer of a key.
type Entry struct {
	BodyHash [32]byte
	Total    uint32
	Spans    []Span
	// Pending: events of the request are stored here but not yet durable
	// by the ack rule, or a request with the key is being stored here now,
	// or it is held (Hold).
	Pending bool
	// Origins: the origin GUIDs of the blocks here that hold the key's
	// events (this peer's own for a request it stored), sorted.
	Origins []string
}

// Lookup tells what this peer holds of a key (false when nothing).
func (x *Index) Lookup(tok [32]byte, key string) (Entry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lookupLocked(tok, key)
}

func (x *Index) lookupLocked(tok [32]byte, key string) (Entry, bool) {
	e := x.get(tok, key)
	if e == nil || (len(e.spans) == 0 && e.claim == nil && e.arriving == 0) {
		return Entry{}, false
	}
	return Entry{BodyHash: e.body, Total: e.total, Spans: slices.Clone(e.spans), Origins: slices.Clone(e.origins),
		Pending: e.claim != nil || e.held || e.arriving > 0 || (e.ack != nil && !e.ack.Durable())}, true
}

// covered is how many ordinals sorted, merged spans hold.
func covered(spans []Span) int64 {
	var n int64
	for _, s := range spans {
		n += int64(s.Count)
	}
	return n
}

// addSpan merges s into sorted, disjoint spans.
func addSpan(spans []Span, s Span) []Span {
	if s.Count == 0 {
		return spans
	}
	lo, hi := uint64(s.First), uint64(s.First)+uint64(s.Count)
	out := spans[:0:0]
	for _, t := range spans {
		tlo, thi := uint64(t.First), uint64(t.First)+uint64(t.Count)
		if thi < lo || tlo > hi {
			out = append(out, t)
			continue
		}
		lo, hi = min(lo, tlo), max(hi, thi)
	}
	out = append(out, Span{First: uint32(lo), Count: uint32(hi - lo)})
	slices.SortFunc(out, func(a, b Span) int { return int(int64(a.First) - int64(b.First)) })
	return out
}

// removeSpan takes s out of sorted, disjoint spans.
func removeSpan(spans []Span, s Span) []Span {
	if s.Count == 0 {
		return spans
	}
	lo, hi := uint64(s.First), uint64(s.First)+uint64(s.Count)
	out := spans[:0:0]
	for _, t := range spans {
		tlo, thi := uint64(t.First), uint64(t.First)+uint64(t.Count)
		if thi <= lo || tlo >= hi {
			out = append(out, t)
			continue
		}
		if tlo < lo {
			out = append(out, Span{First: t.First, Count: uint32(lo - tlo)})
		}
		if thi > hi {
			out = append(out, Span{First: uint32(hi), Count: uint32(thi - hi)})
		}
	}
	return out
}

// Overlaps reports whether sorted, disjoint spans hold any ordinal of s.
func Overlaps(spans []Span, s Span) bool {
	lo, hi := uint64(s.First), uint64(s.First)+uint64(s.Count)
	for _, t := range spans {
		if uint64(t.First) < hi && lo < uint64(t.First)+uint64(t.Count) {
			return true
		}
	}
	return false
}

// Missing lists the ordinals of [0, total) that spans do not hold.
func Missing(spans []Span, total uint32) []uint32 {
	var out []uint32
	next := uint32(0)
	for _, s := range spans {
		for o := next; o < s.First && o < total; o++ {
			out = append(out, o)
		}
		next = max(next, s.First+s.Count)
	}
	for o := next; o < total; o++ {
		out = append(out, o)
	}
	return out
}

// SpansOf is the spans of sorted ordinals.
func SpansOf(ords []uint32) []Span {
	var out []Span
	for _, o := range ords {
		if n := len(out); n > 0 && out[n-1].First+out[n-1].Count == o {
			out[n-1].Count++
			continue
		}
		out = append(out, Span{First: o, Count: 1})
	}
	return out
}
