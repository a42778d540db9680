package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// Retention through the public interfaces (issue 13, item 1): buckets of an
// index past max_total_bytes freeze oldest first, past frozen_time_period
// within a planner pass of their time; every copy goes, on every peer, and
// a search head's count drops to exactly the events of the buckets left; a
// peer Down during the freeze returns and its copy is deleted, never back
// in the table; max_data_size rolls hot buckets at its size on running
// peers, and bad values are refused, changing nothing.

// retentionIndex is the index these tests freeze.
const retentionIndex = "ret"

// sendAt posts raws to peer id's HEC (the no-ack token) into index, every
// event at time at; it retries for a while, as an index just declared
// reaches the peers with their next config read.
func sendAt(t *testing.T, c *Cluster, id, index string, at time.Time, raws []string) {
	t.Helper()
	c.WaitFor(10*time.Second, func() error { return postAt(c, id, index, at, raws) })
}

func postAt(c *Cluster, id, index string, at time.Time, raws []string) error {
	var body bytes.Buffer
	for _, r := range raws {
		b, _ := json.Marshal(map[string]any{"event": r, "time": float64(at.UnixNano()) / 1e9, "index": index})
		body.Write(b)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.Peer(id).Addr()+"/services/collector/event", &body)
	req.Header.Set("Authorization", "Splunk "+NoAckHECToken)
	resp, err := c.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("HEC to %s: %d %s", id, resp.StatusCode, b)
	}
	return nil
}

// rollHot rolls peer id's hot buckets of index through its API and waits
// until the managers list each warm with its events; it returns their ids.
func rollHot(t *testing.T, c *Cluster, id, index string) []string {
	t.Helper()
	var ids []string
	c.WaitFor(10*time.Second, func() error {
		ids = nil
		for _, ci := range c.Inventory(id) {
			if ci.Index == index && ci.State == "hot" && ci.Events > 0 {
				ids = append(ids, ci.ID)
			}
		}
		if len(ids) == 0 {
			return fmt.Errorf("no hot %s bucket with events on %s", index, id)
		}
		return nil
	})
	for _, b := range ids {
		req, _ := http.NewRequest(http.MethodPost, "http://"+c.Peer(id).Addr()+"/v1/buckets/"+b+"/roll", nil)
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		resp, err := c.HTTPClient(10 * time.Second).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("roll %s on %s: %d", b, id, resp.StatusCode)
		}
	}
	c.WaitFor(20*time.Second, func() error {
		for _, b := range ids {
			v, ok := bucketView(c, b)
			if !ok || v.Hot || v.Events == 0 {
				return fmt.Errorf("bucket %s not warm in the managers' table yet (%+v)", b, v)
			}
		}
		return nil
	})
	return ids
}

func bucketView(c *Cluster, id string) (fsm.BucketView, bool) {
	var out fsm.BucketView
	found := false
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			if b.ID == id {
				out, found = b, true
			}
		}
	})
	return out, found
}

// editConfig reads the cluster config from the leader, lets edit change
// it, and posts it back (the admin API); it fails the test on a refusal.
func editConfig(t *testing.T, c *Cluster, edit func(*fsm.Config)) {
	t.Helper()
	cfg := getConfig(t, c)
	edit(&cfg)
	b, _ := json.Marshal(cfg)
	c.AdminPost("/v1/config", string(b))
}

func getConfig(t *testing.T, c *Cluster) fsm.Config {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+c.Leader().HTTPAddr()+"/v1/config", nil)
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err := c.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg fsm.Config
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func setIndex(cfg *fsm.Config, ic fsm.IndexConfig) {
	for i := range cfg.Indexes {
		if cfg.Indexes[i].Name == ic.Name {
			cfg.Indexes[i] = ic
			return
		}
	}
	cfg.Indexes = append(cfg.Indexes, ic)
}

