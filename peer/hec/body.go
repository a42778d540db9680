package hec

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
)

// Memory a request costs (SPEC §11): every body buffer, gzip reader and
// event decoder a request holds is reserved from one byte budget shared by
// all requests (Config.MaxInFlightBytes) before it is allocated, and given
// back when the request lets go of it — for /raw and /event that is when
// the store has indexed the events. A request that finds the budget spent
// waits up to BusyWait for room, then answers 503 code 9; one that could
// never fit (it alone needs more than its token's share, TokenShare of the
// budget) answers 413. Bytes are reserved as they arrive, never from a
// declared Content-Length alone.

// sizeClasses are the pooled buffer sizes a body is read into, smallest
// first; a body beyond the last of unknown length is read in chunks of that
// size and then copied whole into a buffer of its exact length (not
// pooled); one of known length is read into its exact buffer (readKnown).
var sizeClasses = [...]int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}

const (
	lastClass = len(sizeClasses) - 1
	// gzipReaderBytes is what a pooled gzip reader holds (its window and
	// tables, about 40 KiB), reserved while a request inflates.
	gzipReaderBytes = 64 << 10
)

// budget is a byte budget shared by concurrent requests.
type budget struct {
	max     int64
	used    atomic.Int64
	waiters atomic.Int32
	mu      sync.Mutex
	wake    chan struct{} // closed (and replaced) by a release while someone waits
}

func newBudget(max int64) *budget {
	return &budget{max: max, wake: make(chan struct{})}
}

// tryTake takes n bytes if they are free, and within share of what tok
// (a token's bytes in flight; nil: no share) may hold.
func (b *budget) tryTake(n int64, tok *atomic.Int64, share int64) bool {
	if tok != nil && !addUpTo(tok, n, share) {
		return false
	}
	if !addUpTo(&b.used, n, b.max) {
		if tok != nil {
			tok.Add(-n)
		}
		return false
	}
	return true
}

