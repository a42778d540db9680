package main

import (
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
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

// TestRoleTokenEnv: each client command reads its role's token variable
// first, QUARRY_TOKEN as a fallback (SPEC §8).
func TestRoleTokenEnv(t *testing.T) {
	for role, want := range map[string][]string{
		"admin":  {"QUARRY_ADMIN_TOKEN", "QUARRY_TOKEN"},
		"search": {"QUARRY_SEARCH_TOKEN", "QUARRY_TOKEN"},
		"hec":    {"QUARRY_HEC_TOKEN", "QUARRY_TOKEN"},
	} {
		if got := roleTokenEnv(role); !slices.Equal(got, want) {
			t.Errorf("roleTokenEnv(%q) = %q, want %q", role, got, want)
		}
	}
	if got := (searchCommand().Flags[2]).(*cli.StringFlag).EnvVars; !slices.Equal(got, []string{"QUARRY_SEARCH_TOKEN", "QUARRY_TOKEN"}) {
		t.Errorf("quarry search --token reads %q", got)
	}
}
