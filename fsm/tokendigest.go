package fsm

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// TokenDigestPrefix begins a token given by its unkeyed digest instead of
// its secret. A secret can never take that form: secrets may not hold ':'
// (the --hec-token syntax's separator, refused by the admin API too).
const TokenDigestPrefix = "sha256:"

// KeyedDigestPrefix begins a token given by its keyed digest (KeyedDigest):
// the form every token leaves the managers in once the cluster has a token
// key (SetTokenKey, tokenkey.go).
const KeyedDigestPrefix = "hmac-sha256:"

// TokenDigest is the unkeyed digest of a secret: "sha256:" and the SHA-256
// of the secret in lower-case hex. It is what tokens left the managers as
// before the cluster had a token key (review L1: anyone holding it could
// guess a human-chosen secret offline at SHA-256 speed), and what a search
// head without the key names a caller by. Peers and search heads still
// check a presented token against it (TokenMatches).
func TokenDigest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return TokenDigestPrefix + hex.EncodeToString(sum[:])
}

// KeyedDigest is the form in which a token leaves the managers (SPEC §7: no
// read, HTTP or NATS, shows a token's secret to anyone but the managers):
// "hmac-sha256:" and the HMAC-SHA256 of the secret under the cluster's
// token key, in lower-case hex; without a key (a cluster below
// TokenKeyVersion) the unkeyed TokenDigest. Peers and search heads, which
// are sent the key, check a presented token against it (TokenMatches);
// GET /v1/config shows it and POST /v1/config takes it back as "keep this
// token's secret".
func KeyedDigest(key []byte, secret string) string {
	if len(key) == 0 {
		return TokenDigest(secret)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(secret))
	return KeyedDigestPrefix + hex.EncodeToString(m.Sum(nil))
}

// IsTokenDigest reports whether s has a form TokenDigest or KeyedDigest
// returns.
func IsTokenDigest(s string) bool {
	_, ok := DigestSum(s)
	return ok
}

// DigestSum is the 32-byte sum a digest of either form carries, and
// whether s is a digest.
func DigestSum(s string) (sum [sha256.Size]byte, ok bool) {
	h, ok := strings.CutPrefix(s, TokenDigestPrefix)
	if !ok {
		h, ok = strings.CutPrefix(s, KeyedDigestPrefix)
	}
	if !ok || len(h) != 2*sha256.Size || strings.ToLower(h) != h {
		return sum, false
	}
	if _, err := hex.Decode(sum[:], []byte(h)); err != nil {
		return sum, false
	}
	return sum, true
}

// DigestAs is the digest of a presented secret in the form of a stored
// token: keyed for a keyed digest, unkeyed for an unkeyed one, the secret
// itself for a secret. "" when stored is keyed and there is no key.
func DigestAs(key []byte, stored, presented string) string {
	switch {
	case strings.HasPrefix(stored, KeyedDigestPrefix):
		if len(key) == 0 {
			return ""
		}
		return KeyedDigest(key, presented)
	case strings.HasPrefix(stored, TokenDigestPrefix):
		return TokenDigest(presented)
	}
	return presented
}

// TokenMatches reports whether a presented secret is the stored token,
// which is a secret (standalone flags, the managers' own config), a keyed
// digest (what peers and search heads are sent once the cluster has a
// token key, checked under key) or an unkeyed digest (before). Constant
// time in the presented secret in every case; a keyed digest never matches
// without a key.
func TokenMatches(key []byte, stored, presented string) bool {
	if presented == "" || stored == "" {
		return false
	}
	want := DigestAs(key, stored, presented)
	if want == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(stored), []byte(want)) == 1
}

// Redacted is the config with every token's secret replaced by its digest
// under the cluster's token key (KeyedDigest; unkeyed without one): what
// leaves the managers (the peers' config over NATS, GET /v1/config). The
// token slices are copies; c is not changed.
func (c Config) Redacted(key []byte) Config {
	c.HECTokens = slices.Clone(c.HECTokens)
	for i := range c.HECTokens {
		if !IsTokenDigest(c.HECTokens[i].Token) {
			c.HECTokens[i].Token = KeyedDigest(key, c.HECTokens[i].Token)
		}
	}
	c.SearchTokens = slices.Clone(c.SearchTokens)
	for i := range c.SearchTokens {
		if !IsTokenDigest(c.SearchTokens[i].Token) {
			c.SearchTokens[i].Token = KeyedDigest(key, c.SearchTokens[i].Token)
		}
	}
	return c
}

// WithoutTokens is the config with every token's secret blanked, their
// other settings (indexes, acks) kept: what GET /v1/status shows, which no
// digest of any form leaves (review L1). The token slices are copies.
func (c Config) WithoutTokens() Config {
	c.HECTokens = slices.Clone(c.HECTokens)
	for i := range c.HECTokens {
		c.HECTokens[i].Token = ""
	}
	c.SearchTokens = slices.Clone(c.SearchTokens)
	for i := range c.SearchTokens {
		c.SearchTokens[i].Token = ""
	}
	return c
}

// ShortTokenLength: a configured token shorter than this is warned about
// at start (manager, peer, search head), never refused — SPEC §8's CLI
// examples and existing deployments use short tokens. A short
// human-chosen secret is what an offline guess of a digest finds first
// (review L1); `quarry token add` makes 48-character ones.
const ShortTokenLength = 16

// ShortTokenWarning is the warning logged, once per kind, for the short
// tokens among secrets; "" when none is short (or all are empty). The
// secret itself is never in it.
func ShortTokenWarning(kind string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" && !IsTokenDigest(s) && len(s) < ShortTokenLength {
			return fmt.Sprintf("a configured %s is shorter than %d characters: anyone who gets one of its digests can guess it offline; use a long random token (quarry token add makes 48 characters)", kind, ShortTokenLength)
		}
	}
	return ""
}
