package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/query"
)

// TestQueryBenchStore times queries over a prebuilt peer data folder (the
// bench's benchdata/peer-5m, opened in place: point it at a copy), a
// cheaper loop than `make bench`: QUARRY_BENCH_STORE=<dir>
// QUARRY_BENCH_QUERIES='<spl>;;<spl>' QUARRY_BENCH_RUNS=5 go test -run
// TestQueryBenchStore -v [-cpuprofile …] ./peer/store/. Each query's first
// run follows a fresh Open (no decoded column cached) and the warm-up
// queries of QUARRY_BENCH_WARM (default `| stats count`, as the bench
// does), like the first run after a restart; wall and process CPU per run
// are logged; QUARRY_BENCH_WARMPROFILE=<file> writes a CPU profile of
// the runs after the first, <file>.<query number>.
func TestQueryBenchStore(t *testing.T) {
	dir := os.Getenv("QUARRY_BENCH_STORE")
	if dir == "" {
		t.Skip("QUARRY_BENCH_STORE not set")
	}
	qs := strings.Split(os.Getenv("QUARRY_BENCH_QUERIES"), ";;")
	runs := 5
	if s := os.Getenv("QUARRY_BENCH_RUNS"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	var pj struct {
		GUID string `json:"guid"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "peer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pj); err != nil {
		t.Fatal(err)
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	prof := os.Getenv("QUARRY_BENCH_WARMPROFILE") // CPU profile of runs 2.., one file per query
	profFrom := 1
	if s := os.Getenv("QUARRY_BENCH_PROFILE_FROM"); s != "" {
		profFrom, _ = strconv.Atoi(s) // 0-based run to start the profile at
	}
	for qi, q := range qs {
		q = strings.TrimSpace(q)
		if q == "" {
			continue
		}
		st, err := Open(Options{Dir: dir, GUID: pj.GUID, Searchable: true})
		if err != nil {
			t.Fatal(err)
		}
		segs := st.Segments()
		// The bench warms the page cache with a count after the restart.
		warm := "| stats count"
		if w, ok := os.LookupEnv("QUARRY_BENCH_WARM"); ok {
			warm = w
		}
		for _, w := range strings.Split(warm, ";;") {
			if w = strings.TrimSpace(w); w != "" {
				if _, err := query.Search(context.Background(), query.Request{Query: w, Server: "bench"}, segs); err != nil {
					t.Fatal(err)
				}
			}
		}
		var line []string
		var first string
		for i := 0; i < runs; i++ {
			if i == profFrom && prof != "" {
				f, err := os.Create(fmt.Sprintf("%s.%d", prof, qi))
				if err != nil {
					t.Fatal(err)
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					t.Fatal(err)
				}
				defer f.Close()
			}
			c0, w0 := cpu(), time.Now()
			resp, err := query.Search(context.Background(), query.Request{Query: q, Server: "bench"}, segs)
			w, c := time.Since(w0), cpu()-c0
			if err != nil {
				t.Fatal(err)
			}
			line = append(line, w.Round(100*time.Microsecond).String()+"/"+c.Round(100*time.Microsecond).String())
			if i == 0 {
				out, _ := json.Marshal(resp.Results)
				if len(out) > 300 {
					out = append(out[:300], "…"...)
				}
				first = string(out)
			}
		}
		if prof != "" {
			pprof.StopCPUProfile()
		}
		t.Logf("%s\n  wall/cpu per run: %s\n  %s", q, strings.Join(line, " "), first)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
