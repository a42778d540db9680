package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/searchhead"
)

func mustExact(t *testing.T, what string, a SearchAnswer, raws []string) {
	t.Helper()
	if a.Status != 200 {
		t.Fatalf("%s: HTTP %d %s (%s)", what, a.Status, a.Error, a.Code)
	}
	_, sum := resultIDs(t, a.Resp.Results)
	if len(a.Resp.Results) != len(raws) || sum != rawsChecksum(raws) {
		t.Fatalf("%s: %d results, want %d (summary %+v)", what, len(a.Resp.Results), len(raws), a.Resp.Summary)
	}
	if a.Resp.Summary.Partial {
		t.Fatalf("%s: partial: %+v", what, a.Resp.Summary)
	}
}

// Kill a site1 peer: site1 searches at once return complete results,
// served partly by site2 peers (remote fill-in); after fixup, by site1
// peers only again.
func TestSearchHeadKillPeerFillIn(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 128 << 10})
	raws := searchIngest(t, c, "kill", 4000)
	sh1 := c.StartSearchHead("sh1", "site1", func(cfg *searchhead.Config) { cfg.PeerTimeout = 5 * time.Second })
	mustExact(t, "before", search(t, sh1.URL(), map[string]any{"query": "*"}), raws)
	// The site1 peer with the most site1 primaries dies.
	var victim string
	c.State(func(s *fsm.State) {
		v, _ := s.Generation("site1", 0)
		n := map[string]int{}
		for _, p := range v.Primaries {
			n[p]++
		}
		for p, k := range n {
			if siteOf(p) == "site1" && (victim == "" || k > n[victim]) {
				victim = p
			}
		}
	})
	c.KillPeer(victim)
	remote := false
	// At once (the managers still list it Up): complete and exact.
	a := search(t, sh1.URL(), map[string]any{"query": "*"})
	mustExact(t, "right after the kill", a, raws)
	for _, p := range a.Resp.Summary.Peers {
		if siteOf(p) == "site2" {
			remote = true
		}
	}
	// Once the managers moved the primaries: site2 fill-ins may serve
	// some buckets; searches stay exact.
	c.WaitFor(30*time.Second, func() error {
		var up bool
		c.State(func(s *fsm.State) {
			for _, p := range s.PeerList() {
				if p.ID == victim {
					up = p.State == fsm.StateUp
				}
			}
		})
		if up {
			return fmt.Errorf("%s still Up", victim)
		}
		return nil
	})
	c.WaitFor(30*time.Second, func() error {
		a := search(t, sh1.URL(), map[string]any{"query": "*"})
		mustExact(t, "after down", a, raws)
		for _, p := range a.Resp.Summary.Peers {
			if siteOf(p) == "site2" {
				remote = true
			}
		}
		return nil
	})
	if !remote {
		t.Fatalf("site2 peers never served a site1 search after %s died (its buckets have no other searchable copy in site1)", victim)
	}
	// After fixup (site1 complete again): site1 peers only.
	waitComplete(t, c)
	c.WaitFor(30*time.Second, func() error {
		a := search(t, sh1.URL(), map[string]any{"query": "*"})
		mustExact(t, "after fixup", a, raws)
		for _, p := range a.Resp.Summary.Peers {
			if siteOf(p) != "site1" {
				return fmt.Errorf("site2 peer %s still answers site1 searches (%v)", p, a.Resp.Summary.Peers)
			}
		}
		return nil
	})
	t.Logf("victim %s; remote fill-in seen: %v", victim, remote)
}

