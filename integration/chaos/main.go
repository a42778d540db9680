// Command chaos is `make chaos`: quarry's own chaos suite against real
// `quarry` processes (integration/proccluster): 3 managers, 2 sites × 3
// peers, a NATS node per site joined by gateways that run through cuttable
// links, and search heads on site1, site2 and site0, all on loopback under
// a temporary folder.
//
// While ingest with acks runs through random peers (each request a unique
// marker and an Idempotency-Key) and every head searches back to back, it
// injects faults one at a time at random — SIGKILL and SIGSTOP of peers,
// of the manager leader and of followers, of search heads; a cut of the
// link between the sites; a peer's data disk filling up; a HEC retry with
// the same Idempotency-Key to another peer after the first was killed —
// and waits until the cluster is valid again after each. Every search is
// checked against what was sent and acknowledged; at the end every
// acknowledged request must be counted exactly once on every head. It
// prints the fault counts, the figures and every violation, and exits 1 on
// any violation.
//
//	go run ./integration/chaos -bin bin/quarry -faults 30
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/quarry-dev/quarry/integration/proccluster"
)

type config struct {
	bin              string
	faults           int
	duration         time.Duration
	kinds            []string
	seed             uint64
	workers          int
	events           int
	grace            time.Duration
	heartbeatTimeout time.Duration
	readyTimeout     time.Duration
	maxHotBytes      int64
	disk             string
	dir              string
	keep             bool
	tolerate         []string
}

func parseFlags() (config, slog.Level, error) {
	var c config
	var kinds, skip string
	var verbose bool
	var all []string
	for _, k := range faultKinds {
		all = append(all, k.name)
	}
	flag.StringVar(&c.bin, "bin", "bin/quarry", "the quarry binary (make build)")
	flag.IntVar(&c.faults, "faults", 30, "faults to inject, one at a time")
	flag.DurationVar(&c.duration, "duration", 0, "stop injecting after this long even if -faults are not done (0: no limit)")
	flag.StringVar(&kinds, "kinds", "all", "comma list of fault kinds to draw from: "+strings.Join(all, ","))
	flag.StringVar(&skip, "skip", "", "comma list of fault kinds to leave out (e.g. hec-retry until Idempotency-Key lands)")
	flag.Uint64Var(&c.seed, "seed", 0, "random seed of the fault schedule (0: from the clock; printed)")
	flag.IntVar(&c.workers, "workers", 3, "concurrent HEC clients")
	flag.IntVar(&c.events, "events", 10, "events per HEC request")
	flag.DurationVar(&c.grace, "ack-grace", 3*time.Second, "a search must count every event acknowledged this long before it began")
	flag.DurationVar(&c.heartbeatTimeout, "heartbeat-timeout", 5*time.Second, "the managers' heartbeat_timeout (outages last 1-6 s, so some peers are declared Down)")
	flag.DurationVar(&c.readyTimeout, "ready-timeout", 2*time.Minute, "how long the cluster may take to be valid again after a fault")
	flag.Int64Var(&c.maxHotBytes, "max-hot-bytes", 128<<10, "peers roll a hot bucket at this many bytes (small: many buckets)")
	flag.StringVar(&c.disk, "disk", diskAuto, "disk-full faults: tmpfs (each peer's data dir a tmpfs that the fault fills), manual (detention by the admin API), auto (tmpfs if mounting is allowed)")
	flag.StringVar(&c.dir, "dir", "", "folder for data dirs and logs (default: a new temporary folder)")
	flag.BoolVar(&c.keep, "keep", false, "keep the folder afterwards (it is kept anyway when a violation was found)")
	flag.BoolVar(&verbose, "v", false, "debug logging")
	var tolerate string
	flag.StringVar(&tolerate, "tolerate", "", "comma list of violation classes printed but not failing the run: "+classPartialCovered+" (a partial search while every bucket had a reachable copy), "+classRetriedTwice+" (a request stored twice after an Idempotency-Key retry to another peer once its first peer was killed); every other rule always fails. Default: none (strict)")
	flag.Parse()
	for _, cl := range strings.Split(tolerate, ",") {
		switch cl = strings.TrimSpace(cl); cl {
		case "":
		case classPartialCovered, classRetriedTwice:
			c.tolerate = append(c.tolerate, cl)
		default:
			return c, 0, fmt.Errorf("-tolerate: unknown class %q (want %s or %s)", cl, classPartialCovered, classRetriedTwice)
		}
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	if kinds == "all" {
		kinds = strings.Join(all, ",")
	}
	skipped := map[string]bool{}
	for _, s := range strings.Split(skip, ",") {
		skipped[strings.TrimSpace(s)] = true
	}
	for _, k := range strings.Split(kinds, ",") {
		k = strings.TrimSpace(k)
		if k == "" || skipped[k] {
			continue
		}
		if kindRunner(k) == nil {
			return c, 0, fmt.Errorf("-kinds: unknown fault kind %q (known: %s)", k, strings.Join(all, ", "))
		}
		c.kinds = append(c.kinds, k)
	}
	if len(c.kinds) == 0 && c.faults > 0 {
		return c, 0, fmt.Errorf("no fault kind left to inject (-kinds %q, -skip %q)", kinds, skip)
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return c, level, nil
}

func kindRunner(name string) func(*faulter, context.Context, *fault) error {
	for _, k := range faultKinds {
		if k.name == name {
			return k.run
		}
	}
	return nil
}

func main() {
	cfg, level, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg, log)
	if rep != nil {
		rep.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if n := rep.failing(cfg.tolerate); n > 0 {
		os.Exit(1)
	}
	if len(rep.violations) > 0 {
		fmt.Printf("%d violations of the tolerated classes %v (known open; printed above); none of any other rule\n", len(rep.violations), cfg.tolerate)
	}
}

// run starts the cluster, runs the workload and the faults, checks, and
// stops everything it started, whatever happens.
func run(ctx context.Context, cfg config, log *slog.Logger) (*report, error) {
	started := time.Now()
	bin, err := filepath.Abs(cfg.bin)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the quarry binary: %w (run make build)", err)
	}
	dir := cfg.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "quarry-chaos-"); err != nil {
			return nil, err
		}
	}
	disk, err := newDiskFaults(cfg.disk, dir, 512<<20, 128<<20, log)
	if err != nil {
		return nil, err
	}
	rep := &report{seed: cfg.seed, kinds: cfg.kinds, dir: dir, faultCounts: map[string]int{}}
	defer func() {
		if !cfg.keep && len(rep.violations) == 0 && rep.finished {
			os.RemoveAll(dir)
			rep.dir = ""
		}
	}()
	defer disk.unmount()
	log.Info("starting the cluster", "dir", dir, "disk", disk.mode, "seed", cfg.seed)
	cl, err := proccluster.Start(ctx, proccluster.Options{
		Bin: bin, Dir: dir, Managers: 3, CuttableGateways: true,
		Heads:          []proccluster.Head{{ID: "sh1", Site: "site1"}, {ID: "sh2", Site: "site2"}, {ID: "sh0", Site: "site0"}},
		ManagerArgs:    append([]string{"--heartbeat-timeout", cfg.heartbeatTimeout.String()}, disk.managerArgs()...),
		PeerArgs:       []string{"--max-hot-bytes", fmt.Sprint(cfg.maxHotBytes)},
		PrepareDataDir: disk.prepare,
		Logger:         log,
	})
	if err != nil {
		return rep, fmt.Errorf("start the cluster (logs in %s): %w", dir, err)
	}
	defer cl.Stop()
	rep.startup = time.Since(started)
	if err := runWorkload(ctx, cfg, cl, disk, rep, log); err != nil {
		return rep, err
	}
	rep.wall = time.Since(started)
	rep.finished = true
	return rep, nil
}

