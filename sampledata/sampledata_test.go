package sampledata

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSameAsBenchGenerator: the events equal what the bench generator
// writes for the same n, seed and base (when ../shared/bench is present).
func TestSameAsBenchGenerator(t *testing.T) {
	gen := filepath.Join("..", "..", "shared", "bench", "gen_events.go")
	if _, err := os.Stat(gen); err != nil {
		t.Skipf("bench generator not present (%v)", err)
	}
	out := filepath.Join(t.TempDir(), "ev.jsonl")
	cmd := exec.Command("go", "run", gen, "-n", "2000", "-seed", "7", "-format", "hec", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen_events: %v: %s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	c, err := Write(&got, 2000, 7, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "main")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		h1, h2 := sha256.Sum256(got.Bytes()), sha256.Sum256(want)
		t.Fatalf("sample differs from gen_events.go: %s vs %s", hex.EncodeToString(h1[:8]), hex.EncodeToString(h2[:8]))
	}
	if c.Events != 2000 || c.Rare != 10 || c.Errors != strings.Count(got.String(), "error") {
		t.Fatalf("counts %+v", c)
	}
}
