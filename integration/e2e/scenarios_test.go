//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/query"
)

var (
	baseOnce sync.Once
	baseTag  string
	baseN    int
)

// baseline ingests a reference set once (through p1, with acks) and waits
// until every head counts it exactly: during every fault, searches for it
// must stay complete and exact.
func baseline(t *testing.T) (string, int) {
	t.Helper()
	baseOnce.Do(func() {
		tag := uniqueTag("base")
		in := startIngester(tag, hecURLs[:1], 100)
		waitFor(t, 60*time.Second, "2000 baseline events acknowledged", func() error {
			if n := in.ackedCount(); n < 2000 {
				return fmt.Errorf("%d acknowledged", n)
			}
			return nil
		})
		acked, sent, unacked, errs := in.end()
		if unacked != 0 {
			t.Fatalf("baseline: %d of %d events not acknowledged on a healthy cluster: %v", unacked, sent, errs)
		}
		for _, h := range []string{"sh1", "sh2", "sh0"} {
			waitFor(t, 60*time.Second, h+" counting the baseline", func() error {
				n, _, err := count(context.Background(), h, tag)
				if err == nil && n != len(acked) {
					err = fmt.Errorf("%s counts %d, want %d", h, n, len(acked))
				}
				return err
			})
		}
		if lost := verifyAcked(t, tag, acked, sent); lost != 0 {
			t.Fatalf("baseline: %d acknowledged events lost on a healthy cluster", lost)
		}
		baseTag, baseN = tag, len(acked)
	})
	if baseTag == "" {
		t.Fatal("no baseline (an earlier test failed to make it)")
	}
	// Every scenario starts from a whole cluster: every peer Up, valid,
	// complete, no fixup pending (an earlier scenario may have failed).
	waitFor(t, 3*time.Minute, "a complete cluster before the scenario", func() error {
		st, _, err := status(context.Background())
		if err != nil {
			return err
		}
		if len(st.Fixups) > 0 || st.Maintenance {
			return fmt.Errorf("%d fixups pending (%+v), maintenance %v", len(st.Fixups), st.Fixups, st.Maintenance)
		}
		return complete(context.Background())
	})
	return baseTag, baseN
}

// finish stops the ingester and the searcher, verifies every acknowledged
// event and reports the scenario's figures.
func finish(t *testing.T, name string, in *ingester, se *searcher, valid, completeIn time.Duration, extra string) {
	t.Helper()
	runs, failed := se.end()
	acked, sent, unacked, _ := in.end()
	lost := verifyAcked(t, in.tag, acked, sent)
	if len(failed) > 0 {
		t.Errorf("%d of %d searches not complete and exact: %s", len(failed), runs, strings.Join(failed[:min(5, len(failed))], "; "))
	}
	if len(acked) == 0 {
		t.Errorf("nothing acknowledged during the scenario")
	}
	addReport("%s: %d events acknowledged (%d sent, %d unacknowledged), %d lost; valid in %.1fs, complete in %.1fs; %d searches, %d complete and exact%s",
		name, len(acked), sent, unacked, lost, valid.Seconds(), completeIn.Seconds(), runs, runs-int64(len(failed)), extra)
}

