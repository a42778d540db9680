package manager

import (
	"context"
	"net/http"
	"net/url"
)

// The admin client's saved-search calls (savedapi.go).

// AddSavedSearch is POST /v1/savedsearches.
func (c *Client) AddSavedSearch(ctx context.Context, req SavedSearchRequest) (SavedSearchView, error) {
	var out struct {
		SavedSearch SavedSearchView `json:"savedsearch"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/savedsearches", req, &out)
	return out.SavedSearch, err
}

// SavedSearches is GET /v1/savedsearches.
func (c *Client) SavedSearches(ctx context.Context) ([]SavedSearchView, error) {
	var out struct {
		SavedSearches []SavedSearchView `json:"savedsearches"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/savedsearches", nil, &out)
	return out.SavedSearches, err
}

// RemoveSavedSearch is DELETE /v1/savedsearches/{name}.
func (c *Client) RemoveSavedSearch(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/savedsearches/"+url.PathEscape(name), nil, nil)
}

// RunSavedSearch is POST /v1/savedsearches/{name}/run: it queues a manual
// slot and returns it (unix seconds).
func (c *Client) RunSavedSearch(ctx context.Context, name string) (int64, error) {
	var out struct {
		Slot int64 `json:"slot"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/savedsearches/"+url.PathEscape(name)+"/run", nil, &out)
	return out.Slot, err
}
