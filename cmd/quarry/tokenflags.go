package main

import (
	"fmt"
	"strings"

	"github.com/quarry-dev/quarry/fsm"
)

// parseSearchToken parses `--search-token T[=index,…]`.
func parseSearchToken(s string) (fsm.SearchToken, error) {
	tok, list, hasList := strings.Cut(strings.TrimSpace(s), "=")
	if tok == "" || strings.ContainsAny(tok, " \t,;") {
		return fsm.SearchToken{}, fmt.Errorf("parse --search-token %q: want T[=index,…] with a non-empty token", s)
	}
	t := fsm.SearchToken{Token: tok}
	if hasList {
		for _, ix := range strings.Split(list, ",") {
			ix = strings.TrimSpace(ix)
			if ix == "" {
				return fsm.SearchToken{}, fmt.Errorf("parse --search-token %q: empty index name in %q", s, list)
			}
			t.Indexes = append(t.Indexes, ix)
		}
	}
	return t, nil
}