// runWorkload is the run proper on a started cluster.
func runWorkload(ctx context.Context, cfg config, cl *proccluster.Cluster, disk *diskFaults, rep *report, log *slog.Logger) error {
	fl := &faulter{cl: cl, rng: rand.New(rand.NewPCG(cfg.seed, 1)), disk: disk, events: cfg.events, log: log}
	if err := fl.ready(ctx, cfg.readyTimeout, false); err != nil {
		return fmt.Errorf("the new cluster is not ready: %w", err)
	}
	run := fmt.Sprintf("chaos%x", cfg.seed&0xffffffffff)
	led := newLedger(run)
	fl.led = led
	rep.run = run
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	in := &ingester{abort: ctx, cl: cl, led: led, events: cfg.events, log: log}
	in.start(wctx, cfg.workers, cfg.seed)
	se := &searchers{abort: ctx, cl: cl, led: led, grace: cfg.grace, log: log}
	se.start(wctx)
	// Some data first, so the first faults hit buckets.
	if err := proccluster.WaitFor(ctx, time.Minute, func() error {
		if n, _ := led.ackedCount(); n < 20 {
			return fmt.Errorf("%d requests acknowledged", n)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("ingest does not start: %w", err)
	}
	faultStart := time.Now()
	for i := 1; i <= cfg.faults && ctx.Err() == nil; i++ {
		if cfg.duration > 0 && time.Since(faultStart) > cfg.duration {
			log.Info("-duration reached", "faults", i-1)
			break
		}
		kind := cfg.kinds[fl.rng.IntN(len(cfg.kinds))]
		ft := &fault{N: i, Kind: kind}
		err := fl.inject(ctx, ft, kindRunner(kind), cfg.readyTimeout)
		rep.faults = append(rep.faults, ft)
		rep.faultCounts[kind]++
		acked, _ := led.ackedCount()
		log.Info("fault done", "fault", ft.String(), "detail", ft.Detail, "window", ft.End.Sub(ft.Start).Round(time.Millisecond),
			"uncovered", len(ft.Uncovered), "acked", acked)
		if err != nil && ctx.Err() == nil {
			rep.violate("cluster not ready after a fault", ft.String(), fmt.Sprintf("not ready within %s: %v", cfg.readyTimeout, err))
		}
	}
	rep.faultPhase = time.Since(faultStart)
	log.Info("faults done; stopping the workload")
	stopWork()
	in.wait()
	rep.outcomes, rep.exact = se.wait()
	rep.requests = led.snapshot()
	if ctx.Err() != nil {
		rep.interrupted = true
		return ctx.Err()
	}
	if err := fl.restoreAll(ctx, cfg.readyTimeout); err != nil {
		rep.violate("cluster not ready at the end", "", err.Error())
	}
	if err := fl.ready(ctx, 3*time.Minute, true); err != nil {
		rep.violate("cluster not complete at the end", "", err.Error())
	}
	rep.judge(cfg.grace)
	rep.finalCheck(ctx, cl, run, log)
	return nil
}
