package fsm

import (
	"strings"
	"testing"
)

// TestSearchTokenPublish: a search token's publish list — names and
// prefixes ending in * — decides the result names it may publish to (none
// listed: any); the config refuses malformed patterns and too many; a
// config with a list is appended only by a group at PublishScopeVersion
// (review L2).
func TestSearchTokenPublish(t *testing.T) {
	tok := SearchToken{Token: "s", Publish: []string{"nightly", "team-a.*", "ops*"}}
	for name, want := range map[string]bool{
		"nightly": true, "nightly.x": false, "team-a.errors": true, "team-a": false, "team-b.x": false,
		"ops": true, "ops-west": true, "": false,
	} {
		if got := tok.MayPublish(name); got != want {
			t.Errorf("MayPublish(%q) = %v, want %v", name, got, want)
		}
	}
	if !(SearchToken{Token: "s"}).MayPublish("anything") {
		t.Error("a token without a publish list may publish anywhere")
	}
	if (SearchToken{Token: "s", Publish: []string{}}).MayPublish("anything") {
		t.Error("an empty publish list allows a name")
	}
	for _, p := range []string{"nightly", "a.b-c_d", "team-a.*", "*", "x*"} {
		if err := validPublishPattern(p); err != nil {
			t.Errorf("pattern %q refused: %v", p, err)
		}
	}
	for _, p := range []string{"", ".", "a..b", "a.", "a b", "a>", "*.x", "a*b", "**", strings.Repeat("a", 129)} {
		if err := validPublishPattern(p); err == nil {
			t.Errorf("pattern %q accepted", p)
		}
	}
	c := DefaultConfig()
	c.SearchTokens = []SearchToken{{Token: "s"}}
	if v := NeedsClusterVersion(&SetConfig{Config: c}); v != 1 {
		t.Fatalf("a config without publish lists needs cluster version %d, want 1", v)
	}
	c.SearchTokens[0].Publish = []string{"nightly"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if v := NeedsClusterVersion(&SetConfig{Config: c}); v != PublishScopeVersion {
		t.Fatalf("a config with a publish list needs cluster version %d, want %d", v, PublishScopeVersion)
	}
	c.SearchTokens[0].Publish = []string{"bad name"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "publish pattern") {
		t.Fatalf("a malformed pattern: %v", err)
	}
	c.SearchTokens[0].Publish = make([]string, MaxPublishPatterns+1)
	for i := range c.SearchTokens[0].Publish {
		c.SearchTokens[0].Publish[i] = "n"
	}
	if err := c.Validate(); err == nil {
		t.Fatal("too many patterns accepted")
	}
}
