package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
)

// ControlPlane is what a cluster peer asks of the managers (SPEC §3). The
// HTTP implementation talks to the managers' admin API until the NATS
// transport (quarry.mgr.<op>) lands; the replicator and the heartbeat loop
// only see this interface.
type ControlPlane interface {
	Register(ctx context.Context, id string, req RegisterRequest) error
	// Heartbeat returns ErrRegisterFirst when the managers want a fresh
	// registration (the peer was declared Down, or is unknown).
	// It returns the peer's state in the managers' table when known. The
	// stats ride along (disk space for the managers' detention rule).
	Heartbeat(ctx context.Context, id string, stats api.PeerStats) (fsm.PeerState, error)
	Config(ctx context.Context) (fsm.Config, error)
	Peers(ctx context.Context) ([]fsm.PeerView, error)
	// Targets asks for the replication targets of a new hot bucket; the
	// managers commit the bucket with them.
	Targets(ctx context.Context, req TargetsRequest) (TargetsResponse, error)
	// BucketEvent reports a bucket event (rolled, target failed).
	BucketEvent(ctx context.Context, ev BucketEvent) error
	// Maintenance reports whether maintenance mode is on.
	Maintenance(ctx context.Context) (bool, error)
	// Buckets lists the buckets the managers know with a copy on peer.
	Buckets(ctx context.Context, peer string) ([]fsm.BucketView, error)
	// Fixups lists the open fixup tasks this peer acts on (its target, or
	// its source for a replication).
	Fixups(ctx context.Context, peer string) ([]FixupTask, error)
	// Confirm checks a destructive task against the leader's committed
	// state; it fails unless the task is open there.
	Confirm(ctx context.Context, id uint64) (FixupTask, error)
	// FixupResult reports a task's outcome.
	FixupResult(ctx context.Context, res FixupResult) error
}

// FixupTask is one fixup task as a peer gets it: the FSM record plus, for
// fetch and truncate, the bucket's sealed length (SealedBlocks < 0: not
// known to this control plane yet).
type FixupTask struct {
	fsm.Task
	SealedBlocks int64  `json:"sealed_blocks"`
	LastChecksum string `json:"last_checksum,omitempty"`
	Confirmed    bool   `json:"confirmed,omitempty"`
}

// FixupResult is what a peer reports when a task ends.
type FixupResult struct {
	ID          uint64 `json:"id"`
	Peer        string `json:"peer"`
	Bucket      string `json:"bucket"`
	Failed      bool   `json:"failed,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Blocks      int    `json:"blocks,omitempty"`
	Searchable  bool   `json:"searchable,omitempty"`
	ContentHash string `json:"content_hash,omitempty"`
	Bytes       int64  `json:"bytes,omitempty"` // bytes moved over the network
}

// ErrRegisterFirst: the managers do not count this peer as up.
var ErrRegisterFirst = errors.New("managers ask the peer to register first")

// ErrUnsupported: this control plane cannot carry the call yet.
var ErrUnsupported = errors.New("not supported by this control plane")

// RegisterRequest is a registration with the bucket inventory.
type RegisterRequest struct {
	GUID      string            `json:"guid"`
	Site      string            `json:"site"`
	Host      string            `json:"host,omitempty"`
	Attrs     map[string]string `json:"attrs,omitempty"`
	Inventory []fsm.CopyInfo    `json:"inventory,omitempty"`
	HTTPAddr  string            `json:"-"`
	// content hash and last block checksum per copy (NATS registration)
	hashes, lastSums map[string]string
}

// TargetsRequest asks targets for a new hot bucket.
type TargetsRequest struct {
	Index    string `json:"index"`
	LocalID  string `json:"local_id"`
	Origin   string `json:"origin"`
	Earliest int64  `json:"earliest,omitempty"`
	// Used: targets the origin already replicates to (api.TargetsRequest).
	Used []fsm.CopySpec `json:"used,omitempty"`
	// Replace: ask for one replacement of a failed target instead.
	Replace []string `json:"replace,omitempty"`
}

// TargetsResponse is the bucket id and its replication targets.
type TargetsResponse struct {
	Bucket string `json:"bucket"`
	fsm.TargetChoice
	// Sites are the targets' subject sites, when the control plane says.
	Sites map[string]string `json:"-"`
}

// BucketEvent is a bucket event an origin reports.
type BucketEvent struct {
	Type         string `json:"type"` // "rolled", "target_failed", "target_lagging", "target_caught_up", …
	Bucket       string `json:"bucket"`
	Peer         string `json:"peer"`             // reporting peer
	Target       string `json:"target,omitempty"` // target_* events
	Blocks       int    `json:"blocks,omitempty"`
	Events       int64  `json:"events,omitempty"`
	Size         int64  `json:"size,omitempty"`
	Earliest     int64  `json:"earliest,omitempty"`
	Latest       int64  `json:"latest,omitempty"`
	Searchable   bool   `json:"searchable,omitempty"`
	LastChecksum string `json:"last_checksum,omitempty"`
	// SealedBlocks, SealedChecksum: the sealed length an "extend_seal"
	// was verified against.
	SealedBlocks   int    `json:"sealed_blocks,omitempty"`
	SealedChecksum string `json:"sealed_checksum,omitempty"`
}

// HTTPControlPlane is a ControlPlane over the managers' HTTP API. It tries
// the managers in order and follows a follower's redirect to the leader.
type HTTPControlPlane struct {
	URLs   []string
	Token  string // admin bearer token (writes)
	Client *http.Client
}

// NewHTTPControlPlane returns a control plane on the given manager URLs.
func NewHTTPControlPlane(urls []string, token string) *HTTPControlPlane {
	return &HTTPControlPlane{URLs: urls, Token: token, Client: &http.Client{
		Timeout: 5 * time.Second,
		// Redirects are followed by hand: Go's client drops the
		// Authorization header when a follower's 307 points at the
		// leader's port.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type apiError struct {
	Status int
	Code   string `json:"code"`
	Msg    string `json:"error"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("manager answered %d %s: %s", e.Status, e.Code, e.Msg)
}

