package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/searchhead"
)

// The search API's rules: preference statuses and texts end to end, the
// search token's index scope by every path, the nesting limit, the
// concurrency cap, NDJSON streaming, and publishing to NATS.
func TestSearchHeadAPIRules(t *testing.T) {
	c := Start(t, Options{MaxHotBytes: 128 << 10, SearchTokens: []fsm.SearchToken{{Token: "web-only", Indexes: []string{"web"}}, {Token: "all"}}})
	raws := searchIngest(t, c, "api", 2000)
	// 300 events into index web.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := c.NewHECClient("site1-p2")
	h.Index = "web"
	var web []string
	for _, b := range Batches("webev", 300, 100) {
		id, err := h.Send(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 30*time.Second, func() error {
			st, err := h.Acked(ctx, []int64{id})
			if err != nil || !st[id] {
				return fmt.Errorf("not acked yet (%v)", err)
			}
			return nil
		})
		web = append(web, b...)
	}
	waitComplete(t, c)
	sh1 := c.StartSearchHead("sh1", "site1", func(cfg *searchhead.Config) { cfg.MaxSearches = 16 })
	sh2 := c.StartSearchHead("sh2", "site2")
	sh0 := c.StartSearchHead("sh0", "site0")
	post := func(url, token string, req map[string]any) SearchAnswer {
		t.Helper()
		a, err := SearchHTTP(ctx, url, token, req)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	all := append(append([]string(nil), raws...), web...)

	// Tokens: none → 401; unknown → 403; web-only sees only web, by the
	// default plan, _buckets, _only_nodes and the peers' own API.
	if a := post(sh1.URL(), "", map[string]any{"query": "*"}); a.Status != 401 {
		t.Fatalf("no token: %d %s", a.Status, a.Error)
	}
	if a := post(sh1.URL(), "nope", map[string]any{"query": "*"}); a.Status != 403 {
		t.Fatalf("bad token: %d %s", a.Status, a.Error)
	}
	mustExact(t, "all-index token", post(sh1.URL(), "all", map[string]any{"query": "*"}), all)
	mustExact(t, "web token", post(sh1.URL(), "web-only", map[string]any{"query": "*"}), web)
	mustExact(t, "web token, index=main asked", post(sh1.URL(), "web-only", map[string]any{"query": "index=main OR index=web"}), web)
	var mainBucket string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("main", "") {
			mainBucket = b.ID
		}
	})
	a := post(sh1.URL(), "web-only", map[string]any{"query": "*", "preference": "_buckets:" + mainBucket})
	if a.Status == 200 && len(a.Resp.Results) != 0 {
		t.Fatalf("web token read a main bucket through _buckets: %d results", len(a.Resp.Results))
	}
	mustExact(t, "web token, _only_nodes", post(sh1.URL(), "web-only", map[string]any{"query": "*", "preference": "_only_nodes:site*"}), web)
	for _, id := range c.PeerIDs() {
		pa := post("http://"+c.Peer(id).Addr(), "web-only", map[string]any{"query": "*"})
		if pa.Status != 200 {
			t.Fatalf("peer %s API with web token: %d %s", id, pa.Status, pa.Error)
		}
		for _, r := range pa.Resp.Results {
			if r["index"] != "web" {
				t.Fatalf("peer %s API gave a web token an event of %v", id, r["index"])
			}
		}
		if pa := post("http://"+c.Peer(id).Addr(), "", map[string]any{"query": "*"}); pa.Status != 401 {
			t.Fatalf("peer %s API without a token: %d", id, pa.Status)
		}
		if pa := post("http://"+c.Peer(id).Addr(), "all", map[string]any{"query": "*", "preference": "_xyz"}); pa.Status != 400 || pa.Error != "no preference for [_xyz]" {
			t.Fatalf("peer %s API with _xyz: %d %q", id, pa.Status, pa.Error)
		}
	}

	// Preference statuses and texts.
	for _, x := range []struct {
		url, pref string
		status    int
		msg       string
	}{
		{sh1.URL(), "_xyz", 400, "no preference for [_xyz]"},
		{sh0.URL(), "_only_local", 400, "no local site for a site0 search head"},
		{sh1.URL(), "_only_nodes:nobody-*", 400, "no peers with criteria [nobody-*] found for bucket ["},
	} {
		a := post(x.url, "all", map[string]any{"query": "*", "preference": x.pref})
		if a.Status != x.status || !strings.HasPrefix(a.Error, x.msg) {
			t.Fatalf("%s: %d %q, want %d %q", x.pref, a.Status, a.Error, x.status, x.msg)
		}
	}
	for _, pref := range []string{"_local", "_only_local", "_prefer_nodes:site2-p3", "_only_nodes:site:site2", "_primary", "_primary_first",
		"_replica_first", "_adaptive", "user-7", "_only_nodes:site1-*,site2-*"} {
		a := post(sh1.URL(), "all", map[string]any{"query": "*", "preference": pref})
		mustExact(t, "preference "+pref, a, all)
		switch pref {
		case "_only_local":
			for _, p := range a.Resp.Summary.Peers {
				if siteOf(p) != "site1" {
					t.Fatalf("_only_local answered by %s", p)
				}
			}
		case "_only_nodes:site:site2":
			for _, p := range a.Resp.Summary.Peers {
				if siteOf(p) != "site2" {
					t.Fatalf("_only_nodes:site:site2 answered by %s", p)
				}
			}
		}
	}
	// _replica: every bucket has two searchable copies here, so complete.
	mustExact(t, "_replica", post(sh1.URL(), "all", map[string]any{"query": "*", "preference": "_replica"}), all)
	// A custom string is sticky across two heads: same peers answer.
	p1 := post(sh1.URL(), "all", map[string]any{"query": "*", "preference": "sticky-1"}).Resp.Summary.Peers
	p2 := post(sh2.URL(), "all", map[string]any{"query": "*", "preference": "sticky-1"}).Resp.Summary.Peers
	if strings.Join(p1, ",") != strings.Join(p2, ",") {
		t.Fatalf("custom preference not sticky across heads: %v vs %v", p1, p2)
	}

	// A 2 MB nested query: 400 (past the 256 KiB query cap), and the
	// head lives on.
	deep := strings.Repeat("(", 1<<20) + "a" + strings.Repeat(")", 1<<20)
	if a := post(sh1.URL(), "all", map[string]any{"query": deep}); a.Status != 400 || !strings.Contains(a.Error, "at most 262144 bytes") {
		t.Fatalf("2 MB nested query: %d %q", a.Status, a.Error)
	}
	mustExact(t, "after the nested query", post(sh1.URL(), "all", map[string]any{"query": "*"}), all)
	// Straight to a peer's single-peer API: the 2 MB body is over its
	// request cap (400), a 200 KB nested query over the nesting limit
	// (400); the peer lives on.
	onePeer := "http://" + c.Peer("site1-p1").Addr()
	if a := post(onePeer, "all", map[string]any{"query": deep}); a.Status != 400 || !strings.Contains(a.Error, "too large") {
		t.Fatalf("2 MB nested query to a peer: %d %q", a.Status, a.Error)
	}
	deep200k := strings.Repeat("(", 100<<10) + "a" + strings.Repeat(")", 100<<10)
	if a := post(onePeer, "all", map[string]any{"query": deep200k}); a.Status != 400 || !strings.Contains(a.Error, "nesting") {
		t.Fatalf("200 KB nested query to a peer: %d %q", a.Status, a.Error)
	}
	if a := post(onePeer, "all", map[string]any{"query": "* | stats count"}); a.Status != 200 {
		t.Fatalf("the peer after the nested query: %d %q", a.Status, a.Error)
	}

	// NDJSON: result lines, then one summary line.
	b, _ := json.Marshal(map[string]any{"query": "*"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sh1.URL()+"/v1/search?stream=true", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer all")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var rows []map[string]any
	var summaryLines int
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["summary"]; ok {
			summaryLines++
			continue
		}
		if summaryLines > 0 {
			t.Fatal("a result line after the summary")
		}
		rows = append(rows, m)
	}
	res.Body.Close()
	if summaryLines != 1 {
		t.Fatalf("%d summary lines", summaryLines)
	}
	_, sum := resultIDs(t, rows)
	if len(rows) != len(all) || sum != rawsChecksum(all) {
		t.Fatalf("NDJSON: %d rows, want %d", len(rows), len(all))
	}

	// Publishing: a subscriber gets the results in order, summary last.
	nc, err := nats.Connect(c.Bus.Server("site1").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe("quarry.results.>", msgs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	sorted := post(sh1.URL(), "all", map[string]any{"query": "* | sort _raw | head 500", "publish": "nightly"})
	if sorted.Status != 200 || len(sorted.Resp.Results) != 500 {
		t.Fatalf("published search: %d, %d rows", sorted.Status, len(sorted.Resp.Results))
	}
	var got []map[string]any
	for done := false; !done; {
		select {
		case m := <-msgs:
			if m.Subject != "quarry.results.nightly" {
				t.Fatalf("subject %s", m.Subject)
			}
			if bytes.HasPrefix(m.Data, []byte(`{"summary"`)) {
				done = true
				break
			}
			for _, line := range bytes.Split(bytes.TrimSpace(m.Data), []byte("\n")) {
				var r map[string]any
				if err := json.Unmarshal(line, &r); err != nil {
					t.Fatalf("published line: %v", err)
				}
				got = append(got, r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no summary published")
		}
	}
	if len(got) != 500 {
		t.Fatalf("subscriber got %d rows, want 500", len(got))
	}
	for i := range got {
		if got[i]["_raw"] != sorted.Resp.Results[i]["_raw"] {
			t.Fatalf("published row %d out of order", i)
		}
	}
	// A row larger than a bus message cannot be published: the answer says
	// so in its warnings, and so does the summary subscribers get — never a
	// complete-looking cut (security review L2).
	wide := post(sh1.URL(), "all", map[string]any{"publish": "nightly",
		"query": `* | head 1 | eval a=replace(_raw, ".", "` + strings.Repeat("x", 16000) + `") | eval b=a | table a b`})
	if wide.Status != 200 || len(wide.Resp.Results) != 1 {
		t.Fatalf("a search with a row wider than a bus message: %d, %d rows (%s)", wide.Status, len(wide.Resp.Results), wide.Error)
	}
	if w := strings.Join(wide.Resp.Summary.Warnings, " "); !strings.Contains(w, "publishing to quarry.results.nightly failed after 0 rows") {
		t.Fatalf("warnings %q, want the failed publish said", wide.Resp.Summary.Warnings)
	}
	for done := false; !done; {
		select {
		case m := <-msgs:
			if !bytes.HasPrefix(m.Data, []byte(`{"summary"`)) {
				t.Fatalf("a row message got through: %d bytes", len(m.Data))
			}
			if !bytes.Contains(m.Data, []byte("subscribers got an incomplete answer")) {
				t.Fatalf("the published summary does not say the rows are missing: %.300s", m.Data)
			}
			done = true
		case <-time.After(10 * time.Second):
			t.Fatal("no summary published for the wide search")
		}
	}

	// The 17th concurrent search on a head capped at 16 gets 429: 16
	// searches are held open (the hook blocks their first message).
	release := make(chan struct{})
	capped := c.StartSearchHead("sh-cap", "site1", func(cfg *searchhead.Config) {
		cfg.MaxSearches = 16
		cfg.MaxSearchesPerToken = 16 // the global cap under test (one token; TestSearchHeadQuotas has the per-token one)
		cfg.PeerTimeout = time.Minute
		cfg.OnMessage = func(peer, kind, bucket string) { <-release }
	})
	var wg sync.WaitGroup
	statuses := make(chan int, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := SearchHTTP(ctx, capped.URL(), "all", map[string]any{"query": "*"})
			if err == nil {
				statuses <- a.Status
			}
		}()
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		res, err := http.Get(capped.URL() + "/metrics")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if sc.Text() == "quarry_searchhead_searches_running 16" {
				return nil
			}
		}
		return fmt.Errorf("not 16 searches running yet")
	})
	a17 := post(capped.URL(), "all", map[string]any{"query": "*"})
	close(release)
	wg.Wait()
	close(statuses)
	if a17.Status != 429 || !strings.Contains(a17.Error, "too many concurrent searches") || a17.Code != "too_many_searches" {
		t.Fatalf("17th search: %d %q %q", a17.Status, a17.Code, a17.Error)
	}
	for st := range statuses {
		if st != 200 {
			t.Fatalf("a held search ended with %d", st)
		}
	}
}

// A search that hits its time limit answers 504 with a clear text and the
// peers stop working on it (quarry_peer_searches_cancelled_total); a peer
// refuses a generation it cannot resolve with a clear error.
func TestSearchCancelAndUnknownGeneration(t *testing.T) {
	c := Start(t, Options{})
	searchIngest(t, c, "cxl", 1000)
	cancelled := func() int64 { return peersCancelled(c) }
	before := cancelled()
	sh := c.StartSearchHead("sh-short", "site1", func(cfg *searchhead.Config) { cfg.SearchTimeout = time.Millisecond })
	a := search(t, sh.URL(), map[string]any{"query": "*"})
	if a.Status != 504 || a.Code != "search_timeout" || !strings.Contains(a.Error, "time limit") {
		t.Fatalf("search past its time limit: %d %q %q", a.Status, a.Code, a.Error)
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		if cancelled() <= before {
			return fmt.Errorf("no peer counted the search as cancelled")
		}
		return nil
	})
	if text, _ := scrape(t, sh.URL()+"/metrics"); !strings.Contains(text, "quarry_searchhead_searches_cancelled_total 1") {
		t.Errorf("the head's cancelled counter did not move by exactly 1")
	}

	// Unresolvable generation, asked straight over NATS.
	nc, err := nats.Connect(c.Bus.Server("site1").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rcv, err := bus.NewReceiver(nc, 0, bus.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(nil)
	var prim string
	var gen uint64
	c.State(func(s *fsm.State) {
		gen = s.CurrentGeneration()
		v, _ := s.Generation("site1", 0)
		for _, p := range v.Primaries {
			prim = p
		}
	})
	req := api.SearchRequest{V: api.WireVersion, ID: "t1", Head: "test", Query: "*", NowNS: time.Now().UnixNano(),
		Generation: gen + 1000, TableVersion: 1, TableSite: "site1", Invites: map[string]bus.Invite{prim: rcv.Invite()}, TimeoutMs: 10000}
	// Each peer takes search requests on its own subject only (SECURITY.md, M4).
	if err := bus.Publish(nc, "quarry.search.site1."+prim, req); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := rcv.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m api.SearchMsg
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != api.SearchError || m.Code != api.SearchCodeGeneration || !strings.Contains(m.Error, fmt.Sprintf("cannot resolve generation %d", gen+1000)) {
		t.Fatalf("peer %s answered %+v", prim, m)
	}
}

// quarry search --searchhead and quarry searchhead, through the binary: a
// search head process on the cluster's bus; event rows stream, a stats
// search prints a table, json prints one line per row; --site names the
// head's site or is refused; a syntax error exits non-zero with its column.
func TestCLISearchHead(t *testing.T) {
	c := Start(t, Options{})
	raws := searchIngest(t, c, "cli", 600)
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBinary(t), "searchhead", "--id", "shx", "--site", "site2", "--http-addr", addr,
		"--nats", c.Bus.Server("site2").ClientURL())
	var logb bytes.Buffer
	cmd.Stderr = &logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	url := "http://" + addr
	testutil.WaitFor(t, 30*time.Second, func() error {
		if r := runCLI(t, "health", url); r.Code != 0 {
			return fmt.Errorf("searchhead not healthy: %s", r.Stderr)
		}
		return nil
	})
	r := mustCLI(t, "search", "--searchhead", url, "*", "--output", "raw")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != len(raws) {
		t.Fatalf("raw output: %d lines, want %d", len(lines), len(raws))
	}
	if !strings.Contains(r.Stderr, "site site2") || !strings.Contains(r.Stderr, "0 failed, 0 missing") {
		t.Fatalf("summary line: %q", r.Stderr)
	}
	r = mustCLI(t, "search", "* | stats count by sourcetype", "--searchhead", url)
	if !strings.Contains(r.Stdout, "sourcetype") || !strings.Contains(r.Stdout, fmt.Sprint(len(raws))) {
		t.Fatalf("table output: %q", r.Stdout)
	}
	r = mustCLI(t, "search", "*", "--searchhead", url, "--output", "json", "--site", "site2")
	if n := strings.Count(strings.TrimSpace(r.Stdout), "\n") + 1; n != len(raws) {
		t.Fatalf("json output: %d lines, want %d", n, len(raws))
	}
	if r := runCLI(t, "search", "*", "--searchhead", url, "--site", "site1"); r.Code == 0 || !strings.Contains(r.Stderr, `serves site "site2", not "site1"`) {
		t.Fatalf("--site mismatch: exit %d %q", r.Code, r.Stderr)
	}
	if r := runCLI(t, "search", "foo | stats", "--searchhead", url); r.Code == 0 || !strings.Contains(r.Stderr, "column") {
		t.Fatalf("syntax error: exit %d %q", r.Code, r.Stderr)
	}
	if r := runCLI(t, "search", "*", "--searchhead", url, "--preference", "_xyz"); r.Code == 0 || !strings.Contains(r.Stderr, "no preference for [_xyz]") {
		t.Fatalf("bad preference: exit %d %q", r.Code, r.Stderr)
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// The result limit truncates with a warning (event search through JSON and
// NDJSON, and a transforming search); a client that goes away mid-search
// makes the head cancel it and the peers stop scanning (their cancelled
// counters move).
func TestSearchHeadResultLimitAndClientGone(t *testing.T) {
	// The client-gone case needs a peer still scanning when the client
	// hangs up (a peer that already finished has nothing to stop): the
	// first bucket a peer scans for the search of "gone" waits, on that
	// search's context, until the client has gone.
	var holdOnce sync.Once
	var holding atomic.Bool
	held, gone := make(chan struct{}), make(chan struct{})
	c := Start(t, Options{PeerTweak: func(id string, cfg *peer.Config) {
		cfg.BeforeSearchBucket = func(ctx context.Context, bucket string) {
			if !holding.Load() {
				return
			}
			first := false
			holdOnce.Do(func() { first = true; close(held) })
			if first {
				select {
				case <-gone:
				case <-ctx.Done():
				}
			}
		}
	}})
	var goneOnce sync.Once
	release := func() { goneOnce.Do(func() { close(gone) }) }
	t.Cleanup(release)
	searchIngest(t, c, "lim", 2000)
	sh := c.StartSearchHead("sh-lim", "site1", func(cfg *searchhead.Config) { cfg.MaxResults = 150 })
	limited := func(s query.Summary) bool {
		for _, w := range s.Warnings {
			if strings.Contains(w, "result limit of 150 rows reached") {
				return true
			}
		}
		return false
	}
	a := search(t, sh.URL(), map[string]any{"query": "*"})
	if a.Status != 200 || len(a.Resp.Results) != 150 || !limited(a.Resp.Summary) {
		t.Fatalf("event search over the limit: HTTP %d, %d rows, warnings %v", a.Status, len(a.Resp.Results), a.Resp.Summary.Warnings)
	}
	a = search(t, sh.URL(), map[string]any{"query": "* | stats count by _raw"})
	if a.Status != 200 || len(a.Resp.Results) != 150 || !limited(a.Resp.Summary) {
		t.Fatalf("transforming search over the limit: HTTP %d, %d rows, warnings %v", a.Status, len(a.Resp.Results), a.Resp.Summary.Warnings)
	}
	a = search(t, sh.URL(), map[string]any{"query": "* | head 10"})
	if a.Status != 200 || len(a.Resp.Results) != 10 || limited(a.Resp.Summary) {
		t.Fatalf("a search under the limit: HTTP %d, %d rows, warnings %v", a.Status, len(a.Resp.Results), a.Resp.Summary.Warnings)
	}

	// Client gone: a peer is held at its first bucket (above) until the
	// client has hung up, then lets it go on; the head must abort the
	// peers' streams (not confirm their end), and the peers must count
	// the search as cancelled.
	cancelled := func() int64 { return peersCancelled(c) }
	before := cancelled()
	sh2 := c.StartSearchHead("sh-gone", "site1", func(cfg *searchhead.Config) { cfg.PeerTimeout = 30 * time.Second })
	holding.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := SearchHTTP(ctx, sh2.URL(), "", map[string]any{"query": "*"})
		errc <- err
	}()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no peer began scanning for the search")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the client's cancelled request returned an answer")
	}
	release()
	testutil.WaitFor(t, 30*time.Second, func() error {
		if cancelled() <= before {
			return fmt.Errorf("no peer counted the abandoned search as cancelled")
		}
		return nil
	})
	testutil.WaitFor(t, 30*time.Second, func() error {
		if text, _ := scrape(t, sh2.URL()+"/metrics"); !strings.Contains(text, "quarry_searchhead_searches_cancelled_total 1") {
			return fmt.Errorf("the head's cancelled counter is not 1")
		}
		return nil
	})
}

