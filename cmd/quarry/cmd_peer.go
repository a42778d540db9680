package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/store"
	"github.com/quarry-dev/quarry/query"
	"github.com/urfave/cli/v2"
)

// peerCommand runs an indexer peer (SPEC §8). Without --nats it runs
// standalone (RF=1) with its HEC tokens from --hec-token. Additions to SPEC
// §8, all optional: --searchable (false keeps journal-only copies),
// --max-hot-bytes, --max-hot-span, --max-hot-buckets (roll limits; in a
// cluster they come from the managers' config), --quarantine-past,
// --quarantine-future (the quarantine bucket's window), --max-open-files
// (the file cache's cap), --idempotency-window (how long a HEC token's
// Idempotency-Key is remembered), --max-hot-buckets-total, --max-hot-idle
// and --max-indexes (the peer-wide ingest limits of review M3; the peer's
// own in a cluster too).
func peerCommand() *cli.Command {
	return &cli.Command{
		Name:  "peer",
		Usage: "run an indexer peer (standalone without --nats)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Usage: "peer id", EnvVars: envVars("id")},
			&cli.StringFlag{Name: "site", Value: "site1", Usage: "the peer's site", EnvVars: envVars("site")},
			&cli.StringFlag{Name: "data-dir", Usage: "data folder (buckets, identity)", EnvVars: envVars("data-dir")},
			&cli.StringFlag{Name: "http-addr", Value: "127.0.0.1:8088", Usage: "HTTP listen address (HEC and API)", EnvVars: envVars("http-addr")},
			&cli.GenericFlag{Name: "attr", Value: &repeatable{}, Usage: "peer attribute k=v (repeatable)", EnvVars: envVars("attr")},
			&cli.StringFlag{Name: "nats", Usage: "NATS URL of the cluster (cluster mode)", EnvVars: envVars("nats")},
			&cli.StringFlag{Name: "token", Usage: "cluster mode, optional: the managers' admin token, checked directly (without it the peer checks the token presented to its roll, searchable, pprof, /v1/buckets and /v1/search against the digest the managers send; peers need no secret)", EnvVars: envVars("token")},
			secretFileFlag("token", "the managers' admin token"),
			&cli.StringFlag{Name: "nats-user", Usage: "cluster mode: this peer's NATS user", EnvVars: envVars("nats-user")},
			&cli.StringFlag{Name: "nats-password", Usage: "cluster mode: password of --nats-user", EnvVars: envVars("nats-password")},
			secretFileFlag("nats-password", "the NATS password"),
			&cli.DurationFlag{Name: "target-timeout", Value: 2 * time.Second, Usage: "cluster mode: a replication target that has not acknowledged within this leaves the set", EnvVars: envVars("target-timeout")},
			&cli.GenericFlag{Name: "hec-token", Value: &repeatable{}, Usage: "standalone HEC token `T[=index,…][:useack=false]` (repeatable; acknowledging unless :useack=false; :allowquerystringauth=true accepts ?token=)", EnvVars: envVars("hec-token")},
			secretListFileFlag("hec-token", "the HEC tokens"),
			&cli.StringFlag{Name: "knowledge", Usage: "standalone: the search-time knowledge bundle `DIR` for this peer's own POST /v1/search (as quarry searchhead --knowledge; read at start)", EnvVars: envVars("knowledge")},
			&cli.StringFlag{Name: "bundle", Usage: "standalone: the configuration bundle `DIR` (props.conf, transforms.conf: line breaking and timestamps per sourcetype); in a cluster the managers push it (quarry cluster bundle apply)", EnvVars: envVars("bundle")},
			&cli.GenericFlag{Name: "search-token", Value: &repeatable{}, Usage: "standalone search token `T[=index,…]` for /v1/search and GET /v1/buckets (repeatable; in a cluster they come from the managers). None: served without a token on a loopback --http-addr only", EnvVars: envVars("search-token")},
			secretListFileFlag("search-token", "the search tokens"),
			&cli.StringFlag{Name: "admin-token", Usage: "standalone admin token: roll, searchable, pprof, and searches of every index (in a cluster: --token). None: served without a token on a loopback --http-addr only; any other address refuses to start without it", EnvVars: envVars("admin-token")},
			secretFileFlag("admin-token", "the admin token"),
			&cli.BoolFlag{Name: "pprof", Usage: "serve /debug/pprof/* (behind the admin token)", EnvVars: envVars("pprof")},
			tlsCertFlag(), tlsKeyFlag(), tlsCAFlag(),
			&cli.BoolFlag{Name: "searchable", Value: true, Usage: "make new bucket copies searchable (false: journal only)", EnvVars: envVars("searchable")},
			&cli.Int64Flag{Name: "max-hot-bytes", Value: 32 << 20, Usage: "roll a hot bucket at this many uncompressed event bytes", EnvVars: envVars("max-hot-bytes")},
			&cli.DurationFlag{Name: "max-hot-span", Value: 90 * 24 * time.Hour, Usage: "roll rather than let a hot bucket span longer than this", EnvVars: envVars("max-hot-span")},
			&cli.IntFlag{Name: "max-hot-buckets", Value: 3, Usage: "hot buckets per index at most, besides its quarantine bucket", EnvVars: envVars("max-hot-buckets")},
			&cli.IntFlag{Name: "max-hot-buckets-total", Value: store.DefaultMaxHotBucketsTotal, Usage: "hot buckets this peer holds over all indexes at most (each keeps a journal descriptor and its index in memory); a new one past it rolls the least recently written first", EnvVars: envVars("max-hot-buckets-total")},
			&cli.DurationFlag{Name: "max-hot-idle", Value: store.DefaultMaxHotIdle, Usage: "roll a hot bucket that received no event for this long (Splunk's maxHotIdleSecs); 0: never", EnvVars: envVars("max-hot-idle")},
			&cli.IntFlag{Name: "max-indexes", Value: store.DefaultMaxIndexes, Usage: "indexes this peer holds at most before it refuses a new undeclared one (HEC 400 code 7); indexes a token or the cluster config names are always accepted; 0: no cap", EnvVars: envVars("max-indexes")},
			&cli.DurationFlag{Name: "quarantine-past", Value: 900 * 24 * time.Hour, Usage: "events older than this (by the peer's clock) go to the index's quarantine bucket; 0: never", EnvVars: envVars("quarantine-past")},
			&cli.DurationFlag{Name: "quarantine-future", Value: 30 * 24 * time.Hour, Usage: "events further ahead than this go to the index's quarantine bucket; 0: never", EnvVars: envVars("quarantine-future")},
			&cli.DurationFlag{Name: "search-timeout", Value: peer.DefaultSearchTimeout, Usage: "time limit of a search sent to this peer's own POST /v1/search (504 past it)", EnvVars: envVars("search-timeout")},
			&cli.IntFlag{Name: "max-results", Value: peer.DefaultMaxResults, Usage: "most result rows of a search sent to this peer's own POST /v1/search (a warning says when it cut)", EnvVars: envVars("max-results")},
			&cli.Int64Flag{Name: "search-memory", Value: query.DefaultSearchMemory, Usage: "one search's memory budget on this peer, in bytes: the partial results it holds before sending or merging them; past it the search ends with limit_exceeded (HTTP 400)", EnvVars: envVars("search-memory")},
			&cli.IntFlag{Name: "max-searches", Value: peer.DefaultMaxSearches, Usage: "searches this peer's own POST /v1/search runs at once (more get 429 with Retry-After)", EnvVars: envVars("max-searches")},
			&cli.IntFlag{Name: "max-open-files", Usage: "descriptors kept open for reading bucket files (0: half of RLIMIT_NOFILE, 16 to 4096)", EnvVars: envVars("max-open-files")},
			&cli.DurationFlag{Name: "idempotency-window", Value: 24 * time.Hour, Usage: "a HEC request whose Idempotency-Key its token used this recently is answered, not stored again", EnvVars: envVars("idempotency-window")},
		},
		Subcommands: peerAdminSubcommands(),
		Action:      runPeer,
	}
}

