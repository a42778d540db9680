package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer"
)

// idemHeads starts a search head per site and one for site0: every count
// of these tests is checked on each.
func idemHeads(c *Cluster) []string {
	return []string{c.StartSearchHead("sh1", "site1").URL(), c.StartSearchHead("sh2", "site2").URL(), c.StartSearchHead("sh0", "site0").URL()}
}

// termCount is a head's count of the events holding term, and whether the
// search was complete.
func termCount(url, term string) (int, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := SearchHTTP(ctx, url, "", map[string]any{"query": term + " | stats count"})
	if err != nil {
		return -1, false, err
	}
	if a.Status != 200 || len(a.Resp.Results) != 1 {
		return -1, false, fmt.Errorf("search %q: status %d %s", term, a.Status, a.Error)
	}
	n, err := a.Resp.Results[0]["count"].(json.Number).Int64()
	return int(n), !a.Resp.Summary.Partial, err
}

// waitExact waits until every head counts exactly want events holding term
// in a complete search, and fails at once on a count above want (an event
// stored twice never goes away).
func waitExact(t *testing.T, c *Cluster, heads []string, term string, want int) {
	t.Helper()
	c.WaitFor(45*time.Second, func() error {
		for _, h := range heads {
			n, complete, err := termCount(h, term)
			if err != nil {
				return err
			}
			if n > want {
				t.Fatalf("head %s counts %d events of %q, want %d: stored twice", h, n, term, want)
			}
			if n != want || !complete {
				return fmt.Errorf("head %s counts %d of %q (complete %v), want %d", h, n, term, complete, want)
			}
		}
		return nil
	})
}

func idemRaws(term string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s event %d of a retried request", term, i)
	}
	return out
}

// waitAcked polls a client's ack id until it reads true.
func waitAcked(t *testing.T, c *Cluster, h *HECClient, id int64) {
	t.Helper()
	c.WaitFor(20*time.Second, func() error {
		st, err := h.Acked(context.Background(), []int64{id})
		if err != nil {
			return err
		}
		if !st[id] {
			return fmt.Errorf("ack %d on %s not true yet", id, h.URL)
		}
		return nil
	})
}

// TestClusterIdempotencyKeys: a HEC request with an Idempotency-Key is
// stored once however it is repeated — twice to one peer, eight times at
// once, and (with acks) again to a peer of the other site, whose ack id for
// the duplicate turns true — and a reuse of the key with another body is
// refused with 422 and stores nothing. Every count by search, exact, on a
// site1, a site2 and a site0 head.
func TestClusterIdempotencyKeys(t *testing.T) {
	c := Start(t, Options{RoleUsers: true})
	heads := idemHeads(c)
	ctx := context.Background()

	t.Run("same key twice to one peer", func(t *testing.T) {
		h := c.NewHECClient("site1-p1")
		h.Token, h.Key = NoAckHECToken, "twice-1"
		for i := 0; i < 2; i++ {
			if a, err := h.Post(ctx, idemRaws("idemtwice", 5)); err != nil || a.Status != 200 || a.Code != 0 {
				t.Fatalf("send %d: %+v %v", i, a, err)
			}
		}
		waitExact(t, c, heads, "idemtwice", 5)
	})

	t.Run("two identical requests at once", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := c.NewHECClient("site1-p2")
				h.Token, h.Key = NoAckHECToken, "at-once-1"
				if a, err := h.Post(ctx, idemRaws("idematonce", 7)); err != nil || a.Status != 200 {
					t.Errorf("concurrent send: %+v %v", a, err)
				}
			}()
		}
		wg.Wait()
		waitExact(t, c, heads, "idematonce", 7)
	})

	t.Run("reused key with another body", func(t *testing.T) {
		h := c.NewHECClient("site2-p1")
		h.Token, h.Key = NoAckHECToken, "twice-1" // stored by site1-p1 above
		a, err := h.Post(ctx, idemRaws("idemotherbody", 3))
		if err != nil || a.Status != http.StatusUnprocessableEntity || a.Code != 24 {
			t.Fatalf("another body under a used key: %+v %v, want 422 code 24", a, err)
		}
		same := c.NewHECClient("site1-p1")
		same.Token, same.Key = NoAckHECToken, "twice-1"
		if a, err := same.Post(ctx, idemRaws("idemotherbody", 3)); err != nil || a.Status != 422 {
			t.Fatalf("on the peer that stored it: %+v %v, want 422", a, err)
		}
		// nothing of it stored: the term's count stays 0 while a marker
		// sent after it is seen
		marker := c.NewHECClient("site2-p1")
		marker.Token = NoAckHECToken
		if a, err := marker.Post(ctx, idemRaws("idemmarker", 1)); err != nil || a.Status != 200 {
			t.Fatalf("marker: %+v %v", a, err)
		}
		waitExact(t, c, heads, "idemmarker", 1)
		waitExact(t, c, heads, "idemotherbody", 0)
		waitExact(t, c, heads, "idemtwice", 5)
	})

	t.Run("with acks the duplicate's ack turns true", func(t *testing.T) {
		first := c.NewHECClient("site1-p3")
		first.Key = "acked-1"
		id, err := first.Send(ctx, idemRaws("idemacked", 4))
		if err != nil {
			t.Fatal(err)
		}
		waitAcked(t, c, first, id)
		again := c.NewHECClient("site1-p3") // same peer, another channel
		again.Key = "acked-1"
		id2, err := again.Send(ctx, idemRaws("idemacked", 4))
		if err != nil {
			t.Fatal(err)
		}
		waitAcked(t, c, again, id2)
		other := c.NewHECClient("site2-p2") // the other site's peer
		other.Key = "acked-1"
		id3, err := other.Send(ctx, idemRaws("idemacked", 4))
		if err != nil {
			t.Fatal(err)
		}
		waitAcked(t, c, other, id3)
		waitExact(t, c, heads, "idemacked", 4)
	})
}

