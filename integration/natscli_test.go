package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// The stock NATS CLI (github.com/nats-io/natscli, `nats sub`) consumes a
// published search: NDJSON result lines in order, then the summary. The
// binary is found as $QUARRY_NATS_CLI or `nats` on PATH; .ci/run installs
// it from compat/go.mod's pin (cd compat && go build -o ../bin/tools/nats github.com/nats-io/natscli/nats). Skipped, saying
// so, where it is absent.
func TestNATSCLIConsumesPublishedResults(t *testing.T) {
	bin := os.Getenv("QUARRY_NATS_CLI")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("nats"); err != nil {
			t.Skip("the NATS CLI is not installed (cd compat && go build -o ../bin/tools/nats github.com/nats-io/natscli/nats; then QUARRY_NATS_CLI=bin/tools/nats)")
		}
	}
	c := Start(t, Options{})
	raws := searchIngest(t, c, "cli", 400)
	sh := c.StartSearchHead("sh1", "site1")
	url := c.Bus.Server("site1").ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// One result batch (400 short rows) and one summary: two messages.
	cmd := exec.CommandContext(ctx, bin, "sub", "--server", url, "--raw", "--count", "2", "quarry.results.>")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ns := c.Bus.Server("site1").NATS()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if ns.NumSubscriptions() == 0 {
			return fmt.Errorf("no subscription yet")
		}
		// The CLI's subscription is on this node once its interest shows.
		r := ns.GlobalAccount().SubscriptionInterest("quarry.results.x")
		if !r {
			return fmt.Errorf("the CLI has not subscribed yet")
		}
		return nil
	})
	a := search(t, sh.URL(), map[string]any{"query": "* | sort _raw", "publish": "cli"})
	if a.Status != 200 || len(a.Resp.Results) != len(raws) {
		t.Fatalf("published search: %d, %d rows", a.Status, len(a.Resp.Results))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("nats sub: %v: %s", err, out.String())
	}
	var rows []map[string]any
	summaries := 0
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("nats sub printed %q: %v", line, err)
		}
		if _, ok := m["summary"]; ok {
			summaries++
			continue
		}
		if summaries > 0 {
			t.Fatal("a result after the summary")
		}
		rows = append(rows, m)
	}
	if summaries != 1 || len(rows) != len(raws) {
		t.Fatalf("nats sub got %d rows and %d summaries, want %d and 1", len(rows), summaries, len(raws))
	}
	for i := range rows {
		if rows[i]["_raw"] != a.Resp.Results[i]["_raw"] {
			t.Fatalf("row %d out of order", i)
		}
	}
}