// TestKillPeerDuringIngestAndSearch: docker kill of p1 — the origin the
// ingest goes through and the site1 primary of the baseline — while events
// flow and searches run. Ingest moves to p4's HEC; no acknowledged event
// is lost; every search is complete and exact; the cluster is valid again
// once p1 is declared Down, and complete again after it restarts.
func TestKillPeerDuringIngestAndSearch(t *testing.T) {
	tag, n := baseline(t)
	in := startIngester(uniqueTag("kill"), hecURLs, 50)
	se := startSearcher(tag, n, []string{"sh1", "sh2", "sh0"}, nil)
	waitFor(t, 30*time.Second, "events flowing", func() error {
		if in.ackedCount() < 500 {
			return fmt.Errorf("%d acknowledged", in.ackedCount())
		}
		return nil
	})
	ctx := context.Background()
	if _, err := docker(ctx, "kill", container("p1")); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	defer docker(ctx, "start", container("p1"))
	waitFor(t, 60*time.Second, "p1 Down and the cluster valid", func() error {
		st, _, err := status(ctx)
		if err != nil {
			return err
		}
		if peerState(st, "p1") != fsm.StateDown || !st.Valid {
			return fmt.Errorf("p1 %v, valid %v", peerState(st, "p1"), st.Valid)
		}
		return nil
	})
	valid := time.Since(killed)
	atValid := in.ackedCount()
	waitFor(t, 60*time.Second, "more events acknowledged with p1 down", func() error {
		if in.ackedCount() < atValid+500 {
			return fmt.Errorf("%d acknowledged since", in.ackedCount()-atValid)
		}
		return nil
	})
	if _, err := docker(ctx, "start", container("p1")); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	completeIn := waitFor(t, 3*time.Minute, "complete again after p1 restarts", func() error { return complete(ctx) })
	finish(t, "kill p1", in, se, valid, completeIn, fmt.Sprintf(" (valid measured from the kill, complete from the restart %s)", restarted.Format("15:04:05")))
}

// stateHashes reads GET /v1/state/hash from every manager.
func stateHashes(ctx context.Context) (map[string]manager.StateHash, error) {
	out := map[string]manager.StateHash{}
	for id, u := range managerURLs {
		var h manager.StateHash
		if err := getJSON(ctx, u+"/v1/state/hash", &h); err != nil {
			return nil, err
		}
		out[id] = h
	}
	return out, nil
}

// TestPauseManagerLeader: docker pause of the Raft leader. Another manager
// leads; ingest and searches go on; when the old leader resumes, a write
// it is asked to make is refused (redirected to the new leader, never
// applied by it), and all three managers end with the same state hash.
func TestPauseManagerLeader(t *testing.T) {
	tag, n := baseline(t)
	ctx := context.Background()
	st, _, err := status(ctx)
	if err != nil || st.Leader == "" {
		t.Fatalf("no leader: %v", err)
	}
	old := st.Leader
	in := startIngester(uniqueTag("pause"), hecURLs, 50)
	se := startSearcher(tag, n, []string{"sh1", "sh2", "sh0"}, nil)
	if _, err := docker(ctx, "pause", container(old)); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	defer docker(ctx, "unpause", container(old))
	var leader string
	waitFor(t, 30*time.Second, "a new leader", func() error {
		st, _, err := status(ctx, old)
		if err != nil {
			return err
		}
		if st.Leader == "" || st.Leader == old {
			return fmt.Errorf("leader %q", st.Leader)
		}
		leader = st.Leader
		return nil
	})
	newLeaderIn := time.Since(paused)
	at := in.ackedCount()
	waitFor(t, 60*time.Second, "events acknowledged under the new leader", func() error {
		if in.ackedCount() < at+300 {
			return fmt.Errorf("%d since", in.ackedCount()-at)
		}
		return nil
	})
	if _, err := docker(ctx, "unpause", container(old)); err != nil {
		t.Fatal(err)
	}
	// The old leader is asked for a write at once: it must not apply it.
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodPost, managerURLs[old]+"/v1/rebalance", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := noRedirect.Do(req)
	code := 0
	if err == nil {
		code = res.StatusCode
		res.Body.Close()
	}
	// Refused means answered: a redirect to the new leader (307) or
	// not_leader (503) — not a timeout, which would prove nothing.
	if err != nil || (code != http.StatusTemporaryRedirect && code != http.StatusServiceUnavailable) {
		t.Errorf("the resumed old leader %s answered a write with HTTP %d (err %v), want 307 or 503", old, code, err)
	}
	var hashes map[string]manager.StateHash
	sameIn := waitFor(t, 60*time.Second, "the same state hash on all three managers", func() error {
		var err error
		if hashes, err = stateHashes(ctx); err != nil {
			return err
		}
		a, b, c := hashes["m1"], hashes["m2"], hashes["m3"]
		if a.Applied != b.Applied || a.Applied != c.Applied || a.Hash != b.Hash || a.Hash != c.Hash {
			return fmt.Errorf("m1 %d %.8s, m2 %d %.8s, m3 %d %.8s", a.Applied, a.Hash, b.Applied, b.Hash, c.Applied, c.Hash)
		}
		return nil
	})
	completeIn := waitFor(t, 2*time.Minute, "complete", func() error { return complete(ctx) })
	finish(t, "pause leader", in, se, newLeaderIn, completeIn, fmt.Sprintf("; old leader %s, new leader %s in %.1fs; the old leader's write answered %d (err %v); state hashes equal at index %d %.1fs after resume",
		old, leader, newLeaderIn.Seconds(), code, err, hashes["m1"].Applied, sameIn.Seconds()))
}

