package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseSearchToken(t *testing.T) {
	for _, tc := range []struct {
		in      string
		token   string
		indexes []string
		err     string
	}{
		{in: "abc", token: "abc"},
		{in: " abc=web, main ", token: "abc", indexes: []string{"web", "main"}},
		{in: "", err: "non-empty token"},
		{in: "=web", err: "non-empty token"},
		{in: "a b", err: "non-empty token"},
		{in: "abc=web,,main", err: "empty index name"},
	} {
		got, err := parseSearchToken(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseSearchToken(%q) = %+v, %v; want error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.Token != tc.token || !slices.Equal(got.Indexes, tc.indexes) {
			t.Errorf("parseSearchToken(%q) = %+v, %v; want %q %v", tc.in, got, err, tc.token, tc.indexes)
		}
	}
}
