package hec

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/peer/idem"
	"github.com/quarry-dev/quarry/peer/store"
)

// Idempotent retries (peer/DESIGN.md "Idempotent retries"): a request with
// an Idempotency-Key header whose key its token used within the key window
// is not stored again and is answered as a success; a key reused with
// another body is refused. Without the header nothing here runs.

// IdempotencyHeader is the IETF draft's header name.
const IdempotencyHeader = "Idempotency-Key"

// Codes of ours, beyond Splunk's table (0–23 are Splunk's or reserved for
// it): 24 a key reused with another body (HTTP 422, the IETF draft's
// status), 25 a malformed key (HTTP 400).
var (
	replyKeyReused  = Reply{Status: http.StatusUnprocessableEntity, Code: 24, Text: "Idempotency-Key reused with a different request", InvalidEvent: -1, AckID: -1}
	replyKeyInvalid = Reply{Status: http.StatusBadRequest, Code: 25, Text: "Invalid Idempotency-Key", InvalidEvent: -1, AckID: -1}
)

// ErrBadKey is returned by ParseIdempotencyKey.
var ErrBadKey = errors.New("invalid Idempotency-Key")

// ParseIdempotencyKey reads an Idempotency-Key header value: an RFC 8941
// sf-string ("…", with \" and \\ escapes) as the IETF draft specifies, or,
// as many clients send it, the bare key. The key is 1 to store.MaxKeyLen
// bytes of printable ASCII; anything else is ErrBadKey.
func ParseIdempotencyKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if !strings.HasPrefix(v, `"`) {
		if !store.ValidKey(v) {
			return "", fmt.Errorf("%w: want 1 to %d printable ASCII characters", ErrBadKey, store.MaxKeyLen)
		}
		return v, nil
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			if i+1 == len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", fmt.Errorf("%w: bad escape in a quoted key", ErrBadKey)
			}
			i++
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("%w: characters after the closing quote", ErrBadKey)
			}
			k := b.String()
			if !store.ValidKey(k) {
				return "", fmt.Errorf("%w: want 1 to %d printable ASCII characters", ErrBadKey, store.MaxKeyLen)
			}
			return k, nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: a non-printable character", ErrBadKey)
		default:
			b.WriteByte(c)
		}
		if b.Len() > store.MaxKeyLen {
			return "", fmt.Errorf("%w: longer than %d bytes", ErrBadKey, store.MaxKeyLen)
		}
	}
	return "", fmt.Errorf("%w: no closing quote", ErrBadKey)
}

// KeyPeers asks the cluster's other peers what they hold of a key (the
// peer's NATS lookup; nil on a standalone peer).
type KeyPeers interface {
	LookupKey(ctx context.Context, tok [32]byte, key string, body [32]byte) (RemoteKey, error)
}

// RemoteKey sums up the other peers' answers about a key.
type RemoteKey struct {
	// Mismatch: a peer holds the key with another body.
	Mismatch bool
	// Pending: a peer is storing the key now, or holds events of it not
	// yet durable by the ack rule.
	Pending bool
	// Spans: the request ordinals some peer holds.
	Spans []idem.Span
}

// keyedRequest is a request's key and the hash of what its events come from.
type keyedRequest struct {
	key  string
	body [32]byte
}

// requestKey reads the request's Idempotency-Key (nil without one).
func requestKey(r *http.Request) (*keyedRequest, *Reply) {
	vs := r.Header.Values(IdempotencyHeader)
	if len(vs) == 0 {
		return nil, nil
	}
	if len(vs) > 1 {
		rp := replyKeyInvalid
		return nil, &rp
	}
	k, err := ParseIdempotencyKey(vs[0])
	if err != nil {
		rp := replyKeyInvalid
		return nil, &rp
	}
	return &keyedRequest{key: k}, nil
}

// hashBody sets the request's body hash: SHA-256 of the endpoint, the query
// parameters that shape its events (index, host, source, sourcetype, time)
// and the body as decoded (inflated when gzip). The channel is left out: a
// retry may come on another channel, or to another peer.
func (k *keyedRequest) hashBody(endpoint string, q url.Values, body []byte) {
	h := sha256.New()
	h.Write([]byte(endpoint))
	for _, p := range []string{"index", "host", "source", "sourcetype", "time"} {
		fmt.Fprintf(h, "\x00%s=%q", p, q.Get(p))
	}
	h.Write([]byte{0})
	h.Write(body)
	h.Sum(k.body[:0])
}

