package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// The hostile-process suite (issue 25, SECURITY.md): processes and clients
// holding one role's valid credentials try what only another role may do,
// against a running cluster with per-process bus users; every attempt is
// refused with a clear error and changes nothing (the managers' state
// hashes, every peer's files). `make hostile` runs the tests named
// TestHostile* (CI's hostile phase); `make integration` skips them.

// TestHostileSearchToken: a client holding a valid search token tries
// every write of the managers' admin API and every admin-only endpoint of
// the peers. Each answers 401 or 403 naming the token it wanted, and the
// cluster is as before; the same token's search still works.
func TestHostileSearchToken(t *testing.T) {
	const searchToken = "tok-search-hostile-0123456789"
	c := Start(t, Options{RoleUsers: true, PeersPerSite: 2, SearchTokens: []fsm.SearchToken{{Token: searchToken}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ctx, "site1-p1", Batches("hostile", 200, 100), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v (%d batches not acked)", err, len(un))
	}
	waitComplete(t, c)
	var bucket string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			bucket = b.ID
		}
	})
	before := settledSnapshot(t, c)
	client := c.HTTPClient(10 * time.Second)
	scheme := c.Opts.TLS.Scheme() + "://"
	type call struct{ method, url, body string }
	var calls []call
	for _, m := range []string{"m1", "m2", "m3"} {
		base := scheme + c.Managers[m].HTTPAddr()
		calls = append(calls,
			call{"POST", base + "/v1/config", `{"replication_factor":1}`},
			call{"POST", base + "/v1/indexes", `{"name":"stolen"}`},
			call{"DELETE", base + "/v1/indexes/main", ""},
			call{"POST", base + "/v1/tokens", `{"kind":"search","token":"mine-0123456789abcdef"}`},
			call{"DELETE", base + "/v1/tokens/1", ""},
			call{"POST", base + "/v1/peers/site1-p1/offline", ""},
			call{"POST", base + "/v1/peers/site1-p1/detention", `{"mode":"strict"}`},
			call{"POST", base + "/v1/maintenance", `{"enabled":true}`},
			call{"POST", base + "/v1/rebalance", ""},
			call{"POST", base + "/v1/rebuild", ""},
			call{"POST", base + "/v1/managers/join", `{"id":"m9","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`},
			call{"GET", base + "/v1/config", ""},
			call{"GET", base + "/v1/tokens", ""},
			call{"POST", base + "/v1/bundle", `{"files":{"props.conf":"[x]\nTZ = UTC\n"}}`},
			call{"GET", base + "/v1/bundle", ""},
		)
	}
	for _, id := range c.PeerIDs() {
		base := scheme + c.Peer(id).Addr()
		calls = append(calls,
			call{"POST", base + "/v1/buckets/" + bucket + "/roll", ""},
			call{"POST", base + "/v1/buckets/" + bucket + "/searchable", ""},
		)
	}
	for _, cl := range calls {
		req, _ := http.NewRequestWithContext(ctx, cl.method, cl.url, strings.NewReader(cl.body))
		req.Header.Set("Authorization", "Bearer "+searchToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", cl.method, cl.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// A follower may redirect a write to the leader (307): the
		// client does not follow it with the token, and nothing ran.
		if resp.StatusCode != 401 && resp.StatusCode != 403 && resp.StatusCode != http.StatusTemporaryRedirect {
			t.Fatalf("%s %s with a search token: %d %s, want 401 or 403", cl.method, cl.url, resp.StatusCode, b)
		}
		if resp.StatusCode != http.StatusTemporaryRedirect && !strings.Contains(strings.ToLower(string(b)), "token") {
			t.Fatalf("%s %s: %d %s, want an error naming the token wanted", cl.method, cl.url, resp.StatusCode, b)
		}
	}
	if err := before.diff(takeSnapshot(t, c)); err != nil {
		t.Fatalf("a search token's admin calls changed something: %v", err)
	}
	h := c.StartSearchHead("sh1", "site1")
	a, err := SearchHTTPWith(ctx, client, h.URL(), searchToken, map[string]any{"query": "* | stats count"})
	if err != nil || a.Status != 200 || fmt.Sprint(a.Resp.Results[0]["count"]) != "200" {
		t.Fatalf("the search token's own search: %+v, %v", a, err)
	}
}

// settledSnapshot waits until the cluster's state and files stop moving
// for a second and returns them.
func settledSnapshot(t *testing.T, c *Cluster) clusterSnapshot {
	t.Helper()
	var before clusterSnapshot
	stableSince := time.Now()
	c.WaitFor(30*time.Second, func() error {
		s := takeSnapshot(t, c)
		if before.hashes == nil || before.diff(s) != nil {
			before, stableSince = s, time.Now()
		}
		if time.Since(stableSince) < time.Second {
			return errors.New("cluster state or files still moving")
		}
		return nil
	})
	return before
}
