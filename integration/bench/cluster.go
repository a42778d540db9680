package main

// The cluster part of `make bench` (issue 8, ../shared/bench/README.md step
// 4): 2 NATS nodes joined by a gateway, one manager (one is enough to
// measure search; the Raft group is measured by the integration suite),
// 6 peers on 2 sites at RF=3 (origin:2,total:3, SF origin:1,total:2) and a
// site1 search head, all as `quarry` processes on loopback. It ingests the
// set through site1's first peer with acks, then measures
//   - ingest with acks at RF=3 (events/s; issue 27's target: 0.8× one
//     standalone peer's, printed by the single-peer step before it);
//   - fan-out overhead: a term that never occurs, over all time, through
//     the head vs straight to one peer (median and p99 of 40 runs);
//   - the five queries and P1–P8 through the head (median of 5) against
//     the same queries on one standalone peer holding the whole set (same
//     run); P1–P8's answers must equal the peer's;
//   - searches per second the head sustains for query e (4 clients, 10 s).
// Every answer is checked.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/quarry-dev/quarry/query"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/integration/proccluster"
)

func init() { register("cluster", runClusterBench) }

// cbCluster is the bench's cluster: real processes started by
// integration/proccluster (the one launcher the chaos suite uses too).
type cbCluster struct {
	*proccluster.Cluster
	dir   string
	size  string
	peers map[string]string // id → http URL
	head  string
	mgr   string
}

func (c *cbCluster) stop() { c.Stop() }

// target is a figure's target, printed for the sets that have targets.
func (c *cbCluster) target(t string) string {
	if !hasTargets(c.size) {
		return ""
	}
	return " (target " + t + ")"
}

func startBenchCluster(cfg Config, size string) (*cbCluster, error) {
	dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "cluster-"+size))
	if err != nil {
		return nil, err
	}
	os.RemoveAll(dir)
	cl, err := proccluster.Start(context.Background(), proccluster.Options{
		Bin: cfg.Bin, Dir: dir, Managers: 1, Heads: []proccluster.Head{{ID: "sh1", Site: "site1"}},
		AdminToken: "bench-admin", HECToken: "bench-token",
	})
	if err != nil {
		return nil, err
	}
	c := &cbCluster{Cluster: cl, dir: dir, size: size, peers: map[string]string{}, head: cl.Heads[0].URL, mgr: cl.Managers[0].URL}
	for _, p := range cl.Peers {
		c.peers[p.Name] = p.URL
	}
	return c, nil
}

// rollAll rolls every hot bucket on every peer: the origin copies roll,
// the hot replicas refuse (409) and follow their origins.
func (c *cbCluster) rollAll() error {
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, u := range c.peers {
		bs, err := buckets(u)
		if err != nil {
			return err
		}
		for _, b := range bs {
			if b.State == "hot" {
				req, _ := http.NewRequest(http.MethodPost, u+"/v1/buckets/"+b.ID+"/roll", nil)
				req.Header.Set("Authorization", "Bearer bench-admin")
				res, err := hc.Do(req)
				if err != nil {
					return fmt.Errorf("roll %s on %s: %w", b.ID, u, err)
				}
				res.Body.Close()
				// 409: a hot replica, which rolls when its origin does.
				if res.StatusCode/100 != 2 && res.StatusCode != http.StatusConflict {
					return fmt.Errorf("roll %s on %s: HTTP %d", b.ID, u, res.StatusCode)
				}
			}
		}
	}
	return nil
}

func percentile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

func runClusterBench(cfg Config) error {
	for _, size := range cfg.Sizes {
		if err := clusterBenchSize(cfg, size); err != nil {
			return fmt.Errorf("%s set: %w", size, err)
		}
	}
	return nil
}