func indexConfig(cfg fsm.Config, name string) fsm.IndexConfig {
	for _, ic := range cfg.Indexes {
		if ic.Name == name {
			return ic
		}
	}
	return fsm.IndexConfig{Name: name}
}

// gone reports nil once no manager lists bucket and no running peer holds
// a copy of it.
func gone(c *Cluster, bucket string) error {
	c.Mu.Lock()
	mgrs := make(map[string]interface{ Read(func(*fsm.State)) }, len(c.Managers))
	for id, m := range c.Managers {
		mgrs[id] = m
	}
	c.Mu.Unlock()
	for id, m := range mgrs {
		var listed bool
		m.Read(func(s *fsm.State) {
			for _, b := range s.BucketList("", "") {
				listed = listed || b.ID == bucket
			}
		})
		if listed {
			return fmt.Errorf("manager %s still lists %s", id, bucket)
		}
	}
	for _, p := range c.PeerIDs() {
		if c.Peer(p) == nil {
			continue
		}
		if _, ok := c.Inventory(p)[bucket]; ok {
			return fmt.Errorf("peer %s still holds %s", p, bucket)
		}
	}
	return nil
}

// countIndex is a search head's count of the index's events (all time).
func countIndex(t *testing.T, url, index string) (int, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := SearchHTTP(ctx, url, "", map[string]any{"query": "index=" + index + " | stats count"})
	if err != nil || a.Status != 200 || len(a.Resp.Results) != 1 {
		return -1, false
	}
	n, err := a.Resp.Results[0]["count"].(json.Number).Int64()
	return int(n), err == nil && !a.Resp.Summary.Partial
}

func waitCount(t *testing.T, c *Cluster, url string, want int) {
	t.Helper()
	c.WaitFor(20*time.Second, func() error {
		if n, ok := countIndex(t, url, retentionIndex); n != want || !ok {
			return fmt.Errorf("search head counts %d (complete %v), want %d", n, ok, want)
		}
		return nil
	})
}

func holdersOf(c *Cluster, bucket string) []string {
	v, _ := bucketView(c, bucket)
	var out []string
	for _, cp := range v.Copies {
		out = append(out, cp.Peer)
	}
	slices.Sort(out)
	return out
}

