package main

import (
	"strings"
	"testing"
	"time"

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