func clusterBenchSize(cfg Config, size string) error {
	file, n, err := ensureHEC(cfg, size)
	if err != nil {
		return err
	}
	singleMed, singleAns, err := cbSinglePeer(cfg, size, file, n)
	if err != nil {
		return err
	}
	c, err := startBenchCluster(cfg, size)
	if err != nil {
		return err
	}
	defer func() {
		c.stop()
		if os.Getenv("QUARRY_BENCH_KEEP") == "" {
			os.RemoveAll(c.dir)
		}
	}()
	fmt.Printf("\ncluster bench, %s set: 6 peers on 2 sites (RF origin:2,total:3, SF origin:1,total:2), 1 manager, site1 search head, loopback\n", size)
	if !hasTargets(size) {
		fmt.Printf("(%s; answers: the oracle's, computed before the run)\n", tinyNote)
	}
	if err := c.ingestAndWait(cfg, file, n); err != nil {
		return err
	}
	// Let replication settle (rolled copies everywhere, checked) so the
	// figures are not taken during fixup.
	settle, qpsFor := 5*time.Second, 10*time.Second
	if !hasTargets(size) {
		settle, qpsFor = time.Second, 3*time.Second
	}
	if err := c.waitReplicated(n, 3, 2, 5*time.Minute); err != nil {
		return err
	}
	time.Sleep(settle) // settle: background fixup traffic would skew timings (not a synchronisation)
	if err := c.fanOut(); err != nil {
		return err
	}
	if err := c.queries(size, singleMed); err != nil {
		return err
	}
	if err := c.fieldQueries(singleMed, singleAns); err != nil {
		return err
	}
	return c.searchesPerSecond(size, qpsFor)
}

// cbSinglePeer is the single-peer side of the comparison, same run: the
// median of 5 of each published query (a–e, every answer checked) and
// field-value query (P1–P8, its answer kept for the head's to equal) on
// one standalone peer holding the whole set.
func cbSinglePeer(cfg Config, size, file string, n int) (map[string]float64, map[string][]map[string]any, error) {
	single, stopSingle, err := qbStartPeerWithData(cfg, size, file, n)
	if err != nil {
		return nil, nil, err
	}
	defer stopSingle()
	singleMed, answers := map[string]float64{}, map[string][]map[string]any{}
	type idq struct{ id, spl string }
	var all []idq
	for _, q := range qbQueries {
		all = append(all, idq{q.id, q.spl})
	}
	for _, q := range qbFieldQueries {
		all = append(all, idq{q.id, q.spl})
	}
	for i, q := range all {
		var ts []float64
		for j := 0; j < 5; j++ {
			r, took, err := single.search(context.Background(), q.spl)
			if err != nil {
				return nil, nil, fmt.Errorf("single peer %s: %w", q.id, err)
			}
			if i < len(qbQueries) {
				if err := qbQueries[i].verify(size, r); err != nil {
					return nil, nil, fmt.Errorf("single peer %s: %w", q.id, err)
				}
			}
			answers[q.id] = r.Results
			ts = append(ts, took.Seconds())
		}
		singleMed[q.id] = percentile(ts, 0.5)
	}
	return singleMed, answers, nil
}

// fieldQueries runs P1–P8 through the head, 5 times each, beside one
// standalone peer holding the whole set: every answer must equal the
// peer's (floats within 1e-9 relative: sums merged in another order).
func (c *cbCluster) fieldQueries(singleMed map[string]float64, singleAns map[string][]map[string]any) error {
	for _, q := range qbFieldQueries {
		want := singleAns[q.id]
		if err := c.headRow(q.id, q.spl, singleMed[q.id], func(r *query.Response) error { return sameAnswer(r.Results, want) }); err != nil {
			return err
		}
	}
	return nil
}

// benchNumber is v as a number (a float64 or a json.Number).
func benchNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// sameAnswer compares two result sets row by row: equal values, numbers
// within 1e-9 relative.
func sameAnswer(got, want []map[string]any) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d rows, the single peer %d", len(got), len(want))
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			return fmt.Errorf("row %d: %v, the single peer %v", i, got[i], want[i])
		}
		for k, w := range want[i] {
			g := got[i][k]
			gf, gok := benchNumber(g)
			wf, wok := benchNumber(w)
			if gok && wok {
				if d := math.Abs(gf - wf); d > 1e-9*math.Max(math.Abs(gf), math.Abs(wf)) {
					return fmt.Errorf("row %d %s: %v, the single peer %v", i, k, g, w)
				}
				continue
			}
			if fmt.Sprint(g) != fmt.Sprint(w) {
				return fmt.Errorf("row %d %s: %v, the single peer %v", i, k, g, w)
			}
		}
	}
	return nil
}

