//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/query"
)

var httpc = &http.Client{Timeout: 10 * time.Second}

// pollEvery is how often the tests check a real process's state.
const pollEvery = 250 * time.Millisecond

// waitFor polls cond (testutil.Poll) with a deadline that fails the test;
// it returns how long cond took to hold.
func waitFor(t *testing.T, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	if err := testutil.Poll(ctx, pollEvery, cond); err != nil {
		t.Fatalf("%s: not within %v: %v", what, d, err)
	}
	return time.Since(start)
}

// waitHealthy: every container healthy, a leader, 6 peers Up, and every
// search head answering.
func waitHealthy(ctx context.Context) error {
	return testutil.Poll(ctx, pollEvery, func() error {
		ids, err := compose(ctx, "ps", "-q")
		if err != nil {
			return err
		}
		certs, err := compose(ctx, "ps", "-q", "certs")
		if err != nil {
			return err
		}
		var f []string
		for _, id := range strings.Fields(ids) {
			if id != strings.TrimSpace(certs) { // the one-shot certs container, exited
				f = append(f, id)
			}
		}
		if len(f) != 14 {
			return fmt.Errorf("%d containers, want 14", len(f))
		}
		out, err := docker(ctx, append([]string{"inspect", "-f", "{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{end}}"}, f...)...)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(out, "\n") {
			if !strings.HasSuffix(l, " healthy") {
				return fmt.Errorf("not healthy: %s", l)
			}
		}
		return allUp(ctx)
	})
}

// status reads /v1/status from the first manager that answers (skipping
// the ones in skip).
func status(ctx context.Context, skip ...string) (fsm.Status, string, error) {
	var last error
	for _, id := range []string{"m1", "m2", "m3"} {
		if slices.Contains(skip, id) {
			continue
		}
		var st fsm.Status
		if err := getJSON(ctx, managerURLs[id]+"/v1/status", &st); err != nil {
			last = err
			continue
		}
		return st, id, nil
	}
	return fsm.Status{}, "", fmt.Errorf("no manager answers: %w", last)
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	// A peer's GET /v1/buckets needs a token off loopback (the managers'
	// admin token works on every peer); the managers' reads ignore it.
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := httpc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("GET %s: %d %s", url, res.StatusCode, b)
	}
	return json.NewDecoder(res.Body).Decode(v)
}

// allUp: a leader, every peer Up.
func allUp(ctx context.Context, skip ...string) error {
	st, _, err := status(ctx, skip...)
	if err != nil {
		return err
	}
	if st.Leader == "" {
		return errors.New("no leader")
	}
	for _, id := range peerIDs {
		if peerState(st, id) != fsm.StateUp {
			return fmt.Errorf("peer %s is %v", id, peerState(st, id))
		}
	}
	return nil
}

func peerState(st fsm.Status, id string) fsm.PeerState {
	for _, p := range st.Peers {
		if p.ID == id {
			return p.State
		}
	}
	return "absent"
}

// complete: every peer Up, and the cluster valid and complete.
func complete(ctx context.Context, skip ...string) error {
	if err := allUp(ctx, skip...); err != nil {
		return err
	}
	st, _, _ := status(ctx, skip...)
	if !st.Valid || !st.Complete {
		return fmt.Errorf("valid %v complete %v (fixups %d: %+v)", st.Valid, st.Complete, len(st.Fixups), st.Fixups)
	}
	return nil
}