// A peer killed between its first and last result batch, for an event
// search and for a stats search: results complete and exact; the events
// the head merged equal the events in range (the dead peer's unfinished
// buckets were searched again elsewhere).
func TestSearchHeadPeerKilledMidStream(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 512 << 10})
	raws := searchIngest(t, c, "mid", 12000)
	for _, q := range []string{"*", "* | stats count by host"} {
		var victim atomic.Value
		var once sync.Once
		var killed sync.WaitGroup
		var markMu sync.Mutex
		marked := map[string][]string{} // peer → buckets whose marker it sent
		sh := c.StartSearchHead("sh-"+fmt.Sprint(len(q)), "site1", func(cfg *searchhead.Config) {
			cfg.PeerTimeout = 5 * time.Second
			cfg.OnMessage = func(peer, kind, bucket string) {
				if kind == "marker" {
					markMu.Lock()
					marked[peer] = append(marked[peer], bucket)
					markMu.Unlock()
				}
				if kind != "batch" {
					return
				}
				once.Do(func() {
					victim.Store(peer)
					killed.Add(1)
					go func() { defer killed.Done(); c.KillPeer(peer) }()
				})
			}
		})
		// Every peer's counter, the one about to die included.
		c.Mu.Lock()
		peers := maps.Clone(c.Peers)
		c.Mu.Unlock()
		scannedBy := func() map[string]int64 {
			out := map[string]int64{}
			for id, p := range peers {
				out[id] = p.SearchStats().Scanned.Load()
			}
			return out
		}
		scanned := func() (n int64) {
			for _, v := range scannedBy() {
				n += v
			}
			return n
		}
		var primaries map[string]string
		var events map[string]int64
		c.State(func(st *fsm.State) {
			v, _ := st.Generation("site1", 0)
			primaries = v.Primaries
			events = map[string]int64{}
			for _, b := range st.BucketList("", "") {
				events[b.ID] = b.Events
			}
		})
		before, beforeBy := scanned(), scannedBy()
		a := search(t, sh.URL(), map[string]any{"query": q})
		killed.Wait()
		v, _ := victim.Load().(string)
		if v == "" {
			t.Fatalf("%q: no batch seen", q)
		}
		if q == "*" {
			mustExact(t, "event search with a peer killed mid-stream", a, raws)
		} else {
			if a.Status != 200 || a.Resp.Summary.Partial {
				t.Fatalf("stats: %d %+v", a.Status, a.Resp.Summary)
			}
			var total int64
			for _, r := range a.Resp.Results {
				var n int64
				fmt.Sscan(fmt.Sprint(r["count"]), &n)
				total += n
			}
			if total != int64(len(raws)) {
				t.Fatalf("stats count by host sums to %d, want %d", total, len(raws))
			}
		}
		// Events scanned = events in range + the retried buckets' events as
		// far as the dead peer got: between N and N + its buckets' events.
		total := scanned() - before
		var victimEvents int64
		for b, p := range primaries {
			if p == v {
				victimEvents += events[b]
			}
		}
		if q == "*" && (total < int64(len(raws)) || total > int64(len(raws))+victimEvents) {
			t.Fatalf("%q: peers scanned %d events, want between %d and %d (+ the dead peer's %d)", q, total, len(raws), int64(len(raws))+victimEvents, victimEvents)
		}
		// Exactly: the live peers scanned every event in range except the
		// buckets the dead peer finished (marker sent) before it died; so
		// the events scanned in all = the events in range + what the dead
		// peer scanned of the buckets then retried elsewhere.
		if q == "*" {
			markMu.Lock()
			var victimDone int64
			for _, b := range marked[v] {
				victimDone += events[b]
			}
			markMu.Unlock()
			after := scannedBy()
			var others int64
			for id := range peers {
				if id != v {
					others += after[id] - beforeBy[id]
				}
			}
			if others != int64(len(raws))-victimDone {
				t.Fatalf("%q: the live peers scanned %d events, want %d in range - %d the dead peer finished", q, others, len(raws), victimDone)
			}
			t.Logf("%q: events scanned %d = %d in range + %d the dead peer scanned of buckets retried elsewhere", q, total, len(raws), total-int64(len(raws)))
		}
		t.Logf("%q: killed %s mid-stream; peers scanned %d events for %d in range (the dead peer was primary for %d); buckets %+v", q, v, total, len(raws), victimEvents, a.Resp.Summary.Buckets)
		sh.Close()
		c.StartPeer(v)
		c.WaitPeersUp(v)
		waitComplete(t, c)
	}
}

