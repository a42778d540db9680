package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/devcluster"
)

// runDevInProcess runs `quarry dev args…` in process and returns once it
// prints "ready" (or fails the test): the lines printed so far, and a stop
// function that is Ctrl-C (context cancel) and waits for the exit.
func runDevInProcess(t *testing.T, args ...string) (lines []string, stop func() (rest []string, err error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	app := newApp()
	app.Writer = pw
	done := make(chan error, 1)
	go func() {
		err := app.RunContext(ctx, append([]string{"quarry", "dev"}, args...))
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	got := make(chan string)
	go func() {
		defer close(got)
		for sc.Scan() {
			got <- sc.Text()
		}
	}()
	deadline := time.After(3 * time.Minute)
	for ready := false; !ready; {
		select {
		case l, ok := <-got:
			if !ok {
				cancel()
				t.Fatalf("quarry dev ended before ready: %v; printed:\n%s", <-done, strings.Join(lines, "\n"))
			}
			lines = append(lines, l)
			ready = strings.HasPrefix(l, "ready in ")
		case <-deadline:
			cancel()
			t.Fatalf("quarry dev not ready within 3 minutes; printed:\n%s", strings.Join(lines, "\n"))
		}
	}
	// Drain the rest of the ready block ("Ctrl-C stops the cluster.").
	for l := range got {
		lines = append(lines, l)
		if strings.HasPrefix(l, "Ctrl-C") {
			break
		}
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})
	return lines, func() ([]string, error) {
		stopped = true
		cancel()
		var rest []string
		for l := range got {
			rest = append(rest, l)
		}
		return rest, <-done
	}
}

var headLine = regexp.MustCompile(`^\s+(sh\d)\s+site (site\d)\s+(http://127\.0\.0\.1:\d+)$`)

// TestDevReadyCountsAndResumes: `quarry dev` prints ready only once every
// search head (sh0, sh1, sh2) answers the exact sample count; Ctrl-C stops
// it; a second run on the same folder resumes without loading the sample
// again (the count stays exact), on the same addresses.
func TestDevReadyCountsAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	dir := t.TempDir()
	const n = 3000
	args := []string{"--data-dir", dir, "--port-base", "0", "--sample-events", "3000"}
	lines, stop := runDevInProcess(t, args...)
	heads := map[string]string{}
	for _, l := range lines {
		if m := headLine.FindStringSubmatch(l); m != nil {
			heads[m[1]] = m[3]
		}
	}
	if len(heads) != 3 {
		t.Fatalf("want 3 search heads (sh0, sh1, sh2) in the ready block, got %v:\n%s", heads, strings.Join(lines, "\n"))
	}
	check := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for id, url := range heads {
			got, err := devcluster.Count(ctx, url, "", "index=sample")
			if err != nil || got != n {
				t.Fatalf("%s: search head %s counts %d sample events (err %v), want %d", what, id, got, err, n)
			}
			if got, err := devcluster.Count(ctx, url, "", "index=sample trace_id=zqxjkcanary"); err != nil || got != 10 {
				t.Fatalf("%s: search head %s counts %d rare events (err %v), want 10", what, id, got, err)
			}
		}
	}
	check("first run")
	rest, err := stop()
	if err != nil {
		t.Fatalf("first run: exit %v", err)
	}
	if !strings.Contains(strings.Join(rest, "\n"), "stopped; data kept in "+dir) {
		t.Fatalf("first run: no clean stop line: %q", rest)
	}
	var layout devcluster.Layout
	b, err := os.ReadFile(filepath.Join(dir, "dev.json"))
	if err != nil || json.Unmarshal(b, &layout) != nil || layout.Sample == nil || !layout.Sample.Acked || layout.Sample.Events != n {
		t.Fatalf("dev.json after the first run: %v %s", err, b)
	}

	lines, stop = runDevInProcess(t, args...)
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, "resumed the cluster of "+dir) || strings.Contains(joined, "loading") {
		t.Fatalf("second run did not resume without loading:\n%s", joined)
	}
	for _, l := range lines {
		if m := headLine.FindStringSubmatch(l); m != nil && heads[m[1]] != m[3] {
			t.Fatalf("search head %s moved from %s to %s", m[1], heads[m[1]], m[3])
		}
	}
	check("resumed")
	if _, err := stop(); err != nil {
		t.Fatalf("second run: exit %v", err)
	}
}
