package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

func waitClusterVersion(t *testing.T, m *Manager, v int) {
	t.Helper()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if got := m.ClusterVersion(); got < v {
			return fmt.Errorf("cluster version %d, want %d", got, v)
		}
		return nil
	})
}

func wantStatus(t *testing.T, err error, status int, what string) {
	t.Helper()
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != status {
		t.Fatalf("%s: %v, want HTTP %d", what, err, status)
	}
}

func TestSavedSearchAPI(t *testing.T) {
	g := newGroup(t, 1, nil)
	l := g.leader()
	waitClusterVersion(t, l, fsm.SavedSearchVersion)
	cl, err := NewClient([]string{"http://" + l.HTTPAddr()}, testToken, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := SavedSearchRequest{Name: "errors", Search: "index=web error | stats count", Cron: "*/5 * * * *", Publish: "errors-out", AlertIf: "count > 10"}
	v, err := cl.AddSavedSearch(ctx, req)
	if err != nil || v.Name != "errors" || v.NextRun == "" || v.AlertIf != "count > 10" {
		t.Fatalf("add: %+v, %v", v, err)
	}
	_, err = cl.AddSavedSearch(ctx, req)
	wantStatus(t, err, http.StatusConflict, "add again")
	for _, bad := range []SavedSearchRequest{
		{Name: "b1", Search: "index=web | stats count(", Cron: "* * * * *"},
		{Name: "b2", Search: "index=web", Cron: "every minute"},
		{Name: "b3", Search: "index=web", Cron: "* * * * *", AlertIf: "rows > 3"},
		{Name: "b.4", Search: "index=web", Cron: "* * * * *"},
		{Name: "b5", Search: "index=web", Cron: "* * * * *", Publish: "a b"},
		{Name: "b6", Search: "", Cron: "* * * * *"},
	} {
		_, err := cl.AddSavedSearch(ctx, bad)
		wantStatus(t, err, http.StatusBadRequest, fmt.Sprintf("add %+v", bad))
	}
	slot, err := cl.RunSavedSearch(ctx, "errors")
	if err != nil || slot < time.Now().Add(-time.Minute).Unix() {
		t.Fatalf("run: %d, %v", slot, err)
	}
	_, err = cl.RunSavedSearch(ctx, "nope")
	wantStatus(t, err, http.StatusNotFound, "run unknown")
	list, err := cl.SavedSearches(ctx)
	if err != nil || len(list) != 1 || len(list[0].Open) != 1 || !list[0].Open[0].Manual || list[0].Open[0].Slot != slot {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := cl.RemoveSavedSearch(ctx, "errors"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, cl.RemoveSavedSearch(ctx, "errors"), http.StatusNotFound, "remove again")
	if list, err := cl.SavedSearches(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list after remove: %+v, %v", list, err)
	}
}

// TestSavedSearchAPIRefusesOtherRoles: every saved-search endpoint needs
// the admin token; none, a wrong one or a search token gets 401 (SECURITY.md).
func TestSavedSearchAPIRefusesOtherRoles(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) {
		c.Seed.SearchTokens = []fsm.SearchToken{{Token: "search-token-1"}}
	})
	l := g.leader()
	waitClusterVersion(t, l, fsm.SavedSearchVersion)
	base := "http://" + l.HTTPAddr()
	body := `{"name":"s","search":"index=web","cron":"* * * * *"}`
	for _, tok := range []string{"", "wrong-token", "search-token-1"} {
		for _, c := range []struct{ method, path, body string }{
			{http.MethodPost, "/v1/savedsearches", body},
			{http.MethodGet, "/v1/savedsearches", ""},
			{http.MethodDelete, "/v1/savedsearches/s", ""},
			{http.MethodPost, "/v1/savedsearches/s/run", ""},
		} {
			r, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
			if tok != "" {
				r.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := noRedirect.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s %s with token %q: %d, want 401", c.method, c.path, tok, resp.StatusCode)
			}
		}
	}
}

// TestSavedSearchAPIClusterVersion: a group that has not agreed version
// fsm.SavedSearchVersion refuses an add with 409 cluster_version.
func TestSavedSearchAPIClusterVersion(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.fsmVersion = fsm.SavedSearchVersion - 1 })
	l := g.leader()
	cl, err := NewClient([]string{"http://" + l.HTTPAddr()}, testToken, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cl.AddSavedSearch(ctx, SavedSearchRequest{Name: "s", Search: "index=web", Cron: "* * * * *"})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "cluster_version" {
		t.Fatalf("add at version %d: %v, want 409 cluster_version", l.ClusterVersion(), err)
	}
}
