package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer"
)

// TestClusterSlowTargetShortNeverPrimary: a replication target that stays
// Up but stops answering past target_timeout (SPEC §4, issue 9 item 5).
// Acks go on without it; the managers know its copy is short before any
// ack counts without it, so no search uses it as a primary meanwhile —
// searches on its site stay exact; once it answers again, fixup completes
// the copy and it serves again.
// slowReplicas is a cluster whose peers' replication receivers can be made
// to hang (hang(id)) until released (release, also run at cleanup, before
// the cluster stops), and an acknowledged-ingest helper through one origin
// that keeps every acknowledged raw.
type slowReplicas struct {
	*Cluster
	slow    atomic.Value
	release func()
	raws    []string
}

func startSlowReplicas(t *testing.T, o Options) *slowReplicas {
	sr := &slowReplicas{}
	ch := make(chan struct{})
	var once sync.Once
	sr.release = func() { once.Do(func() { close(ch) }) }
	o.PeerTweak = func(id string, cfg *peer.Config) {
		cfg.BeforeReplicaAppend = func(string) {
			if v, _ := sr.slow.Load().(string); v == id {
				<-ch
			}
		}
	}
	sr.Cluster = Start(t, o)
	t.Cleanup(sr.release) // before the cluster stops (cleanups run last first)
	return sr
}

func (sr *slowReplicas) hang(id string) { sr.slow.Store(id) }

func (sr *slowReplicas) ingest(ctx context.Context, t *testing.T, origin, tag string, n int) {
	t.Helper()
	acked, un, err := sr.IngestAcked(ctx, origin, Batches(tag, n, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest %s: %v (%d batches not acknowledged)", tag, err, len(un))
	}
	for _, a := range acked {
		sr.raws = append(sr.raws, a.Raws...)
	}
}

func TestClusterSlowTargetShortNeverPrimary(t *testing.T) {
	sr := startSlowReplicas(t, Options{MaxHotBytes: 256 << 10})
	c := sr.Cluster
	unblock := sr.release
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	origin := "site1-p1"
	ingest := func(tag string, n int) { t.Helper(); sr.ingest(ctx, t, origin, tag, n) }
	ingest("before", 500)
	// The site2 holder of the origin's hot bucket: site2's primary for it.
	var victim string
	c.WaitFor(30*time.Second, func() error {
		for _, p := range hotTargets(c, origin) {
			if siteOf(p) == "site2" {
				victim = p
				return nil
			}
		}
		return fmt.Errorf("no hot replica on site2 yet: %v", hotTargets(c, origin))
	})
	sh2 := c.StartSearchHead("sh2", "site2")
	mustExact(t, "before", search(t, sh2.URL(), map[string]any{"query": "*"}), sr.raws)

	sr.hang(victim)
	ingest("during", 1500)
	// Every copy on the victim that misses acknowledged blocks is known
	// short and is nobody's primary.
	var short []string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", victim) {
			for _, cp := range b.Copies {
				if cp.Peer != victim || !cp.Short {
					continue
				}
				short = append(short, b.ID)
				for table, p := range b.Primary {
					if p == victim {
						t.Errorf("bucket %s: short copy on %s is the primary for %s", b.ID, victim, table)
					}
				}
			}
		}
	})
	if len(short) == 0 {
		t.Fatalf("no copy on the hanging target %s is known short", victim)
	}
	a := search(t, sh2.URL(), map[string]any{"query": "*"})
	mustExact(t, "site2 search while its replica hangs", a, sr.raws)
	t.Logf("target %s hung: %d buckets known short; site2 search exact (%d events, peers %v)", victim, len(short), len(sr.raws), a.Resp.Summary.Peers)

	// It answers again: fixup completes its copies; nothing is short.
	unblock()
	waitComplete(t, c)
	c.WaitFor(60*time.Second, func() error {
		var left []string
		c.State(func(s *fsm.State) {
			for _, b := range s.BucketList("", victim) {
				for _, cp := range b.Copies {
					if cp.Short {
						left = append(left, b.ID+"@"+cp.Peer)
					}
				}
			}
		})
		if len(left) > 0 {
			return fmt.Errorf("still short: %v", left)
		}
		return nil
	})
	mustExact(t, "after", search(t, sh2.URL(), map[string]any{"query": "*"}), sr.raws)
}