func (c *HTTPControlPlane) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	var lastErr error
	urls := append([]string(nil), c.URLs...)
	for i, hops := 0, 0; i < len(urls); i++ {
		target := strings.TrimRight(urls[i], "/") + path
		if strings.Contains(urls[i], "/v1/") {
			target = urls[i] // a redirect's Location
		}
		req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := c.Client.Do(req)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				return err
			}
			continue
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusTemporaryRedirect && loc != "" && hops < 3 {
			if u, err := resp.Request.URL.Parse(loc); err == nil {
				hops++
				urls = append(urls[:i+1:i+1], append([]string{u.String()}, urls[i+1:]...)...)
				continue
			}
		}
		if resp.StatusCode/100 != 2 {
			ae := &apiError{Status: resp.StatusCode}
			json.Unmarshal(data, ae)
			if ae.Code == "register_first" {
				return ErrRegisterFirst
			}
			lastErr = ae
			if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTemporaryRedirect || ae.Code == "no_leader" {
				continue // another manager may do better
			}
			return ae
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
			}
		}
		return nil
	}
	return fmt.Errorf("%s %s: no manager answered: %w", method, path, lastErr)
}

func (c *HTTPControlPlane) Register(ctx context.Context, id string, req RegisterRequest) error {
	return c.do(ctx, http.MethodPost, "/v1/peers/"+id+"/register", req, nil)
}

func (c *HTTPControlPlane) Heartbeat(ctx context.Context, id string, stats api.PeerStats) (fsm.PeerState, error) {
	var out struct {
		State fsm.PeerState `json:"state"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/peers/"+id+"/heartbeat", api.Heartbeat{V: api.WireVersion, Peer: id, Stats: stats}, &out)
	return out.State, err
}

func (c *HTTPControlPlane) Config(ctx context.Context) (fsm.Config, error) {
	var cfg fsm.Config
	err := c.do(ctx, http.MethodGet, "/v1/config", nil, &cfg)
	return cfg, err
}

func (c *HTTPControlPlane) Peers(ctx context.Context) ([]fsm.PeerView, error) {
	var out struct {
		Peers []fsm.PeerView `json:"peers"`
	}
	raw := json.RawMessage{}
	if err := c.do(ctx, http.MethodGet, "/v1/peers", nil, &raw); err != nil {
		return nil, err
	}
	// GET /v1/peers answers a list, or an object holding one.
	var list []fsm.PeerView
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("GET /v1/peers: %w", err)
	}
	return out.Peers, nil
}

func (c *HTTPControlPlane) Targets(ctx context.Context, req TargetsRequest) (TargetsResponse, error) {
	var out TargetsResponse
	err := c.do(ctx, http.MethodPost, "/v1/buckets", req, &out)
	return out, err
}

// BucketEvent has no HTTP endpoint on the managers: bucket events travel on
// quarry.mgr.<op> once that transport exists.
func (c *HTTPControlPlane) BucketEvent(ctx context.Context, ev BucketEvent) error {
	return ErrUnsupported
}

func (c *HTTPControlPlane) Maintenance(ctx context.Context) (bool, error) {
	var st fsm.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st)
	return st.Maintenance, err
}

// Fixups reads GET /v1/fixups. The HTTP API does not carry sealed lengths,
// so fetch and truncate tasks come with SealedBlocks -1 (they wait).
func (c *HTTPControlPlane) Fixups(ctx context.Context, peer string) ([]FixupTask, error) {
	var out struct {
		Fixups []FixupTask `json:"fixups"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/fixups", nil, &out); err != nil {
		return nil, err
	}
	var mine []FixupTask
	for _, t := range out.Fixups {
		if t.Target == peer || (t.Kind == fsm.TaskReplicate && t.Source == peer) {
			t.SealedBlocks = -1
			mine = append(mine, t)
		}
	}
	return mine, nil
}

// Confirm is GET /v1/fixups/{id}?confirm=true, answered by the leader after
// it verified its leadership with a quorum.
func (c *HTTPControlPlane) Confirm(ctx context.Context, id uint64) (FixupTask, error) {
	var t FixupTask
	if err := c.do(ctx, http.MethodGet, "/v1/fixups/"+strconv.FormatUint(id, 10)+"?confirm=true", nil, &t); err != nil {
		return t, err
	}
	if !t.Confirmed {
		return t, fmt.Errorf("fixup %d: the answer is not a confirmation", id)
	}
	t.SealedBlocks = -1
	return t, nil
}

// FixupResult has no HTTP endpoint on the managers (it travels on
// quarry.mgr.<op> once that transport exists).
func (c *HTTPControlPlane) FixupResult(ctx context.Context, res FixupResult) error {
	return ErrUnsupported
}

// ReportsFixups is false: without a result endpoint, running fixup tasks
// would leave the managers' table wrong (see canRunFixups).
func (c *HTTPControlPlane) ReportsFixups() bool { return false }

func (c *HTTPControlPlane) Buckets(ctx context.Context, peer string) ([]fsm.BucketView, error) {
	var out struct {
		Buckets []fsm.BucketView `json:"buckets"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/buckets?peer="+url.QueryEscape(peer), nil, &out)
	return out.Buckets, err
}
