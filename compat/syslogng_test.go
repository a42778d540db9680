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

// syslog-ng (Debian's syslog-ng-core with syslog-ng-mod-http; issue 29
// item 2) tails a file of 10,000 lines and ships it with its http()
// destination, as its users configure it for Splunk HEC: JSON envelopes to
// /services/collector/event with `Authorization: Splunk <token>` and a
// token without acks, and the lines as they are to /services/collector/raw
// with Basic auth (the token as the password) and an acknowledging token
// with a channel. Each line is counted exactly once. Skipped with a line
// when syslog-ng is not installed (.ci/run installs it with apt).
func TestSyslogNG(t *testing.T) {
	bin, err := exec.LookPath("syslog-ng")
	if err != nil {
		t.Skip("syslog-ng is not installed (apt-get install syslog-ng-core syslog-ng-mod-http): skipped")
	}
	p := startStandalone(t)
	url := "http://" + p.Addr()
	const lines = 10000
	for _, tc := range []struct {
		name, dest string
	}{
		{"event-json-noack", fmt.Sprintf(`http(
        url("%s/services/collector/event")
        method("POST")
        headers("Authorization: Splunk %s", "Content-Type: application/json")
        body('$(format-json --scope none event=${MSG} sourcetype=syslogng host=${HOST})')
        batch-lines(200) batch-timeout(100) workers(2)
    )`, url, noAckToken)},
		{"raw-basic-ack", fmt.Sprintf(`http(
        url("%s/services/collector/raw?channel=6a3c1e52-34f7-4c47-9a2d-1f0e8e7a9b31&sourcetype=syslogng")
        method("POST")
        user("x") password("acking")
        body("${MSG}")
        batch-lines(200) batch-timeout(100) workers(2)
    )`, url)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tag := strings.ReplaceAll(tc.name, "-", "")
			in := filepath.Join(dir, "in.log")
			var b strings.Builder
			for i := 0; i < lines; i++ {
				fmt.Fprintf(&b, "%s line %d of a syslog-ng shipment\n", tag, i)
			}
			if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			conf := filepath.Join(dir, "syslog-ng.conf")
			text := fmt.Sprintf(`@version: 3.35
options { keep-hostname(yes); stats_freq(0); };
source s_in { file("%s" follow-freq(0.1) flags(no-parse)); };
destination d_hec { %s; };
log { source(s_in); destination(d_hec); };
`, in, tc.dest)
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-F", "--no-caps", "-f", conf, "-R", filepath.Join(dir, "persist"),
				"-p", filepath.Join(dir, "pid"), "-c", filepath.Join(dir, "ctl"))
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			stopped := false
			stop := func() {
				if !stopped {
					stopped = true
					cmd.Process.Signal(os.Interrupt)
					<-exited
				}
			}
			defer stop()
			deadline := time.Now().Add(90 * time.Second)
			var n int
			for {
				n = 0
				for _, c := range countsBy(t, url, tag, "sourcetype") {
					n += c
				}
				if n >= lines || time.Now().After(deadline) {
					break
				}
				select {
				case err := <-exited:
					stopped = true
					t.Fatalf("syslog-ng exited (%v) with %d of %d lines searchable:\n%s", err, n, lines, out.String())
				case <-time.After(200 * time.Millisecond):
				}
			}
			stop()
			if n != lines {
				t.Fatalf("%d of %d lines searchable; syslog-ng said:\n%s", n, lines, out.String())
			}
			got := countsBy(t, url, tag, "sourcetype")
			if fmt.Sprint(got) != fmt.Sprint(map[string]int{"syslogng": lines}) {
				t.Fatalf("counts by sourcetype %v, want syslogng=%d", got, lines)
			}
			dc := search(t, url, tag+" | stats dc(_raw) as d count")
			if fmt.Sprint(dc[0]["d"]) != fmt.Sprint(lines) || fmt.Sprint(dc[0]["count"]) != fmt.Sprint(lines) {
				t.Fatalf("distinct lines %v of %v events, want %d of %d: a line stored twice or lost", dc[0]["d"], dc[0]["count"], lines, lines)
			}
			t.Logf("%s: %d lines searchable, each once", tc.name, lines)
		})
	}
}
