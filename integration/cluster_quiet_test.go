package integration

import (
	"bufio"

	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// controlFetches reads a peer's quarry_peer_control_fetches_total by kind.
func controlFetches(t *testing.T, c *Cluster, id string) map[string]float64 {
	t.Helper()
	resp, err := c.HTTPClient(5 * time.Second).Get(c.Opts.TLS.Scheme() + "://" + c.Peer(id).Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /metrics: HTTP %d", id, resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "quarry_peer_control_fetches_total{") {
			continue
		}
		what := line[strings.Index(line, `what="`)+6:]
		what = what[:strings.IndexByte(what, '"')]
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		out[what] = v
	}
	return out
}

// TestPeersStopPollingInSteadyState (issue 30 item 5): a peer fetched the
// peer list and the cluster config from the leader on every heartbeat —
// three leader requests per peer per second. It now fetches them only when
// the heartbeat reply's generation, table version or config id moved, with
// one fetch of each per 60 heartbeats as a backstop. In a quiet cluster of
// 6 peers a 10 s window sees at most that backstop (before: 20 a peer).
func TestPeersStopPollingInSteadyState(t *testing.T) {
	c := Start(t, Options{})
	waitComplete(t, c)
	before := map[string]map[string]float64{}
	for _, id := range c.PeerIDs() {
		before[id] = controlFetches(t, c, id)
	}
	time.Sleep(10 * time.Second) // the measurement window, not a synchronisation
	for _, id := range c.PeerIDs() {
		after := controlFetches(t, c, id)
		for _, what := range []string{"peers", "config"} {
			if _, ok := after[what]; !ok {
				t.Fatalf("%s: no quarry_peer_control_fetches_total{what=%q}", id, what)
			}
			if n := after[what] - before[id][what]; n > 1 {
				t.Errorf("%s fetched %s %v times in a quiet 10 s window, want at most the backstop's 1", id, what, n)
			}
		}
	}
}