// addUpTo adds n to v unless v would then pass max.
func addUpTo(v *atomic.Int64, n, max int64) bool {
	for {
		u := v.Load()
		if u+n > max {
			return false
		}
		if v.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// take takes n bytes, waiting until ctx ends for them to be released.
func (b *budget) take(ctx context.Context, n int64, tok *atomic.Int64, share int64) bool {
	for {
		if b.tryTake(n, tok, share) {
			return true
		}
		b.mu.Lock()
		b.waiters.Add(1)
		ch := b.wake
		b.mu.Unlock()
		if b.tryTake(n, tok, share) { // released before we registered
			b.waiters.Add(-1)
			return true
		}
		select {
		case <-ch:
			b.waiters.Add(-1)
		case <-ctx.Done():
			b.waiters.Add(-1)
			return false
		}
	}
}

// release gives n bytes back and wakes the requests waiting for room.
func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.used.Add(-n)
	if b.waiters.Load() > 0 {
		b.mu.Lock()
		close(b.wake)
		b.wake = make(chan struct{})
		b.mu.Unlock()
	}
}

// InFlightBytes reports the bytes of the in-flight budget requests hold
// now (bodies, gzip readers, decoders).
func (h *Handler) InFlightBytes() int64 { return h.budget.used.Load() }

// reservation is what one holder (a body, a decoder) holds of the budget
// for a request.
type reservation struct {
	h    *Handler
	wait *waitBound
	held int64
}

// waitBound is what the holders of one request share: its waits for room
// are bounded once — BusyWait from its first wait, and the request's own
// context — and total is what they hold together.
type waitBound struct {
	parent   context.Context
	deadline time.Time // zero until the first wait
	total    atomic.Int64
	// tok is what the request's token holds of the budget over all its
	// requests (nil: not counted); it may hold at most share
	// (MaxInFlightBytes × TokenShare), so one token cannot take it all.
	tok   *atomic.Int64
	share int64
}

func newReservation(h *Handler, ctx context.Context, tok *atomic.Int64) *reservation {
	share := h.budget.max
	if tok != nil {
		share = int64(float64(h.budget.max) * h.cfg.TokenShare)
	}
	return &reservation{h: h, wait: &waitBound{parent: ctx, tok: tok, share: share}}
}

// sibling is another holder of the same request, with the same bound on
// waiting.
func (rv *reservation) sibling() *reservation { return &reservation{h: rv.h, wait: rv.wait} }

// take reserves n more bytes, or answers why not: 413 when the request
// would then hold more than its token's share of the budget (it could
// never fit), 503 code 9 when there was no room within the wait.
func (rv *reservation) take(n int64) *Reply {
	b := rv.h.budget
	w := rv.wait
	if w.total.Load()+n > w.share {
		rp := plain(replyTooLarge)
		return &rp
	}
	if !b.tryTake(n, w.tok, w.share) {
		if rv.wait.deadline.IsZero() {
			rv.wait.deadline = time.Now().Add(rv.h.cfg.BusyWait)
		}
		ctx, cancel := context.WithDeadline(rv.wait.parent, rv.wait.deadline)
		start := time.Now()
		ok := rv.h.cfg.BusyWait > 0 && b.take(ctx, n, w.tok, w.share)
		cancel()
		rv.h.busyWait.Add(time.Since(start).Seconds())
		if !ok {
			rv.h.budgetBusy.Inc()
			rp := plain(replyBusy)
			return &rp
		}
	}
	rv.held += n
	rv.wait.total.Add(n)
	return nil
}

// give returns n of the held bytes.
func (rv *reservation) give(n int64) {
	rv.held -= n
	rv.wait.total.Add(-n)
	if rv.wait.tok != nil {
		rv.wait.tok.Add(-n)
	}
	rv.h.budget.release(n)
}

// releaseAll returns everything the request still holds.
func (rv *reservation) releaseAll() { rv.give(rv.held) }

// pooledBuf is a buffer of one size class, pooled by pointer so that
// putting it back allocates nothing.
type pooledBuf struct {
	b     []byte
	class int
}

func (h *Handler) getBuf(class int) *pooledBuf {
	if pb, _ := h.bufs[class].Get().(*pooledBuf); pb != nil {
		pb.b = pb.b[:0]
		return pb
	}
	return &pooledBuf{b: make([]byte, 0, sizeClasses[class]), class: class}
}

// putBuf pools a buffer again; only size-class buffers are pooled, so the
// pools never hold a buffer larger than the last class, and never more of
// them than were in flight at once (each was reserved from the budget).
func (h *Handler) putBuf(pb *pooledBuf) {
	if pb == nil || cap(pb.b) != sizeClasses[pb.class] {
		return
	}
	h.bufs[pb.class].Put(pb)
}

func classFor(n int64) int {
	for c, sz := range sizeClasses {
		if n <= int64(sz) {
			return c
		}
	}
	return lastClass
}

// body is a request body read whole under the limits.
type body struct {
	data []byte
	pb   *pooledBuf // data's pooled buffer, nil when data has its own
	rv   *reservation
	// more is called before each next size class or MiB of the body is
	// read: it moves the connection's read deadline BodyReadPerMiB ahead,
	// so a body that stops arriving gives its reservation back within
	// BodyReadPerMiB rather than the server's 5-minute ReadTimeout.
	more func()
}

// release gives the body's buffer back to its pool and its bytes (and
// anything else the request reserved) back to the budget.
func (b *body) release() {
	b.rv.h.putBuf(b.pb)
	b.pb, b.data = nil, nil
	b.rv.releaseAll()
}

// readBody reads a bounded body under the in-flight budget; a gzip body
// (Content-Encoding: gzip, as Splunk's HEC accepts) is inflated, and
// MaxBodyBytes applies to the inflated bytes. A body is reserved as its
// buffer grows — from the size class of its declared length up to 1 MiB,
// then 1 MiB at a time — never from its declared Content-Length alone: a
// client that declares 16 MiB and then goes silent holds one class of the
// budget, not 16 MiB of it (review 2026-12-06 M2: four such connections
// took a 64 MiB budget and every tenant got 503 for up to 5 minutes). A
// gzip bomb holds no more than it inflated before it was refused, and all
// of them together no more than the budget. A body that declares more than
// the whole budget gets 413 before anything is read.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, t *tokenState, max int64) (*body, *Reply) {
	if r.ContentLength > max {
		rp := plain(replyTooLarge)
		return nil, &rp
	}
	rc := http.NewResponseController(w)
	b := &body{rv: newReservation(h, r.Context(), &t.inflight), more: func() {
		_ = rc.SetReadDeadline(time.Now().Add(h.cfg.BodyReadPerMiB)) // unsupported: the server's ReadTimeout stays
	}}
	if !strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		return h.readFrom(b, r.Body, r.ContentLength, max)
	}
	if rp := b.rv.take(gzipReaderBytes); rp != nil {
		return nil, rp
	}
	zr, err := h.gzipReader(r.Body)
	if err != nil {
		b.rv.releaseAll()
		rp := plain(replyInvalidFormat)
		return nil, &rp
	}
	b, rp := h.readFrom(b, zr, -1, max) // a refused body has released everything
	h.gzips.Put(zr)
	if rp == nil {
		b.rv.give(gzipReaderBytes)
	}
	return b, rp
}

