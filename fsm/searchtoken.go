package fsm

import (
	"fmt"
	"strings"
)

// SearchToken is a search token of the cluster config (SPEC §11): the
// indexes its searches may read (none listed: every index). Search heads
// and peers read them from the managers; `--search-token T[=index,…]`.
type SearchToken struct {
	Token   string   `json:"token"`
	Indexes []string `json:"indexes,omitempty"`
}

// ParseSearchToken parses `--search-token T[=index,…]`.
func ParseSearchToken(s string) (SearchToken, error) {
	tok, list, hasList := strings.Cut(strings.TrimSpace(s), "=")
	if tok == "" || strings.ContainsAny(tok, " \t,;") {
		return SearchToken{}, fmt.Errorf("parse --search-token %q: want T[=index,…] with a non-empty token", s)
	}
	t := SearchToken{Token: tok}
	if hasList {
		for _, ix := range strings.Split(list, ",") {
			ix = strings.TrimSpace(ix)
			if ix == "" {
				return SearchToken{}, fmt.Errorf("parse --search-token %q: empty index name in %q", s, list)
			}
			t.Indexes = append(t.Indexes, ix)
		}
	}
	return t, nil
}

// Allows reports whether the token may read an index.
func (t SearchToken) Allows(index string) bool {
	if len(t.Indexes) == 0 {
		return true
	}
	for _, ix := range t.Indexes {
		if ix == index {
			return true
		}
	}
	return false
}
