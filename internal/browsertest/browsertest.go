// Package browsertest owns what the browser tests (build tag browser) share:
// a headless Debian chromium driven by chromedp, a skip with one clear line
// where chromium is not installed, polling the page for a condition, and
// screenshots into $QUARRY_SCREENSHOTS when `make screenshots` sets it.
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browsers are the executables tried, in order ($QUARRY_CHROMIUM first).
var browsers = []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"}

// New starts a headless browser for t and returns its tab's context
// (cancelled at cleanup, with a deadline of d). Without a browser the test
// is skipped with a line saying how to get one.
func New(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	bin := os.Getenv("QUARRY_CHROMIUM")
	if bin == "" {
		for _, b := range browsers {
			if p, err := exec.LookPath(b); err == nil {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		t.Skip("browser test skipped: no chromium on PATH (apt-get install -y chromium, or set QUARRY_CHROMIUM)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(ctx, d)
	t.Cleanup(func() { tcancel(); cancel(); acancel() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	return ctx
}

// Eval evaluates a JavaScript expression and decodes its (JSON-able) value
// into out.
func Eval(ctx context.Context, expr string, out any) error {
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string]("JSON.stringify("+expr+")"))
	if err != nil {
		return fmt.Errorf("evaluate %s: %w", expr, err)
	}
	return json.Unmarshal([]byte(s), out)
}

// Poll evaluates cond until it returns nil or d passes, then fails t with
// cond's last error (no sleep stands for a condition).
func Poll(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("page condition not met within %v: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Screenshot writes a PNG of the window (1280×900) named name into $QUARRY_SCREENSHOTS
// (nothing when unset).
func Screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("QUARRY_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}
