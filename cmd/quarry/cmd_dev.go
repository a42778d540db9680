package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/devcluster"
)

// devCommand is `quarry dev` (SPEC §8): the whole multisite cluster in one
// process on 127.0.0.1, sample data loaded with acks, "ready" printed once
// every search head answers the exact sample count. Additions to SPEC §8:
// --sample-events, --port-base, --log-level.
func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run a whole multisite cluster in one process on 127.0.0.1, with sample data",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Usage: "data folder (default: a temporary folder, removed at exit); a second run on the same folder resumes", EnvVars: envVars("data-dir")},
			&cli.IntFlag{Name: "sites", Value: 2, Usage: "sites (one NATS node and one search head each)", EnvVars: envVars("sites")},
			&cli.IntFlag{Name: "peers-per-site", Value: 3, Usage: "peers per site", EnvVars: envVars("peers-per-site")},
			&cli.BoolFlag{Name: "no-sample-data", Usage: "load no sample data", EnvVars: envVars("no-sample-data")},
			&cli.IntFlag{Name: "sample-events", Value: 20000, Usage: "sample events to load (bench event model, index sample)", EnvVars: envVars("sample-events")},
			&cli.IntFlag{Name: "port-base", Value: 18000, Usage: "fixed ports at the first start: managers +1…, peers +21…, search heads +41… (0: any free port)", EnvVars: envVars("port-base")},
			&cli.StringFlag{Name: "log-level", Value: "error", Usage: "log level of the servers (debug, info, warn, error)", EnvVars: envVars("log-level")},
		},
		Action: runDev,
	}
}

func runDev(c *cli.Context) error {
	start := time.Now()
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return fmt.Errorf("dev: --log-level %q: %w", c.String("log-level"), err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	dir, temp := c.String("data-dir"), false
	if dir == "" {
		d, err := os.MkdirTemp("", "quarry-dev-")
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		dir, temp = d, true
		defer os.RemoveAll(dir)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := c.App.Writer
	fmt.Fprintf(out, "quarry dev: starting %d sites × %d peers, 3 managers, %d search heads in %s\n",
		c.Int("sites"), c.Int("peers-per-site"), c.Int("sites")+1, dir)
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var raftLog io.Writer
	if level <= slog.LevelDebug {
		raftLog = os.Stderr
	}
	cl, err := devcluster.Start(sctx, devcluster.Options{DataDir: dir, Sites: c.Int("sites"), PeersPerSite: c.Int("peers-per-site"),
		PortBase: c.Int("port-base"), Logger: log, RaftLog: raftLog})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "quarry dev: stopping")
		cl.Stop()
		if temp {
			fmt.Fprintf(out, "quarry dev: stopped; removed %s\n", dir)
		} else {
			fmt.Fprintf(out, "quarry dev: stopped; data kept in %s (run again with --data-dir %s to resume)\n", dir, dir)
		}
	}()
	if cl.Resumed {
		fmt.Fprintf(out, "quarry dev: resumed the cluster of %s\n", dir)
	}
	var sample *devcluster.Sample
	if !c.Bool("no-sample-data") || cl.Layout.Sample != nil {
		if cl.Layout.Sample == nil {
			fmt.Fprintf(out, "quarry dev: loading %d sample events with acks\n", c.Int("sample-events"))
		}
		s, err := cl.LoadSample(sctx, c.Int("sample-events"))
		if err != nil {
			return err
		}
		sample = &s
		if s.Acked {
			if err := cl.WaitSearchable(sctx, s); err != nil {
				return fmt.Errorf("dev: sample data not searchable on every search head: %w", err)
			}
		} else {
			fmt.Fprintln(out, "quarry dev: warning: an earlier sample load was interrupted before its last ack; it is not repeated and its count is not checked")
		}
	}
	envFile, err := writeDevEnv(cl)
	if err != nil {
		fmt.Fprintf(out, "quarry dev: warning: %v\n", err)
	} else {
		defer removeDevEnv(envFile, cl)
	}
	printReady(out, cl, sample, time.Since(start))
	<-ctx.Done()
	return nil
}

// devEnvPath is where a running quarry dev writes its addresses and tokens
// as shell exports (README quick start: `. "${TMPDIR:-/tmp}/quarry-dev.env"`):
// the tokens are random at a cluster's first start (devcluster.Secrets),
// so the README cannot name them. Mode 0600; removed at exit if it is
// still this run's (the last quarry dev started owns it).
func devEnvPath() string { return filepath.Join(os.TempDir(), "quarry-dev.env") }

// devEnv is the content of the env file: the CLI's variables for this
// cluster (the second search head, sh1, as the default one).
func devEnv(cl *devcluster.Cluster) string {
	l, sec := cl.Layout, cl.Tokens()
	var mgrs []string
	for _, m := range l.Managers {
		mgrs = append(mgrs, "http://"+m.HTTPAddr)
	}
	return fmt.Sprintf("# quarry dev (%s): its addresses and tokens\nexport QUARRY_MANAGER=%s QUARRY_SEARCHHEAD=%s\nexport QUARRY_ADMIN_TOKEN=%s QUARRY_HEC_TOKEN=%s QUARRY_DEV_HEC_NOACK_TOKEN=%s\nexport QUARRY_DEV_NATS_SUBSCRIBER=%s\n",
		cl.DataDir(), strings.Join(mgrs, ","), defaultHead(l), sec.Admin, sec.HEC, sec.HECNoAck, busSubscriberURL(cl))
}