// ingestAndWait ingests the set with acks through site1's first peer, rolls
// every hot bucket and waits until the head counts every event, complete.
func (c *cbCluster) ingestAndWait(cfg Config, file string, n int) error {
	cpu0 := c.cpuByRole()
	start := time.Now()
	cmd := command(cfg.Bin, "ingest", "--quiet", "--hec", c.peers["site1-p1"], "--token", "bench-token", file)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("quarry ingest: %w", err)
	}
	ingestSecs := time.Since(start).Seconds()
	fmt.Printf("ingest with acks at RF=3 through site1-p1: %d events in %.1f s = %.1fk events/s%s\n",
		n, ingestSecs, float64(n)/ingestSecs/1000, c.target("≥ 0.8× one standalone peer's ingest with acks, issue 27"))
	if err := c.rollAll(); err != nil {
		return err
	}
	head := qbHTTPSearcher{url: c.head}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		r, _, err := head.search(context.Background(), "| stats count")
		if err == nil && !r.Summary.Partial {
			if got, _ := qbCountOf(r); got == int64(n) {
				c.printIngestCPU(cpu0, n)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the search head did not see every event within 10 minutes")
		}
		time.Sleep(time.Second) // polling the cluster
	}
}

// cpuByRole is the CPU time the cluster's processes have used so far, by
// role in the bench's ingest: the origin (site1-p1), site1's other peers
// (raw replicas), site2's peers (searchable replicas), and the rest
// (buses, manager, head). nil where /proc cannot be read.
func (c *cbCluster) cpuByRole() map[string]float64 {
	out := map[string]float64{}
	for _, p := range c.All() {
		cpu, ok := procCPU(p.Pid())
		if !ok {
			return nil
		}
		role := "buses, manager and head"
		switch {
		case p.Name == "site1-p1":
			role = "origin site1-p1"
		case strings.HasPrefix(p.Name, "site1-"):
			role = "site1's raw replicas"
		case strings.HasPrefix(p.Name, "site2-"):
			role = "site2's searchable replicas"
		}
		out[role] += cpu
	}
	return out
}

// printIngestCPU prints the cluster's CPU for the ingest, from before it
// to every event counted through the head, by role, and against the
// standalone peer's when this run measured it.
func (c *cbCluster) printIngestCPU(before map[string]float64, n int) {
	after := c.cpuByRole()
	if before == nil || after == nil {
		return
	}
	var total float64
	var parts []string
	for _, role := range []string{"origin site1-p1", "site2's searchable replicas", "site1's raw replicas", "buses, manager and head"} {
		d := after[role] - before[role]
		total += d
		parts = append(parts, fmt.Sprintf("%s %.1f s", role, d))
	}
	per := total / float64(n) * 1e6
	ratio := ""
	if standaloneIngestCPU > 0 {
		ratio = fmt.Sprintf("; %.2f× the standalone peer's %.1f µs/event", per/standaloneIngestCPU, standaloneIngestCPU)
	}
	fmt.Printf("cluster CPU for the ingest at RF=3, until the head counts every event: %.1f s = %.1f µs/event (%s)%s\n", total, per, strings.Join(parts, ", "), ratio)
}

// fanOut measures the head's overhead on a term that never occurs, over
// all time, against one peer answering alone (40 runs each).
func (c *cbCluster) fanOut() error {
	const never = "zzqqneveroccurs"
	ctx := context.Background()
	var viaHead, direct []float64
	head, p1 := qbHTTPSearcher{url: c.head}, qbHTTPSearcher{url: c.peers["site1-p1"]}
	for i := 0; i < 40; i++ {
		r, took, err := head.search(ctx, never)
		if err != nil {
			return fmt.Errorf("fan-out query through the head: %w", err)
		}
		if len(r.Results) != 0 || r.Summary.Partial {
			return fmt.Errorf("fan-out query through the head: %d results, partial %v", len(r.Results), r.Summary.Partial)
		}
		viaHead = append(viaHead, took.Seconds()*1000)
		_, took, err = p1.search(ctx, never)
		if err != nil {
			return err
		}
		direct = append(direct, took.Seconds()*1000)
	}
	fmt.Printf("fan-out overhead (a term that never occurs, all time, 6 peers): head median %.2f ms p99 %.2f ms; one peer median %.2f ms p99 %.2f ms; overhead median %.2f ms, p99 %.2f ms%s\n",
		percentile(viaHead, 0.5), percentile(viaHead, 0.99), percentile(direct, 0.5), percentile(direct, 0.99),
		percentile(viaHead, 0.5)-percentile(direct, 0.5), percentile(viaHead, 0.99)-percentile(direct, 0.99), c.target("median < 1 ms, p99 < 3 ms, issue 27"))
	return nil
}

