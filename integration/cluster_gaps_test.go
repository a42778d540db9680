package integration

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/searchhead"
)

// The spec gaps of issue 24 item 2, each through the public interfaces
// with exact results.

// TestSearchDetainedPeerServes: a detained peer takes no new data but
// keeps serving searches (SPEC §3). The head took candidate copies only
// from Up peers, so a bucket whose allowed copy is on a detained peer came
// back missing.
func TestSearchDetainedPeerServes(t *testing.T) {
	c := Start(t, Options{})
	raws := searchIngest(t, c, "det", 2000)
	waitComplete(t, c)
	sh := c.StartSearchHead("sh1", "site1")
	victim := "site1-p1" // an origin: it holds searchable copies
	c.AdminPost("/v1/peers/"+victim+"/detention", `{"enabled":true}`)
	c.WaitFor(20*time.Second, func() error {
		if st := cliPeerState(c, victim); st != fsm.StateDetention {
			return fmt.Errorf("%s is %s, want Detention", victim, st)
		}
		return nil
	})
	var bucket string
	c.State(func(s *fsm.State) {
		v, _ := s.Generation("site1", 0)
		for _, id := range slices.Sorted(func(yield func(string) bool) {
			for id := range v.Buckets {
				if !yield(id) {
					return
				}
			}
		}) {
			if slices.Contains(v.Buckets[id].SearchableOn, victim) {
				bucket = id
				break
			}
		}
	})
	if bucket == "" {
		t.Fatalf("no bucket searchable on %s", victim)
	}
	// Its copies still answer: first choice by preference, every event
	// exactly once.
	c.WaitFor(20*time.Second, func() error {
		a := search(t, sh.URL(), map[string]any{"query": "*", "preference": "_prefer_nodes:" + victim})
		mustExact(t, "preferring the detained peer", a, raws)
		if !slices.Contains(a.Resp.Summary.Peers, victim) {
			return fmt.Errorf("the detained peer %s did not answer (peers %v)", victim, a.Resp.Summary.Peers)
		}
		return nil
	})
	// Only its copy allowed: searched, not missing.
	a := search(t, sh.URL(), map[string]any{"query": "* | stats count", "preference": "_buckets:" + bucket + "|_only_nodes:" + victim})
	if a.Status != 200 || a.Resp.Summary.Partial || a.Resp.Summary.Buckets.Missing != 0 || a.Resp.Summary.Buckets.Successful != 1 {
		t.Fatalf("bucket %s only on the detained peer: HTTP %d %s, summary %+v", bucket, a.Status, a.Error, a.Resp.Summary)
	}
}