// TestClusterIdempotencyOriginKilled: the first peer dies after its
// request's events are replicated (the ack rule met) and before it
// answers; the shipper retries the same request with the same key, first
// to a peer holding no copy of the bucket (it must ask the others), then
// to one holding a replica (it knows the key from the blocks). The events
// are stored once, counted exactly on every head once the managers have
// sealed the dead origin's bucket.
func TestClusterIdempotencyOriginKilled(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	var fired atomic.Bool // the hook holds the first such request only
	c := Start(t, Options{RoleUsers: true, PeerTweak: func(id string, cfg *peer.Config) {
		if id != "site1-p1" {
			return
		}
		cfg.AfterHECDurable = func(r *http.Request) {
			if r.Header.Get("Idempotency-Key") != "kill-me" || !fired.CompareAndSwap(false, true) {
				return
			}
			close(reached)
			<-release
		}
	}})
	defer close(release)
	heads := idemHeads(c)
	origin := c.Peer("site1-p1")
	h := c.NewHECClient("site1-p1")
	h.Token, h.Key = NoAckHECToken, "kill-me"
	raws := idemRaws("idemkilled", 9)
	answered := make(chan error, 1)
	go func() {
		a, err := h.Post(context.Background(), raws)
		if err == nil {
			err = fmt.Errorf("the dying peer answered %+v", a)
		}
		answered <- err
	}()
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the request's events never became durable on the origin")
	}
	guid := origin.GUID()
	c.KillPeer("site1-p1")
	if err := <-answered; err == nil || strings.Contains(err.Error(), "answered") {
		t.Fatalf("the first request: %v, want no answer", err)
	}
	var holder, stranger string
	for _, id := range c.PeerIDs() {
		if id == "site1-p1" {
			continue
		}
		has := false
		for b := range c.Inventory(id) {
			has = has || strings.HasSuffix(b, "~"+guid)
		}
		if has && holder == "" {
			holder = id
		}
		if !has && stranger == "" {
			stranger = id
		}
	}
	if holder == "" || stranger == "" {
		t.Fatalf("want a peer with a copy of the origin's bucket and one without (holder %q, stranger %q)", holder, stranger)
	}
	for _, id := range []string{stranger, holder} {
		r := c.NewHECClient(id)
		r.Token, r.Key = NoAckHECToken, "kill-me"
		a, err := r.Post(context.Background(), raws)
		if err != nil || a.Status != 200 || a.Code != 0 {
			t.Fatalf("retry to %s: %+v %v", id, a, err)
		}
	}
	waitExact(t, c, heads, "idemkilled", 9)
	// and once more after the origin is back (its journal holds the key)
	c.StartPeer("site1-p1")
	c.WaitPeersUp("site1-p1")
	r := c.NewHECClient("site1-p1")
	r.Token, r.Key = NoAckHECToken, "kill-me"
	if a, err := r.Post(context.Background(), raws); err != nil || a.Status != 200 {
		t.Fatalf("retry to the restarted origin: %+v %v", a, err)
	}
	waitExact(t, c, heads, "idemkilled", 9)
}

