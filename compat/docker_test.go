package compat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Docker's Splunk log driver with its defaults (issue 29 item 2): a
// container whose program prints 10,000 lines runs with
// `--log-driver=splunk` and only the URL and a token without acks (the
// driver sends no channel); its connection check (OPTIONS) passes, and
// every line is counted once; _raw is the driver's inline JSON
// ({"line":…,"source":"stdout","tag":…}). Skipped with a line when no Docker engine answers. The
// image is built FROM scratch from a static binary (no image is pulled).
func TestDockerSplunkLogDriver(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skip("no Docker engine answers (docker info): skipped")
	}
	p := startStandalone(t)
	url := "http://" + p.Addr()
	const lines = 10000
	dir := t.TempDir()
	prog := `package main

import (
	"bufio"
	"fmt"
	"os"
)

func main() {
	w := bufio.NewWriter(os.Stdout)
	for i := 0; i < ` + fmt.Sprint(lines) + `; i++ {
		fmt.Fprintf(w, "dockerdriver line %d from a container\n", i)
	}
	w.Flush()
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module printer\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", "printer", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the printer: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY printer /printer\nENTRYPOINT [\"/printer\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	image := fmt.Sprintf("quarry-compat-printer:%d", time.Now().UnixNano())
	if out, err := exec.Command("docker", "build", "-q", "-t", image, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", image).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "docker", "run", "--rm", "--log-driver=splunk",
		"--log-opt", "splunk-url="+url, "--log-opt", "splunk-token="+noAckToken, image)
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("docker run with the splunk log driver: %v\n%s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	var n int
	for {
		res := search(t, url, "dockerdriver | stats count")
		fmt.Sscan(fmt.Sprint(res[0]["count"]), &n)
		if n >= lines || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res := search(t, url, `dockerdriver | rex "line (?<n>\d+) from" | stats dc(n) as d count`)
	if fmt.Sprint(res[0]["count"]) != fmt.Sprint(lines) || fmt.Sprint(res[0]["d"]) != fmt.Sprint(lines) {
		t.Fatalf("%v events with %v distinct line numbers, want %d of each", res[0]["count"], res[0]["d"], lines)
	}
	sample := search(t, url, "dockerdriver line 7 from | head 1")
	if len(sample) != 1 || !strings.Contains(fmt.Sprint(sample[0]["_raw"]), "dockerdriver line 7 from a container") {
		t.Fatalf("one line as stored: %v", sample)
	}
	t.Logf("%d lines from the container searchable, each once; one as stored: %v", lines, sample[0]["_raw"])
}