// TestSearchFreshDeadOrigin: fresh=true reads a hot bucket from its
// origin; when the origin is dead and the managers have not sealed the
// bucket yet, the search reads a replica — the ack rule made every
// acknowledged block durable on it — and says which, instead of failing
// the bucket.
func TestSearchFreshDeadOrigin(t *testing.T) {
	// A long heartbeat timeout keeps the dead origin Up in the table (and
	// its bucket hot and unsealed) for the whole test.
	c := Start(t, Options{HeartbeatTimeout: 60 * time.Second, MaxHotBytes: 64 << 20})
	sh := c.StartSearchHead("sh1", "site1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	origin := "site2-p2"
	acked, un, err := c.IngestAcked(ctx, origin, Batches("fresh", 300, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v (%d unacknowledged)", err, len(un))
	}
	var raws []string
	for _, a := range acked {
		raws = append(raws, a.Raws...)
	}
	mustExact(t, "fresh, origin alive", search(t, sh.URL(), map[string]any{"query": "*", "fresh": true}), raws)
	c.KillPeer(origin)
	a := search(t, sh.URL(), map[string]any{"query": "*", "fresh": true})
	mustExact(t, "fresh, origin dead", a, raws)
	said := false
	for _, w := range a.Resp.Summary.Warnings {
		said = said || (strings.Contains(w, "fresh") && strings.Contains(w, "replica") && strings.Contains(w, origin))
	}
	if !said {
		t.Fatalf("no warning naming the replica read for the dead origin %s: %v", origin, a.Resp.Summary.Warnings)
	}
}

// TestSearchSilentPeerLosesItsBucketsAfterPeerTimeout: a peer that stays
// connected but sends no progress beat loses its buckets after
// search_peer_timeout (SPEC §5 step 4), not three times that. The wedged
// peer here would answer after 2 × the timeout: under the old rule its
// answer counted; now its buckets go to other copies first.
func TestSearchSilentPeerLosesItsBucketsAfterPeerTimeout(t *testing.T) {
	const peerTimeout = 2 * time.Second
	wedged := "site1-p1"
	var wedge atomic.Bool
	c := Start(t, Options{PeerTweak: func(id string, cfg *peer.Config) {
		if id != wedged {
			return
		}
		cfg.SearchBeats = func() bool { return !wedge.Load() }
		cfg.BeforeSearchBucket = func(ctx context.Context, _ string) {
			if wedge.Load() {
				select {
				case <-time.After(2 * peerTimeout):
				case <-ctx.Done():
				}
			}
		}
	}})
	raws := searchIngest(t, c, "wedge", 2000)
	waitComplete(t, c)
	sh := c.StartSearchHead("sh1", "site1", func(cfg *searchhead.Config) { cfg.PeerTimeout = peerTimeout })
	mustExact(t, "before the wedge", search(t, sh.URL(), map[string]any{"query": "*"}), raws)
	wedge.Store(true)
	defer wedge.Store(false)
	a := search(t, sh.URL(), map[string]any{"query": "*"})
	mustExact(t, "a wedged peer", a, raws)
	if slices.Contains(a.Resp.Summary.Peers, wedged) {
		t.Fatalf("the wedged peer %s, silent for its whole wedge of %s, still answered (peers %v): the head waited past search_peer_timeout %s",
			wedged, 2*peerTimeout, a.Resp.Summary.Peers, peerTimeout)
	}
}

// TestSearchCatchesUpWithANewerTable: a bucket created on a peer the
// search head did not invite (no primaries in the head's table) was
// missed until the head's table refreshed, although the invited peer's
// done message named the newer table version. The head here has lost its
// notices (HoldTable); an invited peer that answered another head since
// names the newer version, and the head catches up within the search.
func TestSearchCatchesUpWithANewerTable(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 64 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ingest := func(origin, tag string) []string {
		acked, un, err := c.IngestAcked(ctx, origin, Batches(tag, 400, 100), 30*time.Second)
		if err != nil || len(un) > 0 {
			t.Fatalf("ingest %s: %v (%d unacknowledged)", tag, err, len(un))
		}
		var raws []string
		for _, a := range acked {
			raws = append(raws, a.Raws...)
		}
		return raws
	}
	raws := ingest("site1-p1", "old")
	// A site1 peer with no site1 primaries: the heads do not invite it.
	var uninvited string
	c.State(func(s *fsm.State) {
		v, _ := s.Generation("site1", 0)
		for _, id := range []string{"site1-p2", "site1-p3"} {
			has := false
			for _, p := range v.Primaries {
				has = has || p == id
			}
			if !has && uninvited == "" {
				uninvited = id
			}
		}
	})
	if uninvited == "" {
		t.Fatal("every site1 peer holds a site1 primary")
	}
	var hold atomic.Bool
	stale := c.StartSearchHead("sh1", "site1", func(cfg *searchhead.Config) { cfg.HoldTable = hold.Load })
	fresh := c.StartSearchHead("sh2", "site1")
	mustExact(t, "stale head, before", search(t, stale.URL(), map[string]any{"query": "*"}), raws)
	hold.Store(true)
	raws = append(raws, ingest(uninvited, "new")...)
	// The other head's search brings the invited peer's table up to date.
	c.WaitFor(20*time.Second, func() error {
		a := search(t, fresh.URL(), map[string]any{"query": "*"})
		if len(a.Resp.Results) != len(raws) {
			return fmt.Errorf("fresh head: %d results, want %d", len(a.Resp.Results), len(raws))
		}
		return nil
	})
	mustExact(t, "stale head, a bucket on an uninvited peer", search(t, stale.URL(), map[string]any{"query": "*"}), raws)
}

// TestSearchCLIRefusesAPeerAsSearchHead: `quarry search --searchhead <a
// peer's URL>` searched that one peer and exited 0; now the answer's role
// header tells a peer from a search head and the CLI says so.
func TestSearchCLIRefusesAPeerAsSearchHead(t *testing.T) {
	c := Start(t, Options{})
	searchIngest(t, c, "role", 1000)
	sh := c.StartSearchHead("sh1", "site1")
	peerURL := "http://" + c.Peer("site1-p1").Addr()
	r := runCLI(t, "search", "--searchhead", peerURL, "* | stats count")
	if r.Code == 0 || !strings.Contains(r.Stderr, "is a peer, not a search head") {
		t.Fatalf("--searchhead at a peer: exit %d, stderr %q", r.Code, r.Stderr)
	}
	r = runCLI(t, "search", "--searchhead", peerURL, "*")
	if r.Code == 0 || !strings.Contains(r.Stderr, "is a peer, not a search head") {
		t.Fatalf("--searchhead at a peer (event search): exit %d, stderr %q", r.Code, r.Stderr)
	}
	r = runCLI(t, "search", "--peer", sh.URL(), "* | stats count")
	if r.Code == 0 || !strings.Contains(r.Stderr, "is a searchhead, not a peer") {
		t.Fatalf("--peer at a search head: exit %d, stderr %q", r.Code, r.Stderr)
	}
	r = mustCLI(t, "search", "--searchhead", sh.URL(), "--output", "json", "* | stats count")
	if !strings.Contains(r.Stdout, `"count":1000`) && !strings.Contains(r.Stdout, `"count": 1000`) {
		t.Fatalf("--searchhead at the search head: %q", r.Stdout)
	}
	// HEC sent to a search head or a manager: one clear line, not a bare
	// 405 or 404 (issue 29).
	for _, u := range []string{sh.URL(), c.ManagerURLs()[0]} {
		resp, err := c.HTTPClient(5*time.Second).Post(u+"/services/collector/event", "application/json", strings.NewReader(`{"event":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || !strings.Contains(string(b), `"not_a_peer"`) || !strings.Contains(string(b), "goes to a peer") {
			t.Fatalf("HEC to %s: HTTP %d %s", u, resp.StatusCode, b)
		}
	}
	// A search of an index that does not exist says so (issue 29).
	c.WaitFor(20*time.Second, func() error {
		a := search(t, sh.URL(), map[string]any{"query": "index=nosuchindex | stats count"})
		for _, w := range a.Resp.Summary.Warnings {
			if strings.Contains(w, `index "nosuchindex" does not exist`) {
				return nil
			}
		}
		return fmt.Errorf("no warning about index nosuchindex: HTTP %d, %v", a.Status, a.Resp.Summary.Warnings)
	})
	if a := search(t, sh.URL(), map[string]any{"query": "index=main | stats count"}); len(a.Resp.Summary.Warnings) != 0 {
		t.Fatalf("index=main warned: %v", a.Resp.Summary.Warnings)
	}
	// A streamed | table prints its columns (issue 29: blank lines, the
	// head sent no fields on the summary line).
	r = mustCLI(t, "search", "--searchhead", sh.URL(), "* | table host sourcetype")
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "host") || !strings.Contains(lines[0], "sourcetype") || strings.TrimSpace(lines[1]) == "" {
		t.Fatalf("| table through the search head printed %q", r.Stdout)
	}
}
