package main

import (
	"slices"
	"testing"
)

// TestHelpAnywherePrintsHelp: `--help` after arguments prints help and runs
// nothing (issue 29: `quarry peer offline p2 --help` took p2 offline).
func TestHelpAnywherePrintsHelp(t *testing.T) {
	app := newApp()
	for _, tc := range []struct{ in, want []string }{
		{[]string{"quarry", "peer", "offline", "p2", "--help"}, []string{"quarry", "peer", "offline", "--help"}},
		{[]string{"quarry", "token", "add", "t1", "-h", "--index", "x"}, []string{"quarry", "token", "add", "--help"}},
		{[]string{"quarry", "search", "error", "--output", "json", "--help"}, []string{"quarry", "search", "--help"}},
		{[]string{"quarry", "--help"}, []string{"quarry", "--help"}},
		{[]string{"quarry", "search", "--", "--help"}, []string{"quarry", "search", "--", "--help"}},
		{[]string{"quarry", "search", "error"}, []string{"quarry", "search", "error"}},
	} {
		if got := helpFirst(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("helpFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