// adminPost posts to the leader's published port (a redirect from a
// follower names the leader's container address, and Go's client does not
// carry the token to another host).
func adminPost(ctx context.Context, path, body string) (int, error) {
	st, _, err := status(ctx)
	if err != nil || managerURLs[st.Leader] == "" {
		return 0, fmt.Errorf("no leader to post %s to (%q): %v", path, st.Leader, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, managerURLs[st.Leader]+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := httpc.Do(req)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

// --- search ------------------------------------------------------------

// search posts a search to a head with the search token.
func search(ctx context.Context, head, q string) (query.Response, error) {
	b, _ := json.Marshal(map[string]any{"query": q, "allow_partial": false})
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, headURLs[head]+"/v1/search", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+searchToken)
	res, err := (&http.Client{}).Do(req)
	if err != nil {
		return query.Response{}, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return query.Response{}, fmt.Errorf("%s: HTTP %d %s", head, res.StatusCode, bytes.TrimSpace(raw))
	}
	var r query.Response
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&r); err != nil {
		return r, err
	}
	if r.Summary.Partial {
		return r, fmt.Errorf("%s: partial: %v", head, r.Summary.Warnings)
	}
	return r, nil
}

// count runs `index=main <term> | stats count` (complete answers only).
func count(ctx context.Context, head, term string) (int, query.Summary, error) {
	r, err := search(ctx, head, "index=main "+term+" | stats count")
	if err != nil {
		return 0, r.Summary, err
	}
	if len(r.Results) != 1 {
		return 0, r.Summary, fmt.Errorf("%s: %d rows", head, len(r.Results))
	}
	n, err := strconv.Atoi(fmt.Sprint(r.Results[0]["count"]))
	return n, r.Summary, err
}

// raws returns how many times each event of term is returned by head.
func raws(ctx context.Context, head, term string) (map[string]int, error) {
	r, err := search(ctx, head, "index=main "+term)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, row := range r.Results {
		out[fmt.Sprint(row["_raw"])]++
	}
	return out, nil
}

// searcher runs the baseline's exact count on every head in turn until
// stopped; every answer must be complete and exact.
type searcher struct {
	term   string
	want   int
	heads  []string
	check  func(head string, s query.Summary) error // extra check, may be nil
	runs   atomic.Int64
	mu     sync.Mutex
	failed []string
	// lastStart is when the most recently finished search began (unix ns).
	lastStart atomic.Int64
	stop      chan struct{}
	stopped   chan struct{}
}

func startSearcher(term string, want int, heads []string, check func(string, query.Summary) error) *searcher {
	s := &searcher{term: term, want: want, heads: heads, check: check, stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(300 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			head := s.heads[i%len(s.heads)]
			began := time.Now()
			n, sum, err := count(context.Background(), head, s.term)
			if err == nil && n != s.want {
				err = fmt.Errorf("%s counts %d, want %d", head, n, s.want)
			}
			if err == nil && s.check != nil {
				err = s.check(head, sum)
			}
			s.runs.Add(1)
			s.lastStart.Store(began.UnixNano())
			if err != nil {
				s.mu.Lock()
				s.failed = append(s.failed, time.Now().Format("15:04:05.000")+" "+err.Error())
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// searchedSince says whether a search that began at or after t has
// finished (whatever its outcome: failures are collected apart).
func (s *searcher) searchedSince(t time.Time) error {
	if s.lastStart.Load() < t.UnixNano() {
		return fmt.Errorf("no search begun since %s has finished yet", t.Format("15:04:05.000"))
	}
	return nil
}

// end stops the searcher: searches run and failures.
func (s *searcher) end() (int64, []string) {
	close(s.stop)
	<-s.stopped
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs.Load(), s.failed
}

// --- ingest ------------------------------------------------------------

func newChannel() string {
	var r [16]byte
	rand.Read(r[:])
	h := hex.EncodeToString(r[:])
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
}

// ingester sends batches of unique events through HEC with acks, from
// the host, until stopped. A batch whose send fails or whose ack does not
// come within ackTimeout is not resent (it may or may not be indexed) and
// the ingester moves to the next HEC URL; acknowledged events are kept.
type ingester struct {
	tag     string
	urls    []string
	batch   int
	mu      sync.Mutex
	acked   []string
	sent    int
	unacked int
	errs    []string
	stop    chan struct{}
	stopped chan struct{}
}

const ackTimeout = 20 * time.Second

func startIngester(tag string, urls []string, batch int) *ingester {
	in := &ingester{tag: tag, urls: urls, batch: batch, stop: make(chan struct{}), stopped: make(chan struct{})}
	go in.run()
	return in
}

func (in *ingester) run() {
	defer close(in.stopped)
	u, ch, next := 0, newChannel(), 0
	for {
		select {
		case <-in.stop:
			return
		default:
		}
		var b []string
		for i := 0; i < in.batch; i++ {
			b = append(b, fmt.Sprintf("%s ev%dx GET /api/item/%d status=%d", in.tag, next, next%13, 200+next%3))
			next++
		}
		in.mu.Lock()
		in.sent += len(b)
		in.mu.Unlock()
		err := sendAcked(in.urls[u], ch, b)
		in.mu.Lock()
		if err == nil {
			in.acked = append(in.acked, b...)
		} else {
			in.unacked += len(b)
			in.errs = append(in.errs, err.Error())
		}
		in.mu.Unlock()
		if err != nil { // next HEC, new channel
			u, ch = (u+1)%len(in.urls), newChannel()
			select {
			case <-in.stop:
				return
			case <-time.After(200 * time.Millisecond): // pace retries against a dead endpoint
			}
		}
	}
}

// ackedCount is how many events are acknowledged so far.
func (in *ingester) ackedCount() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.acked)
}

func (in *ingester) end() (acked []string, sent, unacked int, errs []string) {
	close(in.stop)
	<-in.stopped
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.acked, in.sent, in.unacked, in.errs
}

// sendAcked posts one batch and waits for its ack.
func sendAcked(url, channel string, raws []string) error {
	var body bytes.Buffer
	for _, r := range raws {
		b, _ := json.Marshal(map[string]any{"event": r, "time": 1767225600, "index": "main"})
		body.Write(b)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/services/collector/event", &body)
	req.Header.Set("Authorization", "Splunk "+hecToken)
	req.Header.Set("X-Splunk-Request-Channel", channel)
	res, err := httpc.Do(req)
	if err != nil {
		return err
	}
	var ans struct {
		Code  int    `json:"code"`
		Text  string `json:"text"`
		AckID *int64 `json:"ackId"`
	}
	err = json.NewDecoder(res.Body).Decode(&ans)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || ans.AckID == nil {
		return fmt.Errorf("HEC %s: %d code %d %s %v", url, res.StatusCode, ans.Code, ans.Text, err)
	}
	deadline := time.Now().Add(ackTimeout)
	for time.Now().Before(deadline) {
		b, _ := json.Marshal(map[string]any{"acks": []int64{*ans.AckID}})
		req, _ := http.NewRequest(http.MethodPost, url+"/services/collector/ack", bytes.NewReader(b))
		req.Header.Set("Authorization", "Splunk "+hecToken)
		req.Header.Set("X-Splunk-Request-Channel", channel)
		res, err := httpc.Do(req)
		if err != nil {
			return fmt.Errorf("ack %s: %w", url, err)
		}
		var acks struct {
			Acks map[string]bool `json:"acks"`
		}
		err = json.NewDecoder(res.Body).Decode(&acks)
		res.Body.Close()
		if err == nil && acks.Acks[strconv.FormatInt(*ans.AckID, 10)] {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // the ack poll interval (HEC has no push)
	}
	return fmt.Errorf("HEC %s: ack %d not within %v", url, *ans.AckID, ackTimeout)
}

func uniqueTag(name string) string {
	var r [3]byte
	rand.Read(r[:])
	return "e2e" + name + hex.EncodeToString(r[:])
}

// verifyAcked searches the tag on every head: each acknowledged event
// exactly once, no event twice, nothing that was never sent. It returns
// the number of acknowledged events lost (over all heads, at most).
func verifyAcked(t *testing.T, tag string, acked []string, sent int) (lost int) {
	t.Helper()
	want := map[string]bool{}
	for _, r := range acked {
		want[r] = true
	}
	for _, head := range []string{"sh1", "sh2", "sh0"} {
		// A complete answer holding every acknowledged event, polled for up
		// to 30 s: a searchable hot replica may lag its origin by a block
		// interval, no more. What is still missing then is reported lost.
		var got map[string]int
		first := -1
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := testutil.Poll(ctx, pollEvery, func() error {
			var err error
			if got, err = raws(context.Background(), head, tag); err != nil {
				return err
			}
			n := 0
			for r := range want {
				if got[r] == 0 {
					n++
				}
			}
			if first < 0 {
				first = n
			}
			if n > 0 {
				return fmt.Errorf("%s: %d acknowledged events missing", head, n)
			}
			return nil
		})
		cancel()
		if got == nil {
			t.Fatalf("no complete answer from %s: %v", head, err)
		}
		if first > 0 {
			t.Logf("%s: first answer lacked %d acknowledged events", head, first)
		}
		missing, dup := 0, 0
		for r := range want {
			if got[r] == 0 {
				missing++
			}
		}
		for r, k := range got {
			if k > 1 {
				dup++
				t.Errorf("%s returns %q %d times", head, r, k)
			}
		}
		if len(got) > sent {
			t.Errorf("%s returns %d distinct events of %s, more than the %d sent", head, len(got), tag, sent)
		}
		if missing > 0 {
			t.Errorf("%s: %d of %d acknowledged events missing", head, missing, len(want))
			explainMissing(t, head, tag, want, got)
		}
		lost = max(lost, missing)
		t.Logf("%s: %d events of %s (acknowledged %d, sent %d), %d missing, %d duplicated", head, len(got), tag, len(want), sent, missing, dup)
	}
	return lost
}

// metric reads one counter from a peer's /metrics (over the project
// network; -1 when the peer does not answer).
func metric(id, name string) float64 {
	res, err := httpc.Get("https://" + peerIP(id) + ":8088/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return -1
}

// explainMissing logs, for the buckets that hold events a head did not
// return (found through the other heads' answers, which carry _bkt), the
// head's summary, the managers' view of each bucket (copies, lengths,
// short, primaries) and each peer's own copy of it.
func explainMissing(t *testing.T, head, tag string, want map[string]bool, got map[string]int) {
	t.Helper()
	ctx := context.Background()
	buckets := map[string]int{}
	for _, other := range []string{"sh1", "sh2", "sh0"} {
		if other == head {
			continue
		}
		r, err := search(ctx, other, "index=main "+tag)
		if err != nil {
			continue
		}
		for _, row := range r.Results {
			if raw := fmt.Sprint(row["_raw"]); want[raw] && got[raw] == 0 {
				buckets[fmt.Sprint(row["_bkt"])]++
			}
		}
	}
	if r, err := search(ctx, head, "index=main "+tag+" | stats count by _bkt, splunk_server"); err == nil {
		t.Logf("%s: per bucket and peer %v; summary %+v", head, r.Results, r.Summary)
	}
	st, _, _ := status(ctx)
	for b, n := range buckets {
		t.Logf("bucket %s: %d of the missing events", b, n)
		var all struct {
			Buckets []map[string]any `json:"buckets"`
		}
		if u := managerURLs[st.Leader]; u != "" && getJSON(ctx, u+"/v1/buckets", &all) == nil {
			for _, v := range all.Buckets {
				if v["id"] == b {
					t.Logf("  managers: %v", v)
				}
			}
		}
		for _, p := range peerIDs {
			var inv struct {
				Buckets []map[string]any `json:"buckets"`
			}
			if getJSON(ctx, "https://"+peerIP(p)+":8088/v1/buckets", &inv) != nil {
				continue
			}
			for _, c := range inv.Buckets {
				if c["id"] == b {
					t.Logf("  %s holds %v", p, c)
				}
			}
		}
	}
}
