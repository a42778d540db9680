package peer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/store"
)

const fdTestGUID = "5A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D"

// writeWarmCopies writes n warm copies of index main, each of per events,
// into dataDir as this peer's own (peer.json names fdTestGUID): a template
// bucket per 50,000 copies (ext4 allows 65,000 links to a file) is written
// by the store's own writer and rolled, and the other copies are hard
// links to a template's journal, index and column files beside copy.json
// and meta.json rewritten with their id — valid copies, as recovery
// checks. Every event has the term "common".
func writeWarmCopies(t *testing.T, dataDir string, n, per int) {
	t.Helper()
	idt, _ := json.Marshal(map[string]any{"version": 1, "guid": fdTestGUID, "id": "p1"})
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "peer.json"), idt, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: dataDir, GUID: fdTestGUID, Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-time.Hour).UnixNano()
	var evs []store.Event
	for i := 0; i < per; i++ {
		evs = append(evs, store.Event{Index: "main", Time: now + int64(i), Raw: []byte(fmt.Sprintf("event %d common status=200", i)),
			Host: []byte("web-1"), Source: []byte("/var/log/x"), Sourcetype: []byte("access")})
	}
	const perTemplate = 50_000
	templates := min((n+perTemplate-1)/perTemplate, n)
	for i := 0; i < templates; i++ {
		a, err := st.Append(evs)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Wait(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		st.RollAll()
	}
	if err := st.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	buckets := filepath.Join(dataDir, "buckets")
	for i := templates; i < n; i++ {
		tmpl := i % templates
		srcID := store.BucketID("main", uint64(tmpl), fdTestGUID)
		src := filepath.Join(buckets, srcID)
		copyJSON, err := os.ReadFile(filepath.Join(src, "copy.json"))
		if err != nil {
			t.Fatal(err)
		}
		metaJSON, err := os.ReadFile(filepath.Join(src, "meta.json"))
		if err != nil {
			t.Fatal(err)
		}
		rewrite := func(b []byte, id string) []byte {
			b = bytes.Replace(b, []byte(`"`+srcID+`"`), []byte(`"`+id+`"`), 1)
			return bytes.Replace(b, []byte(`"local_id": `+strconv.Itoa(tmpl)+`,`), []byte(`"local_id": `+strconv.Itoa(i)+`,`), 1)
		}
		id := store.BucketID("main", uint64(i), fdTestGUID)
		dst := filepath.Join(buckets, id)
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"journal.qj", "index.qi", "columns.qc"} {
			if err := os.Link(filepath.Join(src, f), filepath.Join(dst, f)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dst, "copy.json"), rewrite(copyJSON, id), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, "meta.json"), rewrite(metaJSON, id), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// searchPeer posts a search and returns the HTTP status and the answer.
func searchPeer(t *testing.T, c *http.Client, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := c.Post(url+"/v1/search", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("search answer %q: %v", b, err)
	}
	return resp.StatusCode, out
}

func resultCount(out map[string]any) int {
	rows, _ := out["results"].([]any)
	if len(rows) != 1 {
		return -1
	}
	n := -1
	fmt.Sscan(fmt.Sprint(rows[0].(map[string]any)["count"]), &n)
	return n
}

// TestHundredThousandWarmCopiesUnderUlimit1024: a peer whose data folder
// holds 100,000 warm copies (300,000 index, column and journal files)
// starts and answers an exact count over all of them as `quarry peer`
// under `ulimit -n 1024` (soft and hard), with the default
// --max-open-files (half the limit: 512).
func TestHundredThousandWarmCopiesUnderUlimit1024(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 copies and opens them in a child peer (about a minute)")
	}
	const n, per = 100_000, 3
	dir := filepath.Join(memTempDir(t), "data")
	start := time.Now()
	writeWarmCopies(t, dir, n, per)
	generated := time.Since(start)
	var logs bytes.Buffer
	cmd := exec.Command("bash", "-c", `ulimit -n 1024 && exec "$0" "$@"`, quarryBin, "peer", "--id", "p1", "--data-dir", dir,
		"--http-addr", "127.0.0.1:0", "--hec-token", "T")
	cmd.Stderr = &logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addr, drained := testutil.ListeningOn(out)
	go func() {
		<-drained
		exited <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	var url string
	select {
	case url = <-addr:
	case err := <-exited:
		t.Fatalf("peer exited before listening: %v\n%s", err, logs.String())
	case <-time.After(5 * time.Minute):
		t.Fatalf("peer not listening after 5 minutes\n%s", logs.String())
	}
	opened := time.Since(start)
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !regexpLimits(string(limits)) {
		t.Fatalf("the child peer does not run under 1024 open files:\n%s", limits)
	}
	start = time.Now()
	status, ans := searchPeer(t, http.DefaultClient, url, `{"query":"common | stats count","allow_partial":false}`)
	searched := time.Since(start)
	if status != 200 || resultCount(ans) != n*per {
		t.Fatalf("search: %d %v, want count %d", status, ans["results"], n*per)
	}
	sum, _ := ans["summary"].(map[string]any)
	b, _ := sum["buckets"].(map[string]any)
	if fmt.Sprint(b["total"]) != strconv.Itoa(n) || fmt.Sprint(b["failed"]) != "0" {
		t.Fatalf("search summary %v: want %d buckets, none failed", b, n)
	}
	m := scrape(t, url)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if m["quarry_peer_open_files_limit"] != 512 || m["quarry_peer_open_files"] > 512 {
		t.Fatalf("file cache %v of %v: want the default cap 512 held", m["quarry_peer_open_files"], m["quarry_peer_open_files_limit"])
	}
	t.Logf("%d copies: generated in %v, peer listening after %v, search over all in %v; %d descriptors open in the peer "+
		"(file cache %v of %v; %v opens, %v evictions, %v exhausted)", n, generated.Round(time.Millisecond), opened.Round(time.Millisecond),
		searched.Round(time.Millisecond), len(fds), m["quarry_peer_open_files"], m["quarry_peer_open_files_limit"],
		m["quarry_peer_file_opens_total"], m["quarry_peer_file_evictions_total"], m["quarry_peer_file_exhausted_total"])
}

// memTempDir is a temporary folder on tmpfs (/dev/shm) when there is one:
// 100,000 copies are 300,000 file-system entries, which take about 12 s
// to write there and minutes on a busy ext4 disk.
func memTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "quarry-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// regexpLimits reports whether /proc/PID/limits shows 1024 open files,
// soft and hard.
func regexpLimits(limits string) bool {
	for _, line := range strings.Split(limits, "\n") {
		if strings.HasPrefix(line, "Max open files") {
			f := strings.Fields(line)
			return len(f) >= 5 && f[3] == "1024" && f[4] == "1024"
		}
	}
	return false
}

const emfileChildEnv = "QUARRY_TEST_EMFILE_CHILD"

// TestOutOfFileDescriptorsFailsOneRequest: in a peer whose process has no
// descriptor left (RLIMIT_NOFILE 128, the rest taken), a search that must
// open a bucket file fails that request with a clear error (500 without
// partial results, the bucket listed as failed with them), a HEC request
// that needs a new bucket fails with nothing added, a roll waits (its
// bucket stays rolling, still searched), /healthz stays 200; once
// descriptors are free the roll completes and the same search and ingest
// succeed.
// It runs in a child process (this test binary again) so the limit does
// not touch the other tests.
func TestOutOfFileDescriptorsFailsOneRequest(t *testing.T) {
	if os.Getenv(emfileChildEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestOutOfFileDescriptorsFailsOneRequest$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), emfileChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestOutOfFileDescriptorsFailsOneRequest")) {
			t.Fatalf("child: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "openfiles_test.go") {
				t.Log(strings.TrimSpace(line))
			}
		}
		return
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 128, Max: 128}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const copies, per = 5, 3
	writeWarmCopies(t, dir, copies, per)
	tok, err := hec.ParseTokenFlag("N=main,other:useack=false")
	if err != nil {
		t.Fatal(err)
	}
	p, err := peer.Start(peer.Config{ID: "p1", DataDir: dir, HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := "http://" + p.Addr()
	// One keep-alive connection, opened before the descriptors run out.
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	get := func(path string) int {
		t.Helper()
		resp, err := c.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	ingest := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/services/collector/event", strings.NewReader(body))
		req.Header.Set("Authorization", "Splunk N")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if get("/healthz") != 200 {
		t.Fatal("healthz before")
	}
	inventory := func() []store.CopyInfo {
		var out struct {
			Buckets []store.CopyInfo `json:"buckets"`
		}
		resp, err := c.Get(url + "/v1/buckets")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&out)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return out.Buckets
	}
	stateOf := func(id string) string {
		for _, b := range inventory() {
			if b.ID == id {
				return b.State
			}
		}
		return ""
	}
	event := `{"time":` + strconv.FormatInt(time.Now().Unix(), 10) + `,"index":"%s","event":"new bucket common"}`
	// A hot bucket, made while descriptors are there.
	if code, body := ingest(fmt.Sprintf(event, "main")); code != 200 {
		t.Fatalf("ingest: %d %s", code, body)
	}
	inv := inventory()
	if len(inv) != copies+1 {
		t.Fatalf("%d copies listed, want %d", len(inv), copies+1)
	}
	hot := ""
	for _, b := range inv {
		if b.State == string(store.StateHot) {
			hot = b.ID
		}
	}

	// Take every descriptor left.
	var hog []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		hog = append(hog, f)
	}
	status, ans := searchPeer(t, c, url, `{"query":"common | stats count","allow_partial":false}`)
	if msg := fmt.Sprint(ans["error"]); status != 500 || !strings.Contains(msg, "out of file descriptors") {
		t.Fatalf("search without descriptors: %d %v, want 500 naming the want of descriptors", status, ans)
	}
	t.Logf("search without descriptors: %d %s", status, ans["error"])
	status, ans = searchPeer(t, c, url, `{"query":"common | stats count"}`)
	sum, _ := ans["summary"].(map[string]any)
	if status != 200 || sum["partial"] != true || !strings.Contains(fmt.Sprint(sum["warnings"]), "out of file descriptors") {
		t.Fatalf("partial search without descriptors: %d %v, want partial results naming the want of descriptors", status, sum)
	}
	code, body := ingest(fmt.Sprintf(event, "other"))
	if code == 200 {
		t.Fatalf("ingest into a new bucket without descriptors: %d %s, want a refusal", code, body)
	}
	t.Logf("ingest without descriptors: %d %s", code, body)
	if get("/healthz") != 200 || p.Store().Err() != nil {
		t.Fatalf("healthz while out of descriptors: want 200 (store error %v)", p.Store().Err())
	}
	if n := len(inventory()); n != copies+1 {
		t.Fatalf("%d copies listed after the refused ingest, want %d (nothing added)", n, copies+1)
	}
	// A roll cannot write the index: it waits, the bucket stays rolling.
	exhausted := p.Store().Stats.Files.Exhausted.Load()
	resp, err := c.Post(url+"/v1/buckets/"+hot+"/roll", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("roll: %d", resp.StatusCode)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if p.Store().Stats.Files.Exhausted.Load() == exhausted {
			return errors.New("the roll has not met the want of descriptors yet")
		}
		return nil
	})
	if st := stateOf(hot); st != string(store.StateRolling) || get("/healthz") != 200 || p.Store().Err() != nil {
		t.Fatalf("roll without descriptors: bucket %s, store error %v; want it rolling and the store healthy", st, p.Store().Err())
	}

	for _, f := range hog {
		f.Close()
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		if st := stateOf(hot); st != string(store.StateWarm) {
			return fmt.Errorf("bucket %s is %s", hot, st)
		}
		return nil
	})
	status, ans = searchPeer(t, c, url, `{"query":"common | stats count","allow_partial":false}`)
	if status != 200 || resultCount(ans) != copies*per+1 {
		t.Fatalf("search once descriptors are free: %d %v, want count %d", status, ans, copies*per+1)
	}
	if code, body := ingest(fmt.Sprintf(event, "other")); code != 200 {
		t.Fatalf("ingest once descriptors are free: %d %s", code, body)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		status, ans := searchPeer(t, c, url, `{"query":"common | stats count","allow_partial":false}`)
		if status != 200 || resultCount(ans) != copies*per+2 {
			return fmt.Errorf("search: %d %v, want count %d", status, ans["results"], copies*per+2)
		}
		return nil
	})
	if get("/healthz") != 200 {
		t.Fatal("healthz after")
	}
}
