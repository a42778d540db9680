package compat

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// buildQuarry builds the quarry binary from the parent module.
func buildQuarry(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "quarry")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/quarry")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build quarry: %v\n%s", err, out)
	}
	return bin
}

// startQuarryPeer starts `quarry peer` standalone and returns its URL.
func startQuarryPeer(t *testing.T, bin, dir string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"peer", "--id", "k1", "--data-dir", dir, "--http-addr", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urlc, _ := testutil.ListeningOn(out)
	select {
	case u := <-urlc:
		return cmd, u
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("quarry peer did not start")
	}
	return nil, ""
}

// TestNoAckKilledMidRequest sends requests on a token without acks from
// several streams and kills the peer (SIGKILL) while requests are in
// flight. After a restart on the same data dir, every request that was
// answered 200 is fully present, exactly once. Requests that got no answer
// may be absent, present, or (when a request spanned two blocks) partly
// present; the test counts them — a client retries those.
func TestNoAckKilledMidRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a quarry process")
	}
	bin := buildQuarry(t)
	dir := t.TempDir()
	cmd, url := startQuarryPeer(t, bin, dir, "--hec-token", "K:useack=false")
	const perReq, streams = 300, 4
	var (
		mu       sync.Mutex
		answered = map[string]bool{} // request id -> got 200
		sent     []string
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	enough := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for s := 0; s < streams; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			client := &http.Client{}
			for r := 0; ctx.Err() == nil; r++ {
				id := fmt.Sprintf("s%d-r%d", s, r)
				var b strings.Builder
				for i := 0; i < perReq; i++ {
					fmt.Fprintf(&b, `{"event":"kill test %s event %d %s","fields":{"req":"%s"}}`, id, i, strings.Repeat("x", 100), id)
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", url+"/services/collector/event", strings.NewReader(b.String()))
				req.Header.Set("Authorization", "Splunk K")
				mu.Lock()
				sent = append(sent, id)
				mu.Unlock()
				resp, err := client.Do(req)
				if err != nil {
					return // killed
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("request %s: %d", id, resp.StatusCode)
					return
				}
				mu.Lock()
				answered[id] = true
				if len(answered) >= 40 {
					once.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		}(s)
	}
	select {
	case <-enough:
	case <-time.After(60 * time.Second):
		t.Fatal("40 requests were not answered within a minute")
	}
	// Kill while the streams keep sending: some requests are in flight.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	wg.Wait()
	cancel()
	mu.Lock()
	defer mu.Unlock()

	cmd, url = startQuarryPeer(t, bin, dir, "--hec-token", "K:useack=false")
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var counts map[string]int
	deadline := time.Now().Add(30 * time.Second)
	for {
		counts = countsBy(t, url, "", "req")
		missing := []string{}
		for id := range answered {
			if counts[id] != perReq {
				missing = append(missing, fmt.Sprintf("%s:%d", id, counts[id]))
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("answered 200 but not fully present after restart: %v", missing)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
	}
	absent, present, partial := 0, 0, 0
	for _, id := range sent {
		if answered[id] {
			continue
		}
		switch n := counts[id]; {
		case n == 0:
			absent++
		case n == perReq:
			present++
		default:
			partial++
		}
	}
	for id, n := range counts {
		if n > perReq {
			t.Errorf("request %s: %d events, more than it sent", id, n)
		}
	}
	t.Logf("answered and present: %d; unanswered: %d absent, %d present, %d partly present", len(answered), absent, present, partial)
	if len(sent) == len(answered) {
		t.Log("note: no request was in flight at the kill")
	}
}
