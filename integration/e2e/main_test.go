//go:build e2e

// Package e2e is quarry's end-to-end suite against real containers: it
// brings up the docker-compose multisite cluster (../../docker-compose.yml,
// the demo's file) under its own project name, subnet and host ports,
// ingests from the host through HEC with acks, searches through the search
// heads, and injects real faults — docker kill, docker pause, docker network
// disconnect, a rolling restart — checking what a user notices: no
// acknowledged event lost, searches complete and exact throughout.
//
// Run with `make e2e` (builds the image first). Whatever happens — a failed
// test, Ctrl-C, SIGTERM, the suite's own deadline (E2E_DEADLINE, default
// 25m, inside go test's -timeout) — the project is torn down with
// `docker-compose down -v`, leaving no container, network or volume.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	project   = "quarry-e2e"
	netPrefix = "172.30.29"
	network   = project + "_demo"

	adminToken  = "demo-admin"
	hecToken    = "demo-hec"
	searchToken = "demo-search"
)

// Host ports of this project (the demo's defaults + 20000). Every server
// speaks TLS (trustDemoCA).
var (
	managerURLs = map[string]string{"m1": "https://127.0.0.1:28001", "m2": "https://127.0.0.1:28002", "m3": "https://127.0.0.1:28003"}
	hecURLs     = []string{"https://127.0.0.1:28088", "https://127.0.0.1:28188"} // p1 (site1), p4 (site2)
	headURLs    = map[string]string{"sh1": "https://127.0.0.1:28089", "sh2": "https://127.0.0.1:28090", "sh0": "https://127.0.0.1:28091"}
	peerIDs     = []string{"p1", "p2", "p3", "p4", "p5", "p6"}
)

// peerIP is a peer's fixed address on the project network (the host reaches
// it directly on Linux; used only to read peers' /metrics).
func peerIP(id string) string { return fmt.Sprintf("%s.%d", netPrefix, 20+int(id[1]-'0')) }

func composeEnv() []string {
	return append(os.Environ(),
		"COMPOSE_PROJECT_NAME="+project,
		"QUARRY_DEMO_NET="+netPrefix,
		"QUARRY_DEMO_MANAGER_PORT=28001", "QUARRY_DEMO_M2_PORT=28002", "QUARRY_DEMO_M3_PORT=28003",
		"QUARRY_DEMO_HEC_PORT=28088", "QUARRY_DEMO_HEC2_PORT=28188",
		"QUARRY_DEMO_SH1_PORT=28089", "QUARRY_DEMO_SH2_PORT=28090", "QUARRY_DEMO_SH0_PORT=28091",
		"QUARRY_DEMO_ADMIN_TOKEN="+adminToken, "QUARRY_DEMO_HEC_TOKEN="+hecToken, "QUARRY_DEMO_SEARCH_TOKEN="+searchToken,
	)
}

// compose runs docker-compose on the project.
func compose(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-f", "../../docker-compose.yml", "-p", project}, args...)...)
	cmd.Env = composeEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker-compose %s: %w: %s", strings.Join(args, " "), err, lastLines(string(out), 10))
	}
	return string(out), nil
}

// docker runs the docker CLI.
func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, lastLines(string(out), 5))
	}
	return strings.TrimSpace(string(out)), nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// container is the container name of a service of the project.
func container(service string) string { return project + "_" + service + "_1" }

var teardownOnce sync.Once

// teardown removes everything of the project: paused containers are
// resumed first (a paused container cannot be stopped), then down -v.
func teardown() {
	teardownOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if ids, err := compose(ctx, "ps", "-q"); err == nil {
			for _, id := range strings.Fields(ids) {
				docker(ctx, "unpause", id) // most are not paused: errors are expected
			}
		}
		if out, err := compose(ctx, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: teardown: %v\n%s\n", err, out)
			if err := removeNetwork(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: teardown: %v\n", err)
				return
			}
			if out, err := compose(ctx, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: teardown: %v\n%s\n", err, out)
				return
			}
		}
		fmt.Fprintln(os.Stderr, "e2e: torn down (containers, network and volumes removed)")
	})
}