func runPeer(c *cli.Context) error {
	cfg, err := peerConfig(c)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	p, err := peer.Start(cfg)
	if err != nil {
		return err
	}
	mode := "standalone"
	if cfg.NATS != "" {
		mode = "cluster member"
	}
	fmt.Printf("peer %s (guid %s, %s) listening on %s://%s\n", cfg.ID, p.GUID(), mode, cfg.TLS.Scheme(), p.Addr())
	select {
	case s := <-sig:
		cfg.Logger.Info("stopping", "signal", s.String())
	case err := <-p.Done():
		cfg.Logger.Error("http server stopped", "err", err)
	case <-p.TakenOffline():
		cfg.Logger.Info("taken offline by the managers; stopping")
	}
	return p.Close()
}

// peerConfig turns the flags into a peer.Config, secrets read from their
// files (--admin-token-file, --hec-token-file, …).
func peerConfig(c *cli.Context) (peer.Config, error) {
	cfg := peer.Config{
		ID: c.String("id"), Site: c.String("site"), DataDir: c.String("data-dir"), HTTPAddr: c.String("http-addr"),
		Searchable: c.Bool("searchable"), MaxHotBytes: c.Int64("max-hot-bytes"), MaxHotSpan: c.Duration("max-hot-span"),
		MaxHotBuckets: c.Int("max-hot-buckets"), Attrs: map[string]string{}, Pprof: c.Bool("pprof"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		NATS:   c.String("nats"), TargetTimeout: c.Duration("target-timeout"), NATSUser: c.String("nats-user"),
		SearchTimeout: c.Duration("search-timeout"), MaxResults: c.Int("max-results"), MaxSearches: c.Int("max-searches"),
		SearchMemory: c.Int64("search-memory"),
	}
	if cfg.SearchMemory < 1<<20 {
		return peer.Config{}, fmt.Errorf("peer: --search-memory %d: at least 1 MiB (1048576 bytes)", cfg.SearchMemory)
	}
	if cfg.SearchTimeout <= 0 || cfg.MaxResults <= 0 || cfg.MaxSearches <= 0 {
		return peer.Config{}, fmt.Errorf("peer: --search-timeout %s, --max-results %d, --max-searches %d: each must be positive", cfg.SearchTimeout, cfg.MaxResults, cfg.MaxSearches)
	}
	fail := func(err error) (peer.Config, error) { return peer.Config{}, fmt.Errorf("peer: %w", err) }
	if cfg.IdempotencyWindow = c.Duration("idempotency-window"); cfg.IdempotencyWindow <= 0 {
		return fail(fmt.Errorf("--idempotency-window %v: want a positive duration", cfg.IdempotencyWindow))
	}
	if err := peerLimits(c, &cfg); err != nil {
		return fail(err)
	}
	if cfg.MaxOpenFiles = c.Int("max-open-files"); cfg.MaxOpenFiles < 0 {
		return fail(fmt.Errorf("--max-open-files %d: want 0 (derived from RLIMIT_NOFILE) or a positive count", cfg.MaxOpenFiles))
	}
	// 0 on the command line turns a side of the quarantine off (the store
	// reads 0 as its default and a negative duration as off).
	cfg.QuarantinePast, cfg.QuarantineFuture = c.Duration("quarantine-past"), c.Duration("quarantine-future")
	for _, d := range []*time.Duration{&cfg.QuarantinePast, &cfg.QuarantineFuture} {
		if *d <= 0 {
			*d = -1
		}
	}
	cfg.TLS = tlsFiles(c)
	var err error
	for _, s := range []struct {
		name string
		dst  *string
	}{{"token", &cfg.ManagerToken}, {"nats-password", &cfg.NATSPassword}, {"admin-token", &cfg.AdminToken}} {
		if *s.dst, err = secretValue(c, s.name); err != nil {
			return fail(err)
		}
	}
	searchTokens, err := secretValues(c, "search-token", c.Generic("search-token").(*repeatable).values)
	if err != nil {
		return fail(err)
	}
	for _, v := range searchTokens {
		t, err := parseSearchToken(v)
		if err != nil {
			return fail(err)
		}
		cfg.SearchTokens = append(cfg.SearchTokens, t)
	}
	if cfg.NATS != "" && (len(cfg.SearchTokens) > 0 || cfg.AdminToken != "") {
		return peer.Config{}, errors.New("peer: in cluster mode (--nats) search tokens come from the managers and the admin token is --token; drop --search-token/--admin-token")
	}
	for _, a := range c.Generic("attr").(*repeatable).values {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return peer.Config{}, fmt.Errorf("peer: --attr %q: want key=value", a)
		}
		cfg.Attrs[k] = v
	}
	tokens, err := secretValues(c, "hec-token", c.Generic("hec-token").(*repeatable).values)
	if err != nil {
		return fail(err)
	}
	if cfg.NATS != "" && len(tokens) > 0 {
		return peer.Config{}, errors.New("peer: in cluster mode (--nats) HEC tokens come from the managers; drop --hec-token")
	}
	if len(tokens) == 0 && cfg.NATS == "" {
		return peer.Config{}, errors.New("peer: a standalone peer needs at least one --hec-token (or --hec-token-file)")
	}
	if dir := c.String("bundle"); dir != "" {
		if cfg.NATS != "" {
			return peer.Config{}, errors.New("peer: in cluster mode (--nats) the managers push the configuration bundle (quarry cluster bundle apply DIR); drop --bundle")
		}
		files, err := knowledge.LoadDir(dir)
		if err != nil {
			return fail(err)
		}
		if cfg.Bundle, err = knowledge.ParseIndexRules(files); err != nil {
			return fail(fmt.Errorf("--bundle %s: %w", dir, err))
		}
	}
	if dir := c.String("knowledge"); dir != "" {
		if cfg.NATS != "" {
			return peer.Config{}, errors.New("peer: in cluster mode (--nats) each search brings its search head's knowledge bundle; drop --knowledge")
		}
		files, err := knowledge.LoadKnowledgeDir(dir)
		if err != nil {
			return fail(err)
		}
		b, err := knowledge.ParseSearchBundle(files)
		if err == nil {
			cfg.Knowledge, err = query.CompileKnowledge(b)
		}
		if err != nil {
			return fail(fmt.Errorf("--knowledge %s: %w", dir, err))
		}
	}
	for _, s := range tokens {
		t, err := hec.ParseTokenFlag(s)
		if err != nil {
			return fail(err)
		}
		cfg.Tokens = append(cfg.Tokens, t)
	}
	return cfg, nil
}

