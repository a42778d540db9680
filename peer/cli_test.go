package peer_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/quarry-dev/quarry/peer/store"
)

// TestCLIPeerAndIngest runs the binary: `quarry peer` with a token limited
// to two indexes (commas inside one --hec-token) and a token without acks
// (`:useack=false`), `quarry ingest` with two streams into one of them with
// each token, and `quarry peer --nats` refused.
func TestCLIPeerAndIngest(t *testing.T) {
	dir := t.TempDir()
	c := startPeerProcess(t, "", os.Stderr, "--id", "p9", "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0",
		"--hec-token", "T=web,main", "--hec-token", "N=web:useack=false", "--attr", "rack=r1")
	cmd, url := c.cmd, c.url
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-c.exit; err != nil {
			t.Errorf("peer exit: %v", err)
		}
	}()
	f := filepath.Join(dir, "app.log")
	var b strings.Builder
	for i := 0; i < 1234; i++ {
		fmt.Fprintf(&b, "line %d of the app log\n", i)
	}
	os.WriteFile(f, []byte(b.String()), 0o644)
	ing := exec.Command(quarryBin, "ingest", "--hec", url, "--token", "T", "--index", "web", "--streams", "2", "--batch", "100", "--quiet", f)
	msg, err := ing.CombinedOutput()
	if err != nil || !strings.Contains(string(msg), "ingested 1234 events") {
		t.Fatalf("quarry ingest: %v: %s", err, msg)
	}
	ing = exec.Command(quarryBin, "ingest", "--hec", url, "--token", "N", "--streams", "2", "--batch", "100", "--quiet", f)
	msg, err = ing.CombinedOutput()
	if err != nil || !strings.Contains(string(msg), "ingested 1234 events") {
		t.Fatalf("quarry ingest with a token without acks: %v: %s", err, msg)
	}
	// an index the token does not allow: refused with Splunk's reply, exit 1
	ing = exec.Command(quarryBin, "ingest", "--hec", url, "--token", "T", "--index", "secret", "--quiet", f)
	msg, err = ing.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "Incorrect index") {
		t.Fatalf("ingest into a forbidden index: %v: %s", err, msg)
	}
	resp, err := http.Get(url + "/v1/buckets")
	if err != nil {
		t.Fatal(err)
	}
	var br struct {
		Buckets []store.CopyInfo `json:"buckets"`
	}
	json.NewDecoder(resp.Body).Decode(&br)
	resp.Body.Close()
	total := uint32(0)
	for _, c := range br.Buckets {
		if c.Index != "web" {
			t.Fatalf("copy in index %s", c.Index)
		}
		total += c.Events
	}
	if total != 2*1234 {
		t.Fatalf("%d events stored, want %d", total, 2*1234)
	}
	// In cluster mode tokens come from the managers: a --hec-token is refused.
	msg, err = exec.Command(quarryBin, "peer", "--id", "x", "--data-dir", dir, "--nats", "nats://127.0.0.1:4222", "--hec-token", "t").CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "cluster mode") {
		t.Fatalf("peer --nats: %v: %s", err, msg)
	}
}
