package main

import (
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/searchhead"
)

// TestSearchheadJobFlags: the Splunk REST API's job limits take their
// defaults, their flags and their QUARRY_ variables; a limit of 0 is
// refused with one line naming the flags.
func TestSearchheadJobFlags(t *testing.T) {
	clearSecretEnv(t)
	cfg, err := runSearchheadFlags(t, "--id", "sh1", "--site", "site1")
	if err != nil {
		t.Fatal(err)
	}
	want := searchhead.JobLimits{TTL: searchhead.DefaultJobTTL, PerToken: searchhead.DefaultMaxJobsPerToken, Total: searchhead.DefaultMaxJobs,
		JobBytes: searchhead.DefaultJobMaxBytes, TotalBytes: searchhead.DefaultJobsMaxBytes}
	if cfg.Jobs != want {
		t.Fatalf("defaults %+v, want %+v", cfg.Jobs, want)
	}
	t.Setenv("QUARRY_SPLUNK_MAX_JOBS", "7")
	cfg, err = runSearchheadFlags(t, "--id", "sh1", "--site", "site1", "--splunk-job-ttl", "90s", "--splunk-max-jobs-per-token", "3",
		"--splunk-job-max-bytes", "1048576", "--splunk-jobs-max-bytes", "8388608")
	if err != nil {
		t.Fatal(err)
	}
	want = searchhead.JobLimits{TTL: 90 * time.Second, PerToken: 3, Total: 7, JobBytes: 1 << 20, TotalBytes: 8 << 20}
	if cfg.Jobs != want {
		t.Fatalf("flags %+v, want %+v", cfg.Jobs, want)
	}
	_, err = runSearchheadFlags(t, "--id", "sh1", "--site", "site1", "--splunk-max-jobs-per-token", "0")
	if err == nil || !strings.Contains(err.Error(), "--splunk-max-jobs-per-token 0") {
		t.Fatalf("a limit of 0: %v", err)
	}
}

// TestSearchMemoryFlag: --search-memory on a search head and on a peer
// defaults to query.DefaultSearchMemory, takes its flag and QUARRY_
// variable, and a budget under 1 MiB is refused with one line naming it.
func TestSearchMemoryFlag(t *testing.T) {
	clearSecretEnv(t)
	cfg, err := runSearchheadFlags(t, "--id", "sh1", "--site", "site1")
	if err != nil || cfg.SearchMemory != query.DefaultSearchMemory {
		t.Fatalf("head default: %d, %v", cfg.SearchMemory, err)
	}
	t.Setenv("QUARRY_SEARCH_MEMORY", "67108864")
	if cfg, err = runSearchheadFlags(t, "--id", "sh1", "--site", "site1"); err != nil || cfg.SearchMemory != 64<<20 {
		t.Fatalf("head from QUARRY_SEARCH_MEMORY: %d, %v", cfg.SearchMemory, err)
	}
	if _, err := runSearchheadFlags(t, "--id", "sh1", "--site", "site1", "--search-memory", "1000"); err == nil || !strings.Contains(err.Error(), "--search-memory 1000") {
		t.Fatalf("head under 1 MiB: %v", err)
	}
	base := []string{"--id", "p1", "--data-dir", "/d", "--hec-token", "T"}
	pc, err := runPeerFlags(t, append(base, "--search-memory", "134217728")...)
	if err != nil || pc.SearchMemory != 128<<20 {
		t.Fatalf("peer flag: %d, %v", pc.SearchMemory, err)
	}
	if _, err := runPeerFlags(t, append(base, "--search-memory", "0")...); err == nil || !strings.Contains(err.Error(), "--search-memory 0") {
		t.Fatalf("peer budget 0: %v", err)
	}
}