// Exactness under churn: searches back to back while peers are killed and
// restarted at random, one at a time (so one searchable copy of every
// bucket always exists): every search exact, none partial.
func TestSearchHeadExactUnderChurn(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 64 << 10})
	raws := searchIngest(t, c, "churn", 2000)
	const peerTimeout = 5 * time.Second
	sh := c.StartSearchHead("sh1", "site1", func(cfg *searchhead.Config) { cfg.PeerTimeout = peerTimeout })
	sh0 := c.StartSearchHead("sh0", "site0", func(cfg *searchhead.Config) { cfg.PeerTimeout = peerTimeout })
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	kills := 0
	stopped := false
	stopChurn := func() {
		if !stopped {
			stopped = true
			close(stop)
			churn.Wait()
		}
	}
	defer stopChurn() // the churn goroutine never outlives the test
	go func() {
		defer churn.Done()
		rng := rand.New(rand.NewSource(1))
		ids := c.PeerIDs()
		for {
			select {
			case <-stop:
				return
			// Kills are spaced by more than a search's failover time (two
			// peer timeouts: one to judge the dead peer, one for the next
			// copy to answer), counted from the last restart: one
			// searchable copy of every bucket always answers within any
			// one search. (SF=2 tolerates one failure at a time; two
			// inside one search's failover window are two failures, and
			// CI once saw exactly that with 5 s spacing.)
			case <-time.After(2*peerTimeout + time.Second + time.Duration(rng.Intn(1000))*time.Millisecond):
			}
			id := ids[rng.Intn(len(ids))]
			c.KillPeer(id)
			kills++
			select {
			case <-stop:
			case <-time.After(time.Duration(200+rng.Intn(800)) * time.Millisecond):
			}
			c.StartPeer(id)
			// The next kill waits until this peer is back, so one
			// searchable copy of every bucket always exists.
			c.WaitPeersUp(id)
		}
	}()
	n := churnSearches
	for i := 0; i < n; i++ {
		url := sh.URL()
		if i%3 == 2 {
			url = sh0.URL()
		}
		mustExact(t, fmt.Sprintf("search %d", i), search(t, url, map[string]any{"query": "*"}), raws)
	}
	stopChurn()
	t.Logf("%d searches exact under %d kills", n, kills)
}

// A generation change between a search's fan-out and its last batch (a
// primary moves mid-search) changes nothing in the result. The head holds
// its loop at the first done message of a site1 peer; that peer is killed
// there and the managers declare it Down: a new generation in which its
// site1 primaries have moved to the other site1 peers, who are still
// answering for the pinned generation. Result: exact, at the old
// generation, no bucket twice.
func TestSearchHeadGenerationChangeMidSearch(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 128 << 10})
	raws := searchIngest(t, c, "gen", 6000)
	var g0 uint64
	var p0 map[string]string
	c.State(func(s *fsm.State) {
		g0 = s.CurrentGeneration()
		v, _ := s.Generation("site1", 0)
		p0 = maps.Clone(v.Primaries)
	})
	var once sync.Once
	var victim string
	var moved []string // site1 buckets whose primary moved mid-search
	sh := c.StartSearchHead("sh1", "site1", func(cfg *searchhead.Config) {
		cfg.PeerTimeout = time.Minute // the hook below holds the head's loop
		cfg.OnMessage = func(peer, kind, bucket string) {
			if kind != "done" || !strings.HasPrefix(peer, "site1-") {
				return
			}
			once.Do(func() {
				victim = peer
				c.KillPeer(peer)
				testutil.WaitFor(t, 30*time.Second, func() error {
					var g uint64
					var p1 map[string]string
					c.State(func(s *fsm.State) {
						g = s.CurrentGeneration()
						v, _ := s.Generation("site1", 0)
						p1 = v.Primaries
					})
					moved = moved[:0]
					for b, p := range p0 {
						if p == victim && p1[b] != "" && p1[b] != victim {
							moved = append(moved, b)
						}
					}
					if g <= g0 || len(moved) == 0 {
						return fmt.Errorf("generation %d (from %d), %d of %s's primaries moved", g, g0, len(moved), victim)
					}
					return nil
				})
			})
		}
	})
	a := search(t, sh.URL(), map[string]any{"query": "*"})
	mustExact(t, "search across a generation change", a, raws)
	var g1 uint64
	c.State(func(s *fsm.State) { g1 = s.CurrentGeneration() })
	if victim == "" || len(moved) == 0 {
		t.Fatalf("no site1 primary moved during the search (victim %q)", victim)
	}
	if a.Resp.Summary.Generation != g0 || g1 <= g0 {
		t.Fatalf("search at generation %d; generations %d → %d during it", a.Resp.Summary.Generation, g0, g1)
	}
	t.Logf("killed %s after its done; %d site1 primaries moved (generation %d → %d); result exact at %d", victim, len(moved), g0, g1, a.Resp.Summary.Generation)
	// The next search uses the new generation, exact too.
	c.WaitFor(20*time.Second, func() error {
		b := search(t, sh.URL(), map[string]any{"query": "*"})
		mustExact(t, "next search", b, raws)
		if b.Resp.Summary.Generation < g1 {
			return fmt.Errorf("head still at generation %d", b.Resp.Summary.Generation)
		}
		return nil
	})
}

