package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// The token key (review L1, issue 25): a per-cluster 32-byte random key
// under which token secrets are digested (KeyedDigest) before they leave
// the managers, so a digest read from a peer's config can be checked only
// by who holds the key. The leader draws it (crypto/rand) once the group
// agreed TokenKeyVersion and proposes SetTokenKey; Apply only stores the
// bytes it is given, so every manager holds the same key. It is its own
// part of the state, not of Config: GET /v1/config shows the config, and
// a POST /v1/config (which replaces the whole config) never drops it.
// The key is sent only in the NATS config replies to registered peers and
// to search heads (api.PeerConfig.TokenKey); no HTTP read shows it.

// TokenKeyVersion is the cluster version from which the state carries a
// token key (CmdSetTokenKey).
const TokenKeyVersion = 10

// TokenKeySize is the length of a token key in bytes.
const TokenKeySize = 32

// SetTokenKey sets the cluster's token key. Set once: a second SetTokenKey
// with the same key is a no-op, with another key refused
// (ErrTokenKeyExists), so two leaders that each drew one keep the first
// committed.
type SetTokenKey struct {
	ReqID
	Key []byte `json:"key"`
}

func (SetTokenKey) Type() CommandType { return CmdSetTokenKey }

// String never shows the key (a command is sometimes logged).
func (c SetTokenKey) String() string { return fmt.Sprintf("SetTokenKey{%d bytes}", len(c.Key)) }

func init() {
	register(CmdSetTokenKey, applySetTokenKey)
	clusterVersions[CmdSetTokenKey] = TokenKeyVersion
}

// Errors of SetTokenKey.
var (
	// ErrBadTokenKey: a key that is not TokenKeySize bytes.
	ErrBadTokenKey = errors.New("bad token key")
	// ErrTokenKeyExists: the cluster has another token key already.
	ErrTokenKeyExists = errors.New("token key exists")
)

// applySetTokenKey stores the key. Refused below TokenKeyVersion (the
// manager does not append it then; a log that carries one anyway changes
// nothing). A plain function, not a State method: State has too many.
func applySetTokenKey(s *State, _ uint64, c *SetTokenKey) (any, error) {
	if s.ClusterVersion() < TokenKeyVersion {
		return nil, fmt.Errorf("%w: a token key needs cluster version %d, the group agreed %d", ErrClusterVersion, TokenKeyVersion, s.ClusterVersion())
	}
	if len(c.Key) != TokenKeySize {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrBadTokenKey, len(c.Key), TokenKeySize)
	}
	switch {
	case s.d.TokenKey == nil:
		s.d.TokenKey = slices.Clone(c.Key)
	case !bytes.Equal(s.d.TokenKey, c.Key):
		return nil, ErrTokenKeyExists
	}
	return nil, nil
}

// TokenKeyOf returns a copy of the cluster's token key, nil when it has
// none (below TokenKeyVersion, or before the leader proposed it).
func TokenKeyOf(s *State) []byte { return slices.Clone(s.d.TokenKey) }