var site2Services = []string{"nats-site2", "m2", "p4", "p5", "p6", "sh2"}

// TestDisconnectSite2: docker network disconnect of every site2 container.
// Site1 keeps ingesting (through p1) and its searches (sh1) stay local —
// only site1 peers answer — and exact; after reconnecting, the cluster is
// complete again.
func TestDisconnectSite2(t *testing.T) {
	tag, n := baseline(t)
	ctx := context.Background()
	ips := map[string]string{}
	for _, s := range site2Services {
		ip, err := docker(ctx, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+network+"\").IPAddress}}", container(s))
		if err != nil || ip == "" {
			t.Fatalf("address of %s: %q %v", s, ip, err)
		}
		ips[s] = ip
	}
	reconnect := func() {
		for _, s := range site2Services {
			docker(ctx, "network", "connect", "--ip", ips[s], "--alias", s, network, container(s))
		}
	}
	site1 := []string{"p1", "p2", "p3"}
	local := func(head string, s query.Summary) error {
		if s.Site != "site1" {
			return fmt.Errorf("%s answered for site %q", head, s.Site)
		}
		for _, p := range s.Peers {
			if !slices.Contains(site1, p) {
				return fmt.Errorf("%s used peer %s of another site: %v", head, p, s.Peers)
			}
		}
		return nil
	}
	in := startIngester(uniqueTag("cut"), hecURLs[:1], 50)
	se := startSearcher(tag, n, []string{"sh1"}, local)
	for _, s := range site2Services {
		if _, err := docker(ctx, "network", "disconnect", network, container(s)); err != nil {
			reconnect()
			t.Fatal(err)
		}
	}
	cut := time.Now()
	defer reconnect()
	skip := []string{"m2"}
	waitFor(t, 90*time.Second, "site2's peers Down and site1 valid", func() error {
		st, _, err := status(ctx, skip...)
		if err != nil {
			return err
		}
		for _, p := range []string{"p4", "p5", "p6"} {
			if peerState(st, p) != fsm.StateDown {
				return fmt.Errorf("%s is %v", p, peerState(st, p))
			}
		}
		if !st.Sites["site1"].Valid {
			return fmt.Errorf("site1 not valid: %v", st.Sites["site1"].InvalidBuckets)
		}
		return nil
	})
	valid := time.Since(cut)
	at := in.ackedCount()
	waitFor(t, 90*time.Second, "site1 ingesting while site2 is cut off", func() error {
		if in.ackedCount() < at+500 {
			return fmt.Errorf("%d acknowledged since", in.ackedCount()-at)
		}
		return nil
	})
	duringCut := in.ackedCount()
	reconnect()
	reconnected := time.Now()
	// The hot buckets started during the cut have copies on site1 only;
	// the managers ask their origins to roll them (fixup task roll) once
	// site2 can hold copies again, and replicate them warm.
	waitFor(t, 90*time.Second, "site2's peers Up again", func() error { return allUp(ctx) })
	waitFor(t, 4*time.Minute, "complete after reconnecting site2", func() error { return complete(ctx) })
	completeIn := time.Since(reconnected)
	finish(t, "disconnect site2", in, se, valid, completeIn, fmt.Sprintf(" (sh1 only, every answer site1-local; %d events acknowledged by the time of reconnect; nothing rolled by hand)", duringCut))
}

