//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
)

// TestMeasureCluster prints the closing figures of issue 5 (run without
// the race detector):
//
//	QUARRY_MEASURE=$PWD/benchdata/events-200k.hec go test -count=1 -tags integration -run TestMeasureCluster -v -timeout 30m ./integration/
//
// (an absolute path: the test runs in ./integration; -count=1, or a second
// run with the same file answers from the test cache)
//
// with the file made by
// go run ../shared/bench/gen_events.go -n 200000 -seed 1 -format hec -o benchdata/events-200k.hec
func TestMeasureCluster(t *testing.T) {
	file := os.Getenv("QUARRY_MEASURE")
	if file == "" {
		t.Skip("QUARRY_MEASURE=<hec file> runs the measurements")
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	ingest := func(url string) hec.Result {
		res, err := hec.Ingest(ctx, hec.ClientConfig{URL: url, Token: HECToken, Streams: 4, Batch: 1000}, []string{file})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// Standalone peer, RF=1.
	sp, err := peer.Start(peer.Config{ID: "solo", Site: "site1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Searchable: true,
		Tokens: []hec.Token{{Value: HECToken, Ack: true}}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	solo := ingest("http://" + sp.Addr())
	sp.Close()

	// Cluster, origin:2,total:3, through one peer of site1.
	c := Start(t, Options{BlockInterval: 200 * time.Millisecond, MaxHotBytes: 32 << 20})
	before := map[string]int64{}
	for _, id := range c.PeerIDs() {
		before[id] = c.Peer(id).Store().Stats.BytesWritten.Load()
	}
	clus := ingest("http://" + c.Peer("site1-p1").Addr())
	var replicated int64
	for _, id := range c.PeerIDs() {
		if id != "site1-p1" {
			replicated += c.Peer(id).Store().Stats.BytesWritten.Load() - before[id]
		}
	}
	t.Logf("standalone RF=1: %d events in %v = %.0f events/s", solo.Events, solo.Elapsed.Round(time.Millisecond), float64(solo.Events)/solo.Elapsed.Seconds())
	t.Logf("cluster RF=3 with acks: %d events in %v = %.0f events/s (%.2f× standalone)", clus.Events, clus.Elapsed.Round(time.Millisecond),
		float64(clus.Events)/clus.Elapsed.Seconds(), (float64(clus.Events)/clus.Elapsed.Seconds())/(float64(solo.Events)/solo.Elapsed.Seconds()))
	t.Logf("replication: %.1f MB of journal frames to the targets in %v = %.1f MB/s", float64(replicated)/1e6, clus.Elapsed.Round(time.Millisecond), float64(replicated)/1e6/clus.Elapsed.Seconds())

	// Peer kill → valid again (median and maximum of 10), heartbeat_timeout
	// 3 s; TestMeasurePeerKill measures this part alone, with diagnostics.
	const kills = 10
	var valid, complete []time.Duration
	for round := 0; round < kills; round++ {
		var victim string
		var gen uint64
		c.State(func(s *fsm.State) {
			gen = s.CurrentGeneration()
			best := -1
			for _, p := range s.PeerList() {
				if p.ID != "site1-p1" && p.State == fsm.StateUp && p.Primaries > best {
					victim, best = p.ID, p.Primaries
				}
			}
		})
		start := time.Now()
		killDone := make(chan struct{}) // the kill runs beside the poll (TestMeasurePeerKill says why)
		go func() { defer close(killDone); c.KillPeer(victim) }()
		c.WaitFor(60*time.Second, func() error {
			var st fsm.Status
			c.State(func(s *fsm.State) { st = s.Status() })
			if st.Generation <= gen || !st.Valid {
				return errors.New("not valid at a new generation yet")
			}
			if p, _ := c.stateOf(victim); p != fsm.StateDown {
				return fmt.Errorf("%s is %s", victim, p)
			}
			return nil
		})
		valid = append(valid, time.Since(start))
		c.WaitFor(120*time.Second, func() error {
			var st fsm.Status
			c.State(func(s *fsm.State) { st = s.Status() })
			if !st.Complete {
				return errors.New("not complete yet")
			}
			return nil
		})
		complete = append(complete, time.Since(start))
		<-killDone
		c.StartPeer(victim)
		c.WaitPeersUp(victim)
		c.WaitFor(120*time.Second, func() error {
			var st fsm.Status
			c.State(func(s *fsm.State) { st = s.Status() })
			if !st.Complete || !st.Valid {
				return errors.New("not complete after the restart yet")
			}
			return nil
		})
	}
	med, max := medianMax(valid)
	t.Logf("peer kill → valid at a larger generation: median %v, max %v of %d kills (heartbeat_timeout %v, bound %v)",
		med.Round(time.Millisecond), max.Round(time.Millisecond), kills, c.Opts.HeartbeatTimeout, c.Opts.HeartbeatTimeout+time.Second)
	med, max = medianMax(complete)
	t.Logf("peer kill → complete: median %v, max %v of %d kills", med.Round(time.Millisecond), max.Round(time.Millisecond), kills)
}