// TestClusterIdempotencyOriginRestarted: the origin journals a keyed
// request and dies before any replica holds its blocks (its replication is
// held by peer.Config.BeforeReplicate), so it never answered; the retry to
// another peer finds nobody who knows the key and is stored there. The
// origin then comes back from its data dir — at once, or after the
// managers declared it Down and sealed its bucket from the replicas — and
// gives up its unreplicated blocks of the request, also when they are the
// first blocks of a new bucket (its copy then ends with no block, and so
// do the replicas that never got one). Once every copy of the bucket is
// warm at one length, the request is counted exactly once on a site1, a
// site2 and a site0 head, the events acknowledged before it are all
// there, and a last retry, to the restarted origin, stores nothing.
func TestClusterIdempotencyOriginRestarted(t *testing.T) {
	const origin = "site1-p1"
	var holding atomic.Bool
	c := Start(t, Options{RoleUsers: true, TargetTimeout: 10 * time.Second, PeerTweak: func(id string, cfg *peer.Config) {
		if id != origin {
			return
		}
		cfg.BeforeReplicate = func(ctx context.Context, bucket string, first uint32) {
			if holding.Load() {
				<-ctx.Done() // held until the peer is killed
			}
		}
	}})
	heads := idemHeads(c)
	ctx := context.Background()
	for _, tc := range []struct {
		name, key, term, index string
		warm                   int // events acknowledged in the bucket before the keyed request
		afterSeal              bool
	}{
		{"restarted at once", "restart-1", "idemrestarted", "main", 6, false},
		{"restarted after its bucket was sealed", "restart-2", "idemsealed", "main", 6, true},
		{"the first blocks of a new bucket", "restart-3", "idemnewbucket", "web", 0, false},
		{"the first blocks of a new bucket, sealed", "restart-4", "idemnewsealed", "web", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guid := c.Peer(origin).GUID()
			if tc.warm > 0 {
				warm := c.NewHECClient(origin)
				warm.Token, warm.Index = NoAckHECToken, tc.index
				if a, err := warm.Post(ctx, idemRaws(tc.term+"warm", tc.warm)); err != nil || a.Status != 200 {
					t.Fatalf("events before the keyed request: %+v %v", a, err)
				}
			}
			holding.Store(true)
			raws := idemRaws(tc.term, 9)
			answered := postToDying(ctx, c, origin, tc.key, tc.index, raws)
			var bucket string
			c.WaitFor(30*time.Second, func() error { // journaled (fsynced) on the origin
				var err error
				bucket, err = hotOriginBucket(c, origin, guid, tc.index, uint32(tc.warm+9))
				return err
			})
			c.KillPeer(origin)
			holding.Store(false)
			if err := <-answered; err == nil || strings.Contains(err.Error(), "answered") {
				t.Fatalf("the first request: %v, want no answer", err)
			}
			for _, id := range c.PeerIDs() {
				if ci, ok := c.Inventory(id)[bucket]; ok && ci.Events > uint32(tc.warm) {
					t.Fatalf("peer %s holds %d events of %s: the keyed request was replicated", id, ci.Events, bucket)
				}
			}
			r := c.NewHECClient("site2-p2")
			r.Token, r.Key, r.Index = NoAckHECToken, tc.key, tc.index
			if a, err := r.Post(ctx, raws); err != nil || a.Status != 200 || a.Code != 0 {
				t.Fatalf("retry to site2-p2: %+v %v", a, err)
			}
			if tc.afterSeal {
				waitSealedWithoutOrigin(c, bucket, origin)
			}
			c.StartPeer(origin)
			c.WaitPeersUp(origin)
			c.WaitFor(60*time.Second, func() error { return copiesAtOneLength(c, bucket) })
			if got := c.Inventory(origin)[bucket].Events; got != uint32(tc.warm) {
				t.Errorf("the restarted origin's copy of %s holds %d events, want the %d acknowledged before the keyed request", bucket, got, tc.warm)
			}
			if _, by := c.peerMetric(t, "quarry_peer_hec_idempotent_dropped_blocks_total"); by[origin] < 1 {
				t.Errorf("quarry_peer_hec_idempotent_dropped_blocks_total on %s is %v, want at least 1", origin, by[origin])
			}
			waitExact(t, c, heads, tc.term, 9)
			if tc.warm > 0 {
				waitExact(t, c, heads, tc.term+"warm", tc.warm)
			}
			// The origin forgot the key with the blocks: a retry to it now
			// finds the request stored by the other peer.
			again := c.NewHECClient(origin)
			again.Token, again.Key, again.Index = NoAckHECToken, tc.key, tc.index
			if a, err := again.Post(ctx, raws); err != nil || a.Status != 200 || a.Code != 0 {
				t.Fatalf("retry to the restarted origin: %+v %v", a, err)
			}
			waitExact(t, c, heads, tc.term, 9)
		})
	}
}