// fresh=true returns events acknowledged a moment ago; with every manager
// down the summary names the generation used and says so; allow_partial=
// false turns a missing bucket into 503.
func TestSearchHeadFreshManagersDownAllowPartial(t *testing.T) {
	c := Start(t, Options{})
	raws := searchIngest(t, c, "base", 1000)
	sh := c.StartSearchHead("sh1", "site1")
	// Fresh: acknowledged events in a hot bucket, read from the origin.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acked, _, err := c.IngestAcked(ctx, "site2-p2", Batches("fresh", 300, 100), 30*time.Second)
	if err != nil || len(acked) != 3 {
		t.Fatalf("ingest: %v", err)
	}
	all := append([]string(nil), raws...)
	for _, b := range acked {
		all = append(all, b.Raws...)
	}
	// At once, no retry: the origin's copy has every acknowledged event.
	mustExact(t, "fresh", search(t, sh.URL(), map[string]any{"query": "*", "fresh": true}), all)
	// allow_partial=false with a bucket that has no allowed copy → 503.
	a := search(t, sh.URL(), map[string]any{"query": "*", "preference": "_only_nodes:nobody", "allow_partial": false})
	if a.Status != 400 {
		t.Fatalf("_only_nodes:nobody: HTTP %d %s, want 400", a.Status, a.Error)
	}
	a = search(t, sh.URL(), map[string]any{"query": "*", "preference": "_primary", "allow_partial": false})
	mustOK := a.Status == 200
	if !mustOK {
		t.Fatalf("_primary: %d %s", a.Status, a.Error)
	}
	// A missing bucket (no searchable copy on an Up peer) with
	// allow_partial=false: 503; with the default, a partial answer naming it.
	var holders []string
	var bucket string
	for _, id := range c.PeerIDs() {
		for b := range c.Inventory(id) {
			if bucket == "" {
				bucket = b
			}
			if b == bucket {
				holders = append(holders, id)
			}
		}
	}
	for _, h := range holders {
		c.KillPeer(h)
	}
	c.WaitFor(30*time.Second, func() error {
		a := search(t, sh.URL(), map[string]any{"query": "*", "allow_partial": false})
		if a.Status != 503 {
			return fmt.Errorf("bucket %s held only by dead peers %v, allow_partial=false: HTTP %d %s", bucket, holders, a.Status, a.Error)
		}
		return nil
	})
	a = search(t, sh.URL(), map[string]any{"query": "*"})
	if a.Status != 200 || !a.Resp.Summary.Partial || a.Resp.Summary.Buckets.Missing < 1 {
		t.Fatalf("default allow_partial: HTTP %d, summary %+v", a.Status, a.Resp.Summary)
	}
	for _, h := range holders {
		c.StartPeer(h)
	}
	c.WaitPeersUp(holders...)
	waitComplete(t, c)
	// Every manager down: searches go on with the last known generation
	// and say so.
	var gen uint64
	c.State(func(s *fsm.State) { gen = s.CurrentGeneration() })
	c.WaitFor(20*time.Second, func() error {
		a := search(t, sh.URL(), map[string]any{"query": "*"})
		if a.Resp.Summary.Generation != gen {
			return fmt.Errorf("head at generation %d, managers at %d", a.Resp.Summary.Generation, gen)
		}
		return nil
	})
	for _, id := range []string{"m1", "m2", "m3"} {
		c.KillManager(id)
	}
	c.WaitFor(20*time.Second, func() error {
		a := search(t, sh.URL(), map[string]any{"query": "*"})
		mustExact(t, "managers down", a, all)
		if a.Resp.Summary.Generation != gen {
			return fmt.Errorf("generation %d, want %d", a.Resp.Summary.Generation, gen)
		}
		for _, w := range a.Resp.Summary.Warnings {
			if strings.Contains(w, "managers are unreachable") && strings.Contains(w, fmt.Sprintf("generation %d", gen)) {
				return nil
			}
		}
		return fmt.Errorf("no warning naming the managers and generation %d: %v", gen, a.Resp.Summary.Warnings)
	})
}

