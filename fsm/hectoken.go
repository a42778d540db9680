package fsm

import (
	"fmt"
	"strings"
)

// ParseHECToken parses `--hec-token T[=index,…]`: the token, the indexes it
// may write (none listed: any index) with the first as its default. Tokens
// from the manager's flags acknowledge (SPEC §4 acks); an operator turns
// that off through the config API.
func ParseHECToken(s string) (HECToken, error) {
	tok, list, hasList := strings.Cut(strings.TrimSpace(s), "=")
	if tok == "" || strings.ContainsAny(tok, " \t,;") {
		return HECToken{}, fmt.Errorf("parse --hec-token %q: want T[=index,…] with a non-empty token", s)
	}
	t := HECToken{Token: tok, Ack: true}
	if hasList {
		for _, ix := range strings.Split(list, ",") {
			ix = strings.TrimSpace(ix)
			if ix == "" {
				return HECToken{}, fmt.Errorf("parse --hec-token %q: empty index name in %q", s, list)
			}
			t.Indexes = append(t.Indexes, ix)
		}
		t.DefaultIndex = t.Indexes[0]
	}
	return t, nil
}