// readFrom reads src (known bytes long, -1 when unknown; at most max) into b.
func (h *Handler) readFrom(b *body, src io.Reader, known, max int64) (*body, *Reply) {
	fail := func(rp Reply) (*body, *Reply) {
		b.release()
		return nil, &rp
	}
	src = io.LimitReader(src, max+1)
	hint := int64(sizeClasses[0])
	switch {
	case known > int64(sizeClasses[lastClass]):
		if b.rv.wait.total.Load()+known > b.rv.wait.share {
			return fail(plain(replyTooLarge)) // could never fit
		}
		hint = int64(sizeClasses[lastClass]) // then chunk by chunk as it arrives
	case known >= 0:
		hint = known + 1 // room to read the end of the body
	}
	class := classFor(hint)
	b.more()
	if rp := b.rv.take(int64(sizeClasses[class])); rp != nil {
		return fail(*rp)
	}
	b.pb = h.getBuf(class)
	for {
		buf := b.pb.b
		if len(buf) == cap(buf) {
			if class == lastClass {
				if known > int64(len(buf)) {
					return h.readKnown(b, src, known)
				}
				return h.readChunks(b, src, max)
			}
			// the next class: reserve it, copy, give the smaller one back
			b.more()
			if rp := b.rv.take(int64(sizeClasses[class+1])); rp != nil {
				return fail(*rp)
			}
			nb := h.getBuf(class + 1)
			nb.b = append(nb.b, buf...)
			h.putBuf(b.pb)
			b.rv.give(int64(sizeClasses[class]))
			b.pb, class = nb, class+1
			continue
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		b.pb.b = buf[:len(buf)+n]
		if int64(len(b.pb.b)) > max {
			return fail(plain(replyTooLarge))
		}
		if err == io.EOF {
			b.data = b.pb.b
			return b, nil
		}
		if err != nil {
			return fail(plain(replyInvalidFormat))
		}
	}
}

// readKnown goes on reading a body of known length n that filled the last
// size class: into one buffer of exactly n bytes, allocated only now that
// a whole class has arrived, each next class of it reserved before it is
// read — so what the body holds of the budget follows the bytes that
// arrived (plus one class), never the length it declared; no final copy.
func (h *Handler) readKnown(b *body, src io.Reader, n int64) (*body, *Reply) {
	step := int64(sizeClasses[lastClass])
	data := make([]byte, len(b.pb.b), n)
	copy(data, b.pb.b)
	h.putBuf(b.pb)
	b.pb = nil
	for int64(len(data)) < n {
		k := min(step, n-int64(len(data)))
		b.more()
		if rp := b.rv.take(k); rp != nil {
			b.release()
			return nil, rp
		}
		m, err := io.ReadFull(src, data[len(data):len(data)+int(k)])
		data = data[:len(data)+m]
		if err != nil {
			b.release()
			rp := plain(replyInvalidFormat)
			return nil, &rp
		}
	}
	b.data = data
	return b, nil
}

// readChunks goes on reading a body that filled the last size class, in
// chunks of that size, each reserved before it is taken; once the body has
// ended it is copied into one buffer of its exact length (reserved too) and
// the chunks go back to their pool.
func (h *Handler) readChunks(b *body, src io.Reader, max int64) (*body, *Reply) {
	step := int64(sizeClasses[lastClass])
	chunks := []*pooledBuf{b.pb}
	b.pb = nil
	total := int64(len(chunks[0].b))
	drop := func() {
		for _, c := range chunks {
			h.putBuf(c)
		}
		b.rv.give(step * int64(len(chunks)))
		chunks = nil
	}
	fail := func(rp Reply) (*body, *Reply) {
		drop()
		b.release()
		return nil, &rp
	}
	for {
		cur := chunks[len(chunks)-1]
		if len(cur.b) == cap(cur.b) {
			b.more()
			if rp := b.rv.take(step); rp != nil {
				return fail(*rp)
			}
			cur = h.getBuf(lastClass)
			chunks = append(chunks, cur)
		}
		n, err := src.Read(cur.b[len(cur.b):cap(cur.b)])
		cur.b = cur.b[:len(cur.b)+n]
		total += int64(n)
		if total > max {
			return fail(plain(replyTooLarge))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(plain(replyInvalidFormat))
		}
	}
	if rp := b.rv.take(total); rp != nil {
		return fail(*rp)
	}
	b.data = make([]byte, 0, total)
	for _, c := range chunks {
		b.data = append(b.data, c.b...)
	}
	drop()
	return b, nil
}

// gzipReader is a pooled gzip reader reset onto r.
func (h *Handler) gzipReader(r io.Reader) (*gzip.Reader, error) {
	if zr, _ := h.gzips.Get().(*gzip.Reader); zr != nil {
		if err := zr.Reset(r); err != nil {
			h.gzips.Put(zr)
			return nil, err
		}
		return zr, nil
	}
	return gzip.NewReader(r)
}
