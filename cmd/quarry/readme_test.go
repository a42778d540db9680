package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlocks returns the README's shell blocks marked
// `<!-- runnable: NAME … -->` on the line before their fence, by NAME.
func readmeBlocks(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		name, ok := strings.CutPrefix(lines[i], "<!-- runnable: ")
		if !ok || !strings.HasPrefix(lines[i+1], "```sh") {
			continue
		}
		name = strings.Fields(name)[0]
		var body []string
		for j := i + 2; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			body = append(body, lines[j])
		}
		out[name] = strings.Join(body, "\n") + "\n"
	}
	return out
}

var devPort = regexp.MustCompile(`127\.0\.0\.1:180(\d\d)\b`)

// freeBase finds a port base whose quarry dev ports (base+1…base+49) are
// free now, so the README's fixed ports (base 18000) can be rewritten to it
// when another process holds them.
func freeBase(t *testing.T) int {
	t.Helper()
	for base := 18000; base < 60000; base += 1000 {
		ok := true
		for off := 1; off < 50 && ok; off++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range for quarry dev")
	return 0
}

// cleanEnv is the environment without QUARRY_* (the README's commands say
// what they need).
func cleanEnv(extra ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "QUARRY_") {
			env = append(env, e)
		}
	}
	return append(env, extra...)
}

// TestReadmeBlocks runs the README as a new user would: the quick start's
// first command (`go run ./cmd/quarry dev`, as written, with a smaller
// sample and — only if 18000… is taken — another port base through
// QUARRY_PORT_BASE, the README's ports rewritten to match), then, against
// that cluster, the "try" block line by line under bash -e; then Ctrl-C.
// The quick start's second command, `make test`, is what runs this test
// (and .ci/run runs it).
func TestReadmeBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds quarry and starts a whole cluster")
	}
	blocks := readmeBlocks(t)
	quick, try := blocks["quick-start"], blocks["try"]
	if quick == "" || try == "" {
		t.Fatalf("README blocks quick-start and try not found (have %d blocks)", len(blocks))
	}
	first := strings.TrimSpace(strings.SplitN(strings.SplitN(quick, "\n", 2)[0], "#", 2)[0])
	if first != "go run ./cmd/quarry dev" {
		t.Fatalf("the quick start's first command is %q", first)
	}
	if !strings.Contains(quick, "make test") {
		t.Fatalf("the quick start does not name make test:\n%s", quick)
	}
	base := freeBase(t)
	try = devPort.ReplaceAllStringFunc(try, func(m string) string {
		off, _ := strconv.Atoi(m[len(m)-2:])
		return "127.0.0.1:" + strconv.Itoa(base+off)
	})
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dev := exec.CommandContext(ctx, "bash", "-c", "exec "+first)
	dev.Dir = root
	dev.Env = cleanEnv("QUARRY_PORT_BASE="+strconv.Itoa(base), "QUARRY_SAMPLE_EVENTS=2000", "TMPDIR="+tmp)
	dev.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, _ := dev.StdoutPipe()
	var stderr strings.Builder
	dev.Stderr = &stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait() }()
	stop := func() error {
		syscall.Kill(-dev.Process.Pid, syscall.SIGINT) // Ctrl-C to the group, as a terminal sends it
		select {
		case err := <-exited:
			return err
		case <-time.After(60 * time.Second):
			syscall.Kill(-dev.Process.Pid, syscall.SIGKILL)
			return fmt.Errorf("quarry dev did not stop within 60s of Ctrl-C")
		}
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var printed []string
	deadline := time.After(8 * time.Minute)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("quarry dev ended before ready:\n%s\n%s", strings.Join(printed, "\n"), stderr.String())
			}
			printed = append(printed, l)
			if strings.HasPrefix(l, "ready in ") {
				break wait
			}
		case <-deadline:
			stop()
			t.Fatalf("quarry dev not ready in 8 minutes:\n%s\n%s", strings.Join(printed, "\n"), stderr.String())
		}
	}
	// The try block, as one bash -e script from the repo root.
	script := filepath.Join(tmp, "try.sh")
	os.WriteFile(script, []byte("set -euo pipefail\nset -x\n"+try), 0o700)
	run := exec.CommandContext(ctx, "bash", script)
	run.Dir = root
	run.Env = cleanEnv("TMPDIR=" + tmp) // where quarry dev wrote quarry-dev.env
	out, err := run.CombinedOutput()
	// `go run` itself exits 1 when the terminal's Ctrl-C reaches it too
	// (it waits for quarry, then reports the interrupt); quarry's own clean
	// stop is checked on its output below.
	if serr := stop(); serr != nil && !strings.Contains(serr.Error(), "exit status 1") {
		t.Errorf("stopping quarry dev: %v", serr)
	}
	if strings.Contains(stderr.String(), "quarry: ") {
		t.Errorf("quarry dev reported an error:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("the README's try block failed: %v\n%s", err, out)
	}
	for _, want := range []string{"leader", "200", `"count"`, "ingested 2 events", "POST /login 500 error: timeout"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the try block's output lacks %q:\n%s", want, out)
		}
	}
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if !strings.Contains(strings.Join(rest, "\n"), "stopped; removed") {
		t.Errorf("no clean stop after Ctrl-C: %q", rest)
	}
}

