package main

// The ingest part of `make bench` (SPEC §10, bench README protocol step 1
// and 2): one standalone `quarry peer`, the HEC sets ingested with `quarry
// ingest` at 1 and 2 streams (acks on, fresh data folder each run), the
// clock running from the first byte until every event is durable and
// searchable; then the disk per event of a searchable copy and of a
// journal-only one (`quarry peer --searchable=false`).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

func init() { register("ingest", runIngest) }

type ingestBaseline struct {
	eventsPerSec, mbPerSec, cpu, rssMB, bytesPerEvent float64
}

// From ../shared/bench/BASELINES.md (0 = not measured there).
var ingestBaselines = map[string]ingestBaseline{
	"1m/1": {118700, 54.5, 12.7, 188, 45.5},
	"5m/1": {133600, 61.3, 58.0, 209, 43.9},
	"5m/2": {156800, 72.0, 56.6, 235, 43.9},
}

type ingestRun struct {
	size       string
	streams    int
	searchable bool
	events     int
	secs       float64
	fileBytes  int64
	cpuSecs    float64
	peakRSSMB  float64
	diskBytes  int64
}

func runIngest(cfg Config) error {
	var runs []ingestRun
	for _, size := range cfg.Sizes {
		file, n, err := ensureHEC(cfg, size)
		if err != nil {
			return err
		}
		for _, v := range []struct {
			streams    int
			searchable bool
		}{{1, true}, {2, true}, {1, false}} {
			r, err := ingestOnce(cfg, file, size, n, v.streams, v.searchable)
			if err != nil {
				return fmt.Errorf("%s, %d streams, searchable=%v: %w", size, v.streams, v.searchable, err)
			}
			fmt.Fprintf(os.Stderr, "bench ingest: %s streams=%d searchable=%v: %.0f events/s, cpu %.1fs, rss %.0f MB, %.1f B/event\n",
				size, v.streams, v.searchable, float64(r.events)/r.secs, r.cpuSecs, r.peakRSSMB, float64(r.diskBytes)/float64(r.events))
			runs = append(runs, r)
		}
	}
	printIngestTable(runs)
	return nil
}

type benchPeer struct {
	cmd     *exec.Cmd
	url     string
	exit    chan error
	stopped bool
	err     error
}

func startBenchPeer(cfg Config, dataDir string, searchable bool) (*benchPeer, error) {
	cmd := command(cfg.Bin, "peer", "--id", "bench", "--data-dir", dataDir, "--http-addr", "127.0.0.1:0",
		"--hec-token", "benchtoken", "--searchable="+strconv.FormatBool(searchable))
	logf, err := os.Create(dataDir + ".log")
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &benchPeer{cmd: cmd, exit: make(chan error, 1)}
	addr, _ := testutil.ListeningOn(out)
	go func() { p.exit <- cmd.Wait(); logf.Close() }()
	select {
	case p.url = <-addr:
		return p, nil
	case err := <-p.exit:
		return nil, fmt.Errorf("peer exited at start: %v (see %s.log)", err, dataDir)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return nil, errors.New("peer did not start within 30s")
	}
}

func (p *benchPeer) stop() error {
	if p.stopped {
		return p.err
	}
	p.stopped = true
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case p.err = <-p.exit:
	case <-time.After(2 * time.Minute):
		p.cmd.Process.Kill()
		p.err = errors.New("peer did not stop within 2 minutes")
	}
	return p.err
}

type copyInfo struct {
	ID               string `json:"id"`
	State            string `json:"state"`
	Events           int    `json:"events"`
	SearchableEvents int    `json:"searchable_events"`
}