// queries runs the published queries through the head (5 times each),
// every answer checked, beside the single peer's medians.
func (c *cbCluster) queries(size string, singleMed map[string]float64) error {
	fmt.Printf("%-3s %-72s %9s %9s %11s %7s %s\n", "id", "query", "first", "median", "1 peer med", "ratio", "answer")
	for _, q := range qbQueries {
		if err := c.headRow(q.id, q.spl, singleMed[q.id], func(r *query.Response) error { return q.verify(size, r) }); err != nil {
			return err
		}
	}
	return nil
}

// headRow runs one query through the head 5 times, checks every answer,
// and prints its first and median time beside one peer's median.
func (c *cbCluster) headRow(id, spl string, single float64, check func(*query.Response) error) error {
	head := qbHTTPSearcher{url: c.head}
	var ts []float64
	answer := "ok"
	for i := 0; i < 5; i++ {
		r, took, err := head.search(context.Background(), spl)
		if err != nil {
			return fmt.Errorf("head %s: %w", id, err)
		}
		if err := check(r); err != nil {
			answer = "WRONG: " + err.Error()
		}
		if r.Summary.Partial {
			answer = "PARTIAL"
		}
		ts = append(ts, took.Seconds())
	}
	med := percentile(ts, 0.5)
	fmt.Printf("%-3s %-72s %9.4f %9.4f %11.4f %6.2fx %s\n", id, spl, ts[0], med, single, med/single, answer)
	if answer != "ok" {
		return fmt.Errorf("query %s through the head: %s", id, answer)
	}
	return nil
}

// searchesPerSecond is how many searches of query e the head answers, 4
// clients for d, every answer checked.
func (c *cbCluster) searchesPerSecond(size string, d time.Duration) error {
	var e qbQuery
	for _, q := range qbQueries {
		if q.id == "e" {
			e = q
		}
	}
	head := qbHTTPSearcher{url: c.head}
	var count, bad int64
	var firstBad error
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				r, _, err := head.search(context.Background(), e.spl)
				if err == nil {
					err = e.verify(size, r)
				}
				mu.Lock()
				if err != nil {
					bad++
					if firstBad == nil {
						firstBad = err
					}
				} else {
					count++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("query e through the head, 4 clients for %v: %.1f searches/s (%d wrong or failed)\n", d, float64(count)/d.Seconds(), bad)
	if bad > 0 {
		return fmt.Errorf("%d searches of query e failed, the first: %v", bad, firstBad)
	}
	return nil
}

// waitReplicated waits until every bucket has rf warm copies, sf of them
// searchable, across the peers, and the buckets hold n events in all.
func (c *cbCluster) waitReplicated(n, rf, sf int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.replicated(n, rf, sf)
		if err == nil {
			fmt.Printf("replication settled: every bucket has %d warm copies, %d searchable, %d events in all\n", rf, sf, n)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replication did not settle within %v: %w", timeout, err)
		}
		time.Sleep(500 * time.Millisecond) // polling the cluster
	}
}

func (c *cbCluster) replicated(n, rf, sf int) error {
	type agg struct{ copies, searchable, events int }
	byID := map[string]*agg{}
	for name, u := range c.peers {
		bs, err := buckets(u)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, b := range bs {
			if b.State != "warm" {
				return fmt.Errorf("%s: %s is %s", name, b.ID, b.State)
			}
			a := byID[b.ID]
			if a == nil {
				a = &agg{events: b.Events}
				byID[b.ID] = a
			}
			if b.Events != a.events {
				return fmt.Errorf("%s: %s holds %d events, another copy %d", name, b.ID, b.Events, a.events)
			}
			a.copies++
			if b.SearchableEvents == b.Events {
				a.searchable++
			}
		}
	}
	total := 0
	for id, a := range byID {
		if a.copies < rf || a.searchable < sf {
			return fmt.Errorf("%s: %d copies, %d searchable; want %d, %d", id, a.copies, a.searchable, rf, sf)
		}
		total += a.events
	}
	if total != n {
		return fmt.Errorf("the buckets hold %d events, want %d", total, n)
	}
	return nil
}
