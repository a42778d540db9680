package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/devcluster"
	"github.com/quarry-dev/quarry/searchhead"
)

// runDevInProcess runs `quarry dev args…` in process and returns once it
// prints "ready" (or fails the test): the lines printed so far, and a stop
// function that is Ctrl-C (context cancel) and waits for the exit.
func runDevInProcess(t *testing.T, args ...string) (lines []string, stop func() (rest []string, err error)) {
	t.Helper()
	if os.Getenv("QUARRY_TEST_DEV_TMPDIR") == "" { // the env file goes to the test's own TMPDIR
		dir := t.TempDir()
		t.Setenv("QUARRY_TEST_DEV_TMPDIR", dir)
		t.Setenv("TMPDIR", dir)
	}
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
// search head (sh0, sh1, sh2) answers the exact sample count; its tokens
// are random (review L6), printed, and written with its addresses to
// $TMPDIR/quarry-dev.env (0600) while it runs; Ctrl-C stops it and removes
// the file; a second run on the same folder resumes without loading the
// sample again (the count stays exact), on the same addresses, with the
// same tokens.
func TestDevReadyCountsAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	dir := t.TempDir()
	const n = 3000
	// The second run reuses the first run's ports: they come from below the
	// kernel's ephemeral range (32768 up), as the default --port-base does,
	// so no outgoing connection of a parallel test can take one in between
	// (CI once saw a manager's OS-chosen port taken before the resume).
	args := []string{"--data-dir", dir, "--port-base", strconv.Itoa(20000 + 100*rand.IntN(120)), "--sample-events", "3000"}
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
	subscribeAsPrinted(t, lines, heads["sh1"])
	tokens := devTokens(t, lines)
	envFile := filepath.Join(os.Getenv("TMPDIR"), "quarry-dev.env")
	if fi, err := os.Stat(envFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("env file %s: %v, mode %v; want 0600", envFile, err, fi)
	}
	if b, _ := os.ReadFile(envFile); !strings.Contains(string(b), "QUARRY_ADMIN_TOKEN="+tokens["admin"]+" ") || !strings.Contains(string(b), "QUARRY_HEC_TOKEN="+tokens["HEC"]+" ") {
		t.Fatalf("env file lacks the printed tokens %v:\n%s", tokens, b)
	}
	rest, err := stop()
	if err != nil {
		t.Fatalf("first run: exit %v", err)
	}
	if !strings.Contains(strings.Join(rest, "\n"), "stopped; data kept in "+dir) {
		t.Fatalf("first run: no clean stop line: %q", rest)
	}
	if _, err := os.Stat(envFile); !os.IsNotExist(err) {
		t.Fatalf("env file after the stop: %v, want it removed", err)
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
	if again := devTokens(t, lines); again["admin"] != tokens["admin"] || again["HEC"] != tokens["HEC"] {
		t.Fatalf("resumed with tokens %v, the first run had %v", again, tokens)
	}
	if _, err := stop(); err != nil {
		t.Fatalf("second run: exit %v", err)
	}
}

var tokensLine = regexp.MustCompile(`^tokens .*: HEC (\S+) \(.*\), HEC (\S+) \(.*\), admin (\S+)$`)

// devTokens reads the ready block's tokens line; each is random: not the
// fixed dev-admin/dev-hec of old, and a 128-bit hex part.
func devTokens(t *testing.T, lines []string) map[string]string {
	t.Helper()
	for _, l := range lines {
		if m := tokensLine.FindStringSubmatch(l); m != nil {
			out := map[string]string{"HEC": m[1], "HEC no-ack": m[2], "admin": m[3]}
			for what, tok := range out {
				if i := strings.LastIndexByte(tok, '-'); i < 0 || len(tok)-i-1 != 32 {
					t.Fatalf("%s token %q: want a 32-hex-digit random part", what, tok)
				}
			}
			return out
		}
	}
	t.Fatalf("no tokens line in the ready block:\n%s", strings.Join(lines, "\n"))
	return nil
}

var natsSubLine = regexp.MustCompile(`nats sub --server (nats://\S+) '(quarry\.results\.>)'`)

// subscribeAsPrinted follows the ready block's `nats sub` line (issue 29):
// its subscriber credentials connect to the printed bus URL, and a search
// published as "demo" arrives there — its 5 rows, then the summary.
func subscribeAsPrinted(t *testing.T, lines []string, head string) {
	t.Helper()
	var url, subject string
	for _, l := range lines {
		if m := natsSubLine.FindStringSubmatch(l); m != nil {
			url, subject = m[1], m[2]
		}
	}
	if url == "" {
		t.Fatalf("no nats sub line in the ready block:\n%s", strings.Join(lines, "\n"))
	}
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect as printed (%s): %v", url, err)
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(subject, msgs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("quarry.results.forged", []byte("{}")); err == nil {
		_ = nc.Flush() // a subscriber may not publish: the server refuses (async error), nothing arrives
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := searchhead.Client{URL: head}
	if a, err := cl.Search(ctx, searchhead.Request{Query: "index=sample | head 5", Publish: "demo"}); err != nil || a.Status != 200 {
		t.Fatalf("search published as demo: %v %+v", err, a)
	}
	rows := 0
	for {
		select {
		case m := <-msgs:
			if m.Subject != "quarry.results.demo" {
				t.Fatalf("message on %s: %s", m.Subject, m.Data)
			}
			if strings.HasPrefix(string(m.Data), `{"summary"`) {
				if rows != 5 {
					t.Fatalf("summary after %d rows, want 5", rows)
				}
				return
			}
			rows += strings.Count(strings.TrimSpace(string(m.Data)), "\n") + 1
		case <-ctx.Done():
			t.Fatalf("published results did not arrive on %s (%d rows so far)", url, rows)
		}
	}
}