// lookupTimeout bounds the question to the other peers.
const lookupTimeout = 2 * time.Second

// commitKeyed stores a keyed request's events unless the key is known:
// a known key is answered as the original was (an ack id on the caller's
// channel that turns true once the original events are durable), a key
// with another body gets 422, a key another request is storing on this
// peer waits for it; only the events no copy holds are stored.
func (h *Handler) commitKeyed(w http.ResponseWriter, r *http.Request, t *tokenState, chID string, evs []store.Event, release func(), k *keyedRequest) {
	var c *channel
	if t.Ack {
		var rp *Reply
		if c, rp = h.channel(t, chID); rp != nil {
			release()
			h.reply(w, *rp)
			return
		}
	}
	// A key's scope is the SHA-256 of the token's secret, computed here
	// from what the request presented — not the digest the managers sent,
	// which becomes keyed once (cluster version 10, fsm.SetTokenKey): a
	// retry that straddles that switch, or reaches a peer on the other side
	// of it, still finds its key (exactly once). The scope never leaves the
	// peers (their journals and the peer-only quarry.idem subjects).
	tok := sha256.Sum256([]byte(presentedToken(r)))
	total := uint32(len(evs))
	for {
		f, cl := h.cfg.Keys.Begin(tok, k.key, k.body, total, h.cfg.Now())
		switch f.Kind {
		case idem.Mismatch:
			release()
			h.reply(w, replyKeyReused)
			return
		case idem.Busy:
			select {
			case <-f.Wait:
				continue
			case <-r.Context().Done():
				release()
				return
			}
		case idem.Known:
			release()
			h.duplicate(w, r, c, f.Ack)
			return
		}
		if h.cfg.KeyPeers != nil {
			var rp *Reply
			if f, rp = h.askPeers(r.Context(), cl, tok, k); rp != nil {
				cl.Abort()
				release()
				h.reply(w, *rp)
				return
			}
			if f.Kind == idem.Known {
				cl.Commit(nil, nil) // held by other peers' copies, durable there
				release()
				h.duplicate(w, r, c, nil)
				return
			}
		}
		rk := &store.RequestKey{Token: tok, BodyHash: k.body, Key: k.key, Arrival: h.cfg.Now().UnixNano(), Total: total}
		if f.Kind == idem.Partial {
			rk.Ords = idem.Missing(f.Spans, total)
			kept := make([]store.Event, len(rk.Ords))
			for i, o := range rk.Ords {
				kept[i] = evs[o]
			}
			evs = kept
		}
		ack, ok := h.appendEvents(w, evs, release, rk)
		if !ok {
			cl.Abort()
			return
		}
		stored := idem.SpansOf(rk.Ords)
		if rk.Ords == nil {
			stored = []idem.Span{{First: 0, Count: total}}
		}
		cl.Commit(ack, stored)
		h.answer(w, r, c, ack)
		return
	}
}

// askPeers merges what the other peers hold of a claimed key; a reply
// when the request must be answered now (422, or 503 while another peer
// is storing the key).
func (h *Handler) askPeers(ctx context.Context, cl *idem.Claim, tok [32]byte, k *keyedRequest) (idem.Found, *Reply) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	rk, err := h.cfg.KeyPeers.LookupKey(ctx, tok, k.key, k.body)
	if err != nil {
		// No answer in time from some peer: stored here (DESIGN.md: a key
		// is recognised when a peer holding it answers within the timeout).
		h.cfg.Logger.Warn("idempotency key lookup incomplete; storing the request", "err", err)
	}
	switch {
	case rk.Mismatch:
		rp := replyKeyReused
		return idem.Found{}, &rp
	case rk.Pending:
		rp := plain(replyBusy)
		return idem.Found{}, &rp
	}
	return cl.Merge(rk.Spans), nil
}

// duplicate answers a request whose events are already stored: like the
// original, with ack the original's durability (nil: durable already).
func (h *Handler) duplicate(w http.ResponseWriter, r *http.Request, c *channel, ack *store.Ack) {
	h.duplicates.Inc()
	if ack == nil {
		ack = &store.Ack{} // no blocks to wait for: Durable at once
	}
	h.answer(w, r, c, ack)
}
