package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestManagerRecoverFlagsRefused: every refusal of `quarry manager recover`
// before it reads anything is one clear line, and an empty data dir is
// refused with nothing created in it.
func TestManagerRecoverFlagsRefused(t *testing.T) {
	for _, k := range []string{"QUARRY_ID", "QUARRY_DATA_DIR", "QUARRY_MEMBERS", "QUARRY_MANAGER", "QUARRY_OUTPUT"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no id", []string{"--data-dir", empty, "--members", "m1=127.0.0.1:7001"}, "--id is required"},
		{"no data dir", []string{"--id", "m1", "--members", "m1=127.0.0.1:7001"}, "--data-dir is required"},
		{"no members", []string{"--id", "m1", "--data-dir", empty}, "--members is required"},
		{"malformed member", []string{"--id", "m1", "--data-dir", empty, "--members", "m1"}, "is not id=host:port"},
		{"member without port", []string{"--id", "m1", "--data-dir", empty, "--members", "m1=host"}, "missing port"},
		{"members without id", []string{"--id", "m1", "--data-dir", empty, "--members", "m2=127.0.0.1:7002"}, "does not include this manager"},
		{"id twice", []string{"--id", "m1", "--data-dir", empty, "--members", "m1=127.0.0.1:7001,m1=127.0.0.1:7002"}, `id "m1" twice`},
		{"address twice", []string{"--id", "m1", "--data-dir", empty, "--members", "m1=127.0.0.1:7001,m2=127.0.0.1:7001"}, "twice in --members"},
		{"port zero", []string{"--id", "m1", "--data-dir", empty, "--members", "m1=127.0.0.1:0"}, "needs a real port"},
		{"bad output", []string{"--id", "m1", "--data-dir", empty, "--members", "m1=127.0.0.1:7001", "--output", "xml"}, "--output"},
		{"arguments", []string{"--id", "m1", "--data-dir", empty, "--members", "m1=127.0.0.1:7001", "extra"}, "unexpected arguments"},
		{"no raft state", []string{"--id", "m1", "--data-dir", empty, "--members", "m1=127.0.0.1:7001"}, "no raft state"},
	} {
		err := newApp().Run(append([]string{"quarry", "manager", "recover"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("refused recovers created %v in the data dir", ents)
	}
	if _, err := os.Stat(filepath.Join(empty, "raft")); !os.IsNotExist(err) {
		t.Fatalf("raft dir created: %v", err)
	}
}

// TestManagerRebuildFlagsRefused: a negative --expect-peers is refused
// before any call.
func TestManagerRebuildFlagsRefused(t *testing.T) {
	t.Setenv("QUARRY_EXPECT_PEERS", "")
	os.Unsetenv("QUARRY_EXPECT_PEERS")
	err := newApp().Run([]string{"quarry", "manager", "rebuild", "--expect-peers", "-1", "--manager", "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "--expect-peers -1") {
		t.Fatalf("negative --expect-peers: %v", err)
	}
	err = newApp().Run([]string{"quarry", "manager", "rebuild", "extra", "--manager", "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "no arguments") {
		t.Fatalf("argument: %v", err)
	}
}

// TestReadmeQuorumLossCommandsParse: the `quarry manager recover` and
// `quarry manager rebuild` lines of README "Quorum loss" parse as written
// (every flag exists); they then fail only for the deployment they name
// (no data dir here, no manager listening). What they do on a cluster is
// integration/cluster_quorum_test.go's (the README names which test runs
// which line).
func TestReadmeQuorumLossCommandsParse(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Quorum loss\n")
	if !ok {
		t.Fatal("README has no Quorum loss section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	t.Setenv("QUARRY_MANAGER", "http://127.0.0.1:1")
	t.Setenv("QUARRY_TIMEOUT", "1s")
	n := 0
	for _, line := range strings.Split(section, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if !strings.HasPrefix(line, "quarry manager recover ") && !strings.HasPrefix(line, "quarry manager rebuild") {
			continue
		}
		n++
		args := strings.Fields(line)
		err := newApp().Run(args)
		if err == nil {
			t.Fatalf("%q succeeded with no deployment", line)
		}
		if strings.Contains(err.Error(), "flag provided but not defined") || strings.Contains(err.Error(), "invalid value") {
			t.Fatalf("%q does not parse: %v", line, err)
		}
		t.Logf("%s → %v", line, err)
	}
	if n != 2 {
		t.Fatalf("found %d recover/rebuild lines in README Quorum loss, want 2", n)
	}
}
