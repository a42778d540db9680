package main

import (
	"strings"
	"testing"
	"time"
)

// TestPeerLimitFlags: --max-hot-buckets-total, --max-hot-idle and
// --max-indexes default to 256, 1 h and 1,000; 0 turns the idle roll and
// the index cap off (negative in the config, as the store reads it); a
// negative value, or a hot cap below 1, is refused with one clear line.
func TestPeerLimitFlags(t *testing.T) {
	clearSecretEnv(t)
	base := []string{"--id", "p1", "--data-dir", "/d", "--hec-token", "T"}
	cfg, err := runPeerFlags(t, base...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxHotBucketsTotal != 256 || cfg.MaxHotIdle != time.Hour || cfg.MaxIndexes != 1000 {
		t.Fatalf("defaults: %d hot, idle %v, %d indexes", cfg.MaxHotBucketsTotal, cfg.MaxHotIdle, cfg.MaxIndexes)
	}
	cfg, err = runPeerFlags(t, append(base, "--max-hot-buckets-total", "64", "--max-hot-idle", "0", "--max-indexes", "0")...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxHotBucketsTotal != 64 || cfg.MaxHotIdle >= 0 || cfg.MaxIndexes >= 0 {
		t.Fatalf("64, 0, 0: %d hot, idle %v, %d indexes; want 64 and both off", cfg.MaxHotBucketsTotal, cfg.MaxHotIdle, cfg.MaxIndexes)
	}
	for _, bad := range [][]string{{"--max-hot-buckets-total", "0"}, {"--max-hot-idle", "-1s"}, {"--max-indexes", "-5"}} {
		if _, err := runPeerFlags(t, append(base, bad...)...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v, want a refusal naming the flag", bad, err)
		}
	}
}