// TestRollingRestartInMaintenance: maintenance mode on, every peer
// restarted in turn (docker restart), ingest moving between p1's and p4's
// HEC, searches complete and exact throughout, and 0 bytes of fixup
// traffic while maintenance is on.
func TestRollingRestartInMaintenance(t *testing.T) {
	tag, n := baseline(t)
	ctx := context.Background()
	if code, err := adminPost(ctx, "/v1/maintenance", `{"enabled": true}`); err != nil || code != 200 {
		t.Fatalf("maintenance on: %d %v", code, err)
	}
	maintenanceOff := func() { adminPost(ctx, "/v1/maintenance", `{"enabled": false}`) }
	defer maintenanceOff()
	in := startIngester(uniqueTag("roll"), hecURLs, 50)
	se := startSearcher(tag, n, []string{"sh1", "sh2", "sh0"}, nil)
	const fixupMetric, catchupMetric = "quarry_peer_fixup_sent_bytes_total", "quarry_peer_restart_catchup_bytes_total"
	start := map[string][2]float64{}
	for _, p := range peerIDs {
		start[p] = [2]float64{metric(p, fixupMetric), metric(p, catchupMetric)}
		if start[p][0] < 0 || start[p][1] < 0 {
			t.Fatalf("cannot read %s's metrics", p)
		}
	}
	// Each counter is summed over the peer's two processes: its increase
	// until just before the restart, then all of the new process's.
	var fixupBytes, catchupBytes float64
	began := time.Now()
	for _, p := range peerIDs {
		fixupBytes += metric(p, fixupMetric) - start[p][0]
		catchupBytes += metric(p, catchupMetric) - start[p][1]
		if _, err := docker(ctx, "restart", "-t", "10", container(p)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 90*time.Second, p+" Up again", func() error {
			if metric(p, fixupMetric) < 0 {
				return fmt.Errorf("%s does not serve yet", p)
			}
			return allUp(ctx)
		})
		// A searchable rolling restart (Splunk's) takes the next peer down
		// only once the cluster answers searches again: here, once a
		// search that began after this peer was back has finished. Without
		// it, a search that waited search_peer_timeout on one restarting
		// peer could be re-dispatched to the next one as it restarts, and
		// both searchable copies of a bucket would be away in one search.
		back := time.Now()
		waitFor(t, 60*time.Second, "a search begun after "+p+" was back", func() error { return se.searchedSince(back) })
	}
	rolled := time.Since(began)
	for _, p := range peerIDs {
		fixupBytes += metric(p, fixupMetric)
		catchupBytes += metric(p, catchupMetric)
	}
	if fixupBytes != 0 {
		t.Errorf("%.0f bytes of fixup traffic in maintenance mode, want 0", fixupBytes)
	}
	maintenanceOff()
	off := time.Now()
	// A hot bucket left short of its policy by the restarts is rolled on
	// the managers' request (fixup task roll) once maintenance is off.
	waitFor(t, 3*time.Minute, "complete after maintenance", func() error { return complete(ctx) })
	completeIn := time.Since(off)
	finish(t, "rolling restart (maintenance)", in, se, rolled, completeIn, fmt.Sprintf("; 6 peers restarted in %.1fs; %.0f bytes of fixup traffic during it (and %.0f bytes of restarted origins catching their replicas up, not fixup); nothing rolled by hand", rolled.Seconds(), fixupBytes, catchupBytes))
}