func writeDevEnv(cl *devcluster.Cluster) (string, error) {
	p := devEnvPath()
	tmp := p + fmt.Sprintf(".%d", os.Getpid())
	if err := os.WriteFile(tmp, []byte(devEnv(cl)), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return p, nil
}

// removeDevEnv removes the env file when it still holds this run's.
func removeDevEnv(p string, cl *devcluster.Cluster) {
	if b, err := os.ReadFile(p); err == nil && string(b) == devEnv(cl) {
		os.Remove(p)
	}
}

// defaultHead is the search head the CLI examples use: sh1 (site1) when
// there is one, else the only one.
func defaultHead(l devcluster.Layout) string {
	if len(l.Heads) > 1 {
		return "http://" + l.Heads[1].HTTPAddr
	}
	return "http://" + l.Heads[len(l.Heads)-1].HTTPAddr
}

// busSubscriberURL is the first site's bus URL with the subscriber's user
// and password ("" without a bus).
func busSubscriberURL(cl *devcluster.Cluster) string {
	u := cl.BusURL(cl.Layout.Sites[0])
	if u == "" {
		return ""
	}
	return strings.Replace(u, "nats://", "nats://"+devcluster.SubscriberUser+":"+cl.Tokens().Subscriber+"@", 1)
}

func printReady(w io.Writer, cl *devcluster.Cluster, s *devcluster.Sample, took time.Duration) {
	l := cl.Layout
	var b strings.Builder
	fmt.Fprintf(&b, "\nready in %.1fs\n\n", took.Seconds())
	b.WriteString("search heads (POST /v1/search, and the search page at / in a browser; no token needed on loopback):\n")
	for _, h := range l.Heads {
		fmt.Fprintf(&b, "  %-4s site %-6s http://%s\n", h.ID, h.Site, h.HTTPAddr)
	}
	b.WriteString("managers (cluster page at /, admin API /v1/…):\n")
	for _, m := range l.Managers {
		fmt.Fprintf(&b, "  %-4s site %-7s http://%s\n", m.ID, m.Site, m.HTTPAddr)
	}
	b.WriteString("peers (HEC at /services/collector):\n")
	for _, p := range l.Peers {
		fmt.Fprintf(&b, "  %-4s site %-6s http://%s\n", p.ID, p.Site, p.HTTPAddr)
	}
	b.WriteString("bus (NATS; results of a search's publish go to quarry.results.<name>):\n")
	for _, site := range l.Sites {
		fmt.Fprintf(&b, "  %-11s %s\n", site, cl.BusURL(site))
	}
	sec := cl.Tokens()
	fmt.Fprintf(&b, "tokens (random for this cluster; also in %s): HEC %s (indexes main, %s; acknowledging: send a channel), HEC %s (same indexes; no channel needed: the answer is the ack), admin %s\n",
		devEnvPath(), sec.HEC, devcluster.SampleIndex, sec.HECNoAck, sec.Admin)
	if s != nil {
		fmt.Fprintf(&b, "sample: %d events in index %s (%d with status>=500), over the 24 h from %s\n",
			s.Events, s.Index, s.Status5xx, s.Base.Format(time.RFC3339))
	}
	sh := defaultHead(l)
	fmt.Fprintf(&b, "search page: %s/ in a browser (every search head serves it at /; the cluster page is each manager's /)\n", sh)
	fmt.Fprintf(&b, "\ntry (go build -o bin/quarry ./cmd/quarry first):\n")
	fmt.Fprintf(&b, "  . %s   # exports QUARRY_MANAGER, QUARRY_SEARCHHEAD and the tokens\n", devEnvPath())
	b.WriteString("  bin/quarry cluster status\n")
	b.WriteString("  bin/quarry search 'index=sample | stats count by status'\n")
	b.WriteString("  bin/quarry search 'index=sample error | top limit=5 host'\n")
	fmt.Fprintf(&b, "  curl -s %s/v1/search -d '{\"query\":\"index=sample status>=500 | stats count\"}'\n", sh)
	fmt.Fprintf(&b, "  bin/quarry ingest /var/log/syslog --hec http://%s   # QUARRY_HEC_TOKEN\n", l.Peers[0].HTTPAddr)
	if u := busSubscriberURL(cl); u != "" {
		fmt.Fprintf(&b, "  nats sub --server %s 'quarry.results.>'   # then: bin/quarry search 'index=sample | head 5' --publish demo\n", u)
	}
	b.WriteString("\nCtrl-C stops the cluster.\n")
	fmt.Fprint(w, b.String())
}
