package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/devcluster"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestDevSurvivesN1N4 (issue 26 acceptance): the review's N1 (half a
// million nested ln(, 2 MB, which overflowed a head's stack and took the
// whole `quarry dev` process down) and N4 (a chain of replaces that grew a
// value by 10× a step until a peer died out of memory), sent to a search
// head of a running `quarry dev`, each get a 400 naming the limit, and
// afterwards every search head — and through them every peer — still
// answers the exact sample count, complete; the process then stops
// cleanly.
func TestDevSurvivesN1N4(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	const n = 500
	lines, stop := runDevInProcess(t, "--data-dir", t.TempDir(), "--port-base", "0", "--sample-events", "500")
	heads := map[string]string{}
	for _, l := range lines {
		if m := headLine.FindStringSubmatch(l); m != nil {
			heads[m[1]] = m[3]
		}
	}
	if len(heads) != 3 {
		t.Fatalf("want 3 search heads in the ready block:\n%s", strings.Join(lines, "\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deep := 500000
	n1 := "* | eval x=" + strings.Repeat("ln(", deep) + "1" + strings.Repeat(")", deep)
	rep := `"` + strings.Repeat("$1", 10) + `"`
	n4 := `index=sample | eval x=replace(_raw,"(.+)",` + rep + `)`
	for i := 0; i < 5; i++ {
		n4 += ` | eval x=replace(x,"(.+)",` + rep + `)`
	}
	n4 += " | eval n=len(x) | fields n"
	// The whole of `quarry dev` runs in this test process: its peak RSS
	// growth covers every head and peer. A normal search runs back to back
	// on another search head while each offending request is refused.
	mem := testutil.StartMemPeak()
	for _, c := range []struct{ name, q, code, msg string }{
		{"N1", n1, "bad_query", "a query of at most 262144 bytes"},
		{"N4", n4, "limit_exceeded", "1048576-byte limit on an eval value"},
	} {
		var a devcluster.SearchAnswer
		var err error
		lat, nerr := devcluster.CountsDuring(ctx, heads["sh2"], "", "index=sample", n, func() {
			a, err = devcluster.Search(ctx, heads["sh1"], "", map[string]any{"query": c.q})
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if a.Status != 400 || a.Code != c.code || !strings.Contains(a.Error, c.msg) {
			t.Fatalf("%s: %d %s %q, want 400 %s naming the limit", c.name, a.Status, a.Code, a.Error, c.code)
		}
		if nerr != nil {
			t.Fatalf("a normal search on sh2 while %s was refused: %v", c.name, nerr)
		}
		med, most := devcluster.Spread(lat)
		t.Logf("%s refused in %v; meanwhile %d normal searches on sh2, exact, median %v, max %v", c.name, a.Elapsed, len(lat), med, most)
	}
	heap, live, rss := mem.End()
	t.Logf("peak growth of the whole dev process over N1 and N4: RSS %.1f MB, heap in use %.1f MB, live heap %.1f MB",
		float64(rss)/1e6, float64(heap)/1e6, float64(live)/1e6)
	if rss > 256<<20 {
		t.Fatalf("RSS grew by %d MiB over N1 and N4 (bound 256 MiB)", rss>>20)
	}
	for id, url := range heads {
		start := time.Now()
		if got, err := devcluster.Count(ctx, url, "", "index=sample"); err != nil || got != n {
			t.Fatalf("search head %s afterwards counts %d (err %v), want %d", id, got, err, n)
		}
		t.Logf("search head %s answers the exact count afterwards in %v", id, time.Since(start))
	}
	if _, err := stop(); err != nil {
		t.Fatalf("quarry dev exit: %v", err)
	}
}
