package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestSavedSearchCommands: quarry savedsearch add/list/run/remove against
// a running manager — flags and their QUARRY_SAVEDSEARCH_* variables,
// table and JSON output, one clear error for a refusal.
func TestSavedSearchCommands(t *testing.T) {
	for _, v := range []string{"QUARRY_OUTPUT", "QUARRY_TIMEOUT", "QUARRY_TOKEN_FILE", "QUARRY_TLS_CA", "QUARRY_ADMIN_TOKEN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	url, m := mustStartManager(t)
	deadline := time.Now().Add(20 * time.Second)
	for m.ClusterVersion() < fsm.SavedSearchVersion {
		if time.Now().After(deadline) {
			t.Fatalf("cluster version %d", m.ClusterVersion())
		}
		time.Sleep(20 * time.Millisecond) // poll interval of the condition above
	}
	t.Setenv("QUARRY_MANAGER", url)
	t.Setenv("QUARRY_ADMIN_TOKEN", "admin-secret")
	run := func(args ...string) string {
		t.Helper()
		out, _, err := runInProcess(t, args...)
		if err != nil {
			t.Fatalf("quarry %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	out := run("savedsearch", "add", "errs", "--search", "index=main error | stats count", "--cron", "*/5 * * * *", "--alert-if", "count > 3")
	if !strings.Contains(out, "saved search errs added; next run 20") {
		t.Fatalf("add: %q", out)
	}
	t.Setenv("QUARRY_SAVEDSEARCH_CRON", "@every 10s")
	t.Setenv("QUARRY_SAVEDSEARCH_SEARCH", "index=main | head 1")
	run("savedsearch", "add", "from-env")
	if _, _, err := runInProcess(t, "savedsearch", "add", "bad", "--cron", "61 * * * *"); err == nil || !strings.Contains(err.Error(), "cron") {
		t.Fatalf("bad cron: %v", err)
	}
	if _, _, err := runInProcess(t, "savedsearch", "add", "errs"); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("add twice: %v", err)
	}
	if out := run("savedsearch", "run", "errs"); !strings.Contains(out, "queued to run once") {
		t.Fatalf("run: %q", out)
	}
	table := run("savedsearch", "list")
	if !strings.Contains(table, "NAME") || !strings.Contains(table, "errs") || !strings.Contains(table, "@every 10s") {
		t.Fatalf("list:\n%s", table)
	}
	var js struct {
		SavedSearches []struct {
			Name    string `json:"name"`
			AlertIf string `json:"alert_if"`
			Open    []any  `json:"open"`
		} `json:"savedsearches"`
	}
	if err := json.Unmarshal([]byte(run("savedsearch", "list", "--output", "json")), &js); err != nil || len(js.SavedSearches) != 2 ||
		js.SavedSearches[0].Name != "errs" || js.SavedSearches[0].AlertIf != "count > 3" || len(js.SavedSearches[0].Open) != 1 {
		t.Fatalf("list json: %+v, %v", js, err)
	}
	run("savedsearch", "remove", "errs")
	if _, _, err := runInProcess(t, "savedsearch", "remove", "errs"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("remove twice: %v", err)
	}
}