// removeNetwork removes the project's network if it is still there,
// force-disconnecting any endpoint left on it first (stale endpoints of
// removed containers included). No network is no error.
func removeNetwork(ctx context.Context) error {
	names, err := docker(ctx, "network", "inspect", "-f", "{{range .Containers}}{{.Name}} {{end}}", network)
	if err != nil {
		return nil // no such network
	}
	for _, n := range strings.Fields(names) {
		docker(ctx, "network", "disconnect", "-f", network, n)
	}
	if out, err := docker(ctx, "network", "rm", network); err != nil {
		return fmt.Errorf("removing the stale network %s: %v %s", network, err, out)
	}
	fmt.Fprintf(os.Stderr, "e2e: removed the stale network %s (%d endpoints left on it)\n", network, len(strings.Fields(names)))
	return nil
}

// saveLogs writes every container's log into a folder (E2E_LOGS, or a new
// one under the temp dir) before a failed run is torn down, and says where.
func saveLogs() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := os.Getenv("E2E_LOGS")
	if dir == "" {
		d, err := os.MkdirTemp("", "quarry-e2e-logs-")
		if err != nil {
			return
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	out, err := compose(ctx, "ps", "--services")
	if err != nil {
		return
	}
	for _, svc := range strings.Fields(out) {
		cmd := exec.CommandContext(ctx, "docker", "logs", "-t", container(svc))
		b, _ := cmd.CombinedOutput()
		_ = os.WriteFile(dir+"/"+svc+".log", b, 0o644)
	}
	fmt.Fprintf(os.Stderr, "e2e: the containers' logs are in %s\n", dir)
}

// summary lines of every scenario, printed at the end.
var (
	reportMu sync.Mutex
	report   []string
)

func addReport(format string, args ...any) {
	reportMu.Lock()
	defer reportMu.Unlock()
	report = append(report, fmt.Sprintf(format, args...))
}

func TestMain(m *testing.M) {
	if _, err := exec.LookPath("docker-compose"); err != nil {
		fmt.Println("e2e: docker-compose not found: skipped")
		os.Exit(0)
	}
	deadline := 25 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("E2E_DEADLINE")); err == nil && d > 0 {
		deadline = d
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "e2e: %v: tearing down\n", s)
		teardown()
		os.Exit(2)
	}()
	watchdog := time.AfterFunc(deadline, func() {
		fmt.Fprintf(os.Stderr, "e2e: deadline %v passed: tearing down\n", deadline)
		teardown()
		os.Exit(3)
	})
	code := run(m)
	watchdog.Stop()
	if code != 0 {
		saveLogs()
	}
	teardown()
	reportMu.Lock()
	for _, l := range report {
		fmt.Println("E2E", l)
	}
	reportMu.Unlock()
	os.Exit(code)
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A run killed with SIGKILL leaves its project behind: start clean.
	// docker can keep a network's endpoints after its containers are gone
	// (an engine restarted mid-run, a disconnect racing a removal): compose
	// then cannot remove or recreate it ("has active endpoints"), so the
	// network is removed by hand and down runs again.
	if _, err := compose(ctx, "down", "-v", "--remove-orphans", "-t", "2"); err != nil {
		if err := removeNetwork(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: clean start: %v\n", err)
			return 1
		}
		if out, err := compose(ctx, "down", "-v", "--remove-orphans", "-t", "2"); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: clean start: %v\n%s\n", err, out)
			return 1
		}
	}
	if err := removeNetwork(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: clean start: %v\n", err)
		return 1
	}
	start := time.Now()
	if out, err := compose(ctx, "up", "-d"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: up: %v\n%s\n", err, out)
		return 1
	}
	if err := trustDemoCA(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	if err := waitHealthy(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: cluster not healthy: %v\n", err)
		return 1
	}
	addReport("cluster: healthy %.1fs after docker-compose up (14 containers, leader, 6 peers Up, 3 search heads)", time.Since(start).Seconds())
	return m.Run()
}
