package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/searchhead"
)

// searchheadCommand is `quarry searchhead` (SPEC §8): a search head that
// follows the managers' generation table over NATS and serves
// POST /v1/search, Splunk's search REST API, /healthz and /metrics.
func searchheadCommand() *cli.Command {
	return &cli.Command{
		Name:  "searchhead",
		Usage: "run a search head: distributed search over the cluster's peers",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Required: true, Usage: "search head id (sh1)", EnvVars: envVars("id")},
			&cli.StringFlag{Name: "site", Required: true, Usage: "its site (search affinity), or site0 for none", EnvVars: envVars("site")},
			&cli.StringFlag{Name: "http-addr", Value: "127.0.0.1:8089", Usage: "HTTP listen address", EnvVars: envVars("http-addr")},
			&cli.StringFlag{Name: "nats", Value: "nats://127.0.0.1:4222", Usage: "NATS URL(s)", EnvVars: envVars("nats")},
			&cli.StringFlag{Name: "nats-user", Usage: "NATS user of this search head", EnvVars: envVars("nats-user")},
			&cli.StringFlag{Name: "nats-password", Usage: "NATS password", EnvVars: envVars("nats-password")},
			secretFileFlag("nats-password", "the NATS password"),
			&cli.StringFlag{Name: "subject-prefix", Value: "quarry", Usage: "NATS subject prefix", EnvVars: envVars("subject-prefix")},
			&cli.StringFlag{Name: "admin-token", Usage: "a token that searches every index (the managers' admin token)", EnvVars: envVars("admin-token")},
			secretFileFlag("admin-token", "the admin token"),
			&cli.DurationFlag{Name: "peer-timeout", Value: searchhead.DefaultPeerTimeout, Usage: "search_peer_timeout: a peer silent this long loses its buckets to other copies", EnvVars: envVars("peer-timeout")},
			&cli.DurationFlag{Name: "search-timeout", Value: searchhead.DefaultSearchTimeout, Usage: "a search's time limit", EnvVars: envVars("search-timeout")},
			&cli.IntFlag{Name: "max-results", Value: searchhead.DefaultMaxResults, Usage: "most result rows of one search", EnvVars: envVars("max-results")},
			&cli.Int64Flag{Name: "search-memory", Value: query.DefaultSearchMemory, Usage: "one search's memory budget on this head, in bytes: the partial results it holds for the merge (sort, dedup, stats, top); past it the search ends with HTTP 400 limit_exceeded", EnvVars: envVars("search-memory")},
			&cli.IntFlag{Name: "max-searches", Value: searchhead.DefaultMaxSearches, Usage: "concurrent searches; one more waits up to 2s for a slot, then gets HTTP 429 with Retry-After", EnvVars: envVars("max-searches")},
			&cli.IntFlag{Name: "max-searches-per-token", Usage: "concurrent searches of one token (default: three quarters of --max-searches); more get HTTP 429 with Retry-After", EnvVars: envVars("max-searches-per-token")},
			&cli.DurationFlag{Name: "splunk-job-ttl", Value: searchhead.DefaultJobTTL, Usage: "Splunk REST API: a finished search job is kept this long after its last read, then cancelled and freed (Splunk's dispatch ttl)", EnvVars: envVars("splunk-job-ttl")},
			&cli.IntFlag{Name: "splunk-max-jobs-per-token", Value: searchhead.DefaultMaxJobsPerToken, Usage: "Splunk REST API: search jobs one token holds at once, in any state (more get HTTP 429)", EnvVars: envVars("splunk-max-jobs-per-token")},
			&cli.IntFlag{Name: "splunk-max-jobs", Value: searchhead.DefaultMaxJobs, Usage: "Splunk REST API: search jobs this head holds at once, in any state (more get HTTP 503)", EnvVars: envVars("splunk-max-jobs")},
			&cli.Int64Flag{Name: "splunk-job-max-bytes", Value: searchhead.DefaultJobMaxBytes, Usage: "Splunk REST API: result bytes one job holds; past it the job stops its search and says its results are truncated", EnvVars: envVars("splunk-job-max-bytes")},
			&cli.Int64Flag{Name: "splunk-jobs-max-bytes", Value: searchhead.DefaultJobsMaxBytes, Usage: "Splunk REST API: result bytes all jobs hold together, one token at most half (new jobs get HTTP 503 while it is used up)", EnvVars: envVars("splunk-jobs-max-bytes")},
			&cli.StringFlag{Name: "knowledge", Usage: "search-time knowledge bundle `DIR` (props.conf EXTRACT-/REPORT-/KV_MODE/FIELDALIAS-/EVAL-/LOOKUP-, transforms.conf, eventtypes.conf, tags.conf, lookups/*.csv); reloaded when it changes, a bad one refused with the last good one kept", EnvVars: envVars("knowledge")},
			tlsCertFlag(), tlsKeyFlag(), tlsCAFlag(),
		},
		Action: func(c *cli.Context) error {
			cfg, err := searchheadConfig(c)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			cfg.TLS = tlsFiles(c)
			h, err := searchhead.New(sctx, cfg)
			cancel()
			if err != nil {
				return err
			}
			if err := h.Start(); err != nil {
				h.Close()
				return err
			}
			fmt.Fprintf(os.Stderr, "search head %s (site %s) on %s\n", cfg.ID, cfg.Site, h.URL())
			<-ctx.Done()
			return h.Close()
		},
	}
}

