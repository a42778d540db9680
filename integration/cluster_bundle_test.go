//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer/hec"
)

// bundleProps is a stanza for sourcetype app: records start with ts=, the
// time follows it, and the lines of a stack trace merge into their record.
const bundleProps = `# records of the app
[app]
SHOULD_LINEMERGE = true
BREAK_ONLY_BEFORE = ^ts=
TIME_PREFIX = ts=
TIME_FORMAT = %Y-%m-%dT%H:%M:%S
TZ = UTC
`

// bundleBody is three records, two with multi-line stack traces, tagged tag.
func bundleBody(tag string) string {
	return "ts=2026-01-01T05:00:00 ERROR boom " + tag + " id=r1\n" +
		"java.lang.IllegalStateException: no\n\tat a.b.C.d(C.java:10)\n\tat a.b.C.e(C.java:20)\n" +
		"Caused by: java.io.IOException: gone\n\t... 2 more\n" +
		"ts=2026-01-01T05:00:01 INFO fine " + tag + " id=r2\n" +
		"ts=2026-01-01T05:00:02 ERROR again " + tag + " id=r3\n\tat x.Y.z(Y.java:3)\n"
}

// TestClusterConfigBundle (issue 28 item 1): a malformed bundle is refused
// with a line-numbered error and changes nothing; a good one reaches every
// peer within seconds (`bundle status` in sync), and a /raw stream of
// sourcetype app on any peer then gives one event per record — stack
// traces merged — each at the time written in its line, counted exactly
// through a search head over that second's range; a new bundle (no
// merging) takes effect for the next requests.
func TestClusterConfigBundle(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2})
	head := c.StartSearchHead("sh1", "site1").URL()
	cl, err := manager.NewClient(c.ManagerURLs(), AdminToken, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	before := settledSnapshot(t, c)
	var ae *manager.APIError
	_, err = cl.ApplyBundle(ctx, map[string]string{"props.conf": "[app]\nTIME_PREFIX = ts=\nTIME_FORMAT = %Y-%m-%c\n"})
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "bad_bundle" || !strings.Contains(ae.Message, "props.conf:3") {
		t.Fatalf("malformed bundle: %v, want a 400 bad_bundle naming props.conf:3", err)
	}
	if _, err = cl.ApplyBundle(ctx, map[string]string{"inputs.conf": "[x]\n"}); !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("bundle with inputs.conf: %v, want a 400", err)
	}
	anon, _ := manager.NewClient(c.ManagerURLs(), "", 10*time.Second)
	if _, err = anon.ApplyBundle(ctx, map[string]string{"props.conf": bundleProps}); !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("bundle without the admin token: %v, want a 401", err)
	}
	if err := before.diff(takeSnapshot(t, c)); err != nil {
		t.Fatalf("a refused bundle changed something: %v", err)
	}
	c.State(func(s *fsm.State) {
		if h := fsm.BundleHashOf(s); h != "" {
			t.Fatalf("a refused bundle is in force: %s", h)
		}
	})

	applyAndWait := func(props string) string {
		t.Helper()
		st, err := cl.ApplyBundle(ctx, map[string]string{"props.conf": props})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c.WaitFor(30*time.Second, func() error {
			got, err := cl.Bundle(ctx)
			if err != nil || got.Hash != st.Hash || !got.InSync {
				return fmt.Errorf("bundle status %+v, %v; want every peer on %s", got, err, st.Hash)
			}
			for _, p := range got.Peers {
				if p.Bundle == st.Hash && (p.Since.IsZero() || p.Since.Before(start.Add(-time.Second))) {
					t.Fatalf("peer %s runs %s since %v, applied at %v", p.ID, p.Bundle, p.Since, start)
				}
			}
			return nil
		})
		t.Logf("bundle %s on every peer after %v", st.Hash, time.Since(start).Round(time.Millisecond))
		return st.Hash
	}
	applyAndWait(bundleProps)
	if st, err := cl.ApplyBundle(ctx, map[string]string{"props.conf": bundleProps}); err != nil || !st.Unchanged {
		t.Fatalf("the same bundle again: %+v, %v; want unchanged", st, err)
	}

	for i, id := range c.PeerIDs() {
		url := "http://" + c.Peer(id).Addr() + "/services/collector/raw?index=main&sourcetype=app"
		if s, code, _ := hecPostTo(t, url, NoAckHECToken, bundleBody(fmt.Sprintf("merged%d", i))); s != 200 || code != 0 {
			t.Fatalf("raw to %s: %d code %d", id, s, code)
		}
	}
	n := len(c.PeerIDs())
	// One event per record on every peer, each at its own second.
	waitExact(t, c, []string{head}, "sourcetype=app earliest=1767243600 latest=1767243603", 3*n)
	waitExact(t, c, []string{head}, "sourcetype=app earliest=1767243601 latest=1767243602", n)
	waitExact(t, c, []string{head}, `"Caused by" IllegalStateException`, n)

	// quarry ingest FILE --sourcetype app into a cluster peer, two lines
	// per request at most: its requests are cut only where an event may
	// start, so every record keeps its stack trace.
	var file strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&file, "ts=2026-01-03T00:00:%02d ERROR ingested n=%d\njava.lang.Error: x\n\tat a.B.c(B.java:%d)\n", i, i, i)
	}
	f := filepath.Join(t.TempDir(), "app.log")
	if err := os.WriteFile(f, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ingestURL := "http://" + c.Peer(c.PeerIDs()[1]).Addr()
	if _, err := hec.Ingest(ctx, hec.ClientConfig{URL: ingestURL, Token: HECToken, Index: "main", Sourcetype: "app", Batch: 2}, []string{f}); err != nil {
		t.Fatal(err)
	}
	waitExact(t, c, []string{head}, "ingested earliest=1767398400 latest=1767398440 java.lang.Error", 40)

	// A new bundle: no merging; the next request gives one event per line.
	applyAndWait("[app]\nTIME_PREFIX = ts=\nTIME_FORMAT = %Y-%m-%dT%H:%M:%S\n")
	url := "http://" + c.Peer(c.PeerIDs()[0]).Addr() + "/services/collector/raw?index=main&sourcetype=app"
	if s, code, _ := hecPostTo(t, url, NoAckHECToken, bundleBody("split")); s != 200 || code != 0 {
		t.Fatalf("raw after the new bundle: %d code %d", s, code)
	}
	waitExact(t, c, []string{head}, "split", 3)
	waitExact(t, c, []string{head}, "sourcetype=app", 3*n+40+9) // records, ingested records, split lines
}
