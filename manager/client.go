package manager

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// Client talks to the managers' HTTP API. It tries each URL in turn: a
// manager that cannot be reached or answers 5xx is skipped; a 4xx answer
// (bad request, unauthorized, unknown peer) is final. Writes follow a
// follower's 307 to the leader with the token. Every call has a timeout.
type Client struct {
	URLs    []string
	Token   string
	http    *http.Client
	timeout time.Duration
}

// DefaultClientTimeout bounds one HTTP call of the Client.
const DefaultClientTimeout = 10 * time.Second

// NewClient returns a client for the managers at urls (http://host:port).
func NewClient(urls []string, token string, timeout time.Duration) (*Client, error) {
	if timeout <= 0 {
		timeout = DefaultClientTimeout
	}
	var clean []string
	for _, u := range urls {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Host == "" || (pu.Scheme != "http" && pu.Scheme != "https") {
			return nil, fmt.Errorf("manager URL %q: want http://host:port", u)
		}
		clean = append(clean, strings.TrimSuffix(u, "/"))
	}
	if len(clean) == 0 {
		return nil, errors.New("no manager URL given (--manager or QUARRY_MANAGER)")
	}
	return &Client{URLs: clean, Token: token, http: redirectClient(timeout, nil), timeout: timeout}, nil
}

// UseTLS makes the client verify HTTPS managers with cfg (a
// tlsconfig.Files.Client config: the deployment's CA) instead of the
// system roots.
func (c *Client) UseTLS(cfg *tls.Config) {
	c.http = redirectClient(c.timeout, cfg)
}

// noLeaderRetry is how long the client keeps retrying while the managers
// answer but none knows a leader (an election is under way).
const noLeaderRetry = 3 * time.Second

// do sends the request to each manager in turn until one answers with a
// final status, and decodes a 2xx JSON answer into out. When every manager
// that answered said "no leader", it retries for up to noLeaderRetry.
func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	deadline := time.Now().Add(noLeaderRetry)
	// A write carries one request id over every attempt, so a write that
	// was applied but whose answer was lost is not applied twice.
	var rid string
	if method != http.MethodGet {
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("request id: %w", err)
		}
		rid = "cli-" + hex.EncodeToString(b[:])
	}
	for {
		err := c.doOnce(ctx, method, path, rid, body, out)
		var nl *noLeaderError
		if !errors.As(err, &nl) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// noLeaderError: every manager that answered had no leader.
type noLeaderError struct{ error }

func (e *noLeaderError) Unwrap() error { return e.error }

func (c *Client) doOnce(ctx context.Context, method, path, rid string, body any, out any) error {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		payload = b
	}
	var errs []string
	noLeader := 0
	for _, base := range c.URLs {
		var rd io.Reader
		if payload != nil {
			rd = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return err
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		if rid != "" {
			req.Header.Set("X-Request-Id", rid)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%s %s: %w", method, path, ctx.Err())
			}
			errs = append(errs, fmt.Sprintf("%s: %v", base, err))
			continue
		}
		if resp.StatusCode/100 == 2 {
			err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(out)
			resp.Body.Close()
			if err != nil && out != nil {
				return fmt.Errorf("%s %s%s: decode answer: %w", method, base, path, err)
			}
			return nil
		}
		apiErr := decodeAPIError(resp)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			if ae, ok := apiErr.(*APIError); ok && ae.Code == "no_leader" {
				noLeader++
			}
			errs = append(errs, fmt.Sprintf("%s: %v", base, apiErr))
			continue
		}
		return apiErr
	}
	err := fmt.Errorf("%s %s: no manager answered: %s", method, path, strings.Join(errs, "; "))
	if noLeader > 0 {
		return &noLeaderError{err}
	}
	return err
}

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (fsm.Status, error) {
	var st fsm.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st)
	return st, err
}

// Peers is GET /v1/peers.
func (c *Client) Peers(ctx context.Context) ([]fsm.PeerView, error) {
	var out struct {
		Peers []fsm.PeerView `json:"peers"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/peers", nil, &out)
	return out.Peers, err
}

// Buckets is GET /v1/buckets[?index=&peer=].
func (c *Client) Buckets(ctx context.Context, index, peer string) ([]fsm.BucketView, error) {
	q := url.Values{}
	if index != "" {
		q.Set("index", index)
	}
	if peer != "" {
		q.Set("peer", peer)
	}
	path := "/v1/buckets"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Buckets []fsm.BucketView `json:"buckets"`
	}
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out.Buckets, err
}

// Generation is GET /v1/generation?site=&since=.
func (c *Client) Generation(ctx context.Context, site string, since uint64) (fsm.GenerationView, error) {
	q := url.Values{"site": {site}}
	if since > 0 {
		q.Set("since", fmt.Sprint(since))
	}
	var out fsm.GenerationView
	err := c.do(ctx, http.MethodGet, "/v1/generation?"+q.Encode(), nil, &out)
	return out, err
}

// Managers is GET /v1/managers.
func (c *Client) Managers(ctx context.Context) (ManagersView, error) {
	var out ManagersView
	err := c.do(ctx, http.MethodGet, "/v1/managers", nil, &out)
	return out, err
}

// Fixups is GET /v1/fixups.
func (c *Client) Fixups(ctx context.Context) ([]FixupView, error) {
	var out struct {
		Fixups []FixupView `json:"fixups"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/fixups", nil, &out)
	return out.Fixups, err
}

// Offline is POST /v1/peers/{id}/offline[?enforce_counts=true].
func (c *Client) Offline(ctx context.Context, id string, enforceCounts bool) error {
	path := "/v1/peers/" + url.PathEscape(id) + "/offline"
	if enforceCounts {
		path += "?enforce_counts=true"
	}
	return c.do(ctx, http.MethodPost, path, nil, nil)
}

// SetMaintenance is POST /v1/maintenance {"enabled": on}.
func (c *Client) SetMaintenance(ctx context.Context, on bool) error {
	return c.do(ctx, http.MethodPost, "/v1/maintenance", map[string]bool{"enabled": on}, nil)
}

// Rebalance is POST /v1/rebalance.
func (c *Client) Rebalance(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/rebalance", nil, nil)
}
