//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/searchhead"
)

// writeKnowledge writes a knowledge bundle folder: props.conf for
// sourcetype web (an EXTRACT- of user, an automatic lookup of the user's
// team), the lookup, an eventtype and a tag.
func writeKnowledge(t *testing.T, dir, extract string) {
	t.Helper()
	files := map[string]string{
		"props.conf":        "[web]\nEXTRACT-user = " + extract + "\nLOOKUP-team = teams user OUTPUT team\n",
		"transforms.conf":   "[teams]\nfilename = teams.csv\n",
		"eventtypes.conf":   "[ann_logins]\nsearch = user=ann login\n",
		"tags.conf":         "[team=red]\nwatched = enabled\n",
		"lookups/teams.csv": "user,team\nann,red\nbob,blue\n",
	}
	if err := os.MkdirAll(filepath.Join(dir, "lookups"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterKnowledgeBundle (issue 28 item 2): with --knowledge on every
// search head, a field only the bundle defines (EXTRACT-) is filtered and
// counted exactly in the cluster through each head, a lookup enriches
// events, eventtype= and tag= match; a changed folder changes the next
// search's answer; a broken one is refused and the last good one stays.
func TestClusterKnowledgeBundle(t *testing.T) {
	// Per-process bus users: peers fetch the bundle from the heads under
	// their own permissions.
	c := Start(t, Options{PeersPerSite: 2, RoleUsers: true})
	dir := t.TempDir()
	writeKnowledge(t, dir, `who=(?<user>[a-z]+)`)
	withKnowledge := func(cfg *searchhead.Config) { cfg.KnowledgeDir = dir }
	heads := []string{c.StartSearchHead("sh1", "site1", withKnowledge).URL(), c.StartSearchHead("sh2", "site2", withKnowledge).URL(),
		c.StartSearchHead("sh0", "site0", withKnowledge).URL()}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var body strings.Builder
	for i := 0; i < 300; i++ {
		// "who" is a key of the built-in extraction; "user" and "team"
		// exist only through the bundle.
		fmt.Fprintf(&body, "n=%d who=%s did login\n", i, []string{"ann", "bob", "cy"}[i%3])
	}
	url := "http://" + c.Peer("site1-p1").Addr() + "/services/collector/raw?index=main&sourcetype=web"
	if s, code, _ := hecPostTo(t, url, NoAckHECToken, body.String()); s != 200 || code != 0 {
		t.Fatalf("raw: %d code %d", s, code)
	}
	for _, q := range []struct {
		query string
		want  int
	}{
		{"sourcetype=web user=ann", 100},
		{"sourcetype=web team=blue", 100},
		{"eventtype=ann_logins", 100},
		{"tag=watched", 100},
		{"sourcetype=web user=nobody", 0},
	} {
		waitExact(t, c, heads, q.query, q.want)
	}
	a, err := SearchHTTP(ctx, heads[0], "", map[string]any{"query": "sourcetype=web | stats count by team"})
	if err != nil || a.Status != 200 || len(a.Resp.Results) != 2 {
		t.Fatalf("stats count by team: %+v %v", a, err)
	}
	// A changed bundle: the next search answers by it.
	writeKnowledge(t, dir, `who=(?<user>[a-z])`)
	waitExact(t, c, heads, "sourcetype=web user=a", 100)
	// A broken one is refused; the last good one stays in force.
	if err := os.WriteFile(filepath.Join(dir, "props.conf"), []byte("[web]\nEXTRACT-user = (?<user>[\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, h := range heads {
		c.WaitFor(30*time.Second, func() error {
			text, _ := scrape(t, h+"/metrics")
			if n := metricValue(text, "quarry_searchhead_knowledge_refused_total"); n < 1 {
				return fmt.Errorf("head %s refused %v bundles, want the broken one", h, n)
			}
			return nil
		})
	}
	waitExact(t, c, heads, "sourcetype=web user=a", 100)
}
