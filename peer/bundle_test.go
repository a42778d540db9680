package peer

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/peer/hec"
)

// TestStandaloneBundle (issue 28 item 1): a standalone peer with a bundle
// (quarry peer --bundle DIR) breaks a /raw stream of sourcetype app into
// one event per record, stack traces merged, each at the time its line
// names; a sourcetype no stanza names keeps one event per line at arrival
// time; /event takes the text's time only with ?auto_extract_timestamp=true.
func TestStandaloneBundle(t *testing.T) {
	rules, err := knowledge.ParseIndexRules(knowledge.Files{"props.conf": []byte(
		"[app]\nSHOULD_LINEMERGE = true\nBREAK_ONLY_BEFORE = ^ts=\nTIME_PREFIX = ts=\nTIME_FORMAT = %Y-%m-%dT%H:%M:%S\nTZ = UTC\n")})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := hec.ParseTokenFlag("T=main:useack=false")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(Config{ID: "p1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true, Bundle: rules})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	url := "http://" + p.Addr()
	body := "ts=2026-01-01T05:00:00 ERROR boom id=r1\njava.lang.IllegalStateException: no\n\tat a.b.C.d(C.java:10)\n" +
		"Caused by: java.io.IOException: gone\n\t... 2 more\nts=2026-01-01T05:00:01 INFO fine id=r2\n" +
		"ts=2026-01-01T05:00:02 ERROR again id=r3\n\tat x.Y.z(Y.java:3)\n"
	post := func(path, body string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Splunk T")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("POST %s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	post("/services/collector/raw?sourcetype=app", body)
	post("/services/collector/raw?sourcetype=other", body)
	post("/services/collector/event?auto_extract_timestamp=true", `{"event":"ts=2026-01-01T05:00:09 extracted","sourcetype":"app","time":1000}`)
	post("/services/collector/event", `{"event":"ts=2026-01-01T05:00:09 kept","sourcetype":"app","time":1000}`)
	count := func(q string, want int) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, func() error {
			resp, rep := searchOnce(t, url, q+" | stats count")
			if resp.StatusCode != 200 || len(rep.Results) != 1 || rep.Results[0]["count"] != float64(want) {
				return fmt.Errorf("%s: %d %+v, want count %d", q, resp.StatusCode, rep, want)
			}
			return nil
		})
	}
	count("sourcetype=app earliest=1767243600 latest=1767243603", 3)
	count("sourcetype=app earliest=1767243601 latest=1767243602 id=r2", 1)
	count(`sourcetype=app "Caused by" IllegalStateException id=r1`, 1)
	count("sourcetype=other", 8)
	count("sourcetype=other earliest=-10m", 8)
	count("extracted earliest=1767243609 latest=1767243610", 1)
	count("kept earliest=1000 latest=1001", 1)
	// quarry ingest FILE --sourcetype app, two lines per request at most:
	// requests are cut only where an event may start, so each record and
	// its stack trace stay one event.
	var file strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&file, "ts=2026-01-02T00:00:%02d ERROR filed n=%d\njava.lang.Error: x\n\tat a.B.c(B.java:%d)\nCaused by: y\n", i, i, i)
	}
	f := filepath.Join(t.TempDir(), "app.log")
	if err := os.WriteFile(f, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := hec.Ingest(context.Background(), hec.ClientConfig{URL: url, Token: "T", Batch: 2, Sourcetype: "app"}, []string{f}); err != nil {
		t.Fatal(err)
	}
	count("filed", 50)
	count(`filed "Caused by" earliest=1767312000 latest=1767312050`, 50)
	count("filed n=7 earliest=1767312007 latest=1767312008", 1)
	if got := p.hec.IndexRulesHash(); got == "" || got != rules.Hash() {
		t.Fatalf("peer runs bundle %q, want %q", got, rules.Hash())
	}
}