// searchheadConfig turns the flags into a searchhead.Config, secrets read
// from their files (--admin-token-file, --nats-password-file).
func searchheadConfig(c *cli.Context) (searchhead.Config, error) {
	adminToken, err := secretValue(c, "admin-token")
	if err != nil {
		return searchhead.Config{}, fmt.Errorf("searchhead: %w", err)
	}
	natsPassword, err := secretValue(c, "nats-password")
	if err != nil {
		return searchhead.Config{}, fmt.Errorf("searchhead: %w", err)
	}
	if n := c.Int64("search-memory"); n < 1<<20 {
		return searchhead.Config{}, fmt.Errorf("searchhead: --search-memory %d: at least 1 MiB (1048576 bytes)", n)
	}
	jobs := searchhead.JobLimits{TTL: c.Duration("splunk-job-ttl"), PerToken: c.Int("splunk-max-jobs-per-token"), Total: c.Int("splunk-max-jobs"),
		JobBytes: c.Int64("splunk-job-max-bytes"), TotalBytes: c.Int64("splunk-jobs-max-bytes")}
	if jobs.TTL <= 0 || jobs.PerToken <= 0 || jobs.Total <= 0 || jobs.JobBytes <= 0 || jobs.TotalBytes <= 0 {
		return searchhead.Config{}, fmt.Errorf("searchhead: --splunk-job-ttl %s, --splunk-max-jobs-per-token %d, --splunk-max-jobs %d, --splunk-job-max-bytes %d, --splunk-jobs-max-bytes %d: each must be positive",
			jobs.TTL, jobs.PerToken, jobs.Total, jobs.JobBytes, jobs.TotalBytes)
	}
	return searchhead.Config{
		ID: c.String("id"), Site: c.String("site"), HTTPAddr: c.String("http-addr"), NATS: c.String("nats"),
		NATSUser: c.String("nats-user"), NATSPassword: natsPassword, SubjectPrefix: c.String("subject-prefix"),
		AdminToken: adminToken, PeerTimeout: c.Duration("peer-timeout"), SearchTimeout: c.Duration("search-timeout"),
		MaxResults: c.Int("max-results"), MaxSearches: c.Int("max-searches"), MaxSearchesPerToken: c.Int("max-searches-per-token"), Jobs: jobs,
		SearchMemory: c.Int64("search-memory"), KnowledgeDir: c.String("knowledge"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("role", "searchhead"),
	}, nil
}
