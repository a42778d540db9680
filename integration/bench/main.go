// Command bench is `make bench`: it generates the shared benchmark data
// (../shared/bench/gen_events.go) into a git-ignored folder, runs quarry
// against it following the protocol of ../shared/bench/README.md, checks every
// answer, and prints our figures beside the baselines with ratios.
//
// Each part (ingest, query, cluster) registers itself in its own file; run
// `go run ./integration/bench -parts ingest,query`. `-sizes tiny` runs
// every part on a set of 20,000 events whose answers the oracle computes
// (data.go): `make bench-smoke`, which CI runs.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Config is what every bench part receives.
type Config struct {
	DataDir   string // git-ignored folder for generated data and server data dirs
	SharedDir string // ../shared/bench
	Bin       string // the quarry binary (built by make bench)
	Sizes     []string
}

// parts maps a part's name to its runner; each file registers in init.
var parts = map[string]func(Config) error{}

func register(name string, run func(Config) error) {
	if _, dup := parts[name]; dup {
		panic("bench part registered twice: " + name)
	}
	parts[name] = run
}

// command is exec.Command for the processes the bench starts: each dies
// with the bench (SIGKILL when it exits, e.g. past -timeout), so nothing
// is left running.
func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func main() {
	var cfg Config
	var which, sizes string
	var timeout time.Duration
	flag.StringVar(&cfg.DataDir, "data", "benchdata", "folder for generated data (git-ignored)")
	flag.StringVar(&cfg.SharedDir, "shared", "../shared/bench", "the shared bench folder")
	flag.StringVar(&cfg.Bin, "bin", "bin/quarry", "the quarry binary")
	flag.StringVar(&which, "parts", "all", "comma list of parts to run, or all")
	flag.StringVar(&sizes, "sizes", "1m,5m", "comma list of data sets to run: 1m and 5m (the README's, with baselines and targets), tiny (20,000 events, answers from the oracle, figures only; what CI runs)")
	flag.DurationVar(&timeout, "timeout", 0, "fail the run when it is not done within this (0: no bound); every process it started dies with it")
	flag.Parse()
	start := time.Now()
	if timeout > 0 {
		time.AfterFunc(timeout, func() {
			fmt.Fprintf(os.Stderr, "bench: not done within -timeout %v: FAILED (its processes die with it; their folders stay in %s)\n", timeout, cfg.DataDir)
			os.Exit(1)
		})
	}
	cfg.Sizes = strings.Split(sizes, ",")
	for _, s := range cfg.Sizes {
		if _, ok := sizeEvents[s]; !ok {
			fmt.Fprintf(os.Stderr, "bench: unknown size %q (want tiny, 1m or 5m)\n", s)
			os.Exit(2)
		}
	}
	var names []string
	if which == "all" {
		for n := range parts {
			names = append(names, n)
		}
		sort.Strings(names)
	} else {
		names = strings.Split(which, ",")
	}
	if len(names) == 0 {
		fmt.Println("bench: no part is built yet")
		return
	}
	failed := false
	for _, n := range names {
		run, ok := parts[n]
		if !ok {
			fmt.Fprintf(os.Stderr, "bench: unknown part %q\n", n)
			os.Exit(2)
		}
		if err := run(cfg); err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", n, err)
			failed = true
		}
	}
	if failed {
		fmt.Fprintf(os.Stderr, "bench: FAILED after %.0fs\n", time.Since(start).Seconds())
		os.Exit(1)
	}
	fmt.Printf("\nbench: parts %s on sets %s: every answer checked, all ok, in %.0fs\n", strings.Join(names, ","), strings.Join(cfg.Sizes, ","), time.Since(start).Seconds())
}