// fresh=true returns events acknowledged a moment ago on an origin whose
// remote replica lags: in maintenance mode a late target stays in the set
// and acks go on without it (SPEC §3, §4), so the site1 replica of a site2
// origin's hot bucket is held behind (its append hangs) while the origin
// acknowledges more. A fresh search from a site1 head reads that hot bucket
// from its origin and returns every acknowledged event, while the lagging
// replica provably holds fewer.
func TestSearchFreshReadsTheOriginOfALaggingReplica(t *testing.T) {
	sr := startSlowReplicas(t, Options{})
	c := sr.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const origin = "site2-p1"
	ingest := func(tag string, n int) { t.Helper(); sr.ingest(ctx, t, origin, tag, n) }
	ingest("before", 300)
	var lagger string
	c.WaitFor(30*time.Second, func() error {
		for _, p := range hotTargets(c, origin) {
			if siteOf(p) == "site1" {
				lagger = p
				return nil
			}
		}
		return fmt.Errorf("no hot replica on site1 yet: %v", hotTargets(c, origin))
	})
	hot := func(id string) (string, int64) {
		guid := c.Peer(origin).GUID()
		for b, ci := range c.Inventory(id) {
			if strings.HasSuffix(b, "~"+guid) && ci.State == "hot" {
				return b, int64(ci.Events)
			}
		}
		return "", 0
	}
	bucket, _ := hot(origin)
	c.SetMaintenance(true)
	sr.hang(lagger)
	ingest("lag", 500) // acknowledged: the late target no longer waited for
	if b, _ := hot(origin); b != bucket {
		t.Fatalf("the origin rolled %s (now %s) in maintenance mode", bucket, b)
	}
	_, onOrigin := hot(origin)
	_, onLagger := hot(lagger)
	if onLagger >= onOrigin {
		t.Fatalf("replica %s holds %d events of %s, origin %d: it does not lag", lagger, onLagger, bucket, onOrigin)
	}
	// The origin's replication-lag gauge for that target is exactly the
	// blocks the origin holds and the replica does not.
	blocksOf := func(id string) int64 { return int64(c.Inventory(id)[bucket].Blocks) }
	lagMetric := func() float64 {
		text, _ := scrape(t, "http://"+c.Peer(origin).Addr()+"/metrics")
		return metricValue(text, `quarry_peer_replication_lag_blocks{target="`+lagger+`"}`)
	}
	if want := blocksOf(origin) - blocksOf(lagger); want <= 0 || lagMetric() != float64(want) {
		t.Fatalf("replication lag of %s on %s: metric %v, want %d blocks (origin %d, replica %d)", lagger, origin, lagMetric(), want, blocksOf(origin), blocksOf(lagger))
	}
	sh1 := c.StartSearchHead("sh1", "site1")
	a := search(t, sh1.URL(), map[string]any{"query": "*", "fresh": true})
	mustExact(t, "fresh search with a lagging replica", a, sr.raws)
	t.Logf("replica %s of %s lags (%d events, origin %d); fresh answered %d of %d acknowledged, from %v",
		lagger, bucket, onLagger, onOrigin, len(a.Resp.Results), len(sr.raws), a.Resp.Summary.Peers)
	sr.release()
	c.WaitFor(30*time.Second, func() error {
		if v := lagMetric(); v != 0 {
			return fmt.Errorf("lag of %s still %v blocks after its release", lagger, v)
		}
		return nil
	})
	c.SetMaintenance(false)
}

// Raft state on /metrics: exactly one manager reports Leader and the others
// Follower; after the leader is killed, exactly one of the two left does.
// A search head's generation gauge equals the managers' generation and
// follows its change.
func TestClusterRaftStateMetric(t *testing.T) {
	c := Start(t, Options{})
	roles := func() (leaders, followers []string) {
		c.Mu.Lock()
		ms := maps.Clone(c.Managers)
		c.Mu.Unlock()
		for id, m := range ms {
			text, _ := scrape(t, "http://"+m.HTTPAddr()+"/metrics")
			if metricValue(text, `quarry_manager_raft_state{state="Leader"}`) == 1 {
				leaders = append(leaders, id)
			}
			if metricValue(text, `quarry_manager_raft_state{state="Follower"}`) == 1 {
				followers = append(followers, id)
			}
		}
		return leaders, followers
	}
	var leader string
	c.WaitFor(20*time.Second, func() error {
		l, f := roles()
		if len(l) != 1 || len(f) != 2 {
			return fmt.Errorf("leaders %v, followers %v", l, f)
		}
		leader = l[0]
		return nil
	})
	// A search head's generation gauge is the managers' generation, and
	// follows a generation change (a peer killed).
	sh := c.StartSearchHead("sh-gen", "site1")
	headGen := func() float64 {
		text, _ := scrape(t, sh.URL()+"/metrics")
		return metricValue(text, "quarry_searchhead_generation")
	}
	var g0 uint64
	c.WaitFor(20*time.Second, func() error {
		c.State(func(s *fsm.State) { g0 = s.CurrentGeneration() })
		if headGen() != float64(g0) {
			return fmt.Errorf("head at generation %v, managers at %d", headGen(), g0)
		}
		return nil
	})
	c.KillPeer("site1-p3")
	c.WaitFor(30*time.Second, func() error {
		var g uint64
		c.State(func(s *fsm.State) { g = s.CurrentGeneration() })
		if g <= g0 || headGen() != float64(g) {
			return fmt.Errorf("after the kill: managers at %d (from %d), head at %v", g, g0, headGen())
		}
		return nil
	})
	c.KillManager(leader)
	c.WaitFor(30*time.Second, func() error {
		l, f := roles()
		if len(l) != 1 || len(f) != 1 || l[0] == leader {
			return fmt.Errorf("after killing %s: leaders %v, followers %v", leader, l, f)
		}
		return nil
	})
}

// scrapeValue is metricValue of url's /metrics (a head's or a peer's).
func scrapeValue(t *testing.T, url, series string) float64 {
	text, _ := scrape(t, url+"/metrics")
	return metricValue(text, series)
}

// metricValue is the value of one exposition line (name with its labels),
// or -1 when absent.
func metricValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}