// hotOriginBucket is the one hot bucket of index that peer id originates
// (its GUID guid), once it holds events durable events.
func hotOriginBucket(c *Cluster, id, guid, index string, events uint32) (string, error) {
	var found []string
	for b, ci := range c.Inventory(id) {
		if strings.HasSuffix(b, "~"+guid) && ci.Index == index && ci.State == "hot" {
			found = append(found, fmt.Sprintf("%s (%d events)", b, ci.Events))
			if ci.Events == events {
				return b, nil
			}
		}
	}
	return "", fmt.Errorf("peer %s originates hot buckets %v of %s, want one with %d durable events", id, found, index, events)
}

// waitSealedWithoutOrigin waits until the managers count origin Down and
// have sealed its hot bucket from the copies they could reach.
func waitSealedWithoutOrigin(c *Cluster, bucket, origin string) {
	c.T.Helper()
	c.WaitFor(120*time.Second, func() error {
		var err error
		c.State(func(s *fsm.State) {
			p, _ := s.Peer(origin)
			_, _, sealed := s.SealedLength(bucket)
			if p.State != fsm.StateDown || !sealed {
				err = fmt.Errorf("origin %s is %s, bucket %s sealed %v", origin, p.State, bucket, sealed)
			}
		})
		return err
	})
}

// copiesAtOneLength: the managers hold bucket warm, and every copy they
// list is warm on its running peer with the same blocks as every other.
func copiesAtOneLength(c *Cluster, bucket string) error {
	var v fsm.BucketView
	c.State(func(s *fsm.State) {
		if vs := s.BucketViews([]string{bucket}); len(vs) == 1 {
			v = vs[0]
		}
	})
	if v.ID == "" || v.Hot || len(v.Copies) < 3 {
		return fmt.Errorf("bucket %s: %+v, want warm with 3 copies", bucket, v)
	}
	hash := ""
	for _, cp := range v.Copies {
		ci, ok := c.Inventory(cp.Peer)[bucket]
		if !ok || ci.State != "warm" {
			return fmt.Errorf("copy of %s on %s: %+v", bucket, cp.Peer, ci)
		}
		if hash != "" && ci.ContentHash != hash {
			return fmt.Errorf("copies of %s differ: %s holds %d blocks (%s)", bucket, cp.Peer, ci.Blocks, ci.ContentHash)
		}
		hash = ci.ContentHash
	}
	return nil
}

