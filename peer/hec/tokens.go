package hec

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"maps"
	"slices"
	"strings"

	"github.com/quarry-dev/quarry/fsm"
)

// SetTokens replaces the tokens (a cluster peer gets new ones from the
// managers' config). A token that stays keeps its channels and unread acks;
// a removed token's are forgotten. When the cluster's token key first
// arrives, every token comes back as its keyed digest (Token.Key), which
// the peer cannot match to the unkeyed one it replaces without the secret:
// the unkeyed tokens' channels are kept aside (tokenSet.legacy) and the
// first request that presents the secret moves them to its keyed token
// (adopt), so a shipper's unread acks survive the switch. Idempotency keys
// are scoped by the presented secret's SHA-256 (commitKeyed), which the
// switch does not change.
func (h *Handler) SetTokens(tokens []Token) {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	cur := &tokenSet{}
	if p := h.tokens.Load(); p != nil {
		cur = p
	}
	next := &tokenSet{byKey: make(map[tokenKey]*tokenState, len(tokens))}
	for _, t := range tokens {
		k := tokenKeyOf(t.Value)
		st := &tokenState{Token: t}
		if o := cur.byKey[k]; o != nil {
			st.tokenChannels = o.tokenChannels
		} else {
			st.tokenChannels = &tokenChannels{channels: map[string]*channel{}}
		}
		next.byKey[k] = st
		if len(t.Key) > 0 && !slices.ContainsFunc(next.keys, func(k []byte) bool { return bytes.Equal(k, t.Key) }) {
			next.keys = append(next.keys, t.Key)
		}
	}
	if len(next.keys) > 0 {
		for k, lc := range cur.legacy {
			next.legacyPut(k, lc)
		}
		for k, o := range cur.byKey {
			if next.byKey[k] == nil && len(o.Key) == 0 && strings.HasPrefix(o.Value, fsm.TokenDigestPrefix) {
				next.legacyPut(k, o.tokenChannels)
			}
		}
	}
	h.tokens.Store(next)
}

// tokenSet is the tokens in force: by the sum their value or digest
// names, and the keys keyed digests among them are under (one in a
// cluster that has a token key, none before).
type tokenSet struct {
	byKey map[tokenKey]*tokenState
	keys  [][]byte
	// legacy are the channels of the tokens given by their unkeyed digest
	// before the cluster's key arrived, by that digest's sum (the secret's
	// SHA-256), until a request with the secret adopts them.
	legacy map[tokenKey]*tokenChannels
}

func (s *tokenSet) legacyPut(k tokenKey, lc *tokenChannels) {
	if s.legacy == nil {
		s.legacy = map[tokenKey]*tokenChannels{}
	}
	s.legacy[k] = lc
}

// token is the current state of a token value, nil when unknown: found by
// the value's keyed digest under each key, else its SHA-256, then compared
// in constant time.
func (h *Handler) token(v string) *tokenState {
	set := h.tokens.Load()
	plain := sha256.Sum256([]byte(v))
	for _, key := range set.keys {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(v))
		var k tokenKey
		m.Sum(k[:0])
		if t := set.byKey[k]; t != nil && fsm.TokenMatches(t.Key, t.Value, v) {
			if set.legacy[plain] != nil {
				return h.adopt(k, plain)
			}
			return t
		}
	}
	t := set.byKey[plain]
	if t == nil || !fsm.TokenMatches(t.Key, t.Value, v) {
		return nil
	}
	return t
}

// adopt gives the keyed token k the channels its secret had as the
// unkeyed token plain (the caller checked the secret against k), and
// returns its new state. A request already under way on the keyed token's
// own, fresh channels keeps them; its acks are not carried.
func (h *Handler) adopt(k, plain tokenKey) *tokenState {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	cur := h.tokens.Load()
	st, lc := cur.byKey[k], cur.legacy[plain]
	if st == nil || lc == nil {
		return st // adopted meanwhile, or the token went away
	}
	next := &tokenSet{byKey: maps.Clone(cur.byKey), keys: cur.keys, legacy: maps.Clone(cur.legacy)}
	delete(next.legacy, plain)
	moved := &tokenState{Token: st.Token, tokenChannels: lc}
	next.byKey[k] = moved
	h.tokens.Store(next)
	return moved
}

// tokenKeyOf is the sum a token is found by: the SHA-256 of a secret, or
// the sum a digest names (SHA-256 or HMAC-SHA256).
func tokenKeyOf(v string) tokenKey {
	if sum, ok := fsm.DigestSum(v); ok {
		return sum
	}
	return sha256.Sum256([]byte(v))
}