// TestReadmeSmallCluster runs the README's "A small cluster by hand" and
// its search-head block as one bash -e script, with these replacements
// only: `quarry` is the binary built from this checkout (on PATH), every
// server line (quarry manager|peer|searchhead) runs in the background and
// the script waits for its /healthz before the next line, the fixed
// loopback ports become free ones, /tmp/qc becomes a temp dir, and
// /var/log/syslog a generated log of 200 lines (40 with "error"). The
// search counts must be exact.
func TestReadmeSmallCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds quarry and starts a small cluster")
	}
	blocks := readmeBlocks(t)
	cluster, search := blocks["small-cluster"], blocks["small-cluster-search"]
	if cluster == "" || search == "" {
		t.Fatalf("README blocks small-cluster and small-cluster-search not found")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "quarry"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var logLines []string
	for i := range 200 {
		word := "info"
		if i%5 == 0 {
			word = "error"
		}
		logLines = append(logLines, fmt.Sprintf("Dec  2 01:%02d:%02d host app[%d]: %s request %d done", i/60, i%60, i, word, i))
	}
	syslog := filepath.Join(tmp, "syslog")
	os.WriteFile(syslog, []byte(strings.Join(logLines, "\n")+"\n"), 0o644)
	// Free ports for the README's fixed ones.
	// Every listener stays open until all are chosen: closed one by one,
	// the OS may hand the same port out twice (CI saw the head given the
	// manager's Raft port).
	ports := map[string]string{}
	var held []net.Listener
	for _, p := range []string{"7001", "8001", "4222", "8081", "8082", "8089"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		ports[p] = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range held {
		ln.Close()
	}
	portRe := regexp.MustCompile(`127\.0\.0\.1:(7001|8001|4222|8081|8082|8089)\b`)
	httpAddr := regexp.MustCompile(`--http-addr (\S+)`)
	var script strings.Builder
	script.WriteString("set -euo pipefail\nset -x\n")
	script.WriteString("up() { for _ in $(seq 1 600); do curl -sf \"http://$1/healthz\" >/dev/null && return 0; sleep 0.1; done; echo \"$1 never answered /healthz\" >&2; return 1; }\n")
	var cmd strings.Builder
	for _, l := range strings.Split(cluster+search, "\n") {
		l = portRe.ReplaceAllStringFunc(l, func(m string) string { return "127.0.0.1:" + ports[m[len("127.0.0.1:"):]] })
		l = strings.ReplaceAll(l, "/tmp/qc", filepath.Join(tmp, "qc"))
		l = strings.ReplaceAll(l, "/var/log/syslog", syslog)
		trimmed := strings.TrimSpace(l)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		cmd.WriteString(l + "\n")
		if strings.HasSuffix(trimmed, "\\") {
			continue // a command continued on the next line
		}
		c := cmd.String()
		cmd.Reset()
		server := false
		for _, role := range []string{"quarry manager ", "quarry peer ", "quarry searchhead "} {
			server = server || strings.HasPrefix(strings.TrimSpace(c), role)
		}
		if !server {
			script.WriteString(c)
			continue
		}
		script.WriteString(strings.TrimRight(c, "\n") + " >>" + filepath.Join(tmp, "servers.log") + " 2>&1 &\n")
		if m := httpAddr.FindStringSubmatch(c); m != nil {
			script.WriteString("up " + m[1] + "\n")
		}
	}
	path := filepath.Join(tmp, "small.sh")
	os.WriteFile(path, []byte(script.String()), 0o700)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "bash", path)
	run.Env = cleanEnv("PATH=" + bin + ":" + os.Getenv("PATH"))
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := run.CombinedOutput()
	// Stop the servers the script left running: SIGTERM to the group,
	// then wait for their ports to close.
	syscall.Kill(-run.Process.Pid, syscall.SIGTERM)
	t.Cleanup(func() {
		for _, p := range ports {
			for i := 0; i < 100; i++ {
				c, err := net.DialTimeout("tcp", "127.0.0.1:"+p, 100*time.Millisecond)
				if err != nil {
					break
				}
				c.Close()
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	if err != nil {
		logs, _ := os.ReadFile(filepath.Join(tmp, "servers.log"))
		t.Fatalf("the README's small cluster failed: %v\n%s\n--- servers\n%s", err, out, lastN(string(logs), 40))
	}
	for _, want := range []string{"ingested 200 events", "leader", `"summary":`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the blocks' output lacks %q:\n%s", want, out)
		}
	}
	// 'error | stats count by host' prints one table row: the host, 40.
	if !regexp.MustCompile(`(?m)^\s*host\s+count\s*\n\s*\S+\s+40\s*$`).Match(out) {
		t.Errorf("the stats search did not count 40 error events:\n%s", out)
	}
	// '*' --output raw prints every event once.
	if n := len(regexp.MustCompile(`(?m)^Dec  2 \S+ host app\[\d+\]: \w+ request \d+ done$`).FindAll(out, -1)); n != 200 {
		t.Errorf("the raw search printed %d events, want 200", n)
	}
}

func lastN(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
