package peer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer/store"
)

var quarryBin string

// TestMain builds the quarry binary once for the tests that run it as a
// child process.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quarry-peer-test")
	if err != nil {
		panic(err)
	}
	quarryBin = filepath.Join(dir, "quarry")
	cmd := exec.Command("go", "build", "-o", quarryBin, "github.com/quarry-dev/quarry/cmd/quarry")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build quarry:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type child struct {
	cmd  *exec.Cmd
	url  string
	exit chan error
}

// startChild starts `quarry peer` on dataDir and waits for its address.
func startChild(t *testing.T, dataDir, crashpoint string, logw io.Writer) *child {
	t.Helper()
	return startPeerProcess(t, crashpoint, logw, "--id", "p1", "--data-dir", dataDir, "--http-addr", "127.0.0.1:0",
		"--hec-token", "T", "--max-hot-bytes", "6000")
}

// startPeerProcess runs `quarry peer ARGS…` and waits for its address.
func startPeerProcess(t *testing.T, crashpoint string, logw io.Writer, args ...string) *child {
	t.Helper()
	cmd := exec.Command(quarryBin, append([]string{"peer"}, args...)...)
	cmd.Env = append(os.Environ(), "QUARRY_CRASHPOINT="+crashpoint)
	cmd.Stderr = logw
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, exit: make(chan error, 1)}
	addr, _ := testutil.ListeningOn(out)
	go func() { c.exit <- cmd.Wait() }()
	select {
	case c.url = <-addr:
	case err := <-c.exit:
		t.Fatalf("child peer exited before listening: %v", err)
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("child peer did not start within 20s")
	}
	return c
}

// ingester sends batches with unique terms u<seq>x and records which were
// acknowledged.
type ingester struct {
	url     string
	channel string
	client  *http.Client
	next    *int
	mu      *sync.Mutex
	acked   map[int]bool
}

func (in *ingester) run(stop <-chan struct{}) {
	pending := map[int64][]int{}
	for {
		select {
		case <-stop:
			return
		default:
		}
		var body bytes.Buffer
		var seqs []int
		in.mu.Lock()
		for i := 0; i < 20; i++ {
			seq := *in.next
			*in.next++
			seqs = append(seqs, seq)
			fmt.Fprintf(&body, `{"time":%d.%03d,"event":"u%dx GET /p/%d status=%d filler words here","fields":{"n":"%d"}}`, 1767225600+seq/10, seq%1000, seq, seq%17, 200+seq%5, seq%3)
		}
		in.mu.Unlock()
		req, _ := http.NewRequest("POST", in.url+"/services/collector/event", &body)
		req.Header.Set("Authorization", "Splunk T")
		req.Header.Set("X-Splunk-Request-Channel", in.channel)
		resp, err := in.client.Do(req)
		if err != nil {
			return // the child died
		}
		var r struct {
			Code  int    `json:"code"`
			AckID *int64 `json:"ackId"`
		}
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if r.Code == 0 && r.AckID != nil {
			pending[*r.AckID] = seqs
		}
		if len(pending) > 0 {
			ids := make([]int64, 0, len(pending))
			for id := range pending {
				ids = append(ids, id)
			}
			b, _ := json.Marshal(map[string]any{"acks": ids})
			req, _ := http.NewRequest("POST", in.url+"/services/collector/ack", bytes.NewReader(b))
			req.Header.Set("Authorization", "Splunk T")
			req.Header.Set("X-Splunk-Request-Channel", in.channel)
			resp, err := in.client.Do(req)
			if err != nil {
				return
			}
			var a struct {
				Acks map[string]bool `json:"acks"`
			}
			json.NewDecoder(resp.Body).Decode(&a)
			resp.Body.Close()
			for _, id := range ids {
				if a.Acks[strconv.FormatInt(id, 10)] {
					in.mu.Lock()
					for _, s := range pending[id] {
						in.acked[s] = true
					}
					in.mu.Unlock()
					delete(pending, id)
				}
			}
		}
	}
}

func readGUID(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "peer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct {
		GUID string `json:"guid"`
	}
	json.Unmarshal(b, &id)
	return id.GUID
}

