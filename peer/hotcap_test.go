package peer_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/store"
)

// startLimitPeer starts a standalone peer with the token specs given and
// tweak applied to its config.
func startLimitPeer(t *testing.T, tweak func(*peer.Config), tokens ...string) (*peer.Peer, string) {
	t.Helper()
	var toks []hec.Token
	for _, s := range tokens {
		tok, err := hec.ParseTokenFlag(s)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	cfg := peer.Config{ID: "p1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Tokens: toks, Searchable: true}
	if tweak != nil {
		tweak(&cfg)
	}
	p, err := peer.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, "http://" + p.Addr()
}

// hecReply is a HEC answer: its HTTP status and Splunk's body.
type hecReply struct {
	Status  int
	Code    int    `json:"code"`
	Text    string `json:"text"`
	Invalid *int   `json:"invalid-event-number"`
}

// postEvents posts one envelope per (index, raw) pair with token tok.
func postEvents(t *testing.T, c *http.Client, url, tok string, indexes, raws []string) hecReply {
	t.Helper()
	var body strings.Builder
	now := time.Now().Unix()
	for i := range indexes {
		b, _ := json.Marshal(map[string]any{"time": now, "index": indexes[i], "event": raws[i]})
		body.Write(b)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/services/collector/event", strings.NewReader(body.String()))
	req.Header.Set("Authorization", "Splunk "+tok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := hecReply{Status: resp.StatusCode}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("HEC answer %q: %v", b, err)
	}
	return r
}

// postUntilTaken posts the events again while the peer answers 503 code 9
// (busy with rolls: nothing was stored) and fails on any other refusal.
func postUntilTaken(t *testing.T, c *http.Client, url, tok string, indexes, raws []string) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, func() error {
		r := postEvents(t, c, url, tok, indexes, raws)
		switch {
		case r.Status == 200 && r.Code == 0:
			return nil
		case r.Status == 503 && r.Code == 9:
			return fmt.Errorf("busy: %+v", r)
		}
		t.Fatalf("ingest into %v: %+v", indexes, r)
		return nil
	})
}

// dataDescriptors counts this process's descriptors open on files under
// dir (the test runs the peer in-process; sockets and the test's own
// files are left out).
func dataDescriptors(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// countsBy runs `<term> | stats count by index` on the peer's own search
// and returns index → count (allow_partial false: any failure fails it).
func countsBy(t *testing.T, url, term string) map[string]int {
	t.Helper()
	status, ans := searchPeer(t, http.DefaultClient, url, `{"query":"`+term+` | stats count by index","allow_partial":false}`)
	if status != 200 {
		t.Fatalf("search: %d %v", status, ans)
	}
	out := map[string]int{}
	rows, _ := ans["results"].([]any)
	for _, r := range rows {
		row := r.(map[string]any)
		var n int
		fmt.Sscan(fmt.Sprint(row["count"]), &n)
		out[fmt.Sprint(row["index"])] = n
	}
	return out
}

// TestHotCapOverManyIndexes (review M3): a peer capped at 16 hot buckets
// over all indexes is fed events for 32 distinct index names, a few
// indexes per request, each index written in two rounds. After every
// request the hot buckets stay at most 16 and the descriptors the peer
// holds on its data folder at most the cap plus the file cache's
// (--max-open-files 4) — 32 hot journals would be 32; least recently
// written buckets were rolled for room (quarry_peer_hot_cap_rolls_total);
// afterwards every event is searchable exactly once, per index; the
// process's RSS grows by less than 256 MB over it all.
func TestHotCapOverManyIndexes(t *testing.T) {
	const capHot, maxOpen, indexes, perIndex = 16, 4, 32, 3
	p, url := startLimitPeer(t, func(c *peer.Config) {
		c.MaxHotBucketsTotal, c.MaxOpenFiles = capHot, maxOpen
	}, "N:useack=false")
	dir, _ := filepath.EvalSymlinks(p.Store().Options().Dir)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	want := map[string]int{}
	peak := 0
	mem := testutil.StartMemPeak()
	for round := 0; round < 2; round++ {
		for first := 0; first < indexes; first += 4 {
			var idx, raws []string
			for i := first; i < first+4; i++ {
				for k := 0; k < perIndex; k++ {
					name := fmt.Sprintf("ix%02d", i)
					idx = append(idx, name)
					raws = append(raws, fmt.Sprintf("hotcap r%d i%d k%d", round, i, k))
					want[name]++
				}
			}
			postUntilTaken(t, client, url, "N", idx, raws)
			if err := p.Store().WaitIdle(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			if n := p.Store().Limits().HotBuckets(); n > capHot {
				t.Fatalf("after indexes %d–%d of round %d: %d hot buckets, cap %d", first, first+3, round, n, capHot)
			}
			fds := dataDescriptors(t, dir)
			peak = max(peak, fds)
			if fds > capHot+maxOpen {
				t.Fatalf("after indexes %d–%d of round %d: %d descriptors on the data folder, want at most %d hot journals + %d cached",
					first, first+3, round, fds, capHot, maxOpen)
			}
		}
	}
	if _, live, rss := mem.End(); rss >= 256e6 {
		t.Fatalf("RSS grew by %d bytes over %d indexes", rss, indexes)
	} else {
		t.Logf("peak growth over %d indexes: RSS %.1f MB, live heap %.1f MB", indexes, float64(rss)/1e6, float64(live)/1e6)
	}
	m := scrape(t, url)
	if m["quarry_peer_hot_buckets"] > capHot || m["quarry_peer_hot_buckets_limit"] != capHot || m["quarry_peer_hot_cap_rolls_total"] < indexes {
		t.Fatalf("metrics: hot %v of %v, %v rolls for room; want at most %d hot and at least %d rolls",
			m["quarry_peer_hot_buckets"], m["quarry_peer_hot_buckets_limit"], m["quarry_peer_hot_cap_rolls_total"], capHot, indexes)
	}
	got := countsBy(t, url, "hotcap")
	for name, n := range want {
		if got[name] != n {
			t.Errorf("index %s: %d events found, want %d", name, got[name], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d indexes found, want %d: %v", len(got), len(want), got)
	}
	status, ans := searchPeer(t, http.DefaultClient, url, `{"query":"hotcap | stats count, dc(_raw) as distinct","allow_partial":false}`)
	rows, _ := ans["results"].([]any)
	if status != 200 || len(rows) != 1 || fmt.Sprint(rows[0].(map[string]any)["count"]) != fmt.Sprint(2*indexes*perIndex) ||
		fmt.Sprint(rows[0].(map[string]any)["distinct"]) != fmt.Sprint(2*indexes*perIndex) {
		t.Fatalf("search: %d %v, want %d events, each once", status, ans["results"], 2*indexes*perIndex)
	}
	t.Logf("%d indexes through a cap of %d: at most %d descriptors on the data folder, %v rolls for room, %d buckets",
		indexes, capHot, peak, m["quarry_peer_hot_cap_rolls_total"], len(p.Store().Inventory()))
}

// TestHotCapRequestOverCap: one request naming more new indexes than the
// peer may hold hot buckets is refused whole with Splunk's 400 code 7
// "Incorrect index" at the first event that found no room; nothing is
// stored. A request within the cap is taken, and so is one whose event
// needs a new bucket while the request writes to every hot bucket: it
// widens its index's bucket instead.
func TestHotCapRequestOverCap(t *testing.T) {
	p, url := startLimitPeer(t, func(c *peer.Config) { c.MaxHotBucketsTotal = 2 }, "N:useack=false")
	c := http.DefaultClient
	r := postEvents(t, c, url, "N", []string{"a", "b", "a", "c"}, []string{"over e0", "over e1", "over e2", "over e3"})
	if r.Status != 400 || r.Code != 7 || r.Text != "Incorrect index" || r.Invalid == nil || *r.Invalid != 3 {
		t.Fatalf("a request over the cap: %+v, want 400 code 7 Incorrect index at event 3", r)
	}
	if inv := p.Store().Inventory(); len(inv) != 0 {
		t.Fatalf("the refused request left %d buckets", len(inv))
	}
	if m := scrape(t, url); m["quarry_peer_hot_cap_refused_total"] != 1 {
		t.Fatalf("quarry_peer_hot_cap_refused_total %v, want 1", m["quarry_peer_hot_cap_refused_total"])
	}
	postUntilTaken(t, c, url, "N", []string{"a", "b", "a"}, []string{"over e0", "over e1", "over e2"})
	// A request that writes to both hot buckets and then has an event
	// for a 200 days back (outside a's bucket's span): no bucket it does
	// not write to can be rolled, so a's bucket is widened — nothing
	// rolled, nothing refused.
	old := time.Now().Add(-200 * 24 * time.Hour).Unix()
	body := fmt.Sprintf(`{"index":"a","event":"over e3"}{"index":"b","event":"over e4"}{"time":%d,"index":"a","event":"over old"}`, old)
	req, _ := http.NewRequest(http.MethodPost, url+"/services/collector/event", strings.NewReader(body))
	req.Header.Set("Authorization", "Splunk N")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a request widening a bucket: %d", resp.StatusCode)
	}
	if n, inv := p.Store().Limits().HotBuckets(), p.Store().Inventory(); n != 2 || len(inv) != 2 {
		t.Fatalf("%d hot buckets of %d, want the same 2", n, len(inv))
	}
	if m := scrape(t, url); m["quarry_peer_hot_cap_rolls_total"] != 0 {
		t.Fatalf("quarry_peer_hot_cap_rolls_total %v, want 0", m["quarry_peer_hot_cap_rolls_total"])
	}
	if got := countsBy(t, url, "over"); got["a"] != 4 || got["b"] != 2 || len(got) != 2 {
		t.Fatalf("counts %v, want a=4 b=2", got)
	}
}

// TestIdleRoll: with --max-hot-idle 300ms a hot bucket that receives no
// more events rolls by itself (the peer's loop, no request), is warm in
// the inventory, counted by quarry_peer_idle_rolls_total, and its events
// and a later event's (in a new hot bucket) are each found once.
func TestIdleRoll(t *testing.T) {
	p, url := startLimitPeer(t, func(c *peer.Config) { c.MaxHotIdle = 300 * time.Millisecond }, "N=main:useack=false")
	postUntilTaken(t, http.DefaultClient, url, "N", []string{"main", "main"}, []string{"idle one", "idle two"})
	inv := p.Store().Inventory()
	if len(inv) != 1 || inv[0].State != string(store.StateHot) {
		t.Fatalf("inventory %+v, want one hot bucket", inv)
	}
	first := inv[0].ID
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, c := range p.Store().Inventory() {
			if c.ID == first && c.State == string(store.StateWarm) {
				return nil
			}
		}
		return errors.New("the idle bucket is not warm yet")
	})
	if m := scrape(t, url); m["quarry_peer_idle_rolls_total"] < 1 || m["quarry_peer_hot_buckets"] != 0 {
		t.Fatalf("metrics: %v idle rolls, %v hot buckets; want at least 1 and 0", m["quarry_peer_idle_rolls_total"], m["quarry_peer_hot_buckets"])
	}
	postUntilTaken(t, http.DefaultClient, url, "N", []string{"main"}, []string{"idle three"})
	if got := countsBy(t, url, "idle"); got["main"] != 3 {
		t.Fatalf("counts %v, want main=3", got)
	}
	if n := len(p.Store().Inventory()); n != 2 {
		t.Fatalf("%d buckets, want the rolled one and a new hot one", n)
	}
}

// TestIndexCap (review M3): a token without an index list creates indexes
// implicitly; with --max-indexes 3 the fourth new name is refused whole
// with Splunk's 400 code 7 "Incorrect index" at its event (also after an
// event of a known index in the same request), nothing of it stored, and
// counted by quarry_peer_index_cap_refused_total. Indexes the peer already
// holds, main, and an index another token names (declared) are still
// taken.
func TestIndexCap(t *testing.T) {
	p, url := startLimitPeer(t, func(c *peer.Config) { c.MaxIndexes = 3 }, "N:useack=false", "D=declared:useack=false")
	c := http.DefaultClient
	for _, ix := range []string{"ix1", "ix2", "ix3"} {
		postUntilTaken(t, c, url, "N", []string{ix}, []string{"cap " + ix})
	}
	before := len(p.Store().Inventory())
	r := postEvents(t, c, url, "N", []string{"ix4"}, []string{"cap ix4"})
	if r.Status != 400 || r.Code != 7 || r.Text != "Incorrect index" || r.Invalid == nil || *r.Invalid != 0 {
		t.Fatalf("a fourth index: %+v, want 400 code 7 Incorrect index at event 0", r)
	}
	r = postEvents(t, c, url, "N", []string{"ix1", "ix5"}, []string{"cap again", "cap ix5"})
	if r.Status != 400 || r.Code != 7 || r.Invalid == nil || *r.Invalid != 1 {
		t.Fatalf("a known index then a new one: %+v, want 400 code 7 at event 1", r)
	}
	if n := len(p.Store().Inventory()); n != before {
		t.Fatalf("refused requests changed the buckets: %d, want %d", n, before)
	}
	postUntilTaken(t, c, url, "N", []string{"ix2", "main"}, []string{"cap known", "cap main"})
	postUntilTaken(t, c, url, "D", []string{"declared"}, []string{"cap declared"})
	m := scrape(t, url)
	if m["quarry_peer_index_cap_refused_total"] != 2 || m["quarry_peer_indexes"] != 5 || m["quarry_peer_indexes_limit"] != 3 {
		t.Fatalf("metrics: %v refused, %v indexes of %v; want 2 refused, 5 indexes (2 declared), limit 3",
			m["quarry_peer_index_cap_refused_total"], m["quarry_peer_indexes"], m["quarry_peer_indexes_limit"])
	}
	got := countsBy(t, url, "cap")
	want := map[string]int{"ix1": 1, "ix2": 2, "ix3": 1, "main": 1, "declared": 1}
	for ix, n := range want {
		if got[ix] != n {
			t.Errorf("index %s: %d events, want %d (all: %v)", ix, got[ix], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("indexes found %v, want %v", got, want)
	}
}