func TestClusterRetentionFreeze(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2})
	editConfig(t, c, func(cfg *fsm.Config) { setIndex(cfg, fsm.IndexConfig{Name: retentionIndex}) })
	sh := c.StartSearchHead("sh0", "site0")
	origin := "site1-p1"
	now := time.Now()
	// Three warm buckets: A (latest 3 h ago), B (2 h), C (2 min), each of
	// its own batch; the times are well inside the quarantine window.
	batches := map[string][]string{}
	var order []string
	for i, ago := range []time.Duration{3 * time.Hour, 2 * time.Hour, 2 * time.Minute} {
		name := string(rune('A' + i))
		raws := Batches("ret"+name, 40+10*i, 40+10*i)[0]
		sendAt(t, c, origin, retentionIndex, now.Add(-ago), raws)
		ids := rollHot(t, c, origin, retentionIndex)
		if len(ids) != 1 {
			t.Fatalf("batch %s made buckets %v", name, ids)
		}
		batches[ids[0]] = raws
		order = append(order, ids[0])
	}
	a, b, cc := order[0], order[1], order[2]
	total := len(batches[a]) + len(batches[b]) + len(batches[cc])
	waitCount(t, c, sh.URL(), total)

	// max_total_bytes: the oldest (A) goes, exactly as much as needed.
	va, _ := bucketView(c, a)
	vb, _ := bucketView(c, b)
	vc, _ := bucketView(c, cc)
	limit := vb.Size + vc.Size
	start := time.Now()
	editConfig(t, c, func(cfg *fsm.Config) {
		setIndex(cfg, fsm.IndexConfig{Name: retentionIndex, MaxTotalBytes: limit})
	})
	c.WaitFor(20*time.Second, func() error { return gone(c, a) })
	t.Logf("max_total_bytes %d (A %d, B %d, C %d bytes): A gone from every manager and peer %s after the config change",
		limit, va.Size, vb.Size, vc.Size, time.Since(start).Round(time.Millisecond))
	waitCount(t, c, sh.URL(), len(batches[b])+len(batches[cc]))
	for _, id := range []string{b, cc} {
		if _, ok := bucketView(c, id); !ok {
			t.Fatalf("bucket %s frozen too; only the oldest had to go", id)
		}
	}

	// frozen_time_period with a holder of B Down: B goes from the table
	// and every running peer; the Down holder keeps its copy until it
	// returns, and then deletes it — B never comes back.
	var away string
	for _, h := range holdersOf(c, b) {
		if h != origin {
			away = h
			break
		}
	}
	if away == "" {
		t.Fatalf("B has no copy besides its origin's: %v", holdersOf(c, b))
	}
	c.KillPeer(away)
	c.WaitFor(20*time.Second, func() error {
		var st fsm.PeerState
		c.State(func(s *fsm.State) { p, _ := s.Peer(away); st = p.State })
		if st != fsm.StateDown {
			return fmt.Errorf("%s is %s", away, st)
		}
		return nil
	})
	start = time.Now()
	editConfig(t, c, func(cfg *fsm.Config) {
		ic := indexConfig(*cfg, retentionIndex)
		ic.FrozenTimePeriod = 90 * time.Minute
		setIndex(cfg, ic)
	})
	c.WaitFor(20*time.Second, func() error { return gone(c, b) })
	t.Logf("frozen_time_period 90m: B gone %s after the config change, %s Down", time.Since(start).Round(time.Millisecond), away)
	waitCount(t, c, sh.URL(), len(batches[cc]))
	var holders []string
	c.State(func(s *fsm.State) {
		for _, fz := range s.FrozenBuckets() {
			if fz.Bucket == b {
				holders = fz.Holders
			}
		}
	})
	if !slices.Equal(holders, []string{away}) {
		t.Fatalf("B's tombstone holders %v, want [%s]", holders, away)
	}
	c.StartPeer(away)
	_, had := c.Inventory(away)[b]
	t.Logf("%s restarted; its inventory holds frozen B at start: %v", away, had)
	c.WaitFor(30*time.Second, func() error {
		if _, back := bucketView(c, b); back {
			t.Fatalf("frozen bucket %s came back through %s's inventory", b, away)
		}
		if _, ok := c.Inventory(away)[b]; ok {
			return fmt.Errorf("%s still holds frozen %s", away, b)
		}
		var left []string
		c.State(func(s *fsm.State) {
			for _, fz := range s.FrozenBuckets() {
				if fz.Bucket == b {
					left = fz.Holders
				}
			}
		})
		if len(left) > 0 {
			return fmt.Errorf("tombstone of %s still lists %v", b, left)
		}
		return nil
	})
	c.WaitPeersUp(c.PeerIDs()...)
	waitCount(t, c, sh.URL(), len(batches[cc]))

	// Retention lag: C becomes freezable 4 s from now; it goes within a
	// planner pass (100 ms here) and a delivery of that.
	vc, _ = bucketView(c, cc)
	period := time.Since(time.Unix(0, vc.Latest)).Truncate(time.Second) + 4*time.Second
	due := time.Unix(0, vc.Latest).Add(period)
	editConfig(t, c, func(cfg *fsm.Config) {
		ic := indexConfig(*cfg, retentionIndex)
		ic.FrozenTimePeriod = period
		setIndex(cfg, ic)
	})
	if _, ok := bucketView(c, cc); !ok || time.Now().After(due) {
		t.Fatalf("C frozen before its time (due in %s)", time.Until(due))
	}
	c.WaitFor(30*time.Second, func() error {
		if _, ok := bucketView(c, cc); ok {
			return fmt.Errorf("C still listed, due %s ago", time.Since(due).Round(time.Millisecond))
		}
		return nil
	})
	tableLag := time.Since(due)
	c.WaitFor(20*time.Second, func() error { return gone(c, cc) })
	copiesLag := time.Since(due)
	waitCount(t, c, sh.URL(), 0)
	searchLag := time.Since(due)
	t.Logf("retention lag after C's time: %s out of the leader's table, %s off every manager and peer, %s out of the search head's count",
		tableLag.Round(time.Millisecond), copiesLag.Round(time.Millisecond), searchLag.Round(time.Millisecond))
	if tableLag > 3*time.Second {
		t.Fatalf("C left the table %s after its time; want within a planner pass and a delivery", tableLag)
	}
}