// verifyStore opens the store in-process (recovering it as the peer would)
// and checks that every acknowledged event is there, by the per-copy
// inventory and by reading the index; then that a second open is clean.
func verifyStore(t *testing.T, dir string, acked map[int]bool, childEvents uint32) (copies int) {
	t.Helper()
	opts := store.Options{Dir: dir, GUID: readGUID(t, dir), Searchable: true}
	s, err := store.Open(opts)
	if err != nil {
		t.Fatalf("store does not open after a crash: %v", err)
	}
	if rep := s.LastRecovery(); !rep.Clean() {
		t.Fatalf("the restarted peer left repairs to do: %+v", rep)
	}
	inv := s.Inventory()
	var invEvents uint32
	for _, c := range inv {
		if c.State != "warm" || !c.Searchable {
			t.Fatalf("copy %s is %s searchable=%v after recovery", c.ID, c.State, c.Searchable)
		}
		invEvents += c.Events
		if err := s.Repairs().Verify(c.ID); err != nil {
			t.Fatalf("copy %s does not verify after recovery (journal, index, columns): %v", c.ID, err)
		}
	}
	seen := map[int]bool{}
	for _, seg := range s.Segments() {
		err := seg.TermsWithPrefix("u", func(term string, bm *roaring.Bitmap) bool {
			if n, err := strconv.Atoi(strings.TrimSuffix(term[1:], "x")); err == nil && strings.HasSuffix(term, "x") {
				if seen[n] {
					t.Errorf("event u%dx stored twice", n)
				}
				seen[n] = true
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for seq := range acked {
		if !seen[seq] {
			t.Fatalf("acknowledged event u%dx lost (%d acked, %d present)", seq, len(acked), len(seen))
		}
	}
	if int(invEvents) != len(seen) || invEvents != childEvents {
		t.Fatalf("inventory counts %d events (the restarted peer said %d), the index holds %d", invEvents, childEvents, len(seen))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rep := s.LastRecovery(); !rep.Clean() {
		t.Fatalf("second open after recovery still repaired: %+v", rep)
	}
	return len(inv)
}

// TestCrashKill9 kills a child peer with SIGKILL at random moments and at
// crash points (block write, fsync, roll, index and metadata writes) while
// it ingests with acks and rolls constantly; after each kill every
// acknowledged event must be present and the store must open cleanly.
func TestCrashKill9(t *testing.T) {
	kills := 30
	if v, err := strconv.Atoi(os.Getenv("QUARRY_CRASH_KILLS")); err == nil && v > 0 {
		kills = v
	}
	if testing.Short() {
		kills = 6
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d, %d kills", seed, kills)
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	logf, _ := os.Create(filepath.Join(dir, "..", "child.log"))
	defer logf.Close()
	points := []string{"seal", "block-write", "fsync", "roll", "index-write", "index-rename", "columns-write", "columns-rename", "meta-write", "meta-rename", "copy-write", "copy-rename"}
	next := 0
	var mu sync.Mutex
	acked := map[int]bool{}
	byPoint := map[string]int{}
	for k := 0; k < kills; k++ {
		cp := ""
		if k%2 == 1 {
			cp = points[(k/2)%len(points)] + ":" + strconv.Itoa(1+rng.Intn(3))
		}
		c := startChild(t, dir, cp, logf)
		in := &ingester{url: c.url, channel: "11111111-2222-3333-4444-" + fmt.Sprintf("%012d", k), client: &http.Client{Timeout: 5 * time.Second},
			next: &next, mu: &mu, acked: acked}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { in.run(stop); close(done) }()
		how := "random"
		select {
		case <-c.exit:
			how = "crashpoint " + cp
		case <-time.After(time.Duration(50+rng.Intn(400)) * time.Millisecond):
			if cp != "" {
				// give the crash point a little longer, then kill anyway
				select {
				case <-c.exit:
					how = "crashpoint " + cp
				case <-time.After(300 * time.Millisecond):
				}
			}
			if how == "random" {
				c.cmd.Process.Signal(syscall.SIGKILL)
				<-c.exit
			}
		}
		byPoint[how]++
		close(stop)
		<-done
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		// Restart the peer: it recovers the store; its inventory must hold
		// every acknowledged event, all copies warm.
		vc := startChild(t, dir, "", logf)
		var br struct {
			Buckets []store.CopyInfo `json:"buckets"`
		}
		resp, err := http.Get(vc.url + "/v1/buckets")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&br)
		resp.Body.Close()
		var childEvents uint32
		for _, c := range br.Buckets {
			if c.State != "warm" {
				t.Fatalf("after restart copy %s is %s", c.ID, c.State)
			}
			childEvents += c.Events
		}
		if int(childEvents) < len(acked) {
			t.Fatalf("restarted peer holds %d events, %d were acknowledged", childEvents, len(acked))
		}
		vc.cmd.Process.Signal(syscall.SIGTERM)
		if err := <-vc.exit; err != nil {
			t.Fatalf("restarted peer did not stop cleanly: %v", err)
		}
		copies := verifyStore(t, dir, acked, childEvents)
		t.Logf("kill %d (%s): %d events acknowledged so far, %d copies", k+1, how, n, copies)
	}
	if len(acked) == 0 {
		t.Fatal("no event was ever acknowledged")
	}
	t.Logf("kills by kind: %v", byPoint)
}