// peerLimits reads the peer-wide ingest limits (store/hotcap.go): 0 turns
// --max-hot-idle and --max-indexes off (the store reads 0 as its default
// and a negative value as off); a negative value is refused.
func peerLimits(c *cli.Context, cfg *peer.Config) error {
	cfg.MaxHotBucketsTotal, cfg.MaxHotIdle, cfg.MaxIndexes = c.Int("max-hot-buckets-total"), c.Duration("max-hot-idle"), c.Int("max-indexes")
	if cfg.MaxHotBucketsTotal < 1 {
		return fmt.Errorf("--max-hot-buckets-total %d: want a positive count", cfg.MaxHotBucketsTotal)
	}
	if cfg.MaxHotIdle < 0 || cfg.MaxIndexes < 0 {
		return fmt.Errorf("--max-hot-idle %v, --max-indexes %d: want 0 (off) or a positive value", cfg.MaxHotIdle, cfg.MaxIndexes)
	}
	if cfg.MaxHotIdle == 0 {
		cfg.MaxHotIdle = -1
	}
	if cfg.MaxIndexes == 0 {
		cfg.MaxIndexes = -1
	}
	return nil
}

// ingestCommand is the HEC client (SPEC §8): batches of --batch events, N
// concurrent streams each with its own channel, acks, retries on the same
// channel, a progress bar on stderr.
func ingestCommand() *cli.Command {
	return &cli.Command{
		Name:      "ingest",
		Usage:     "send files to a HEC endpoint (envelope files to /event, other files line by line to /raw)",
		ArgsUsage: "FILE…",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "hec", Usage: "HEC base URL, e.g. http://127.0.0.1:8088", EnvVars: envVars("hec")},
			&cli.StringFlag{Name: "token", Usage: "HEC token", EnvVars: roleTokenEnv("hec")},
			secretFileFlag("token", "the HEC token"),
			&cli.StringFlag{Name: "index", Usage: "index of events that name none", EnvVars: envVars("index")},
			&cli.StringFlag{Name: "sourcetype", Usage: "sourcetype of events that name none", EnvVars: envVars("sourcetype")},
			&cli.StringFlag{Name: "host", Usage: "host of events that name none", EnvVars: envVars("host")},
			&cli.StringFlag{Name: "source", Usage: "source of events that name none", EnvVars: envVars("source")},
			&cli.IntFlag{Name: "streams", Value: 1, Usage: "concurrent streams (channels)", EnvVars: envVars("streams")},
			&cli.IntFlag{Name: "batch", Value: 1000, Usage: "events per request", EnvVars: envVars("batch")},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress bar", EnvVars: envVars("quiet")},
			tlsCAFlag(),
		},
		Action: func(c *cli.Context) error {
			files, err := trailingFlags(c)
			if err != nil {
				return err
			}
			if len(files) == 0 {
				return errors.New("ingest: name at least one FILE")
			}
			token, err := secretValue(c, "token")
			if err != nil {
				return fmt.Errorf("ingest: %w", err)
			}
			// Checked here, not with Required: flags may follow the files.
			if c.String("hec") == "" || token == "" {
				return errors.New("ingest: need --hec URL and --token T (or --token-file, QUARRY_HEC, QUARRY_TOKEN)")
			}
			cfg := hec.ClientConfig{URL: c.String("hec"), Token: token, Index: c.String("index"),
				Sourcetype: c.String("sourcetype"), Host: c.String("host"), Source: c.String("source"),
				Streams: c.Int("streams"), Batch: c.Int("batch")}
			if !c.Bool("quiet") {
				cfg.Progress = os.Stderr
			}
			if cfg.TLS, err = tlsClientConfig(c); err != nil {
				return fmt.Errorf("ingest: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			res, err := hec.Ingest(ctx, cfg, files)
			if err != nil {
				return fmt.Errorf("ingest: %w (%d events acknowledged)", err, res.Events)
			}
			secs := res.Elapsed.Seconds()
			fmt.Printf("ingested %d events (%.1f MB) in %.2fs: %.0f events/s, %.1f MB/s, %d requests, %d retries\n",
				res.Events, float64(res.Bytes)/1e6, secs, float64(res.Events)/secs, float64(res.Bytes)/1e6/secs, res.Requests, res.Retries)
			return nil
		},
	}
}