// TestClusterIdempotencyBlocksInFlight: the origin's blocks of a keyed
// request are on their way to the replicas (each holds the append in
// peer.Config.BeforeReplicaAppend) when the origin dies; the retry to
// another peer asks the replicas before the blocks land, finds nobody who
// knows the key, and stores it. When the held appends go on, the replicas
// refuse them (the key was just answered unknown to another peer,
// idem/arrive.go), so the restarted origin finds no replica holding its
// tail and gives it up: the request is counted exactly once on every head.
// Without the refusal the replicas hold the blocks, the origin keeps them,
// and the request is counted twice. The test widens the refusal's hold
// (KeyDenialHold) to a minute so that the order of its steps, not the
// machine's speed, decides.
func TestClusterIdempotencyBlocksInFlight(t *testing.T) {
	const origin, index, term, key = "site1-p1", "main", "idemflight", "in-flight-1"
	var guid atomic.Value
	var holding atomic.Bool
	entered := make(chan string, 16)
	release := make(chan struct{})
	c := Start(t, Options{RoleUsers: true, TargetTimeout: 10 * time.Second, PeerTweak: func(id string, cfg *peer.Config) {
		if id == origin {
			return
		}
		cfg.KeyDenialHold = time.Minute
		cfg.BeforeReplicaAppend = func(bucket string) {
			g, _ := guid.Load().(string)
			if holding.Load() && g != "" && strings.HasSuffix(bucket, "~"+g) {
				select {
				case entered <- bucket:
				default:
				}
				<-release
			}
		}
	}})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the cluster stops (cleanups run last first)
	heads := idemHeads(c)
	ctx := context.Background()
	guid.Store(c.Peer(origin).GUID())
	warm := c.NewHECClient(origin)
	warm.Token, warm.Index = NoAckHECToken, index
	if a, err := warm.Post(ctx, idemRaws(term+"warm", 6)); err != nil || a.Status != 200 {
		t.Fatalf("events before the keyed request: %+v %v", a, err)
	}
	holding.Store(true)
	raws := idemRaws(term, 9)
	answered := postToDying(ctx, c, origin, key, index, raws)
	var bucket string
	select {
	case bucket = <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("no replica received the keyed request's blocks within 60 s")
	}
	c.KillPeer(origin)
	if err := <-answered; err == nil || strings.Contains(err.Error(), "answered") {
		t.Fatalf("the first request: %v, want no answer", err)
	}
	r := c.NewHECClient("site2-p2")
	r.Token, r.Key, r.Index = NoAckHECToken, key, index
	if a, err := r.Post(ctx, raws); err != nil || a.Status != 200 || a.Code != 0 {
		t.Fatalf("retry to site2-p2: %+v %v", a, err)
	}
	holding.Store(false)
	unblock() // the held appends go on now, after the retry was stored
	c.WaitFor(30*time.Second, func() error {
		if sum, by := c.peerMetric(t, "quarry_peer_hec_idempotent_deferred_appends_total"); sum < 1 {
			return fmt.Errorf("no replica refused the blocks in flight yet (%v)", by)
		}
		return nil
	})
	c.StartPeer(origin)
	c.WaitPeersUp(origin)
	c.WaitFor(60*time.Second, func() error { return copiesAtOneLength(c, bucket) })
	if got := c.Inventory(origin)[bucket].Events; got != 6 {
		t.Errorf("the restarted origin's copy of %s holds %d events, want the 6 acknowledged before the keyed request", bucket, got)
	}
	waitExact(t, c, heads, term, 9)
	waitExact(t, c, heads, term+"warm", 6)
}

// postToDying sends a keyed no-ack request to a peer that the test kills
// before it answers; the channel gets the request's error (or an error
// saying the peer answered after all).
func postToDying(ctx context.Context, c *Cluster, id, key, index string, raws []string) <-chan error {
	h := c.NewHECClient(id)
	h.Token, h.Key, h.Index = NoAckHECToken, key, index
	answered := make(chan error, 1)
	go func() {
		a, err := h.Post(ctx, raws)
		if err == nil {
			err = fmt.Errorf("the dying peer answered %+v", a)
		}
		answered <- err
	}()
	return answered
}