// TestClusterMaxDataSize: max_data_size reaches running peers through the
// config API, hot buckets of that index roll at it, and bad values are
// refused (400) with the config unchanged.
func TestClusterMaxDataSize(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2})
	before := getConfig(t, c)
	for _, bad := range []string{`-1`, `100`, `"8KB"`} {
		cfg := before
		raw, _ := json.Marshal(cfg)
		body := strings.Replace(string(raw), `{"name":"web"}`, `{"name":"web","max_data_size":`+bad+`}`, 1)
		if body == string(raw) {
			t.Fatalf("no web index in %s", raw)
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+c.Leader().HTTPAddr()+"/v1/config", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		resp, err := c.HTTPClient(10 * time.Second).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(msg), "max_data_size") {
			t.Fatalf("max_data_size %s: %d %s", bad, resp.StatusCode, msg)
		}
		if after := getConfig(t, c); indexConfig(after, "web") != indexConfig(before, "web") {
			t.Fatalf("refused max_data_size %s changed the config: %+v", bad, indexConfig(after, "web"))
		}
	}
	const size = 8 << 10
	editConfig(t, c, func(cfg *fsm.Config) { setIndex(cfg, fsm.IndexConfig{Name: "web", MaxDataSize: size}) })
	c.WaitFor(10*time.Second, func() error {
		for _, id := range c.PeerIDs() {
			if n := c.Peer(id).Store().Limits().MaxDataSize("web"); n != size {
				return fmt.Errorf("peer %s rolls web at %d", id, n)
			}
			if n := c.Peer(id).Store().Limits().MaxDataSize("main"); n != c.Opts.MaxHotBytes {
				return fmt.Errorf("peer %s rolls main at %d", id, n)
			}
		}
		return nil
	})
	// ~200 bytes an event, 150 events: about 30 KB, four buckets or more.
	raws := Batches("mds", 150, 150)[0]
	for i := range raws {
		raws[i] += " " + strings.Repeat("x", 120)
	}
	sendAt(t, c, "site1-p1", "web", time.Now(), raws)
	var warm, hot int
	c.WaitFor(20*time.Second, func() error {
		warm, hot = 0, 0
		events := int64(0)
		c.State(func(s *fsm.State) {
			for _, b := range s.BucketList("web", "") {
				if b.Hot {
					hot++
				} else {
					warm++
				}
				events += b.Events
			}
		})
		if warm < 3 || hot > 1 {
			return fmt.Errorf("%d warm and %d hot web buckets", warm, hot)
		}
		return nil
	})
	// No rolled copy holds more events than fit in the size (each counts
	// at least its raw text), plus the one that reached it.
	per := size/len(raws[0]) + 1
	for _, ci := range c.Inventory("site1-p1") {
		if ci.Index == "web" && ci.State == "warm" && int(ci.Events) > per {
			t.Fatalf("warm bucket %s holds %d events of %d bytes, over max_data_size %d", ci.ID, ci.Events, len(raws[0]), size)
		}
	}
	t.Logf("max_data_size %d: 150 events of ~%d bytes made %d warm and %d hot web buckets", size, len(raws[0]), warm, hot)
}
