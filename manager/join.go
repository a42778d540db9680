package manager

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quarry-dev/quarry/fsm"
)

// JoinRequest is the body of POST /v1/managers/join: a manager asking the
// leader to add it as a voter (or just to record its addresses in the member
// table). Joining is idempotent: a member already present with the same
// address is left as it is.
type JoinRequest struct {
	ID       string `json:"id"`
	Site     string `json:"site,omitempty"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Version is the highest cluster version the joining build supports
	// (absent from builds before cluster versions: 1).
	Version int `json:"version,omitempty"`
}

// addMember is the leader's side of a join: AddVoter unless the server is
// already a voter at that address, then record its addresses in the member
// table. Safe to repeat.
func (m *Manager) addMember(ctx context.Context, req JoinRequest) error {
	if req.ID == "" || req.RaftAddr == "" || req.HTTPAddr == "" {
		return fmt.Errorf("%w: join needs id, raft_addr and http_addr, got %+v", errBadRequest, req)
	}
	if !m.IsLeader() {
		return ErrNotLeader
	}
	m.versionMu.Lock()
	defer m.versionMu.Unlock()
	if v, cv := Member(req).supports(), m.ClusterVersion(); v < cv {
		// Its FSM would meet commands it does not know.
		return fmt.Errorf("%w: manager %s supports cluster version %d, the group agreed %d: it cannot join (run a build of version %d or later)",
			fsm.ErrClusterVersion, req.ID, v, cv, cv)
	}
	timeout := timeoutOf(ctx)
	cf := m.node.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return raftError(err)
	}
	present := false
	for _, s := range cf.Configuration().Servers {
		if s.ID == raft.ServerID(req.ID) && s.Address == raft.ServerAddress(req.RaftAddr) && s.Suffrage == raft.Voter {
			present = true
		}
	}
	if !present {
		// AddVoter with a known id updates its address.
		if err := m.node.raft.AddVoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, timeout).Error(); err != nil {
			return raftError(err)
		}
		m.log.Info("added manager as voter", "id", req.ID, "raft_addr", req.RaftAddr)
	}
	return m.setMember(ctx, Member(req))
}

// setMember commits a member-table entry unless the table already says so.
func (m *Manager) setMember(ctx context.Context, mem Member) error {
	if cur, ok := m.mux.member(mem.ID); ok && cur == mem {
		return nil
	}
	data, err := json.Marshal(memberCommand{Op: "set", Member: mem})
	if err != nil {
		return err
	}
	_, err = m.applyLog(ctx, raft.Log{Data: data, Extensions: memberExtension})
	return err
}

// self is this manager's member-table entry.
func (m *Manager) self() Member {
	return Member{ID: m.cfg.ID, Site: m.cfg.Site, RaftAddr: m.cfg.RaftAddr, HTTPAddr: m.cfg.HTTPAddr, Version: m.cfg.buildVersion()}
}

// join asks the manager at cfg.Join (which redirects to the leader) to add
// this one, retrying until it succeeds, ctx ends or JoinTimeout passes.
func (m *Manager) join(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.JoinTimeout)
	defer cancel()
	url := strings.TrimSuffix(m.cfg.Join, "/") + "/v1/managers/join"
	var last error
	for attempt := 1; ; attempt++ {
		last = m.postJoin(ctx, url, JoinRequest(m.self()))
		if last == nil {
			m.log.Info("joined the manager group", "via", m.cfg.Join, "attempts", attempt)
			return nil
		}
		m.log.Warn("join attempt failed; retrying", "via", m.cfg.Join, "attempt", attempt, "err", last)
		select {
		case <-ctx.Done():
			return fmt.Errorf("join through %s: gave up after %d attempts: %w", m.cfg.Join, attempt, last)
		case <-m.closing:
			return ErrClosed
		case <-time.After(time.Second):
		}
	}
}

// postJoin sends one join request; redirects to the leader are followed by
// the client (the token is re-sent, see redirectClient). A leader of a
// build before cluster versions refuses the version field (its decoder
// disallows unknown fields): the request is sent again without it, and
// that leader records the member as version 1 — which is what the group
// can agree on while it leads.
func (m *Manager) postJoin(ctx context.Context, url string, jr JoinRequest) error {
	body, _ := json.Marshal(jr)
	err := m.postJoinBody(ctx, url, body)
	var ae *APIError
	if jr.Version != 0 && errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(ae.Message, `unknown field "version"`) {
		jr.Version = 0
		body, _ = json.Marshal(jr)
		err = m.postJoinBody(ctx, url, body)
	}
	return err
}

func (m *Manager) postJoinBody(ctx context.Context, url string, body []byte) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+m.cfg.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := redirectClient(10*time.Second, m.tlsClient).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return nil
	}
	return decodeAPIError(resp)
}

// registerSelf keeps this manager's entry in the member table current: when
// the table lacks it (a bootstrap member, or a restart on a new HTTP
// address), it asks the leader to record it. The leader records its own
// entry when it gains leadership.
func (m *Manager) registerSelf() {
	defer m.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.closing:
			return
		case <-t.C:
		}
		if cur, ok := m.mux.member(m.cfg.ID); ok && cur == m.self() {
			continue
		}
		if m.IsLeader() {
			continue // the leader loop records the leader's own entry
		}
		_, leaderHTTP, err := m.Leader()
		if err != nil || leaderHTTP == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.postJoin(ctx, m.cfg.TLS.Scheme()+"://"+leaderHTTP+"/v1/managers/join", JoinRequest(m.self()))
		cancel()
		if err != nil {
			m.log.Debug("publishing own address to the leader failed; will retry", "err", err)
		}
	}
}

// redirectClient is an HTTP client with a timeout that follows a manager's
// 307 redirects to the leader (at most 3). Go drops the Authorization header
// when the host changes; it is sent again only to a manager of the group:
// the host the request was first sent to, or one that the manager which
// redirected lists in its member table (GET /v1/managers, asked of that
// manager, which already had the token). A redirect anywhere else, or from
// HTTPS to HTTP, is refused with an error and nothing is sent there
// (security review L5). tlsCfg (nil: Go's defaults) verifies HTTPS
// managers.
func redirectClient(timeout time.Duration, tlsCfg *tls.Config) *http.Client {
	var tr http.RoundTripper = http.DefaultTransport
	if tlsCfg != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tlsCfg
		tr = t
	}
	plain := &http.Client{Timeout: timeout, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &http.Client{
		Timeout:   timeout,
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > 3 {
				return errors.New("more than 3 redirects")
			}
			first, prev := via[0], via[len(via)-1]
			if first.URL.Scheme == "https" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect from %s to %s: refusing to leave HTTPS", first.URL.Host, req.URL)
			}
			a := first.Header.Get("Authorization")
			if a == "" {
				return nil
			}
			if req.URL.Host != first.URL.Host {
				if err := isGroupMember(req.Context(), plain, prev.URL, req.URL.Host); err != nil {
					return fmt.Errorf("redirect to %s: %w; the token is not sent there", req.URL.Host, err)
				}
			}
			req.Header.Set("Authorization", a)
			return nil
		},
	}
}

// isGroupMember asks the manager at by (GET /v1/managers, a read that needs
// no token) whether host is the HTTP address of a manager of its group.
func isGroupMember(ctx context.Context, c *http.Client, by *url.URL, host string) error {
	u := url.URL{Scheme: by.Scheme, Host: by.Host, Path: "/v1/managers"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	res, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("ask %s for its managers: %w", by.Host, err)
	}
	defer res.Body.Close()
	var mv ManagersView
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("ask %s for its managers: HTTP %d", by.Host, res.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&mv); err != nil {
		return fmt.Errorf("ask %s for its managers: %w", by.Host, err)
	}
	for _, m := range mv.Managers {
		if m.HTTPAddr == host {
			return nil
		}
	}
	return fmt.Errorf("not a manager of the group %s belongs to", by.Host)
}

// timeoutOf turns a context's deadline into a duration for hashicorp/raft.
func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 {
			return d
		}
		return time.Millisecond
	}
	return defaultApplyTimeout
}
