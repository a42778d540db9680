package manager

import (
	"context"
	"net/http"
	"net/url"
)

// Indexes is GET /v1/indexes.
func (c *Client) Indexes(ctx context.Context) ([]IndexView, error) {
	var out struct {
		Indexes []IndexView `json:"indexes"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/indexes", nil, &out)
	return out.Indexes, err
}

// AddIndex is POST /v1/indexes.
func (c *Client) AddIndex(ctx context.Context, req IndexRequest) (IndexView, error) {
	var out struct {
		Index IndexView `json:"index"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/indexes", req, &out)
	return out.Index, err
}

// RemoveIndex is DELETE /v1/indexes/{name}.
func (c *Client) RemoveIndex(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/indexes/"+url.PathEscape(name), nil, nil)
}

// Tokens is GET /v1/tokens: ids and prefixes, never the secrets.
func (c *Client) Tokens(ctx context.Context) ([]TokenView, error) {
	path := "/v1/tokens"
	var out struct {
		Tokens []TokenView `json:"tokens"`
	}
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out.Tokens, err
}

// AddToken is POST /v1/tokens; the answer holds the secret.
func (c *Client) AddToken(ctx context.Context, req TokenRequest) (TokenView, error) {
	var out struct {
		Token TokenView `json:"token"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/tokens", req, &out)
	return out.Token, err
}

// RevokeToken is DELETE /v1/tokens/{id}.
func (c *Client) RevokeToken(ctx context.Context, id string) (RevokeResponse, error) {
	var out RevokeResponse
	err := c.do(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, &out)
	return out, err
}