// A peer stopped gracefully (SIGTERM: a rolling restart) while it streams
// a search's results finishes that search before it goes, instead of
// cutting the stream (which costs the head a re-dispatch, or
// search_peer_timeout of silence when the request arrives as it leaves).
// The test plays the search head on the bus: it asks the peer for its
// buckets by explicit list on a stream of one-chunk credits and reads
// nothing until the peer has begun to drain, so the stop lands mid-stream;
// then every bucket's marker and the done message must still arrive, with
// the peer's exact event count.
func TestPeerStoppedGracefullyFinishesItsSearch(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 512 << 10})
	searchIngest(t, c, "drain", 12000)
	const victim = "site1-p1"
	p := c.Peer(victim)
	var buckets []string
	var want int64
	for _, ci := range p.Store().Inventory() {
		if ci.Searchable {
			buckets = append(buckets, ci.ID)
			want += int64(ci.Events)
		}
	}
	if len(buckets) == 0 || want == 0 {
		t.Fatalf("%s holds no searchable copy", victim)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := bus.Connect(ctx, c.Bus.Server("site1").ClientURL(), bus.ConnectOptions{Name: "test head"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rcv, err := bus.NewReceiver(nc, 0, bus.StreamOptions{Window: 1, IdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := bus.NewSubjects("")
	to, err := subj.SearchPeer("site1", victim)
	if err != nil {
		t.Fatal(err)
	}
	req := api.SearchRequest{V: api.WireVersion, ID: "drain", Head: "test", Query: "*", NowNS: time.Now().UnixNano(),
		TableSite: "site1", Buckets: buckets, Invites: map[string]bus.Invite{victim: rcv.Invite()}, TimeoutMs: 60000}
	if err := bus.Publish(nc, to, req); err != nil {
		t.Fatal(err)
	}
	first, err := rcv.Next(ctx) // the peer is now blocked on credits
	if err != nil {
		t.Fatalf("first message: %v", err)
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); c.StopPeer(victim) }()
	select {
	case <-p.Draining():
	case <-ctx.Done():
		t.Fatal("the peer did not begin draining")
	}
	var scanned int64
	markers := map[string]bool{}
	done := false
	for b := first; ; {
		var m api.SearchMsg
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		switch m.Kind {
		case api.SearchMarker:
			if m.Error != "" {
				t.Fatalf("bucket %s: %s", m.Bucket, m.Error)
			}
			markers[m.Bucket] = true
			scanned += m.Scanned
		case api.SearchDone:
			done = true
		case api.SearchError:
			t.Fatalf("the stopping peer refused: %s", m.Error)
		}
		if b, err = rcv.Next(ctx); errors.Is(err, io.EOF) {
			rcv.Close(nil)
			break
		} else if err != nil {
			t.Fatalf("the stream was cut while the peer stopped (after %d markers): %v", len(markers), err)
		}
	}
	<-stopped
	if !done || len(markers) != len(buckets) || scanned != want {
		t.Fatalf("done %v, %d of %d markers, %d events scanned of %d", done, len(markers), len(buckets), scanned, want)
	}
	t.Logf("%s stopped mid-stream and still answered its %d buckets (%d events)", victim, len(buckets), want)
	c.StartPeer(victim)
	c.WaitPeersUp(victim)
}
