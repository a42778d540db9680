package api

import (
	"encoding/hex"
	"fmt"

	"github.com/quarry-dev/quarry/bus/wire"
	"github.com/quarry-dev/quarry/fsm"
)

// Idempotency key lookups between peers (peer/DESIGN.md "Idempotent
// retries"):
//
//	<prefix>.idem.<site>.<peer>.<sender>  KeyLookup → KeyAnswer (peer → peer)
//
// A peer that takes a HEC request whose Idempotency-Key it does not hold
// asks every other Up peer what it holds of that key; a peer answers from
// its key index, which knows the keys of the blocks it holds copies of.

// KeyLookup asks a peer about one key of one HEC token.
type KeyLookup struct {
	V int `json:"v"`
	// Token is the hex SHA-256 of the token's secret (never the secret).
	Token string `json:"token"`
	Key   string `json:"key"`
}

// MaxKeyLen is the longest key a lookup may carry (store.MaxKeyLen).
const MaxKeyLen = 256

// Validate checks a lookup's version and fields.
func (l KeyLookup) Validate() error {
	if err := CheckVersion("key lookup", l.V); err != nil {
		return err
	}
	if b, err := hex.DecodeString(l.Token); err != nil || len(b) != 32 {
		return wire.Errorf(CodeBadRequest, "key lookup: token digest %q is not 64 hex digits", l.Token)
	}
	if len(l.Key) == 0 || len(l.Key) > MaxKeyLen {
		return wire.Errorf(CodeBadRequest, "key lookup: key of %d bytes (want 1 to %d)", len(l.Key), MaxKeyLen)
	}
	return nil
}

// KeyAnswer is what a peer holds of a key: nothing (Known false), or the
// body hash it came with, the request's event count and which of its
// ordinals this peer holds, each span [first, count].
type KeyAnswer struct {
	V        int         `json:"v"`
	Known    bool        `json:"known"`
	BodyHash string      `json:"body_hash,omitempty"` // hex SHA-256
	Total    uint32      `json:"total,omitempty"`
	Spans    [][2]uint32 `json:"spans,omitempty"`
	// Pending: a request with the key is being stored on that peer now,
	// or its events are not yet durable by the ack rule there.
	Pending bool `json:"pending,omitempty"`
	// OriginsV is the version of Origins: 0 (omitted) from a peer that
	// predates it, whose answer says nothing of origins; 1 when Origins is
	// what this peer holds (empty: it stores none of the key's events
	// itself, it only heard of them).
	OriginsV int `json:"origins_v,omitempty"`
	// Origins are the GUIDs of the origin peers of the buckets whose
	// blocks on the answering peer hold events of the key — its own GUID
	// for a request it stored itself — at most MaxKeyOrigins, sorted
	// (peer/DESIGN.md "Idempotent retries": a restarted origin drops an
	// unreplicated block whose key another origin stored).
	Origins []string `json:"origins,omitempty"`
}

// KeyOriginsVersion is the KeyAnswer.OriginsV this build writes.
const KeyOriginsVersion = 1

// MaxKeyOrigins bounds KeyAnswer.Origins: an asker only needs to know
// whether an origin other than itself holds the key.
const MaxKeyOrigins = 4

// Validate checks an answer's version and fields.
func (a KeyAnswer) Validate() error {
	if err := CheckVersion("key answer", a.V); err != nil {
		return err
	}
	if !a.Known {
		return nil
	}
	if b, err := hex.DecodeString(a.BodyHash); err != nil || len(b) != 32 {
		return fmt.Errorf("key answer: body hash %q is not 64 hex digits", a.BodyHash)
	}
	for _, s := range a.Spans {
		if s[1] == 0 || uint64(s[0])+uint64(s[1]) > uint64(a.Total) {
			return fmt.Errorf("key answer: span %v outside a request of %d events", s, a.Total)
		}
	}
	if len(a.Origins) > MaxKeyOrigins {
		return fmt.Errorf("key answer: %d origins (at most %d)", len(a.Origins), MaxKeyOrigins)
	}
	for _, o := range a.Origins {
		if err := fsm.ValidGUID(o); err != nil {
			return fmt.Errorf("key answer: origin: %w", err)
		}
	}
	return nil
}
