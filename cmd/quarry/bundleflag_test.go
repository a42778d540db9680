package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quarry-dev/quarry/knowledge"
)

// TestPeerBundleFlag: `quarry peer --bundle DIR` parses DIR's props.conf
// at start (the peer runs its hash); a malformed one stops the start with
// an error naming the file and line; with --nats it is refused, since the
// managers push the bundle in a cluster.
func TestPeerBundleFlag(t *testing.T) {
	clearSecretEnv(t)
	dir := t.TempDir()
	props := "[app]\nTIME_PREFIX = ts=\nTIME_FORMAT = %Y-%m-%dT%H:%M:%S\n"
	if err := os.WriteFile(filepath.Join(dir, "props.conf"), []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--id", "p1", "--data-dir", t.TempDir(), "--hec-token", "T"}
	cfg, err := runPeerFlags(t, append(base, "--bundle", dir)...)
	if err != nil {
		t.Fatal(err)
	}
	want := knowledge.Files{"props.conf": []byte(props)}.Hash()
	if cfg.Bundle == nil || cfg.Bundle.Hash() != want {
		t.Fatalf("--bundle: rules %v, want hash %s", cfg.Bundle, want)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "props.conf"), []byte("[app]\nTIME_FORMAT = %Y-%c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runPeerFlags(t, append(base, "--bundle", bad)...); err == nil || !strings.Contains(err.Error(), "props.conf:2") {
		t.Fatalf("malformed bundle: %v, want an error naming props.conf:2", err)
	}
	if _, err := runPeerFlags(t, "--id", "p1", "--data-dir", t.TempDir(), "--nats", "nats://127.0.0.1:1", "--bundle", dir); err == nil || !strings.Contains(err.Error(), "--bundle") {
		t.Fatalf("--bundle with --nats: %v, want a refusal naming --bundle", err)
	}
}