func buckets(url string) ([]copyInfo, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url + "/v1/buckets")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s/v1/buckets: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	var br struct {
		Buckets []copyInfo `json:"buckets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&br); err != nil {
		return nil, err
	}
	return br.Buckets, nil
}

// waitCount polls until every event is durable (and searchable).
func waitCount(url string, n int, searchable bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		bs, err := buckets(url)
		if err != nil {
			return err
		}
		dur, srch := 0, 0
		for _, b := range bs {
			dur += b.Events
			srch += b.SearchableEvents
		}
		if dur == n && (!searchable || srch == n) {
			return nil
		}
		if dur > n {
			return fmt.Errorf("%d events stored, want %d", dur, n)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d durable / %d searchable of %d events after %v", dur, srch, n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func procStats(pid int) (cpuSecs, hwmMB float64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			f := strings.Fields(s[i+2:])
			if len(f) > 13 {
				ut, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				cpuSecs = (ut + st) / 100 // USER_HZ
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
				hwmMB = kb / 1024
			}
		}
	}
	return
}

func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func ingestOnce(cfg Config, file, size string, n, streams int, searchable bool) (ingestRun, error) {
	r := ingestRun{size: size, streams: streams, searchable: searchable, events: n}
	st, err := os.Stat(file)
	if err != nil {
		return r, err
	}
	r.fileBytes = st.Size()
	dataDir, err := filepath.Abs(filepath.Join(cfg.DataDir, fmt.Sprintf("peer-ingest-%s-%d-%v", size, streams, searchable)))
	if err != nil {
		return r, err
	}
	os.RemoveAll(dataDir)
	defer os.RemoveAll(dataDir)
	p, err := startBenchPeer(cfg, dataDir, searchable)
	if err != nil {
		return r, err
	}
	defer p.stop()
	start := time.Now()
	cmd := command(cfg.Bin, "ingest", "--quiet", "--hec", p.url, "--token", "benchtoken", "--streams", strconv.Itoa(streams), file)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("quarry ingest: %w", err)
	}
	if err := waitCount(p.url, n, searchable, 5*time.Minute); err != nil {
		return r, err
	}
	r.secs = time.Since(start).Seconds()
	r.cpuSecs, r.peakRSSMB = procStats(p.cmd.Process.Pid)
	if searchable {
		// Searchable means a search counts every event, exactly.
		res, _, err := qbHTTPSearcher{url: p.url}.search(context.Background(), "| stats count")
		if err != nil {
			return r, fmt.Errorf("count search: %w", err)
		}
		if got, err := qbCountOf(res); err != nil || got != int64(n) {
			return r, fmt.Errorf("| stats count answered %d (%v), want %d", got, err, n)
		}
	}
	// Disk: roll the hot buckets so that every copy is complete on disk.
	bs, err := buckets(p.url)
	if err != nil {
		return r, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, b := range bs {
		if b.State == "hot" {
			resp, err := hc.Post(p.url+"/v1/buckets/"+b.ID+"/roll", "application/json", nil)
			if err != nil {
				return r, err
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				return r, fmt.Errorf("roll %s: HTTP %d", b.ID, resp.StatusCode)
			}
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		bs, err := buckets(p.url)
		if err != nil {
			return r, err
		}
		warm := 0
		for _, b := range bs {
			if b.State == "warm" {
				warm++
			}
		}
		if warm == len(bs) {
			break
		}
		if time.Now().After(deadline) {
			return r, errors.New("buckets did not roll within 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.diskBytes = dirBytes(filepath.Join(dataDir, "buckets"))
	if err := p.stop(); err != nil {
		return r, fmt.Errorf("peer stop: %w", err)
	}
	return r, nil
}

func ratio(ours, base float64) string {
	if base == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", ours/base)
}

func num(v float64, f string) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf(f, v)
}

func printIngestTable(runs []ingestRun) {
	fmt.Println()
	fmt.Println("## Ingest over HEC, one standalone peer, acks on, until all events are durable and searchable")
	fmt.Println()
	fmt.Println("| data | streams | copy | events/s | baseline | ratio | MB/s (HEC bytes) | baseline | server CPU s | baseline | peak RSS MB | baseline | ratio | disk B/event | baseline | ratio |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		b := ingestBaselines[fmt.Sprintf("%s/%d", r.size, r.streams)]
		if !r.searchable {
			b = ingestBaseline{bytesPerEvent: ingestBaselines[r.size+"/1"].bytesPerEvent}
		}
		eps := float64(r.events) / r.secs
		mbs := float64(r.fileBytes) / 1e6 / r.secs
		bpe := float64(r.diskBytes) / float64(r.events)
		kind := "searchable"
		if !r.searchable {
			kind = "journal-only"
		}
		fmt.Printf("| %s | %d | %s | %.0f | %s | %s | %.1f | %s | %.1f | %s | %.0f | %s | %s | %.1f | %s | %s |\n",
			r.size, r.streams, kind, eps, num(b.eventsPerSec, "%.0f"), ratio(eps, b.eventsPerSec), mbs, num(b.mbPerSec, "%.1f"),
			r.cpuSecs, num(b.cpu, "%.1f"), r.peakRSSMB, num(b.rssMB, "%.0f"), ratio(r.peakRSSMB, b.rssMB),
			bpe, num(b.bytesPerEvent, "%.1f"), ratio(bpe, b.bytesPerEvent))
	}
	fmt.Println()
	fmt.Println("Targets (5M): events/s ≥ 1.0× (1 stream); disk ≤ 3× searchable, ≤ 1.2× journal-only; peak RSS ≤ 2×.")
	fmt.Println("Checked: every run's durable (and searchable) counts, and `| stats count` on each searchable copy, equal the set's events exactly.")
	for _, r := range runs {
		if !hasTargets(r.size) {
			fmt.Println("Not targets: the " + tinyNote + ".")
			break
		}
	}
}