// peersCancelled sums the running peers' cancelled-search counters.
func peersCancelled(c *Cluster) int64 {
	var n int64
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			n += p.SearchStats().Cancelled.Load()
		}
	}
	return n
}

// TestTokenlessHeadServesOnlyLocalClients: a search head with no token on
// loopback (as in `quarry dev`) serves this machine's own clients only
// (the security review's M7): a request whose Host is a rebound name, or
// that a web page of another origin sends, gets 403 not_local; the CLI's
// and curl's requests (loopback Host, no Origin) and the head's own page
// (its loopback origin) are served.
func TestTokenlessHeadServesOnlyLocalClients(t *testing.T) {
	c := Start(t, Options{})
	searchIngest(t, c, "local", 100)
	sh := c.StartSearchHead("sh1", "site1")
	post := func(host, origin string) (int, string) {
		req, _ := http.NewRequest("POST", sh.URL()+"/v1/search", strings.NewReader(`{"query":"* | stats count"}`))
		req.Header.Set("Content-Type", "text/plain")
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := c.HTTPClient(30 * time.Second).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, h := range [][2]string{{"attacker.example:32973", ""}, {"attacker.example:32973", "http://attacker.example:32973"}, {"", "http://attacker.example"}} {
		if code, b := post(h[0], h[1]); code != 403 || !strings.Contains(b, "not_local") {
			t.Fatalf("Host %q Origin %q: %d %s, want 403 not_local", h[0], h[1], code, b)
		}
	}
	own := strings.TrimSuffix(sh.URL(), "/")
	for _, origin := range []string{"", own} {
		if code, b := post("", origin); code != 200 || !strings.Contains(b, `"count"`) {
			t.Fatalf("a local client (Origin %q): %d %s", origin, code, b)
		}
	}
}
