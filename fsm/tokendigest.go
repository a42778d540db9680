package fsm

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"slices"
	"strings"
)

// TokenDigestPrefix begins a token given by its digest instead of its
// secret. A secret can never take that form: secrets may not hold ':'
// (the --hec-token syntax's separator, refused by the admin API too).
const TokenDigestPrefix = "sha256:"

// TokenDigest is the form in which a token leaves the managers (SPEC §7: no
// read, HTTP or NATS, shows a token's secret to anyone but the managers):
// "sha256:" and the SHA-256 of the secret in lower-case hex. Peers and
// search heads check a presented token against it (TokenMatches), and
// GET /v1/config shows it; POST /v1/config takes it back as "keep this
// token's secret".
func TokenDigest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return TokenDigestPrefix + hex.EncodeToString(sum[:])
}

// IsTokenDigest reports whether s has the form TokenDigest returns.
func IsTokenDigest(s string) bool {
	h, ok := strings.CutPrefix(s, TokenDigestPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// TokenMatches reports whether a presented secret is the stored token,
// which is a secret (standalone flags, the managers' own config) or a
// digest (what peers and search heads are sent). Constant time in the
// presented secret either way.
func TokenMatches(stored, presented string) bool {
	if presented == "" || stored == "" {
		return false
	}
	if IsTokenDigest(stored) {
		return subtle.ConstantTimeCompare([]byte(stored), []byte(TokenDigest(presented))) == 1
	}
	return subtle.ConstantTimeCompare([]byte(stored), []byte(presented)) == 1
}

// Redacted is the config with every token's secret replaced by its digest:
// what leaves the managers (the peers' config over NATS, GET /v1/config).
// The token slices are copies; c is not changed.
func (c Config) Redacted() Config {
	c.HECTokens = slices.Clone(c.HECTokens)
	for i := range c.HECTokens {
		if !IsTokenDigest(c.HECTokens[i].Token) {
			c.HECTokens[i].Token = TokenDigest(c.HECTokens[i].Token)
		}
	}
	c.SearchTokens = slices.Clone(c.SearchTokens)
	for i := range c.SearchTokens {
		if !IsTokenDigest(c.SearchTokens[i].Token) {
			c.SearchTokens[i].Token = TokenDigest(c.SearchTokens[i].Token)
		}
	}
	return c
}
