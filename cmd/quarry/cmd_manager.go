package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
)

// managerCommand is `quarry manager`: one member of the Raft group of
// managers (SPEC §8). Config flags seed the cluster config at bootstrap
// only; later changes go through the admin API.
func managerCommand() *cli.Command {
	def := fsm.DefaultConfig()
	hecTokens := &repeatable{}
	searchTokens := &repeatable{}
	return &cli.Command{
		Name:  "manager",
		Usage: "run a manager: a member of the Raft group that owns the cluster state",
		Description: `Starts a manager. With no Raft state in --data-dir it bootstraps the group from
--bootstrap (every initial member, itself included, same list on each) or joins a
running group through --join (any manager's HTTP URL; it redirects to the leader).
With existing state it restarts from the data directory and ignores both.

The cluster config flags (--sites … --index) seed the config the first leader
commits after bootstrap; they are ignored on later starts and on joining managers.

Quorum lost for good (README "Quorum loss"): stop the survivors, run
'quarry manager recover --id … --data-dir … --members m1=host:port,…' on each (the
same member list everywhere), start them again. Every manager's data lost: start
fresh managers, let the peers re-register, then 'quarry manager rebuild'.`,
		Subcommands: managerSubcommands(),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Usage: "manager id, unique in the group (the Raft server id)", EnvVars: envVars("id")},
			&cli.StringFlag{Name: "site", Usage: "the failure domain this manager lives in", Value: "site1", EnvVars: envVars("site")},
			&cli.StringFlag{Name: "data-dir", Usage: "directory of the Raft log, stable store and snapshots", EnvVars: envVars("data-dir")},
			&cli.StringFlag{Name: "raft-addr", Usage: "host:port of the Raft transport (bound and advertised)", Value: "127.0.0.1:7001", EnvVars: envVars("raft-addr")},
			&cli.StringFlag{Name: "http-addr", Usage: "host:port of the admin HTTP API and cluster page", Value: "127.0.0.1:8001", EnvVars: envVars("http-addr")},
			&cli.StringFlag{Name: "nats", Usage: "NATS `URL[,URL…]` of the bus; while leader the manager serves the peers' protocol there (registration, heartbeats, targets, bucket events, fixup delivery). Empty: HTTP API only (or the embedded node of --nats-listen)", EnvVars: envVars("nats")},
			&cli.StringFlag{Name: "admin-token", Usage: "bearer token every write to the manager API, and GET /v1/config, must carry", EnvVars: envVars("admin-token")},
			secretFileFlag("admin-token", "the admin token"),
			&cli.StringFlag{Name: "read-token", Usage: "bearer token every read of the manager API (status, generation, peers, buckets, indexes, fixups, managers, /metrics) must carry, or the admin token; /healthz and the cluster page's files stay open. Empty: reads are open (SPEC §7)", EnvVars: envVars("read-token")},
			secretFileFlag("read-token", "the read token"),
			&cli.StringFlag{Name: "bootstrap", Usage: "initial members `m1=host:port,m2=…` (Raft addresses); used only when the data dir has no state", EnvVars: envVars("bootstrap")},
			&cli.StringFlag{Name: "join", Usage: "HTTP `URL` of any running manager to join through; used only when the data dir has no state", EnvVars: envVars("join")},
			&cli.StringFlag{Name: "sites", Usage: "multisite: the sites, `site1,site2`; empty means single-site", EnvVars: envVars("sites")},
			&cli.StringFlag{Name: "site-replication-factor", Usage: "multisite replication policy in Splunk's syntax", Value: def.SiteReplicationFactor.String(), EnvVars: envVars("site-replication-factor")},
			&cli.StringFlag{Name: "site-search-factor", Usage: "multisite search policy in Splunk's syntax", Value: def.SiteSearchFactor.String(), EnvVars: envVars("site-search-factor")},
			&cli.IntFlag{Name: "replication-factor", Usage: "single-site replication factor", Value: def.ReplicationFactor, EnvVars: envVars("replication-factor")},
			&cli.IntFlag{Name: "search-factor", Usage: "single-site search factor", Value: def.SearchFactor, EnvVars: envVars("search-factor")},
			&cli.DurationFlag{Name: "heartbeat-timeout", Usage: "a peer not heard from for this long is declared Down", Value: def.HeartbeatTimeout, EnvVars: envVars("heartbeat-timeout")},
			&cli.GenericFlag{Name: "hec-token", Usage: "HEC token `T[=index,…][:useack=false]` (repeatable; the first index is its default; no index: any); acknowledging unless :useack=false (then no channel, and the 200 waits until the events are durable); :allowquerystringauth=true accepts ?token=. From the environment: entries separated by spaces or ';'", Value: hecTokens, EnvVars: envVars("hec-token")},
			secretListFileFlag("hec-token", "the HEC tokens"),
			&cli.GenericFlag{Name: "search-token", Usage: "search token `T[=index,…]` (repeatable; no index: every index) for search heads and peers' /v1/search", Value: searchTokens, EnvVars: envVars("search-token")},
			secretListFileFlag("search-token", "the search tokens"),
			&cli.StringSliceFlag{Name: "index", Usage: "declare an index (repeatable)", EnvVars: envVars("index")},
			// Not in SPEC §8 (named in manager/DESIGN.md, "NATS service").
			&cli.StringFlag{Name: "nats-user", Usage: "NATS user (a manager-role user of the bus)", EnvVars: envVars("nats-user")},
			&cli.StringFlag{Name: "nats-password", Usage: "password of --nats-user", EnvVars: envVars("nats-password")},
			secretFileFlag("nats-password", "the NATS password"),
			&cli.StringFlag{Name: "nats-listen", Usage: "embed one NATS node (single node, site --site) listening on `host:port` and connect to it when --nats is empty; --nats-user/--nats-password become its admin credentials", EnvVars: envVars("nats-listen")},
			&cli.StringSliceFlag{Name: "role-user", Usage: "with --nats-listen: a per-role user of the embedded node, ROLE=NAME:PASSWORD as `quarry bus --role-user` takes it (peers, search heads and subscribers then connect each as its own user; needs --nats-user; repeat)", EnvVars: envVars("role-user")},
			secretListFileFlag("role-user", "the embedded node's per-role users"),
			&cli.StringFlag{Name: "subject-prefix", Value: bus.DefaultPrefix, Usage: "first token of every quarry subject", EnvVars: envVars("subject-prefix")},
			&cli.DurationFlag{Name: "nats-connect-timeout", Value: bus.DefaultConnectTimeout, Usage: "how long the first connection to --nats may take before the start fails", EnvVars: envVars("nats-connect-timeout")},
			&cli.DurationFlag{Name: "target-timeout", Value: manager.DefaultTargetTimeout, Usage: "pushed to peers: a replication target that has not acked within it leaves the set", EnvVars: envVars("target-timeout")},
			detentionFreeBytesFlag(), detentionHysteresisBytesFlag(),
			// Tuning, not in SPEC §8: named in manager/DESIGN.md.
			&cli.Uint64Flag{Name: "raft-snapshot-threshold", Usage: "Raft entries between snapshots; also the entries kept behind one (0: hashicorp/raft's 8192 and 10240)", EnvVars: envVars("raft-snapshot-threshold")},
			&cli.DurationFlag{Name: "raft-snapshot-interval", Usage: "how often Raft checks the snapshot threshold (0: 120s)", EnvVars: envVars("raft-snapshot-interval")},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: "info", EnvVars: envVars("log-level")},
			tlsCertFlag(), tlsKeyFlag(), tlsCAFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("manager: unexpected arguments %q", c.Args().Slice())
			}
			cfg, err := managerConfig(c, hecTokens.values)
			if err != nil {
				return err
			}
			users, err := embeddedBusUsers(c, cfg)
			if err != nil {
				return err
			}
			return runManager(cfg, c.String("nats-listen"), users)
		},
	}
}

// managerConfig turns the flags into a manager.Config, refusing a cluster
// config that cannot be met with one clear line.
func managerConfig(c *cli.Context, hecTokens []string) (manager.Config, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return manager.Config{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	bootstrap, err := manager.ParseBootstrap(c.String("bootstrap"))
	if err != nil {
		return manager.Config{}, err
	}
	adminToken, err := secretValue(c, "admin-token")
	if err != nil {
		return manager.Config{}, err
	}
	readToken, err := secretValue(c, "read-token")
	if err != nil {
		return manager.Config{}, err
	}
	natsPassword, err := secretValue(c, "nats-password")
	if err != nil {
		return manager.Config{}, err
	}
	if hecTokens, err = secretValues(c, "hec-token", hecTokens); err != nil {
		return manager.Config{}, err
	}
	seed, err := seedConfig(c, hecTokens)
	if err != nil {
		return manager.Config{}, err
	}
	seedPtr := &seed
	if c.String("join") != "" {
		seedPtr = nil // a joining manager takes the group's config
	}
	th := c.Uint64("raft-snapshot-threshold")
	raftLevel := "info"
	if level > slog.LevelInfo {
		raftLevel = "warn"
	}
	return manager.Config{
		ID: c.String("id"), Site: c.String("site"), DataDir: c.String("data-dir"),
		RaftAddr: c.String("raft-addr"), HTTPAddr: c.String("http-addr"), NATS: c.String("nats"),
		NATSUser: c.String("nats-user"), NATSPassword: natsPassword, NATSPrefix: c.String("subject-prefix"),
		NATSConnectTimeout: c.Duration("nats-connect-timeout"), TargetTimeout: c.Duration("target-timeout"),
		DetentionFreeBytes: c.Int64("detention-free-bytes"), DetentionHysteresisBytes: c.Int64("detention-hysteresis-bytes"),
		AdminToken: adminToken, ReadToken: readToken, Bootstrap: bootstrap, Join: c.String("join"),
		Seed:              seedPtr,
		SnapshotThreshold: th, TrailingLogs: th,
		SnapshotInterval: c.Duration("raft-snapshot-interval"),
		RaftLogLevel:     raftLevel,
		Logger:           logger,
		TLS:              tlsFiles(c),
	}, nil
}

// seedConfig starts from fsm.DefaultConfig and overrides what the flags set.
func seedConfig(c *cli.Context, hecTokens []string) (fsm.Config, error) {
	cfg := fsm.DefaultConfig()
	if c.IsSet("replication-factor") {
		cfg.ReplicationFactor = c.Int("replication-factor")
	}
	if c.IsSet("search-factor") {
		cfg.SearchFactor = c.Int("search-factor")
	}
	if s := strings.TrimSpace(c.String("sites")); s != "" {
		cfg.Sites = nil
		for _, site := range strings.Split(s, ",") {
			cfg.Sites = append(cfg.Sites, strings.TrimSpace(site))
		}
	}
	for _, f := range []struct {
		name string
		dst  *fsm.Policy
	}{{"site-replication-factor", &cfg.SiteReplicationFactor}, {"site-search-factor", &cfg.SiteSearchFactor}} {
		if !c.IsSet(f.name) {
			continue
		}
		p, err := fsm.ParsePolicy(c.String(f.name))
		if err != nil {
			return cfg, fmt.Errorf("--%s: %w", f.name, err)
		}
		*f.dst = p
	}
	if c.IsSet("heartbeat-timeout") {
		cfg.HeartbeatTimeout = c.Duration("heartbeat-timeout")
	}
	for _, name := range c.StringSlice("index") {
		name = strings.TrimSpace(name)
		if name == "" || hasIndex(cfg.Indexes, name) {
			continue
		}
		cfg.Indexes = append(cfg.Indexes, fsm.IndexConfig{Name: name})
	}
	for _, v := range hecTokens {
		tok, err := fsm.ParseHECToken(v)
		if err != nil {
			return cfg, err
		}
		cfg.HECTokens = append(cfg.HECTokens, tok)
	}
	if st, ok := c.Generic("search-token").(*repeatable); ok && st != nil {
		values, err := secretValues(c, "search-token", st.values)
		if err != nil {
			return cfg, err
		}
		for _, v := range values {
			tok, err := parseSearchToken(v)
			if err != nil {
				return cfg, err
			}
			cfg.SearchTokens = append(cfg.SearchTokens, tok)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("cluster config refused: %w", err)
	}
	return cfg, nil
}

func hasIndex(list []fsm.IndexConfig, name string) bool {
	for _, ix := range list {
		if ix.Name == name {
			return true
		}
	}
	return false
}

// runManager runs a manager until SIGTERM or SIGINT, then closes it.
// embeddedBusUsers reads --role-user (and its file) for the node of
// --nats-listen: refused without --nats-listen (it would configure
// nothing) and without --nats-user (the manager needs a user of its own on
// a node with users).
func embeddedBusUsers(c *cli.Context, cfg manager.Config) ([]bus.User, error) {
	vals, err := secretValues(c, "role-user", c.StringSlice("role-user"))
	if err != nil || len(vals) == 0 {
		return nil, err
	}
	if c.String("nats-listen") == "" {
		return nil, errors.New("manager: --role-user sets the users of the embedded NATS node: it needs --nats-listen")
	}
	if cfg.NATSUser == "" {
		return nil, errors.New("manager: --role-user needs --nats-user/--nats-password: the manager's own user of the embedded node (its admin)")
	}
	users := make([]bus.User, 0, len(vals))
	for _, v := range vals {
		u, err := bus.ParseRoleUser(v)
		if err != nil {
			return nil, fmt.Errorf("manager: --role-user: %w", err)
		}
		users = append(users, u)
	}
	return users, nil
}

// startEmbeddedBus starts the NATS node of --nats-listen: site --site,
// --nats-user/--nats-password as its admin, users as its role users.
func startEmbeddedBus(ctx context.Context, cfg manager.Config, listen string, users []bus.User) (*bus.Server, error) {
	subjects, err := bus.NewSubjects(cfg.NATSPrefix)
	if err != nil {
		return nil, err
	}
	site := cfg.Site
	if site == "" {
		site = "site1"
	}
	sctx, cancel := context.WithTimeout(ctx, bus.DefaultReadyTimeout)
	defer cancel()
	srv, err := bus.StartServer(sctx, bus.ServerConfig{Name: "manager-" + cfg.ID, Site: site, Listen: listen,
		User: cfg.NATSUser, Password: cfg.NATSPassword, Users: users, Subjects: subjects, Logger: cfg.Logger.With("role", "bus"),
		TLSCert: cfg.TLS.Cert, TLSKey: cfg.TLS.Key, TLSCA: cfg.TLS.CA})
	if err != nil {
		return nil, fmt.Errorf("manager: embedded NATS on %s: %w", listen, err)
	}
	return srv, nil
}

func runManager(cfg manager.Config, natsListen string, users []bus.User) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if natsListen != "" {
		srv, err := startEmbeddedBus(ctx, cfg, natsListen, users)
		if err != nil {
			return err
		}
		// Stopped after the manager (deferred first, runs last).
		defer srv.Shutdown()
		if cfg.NATS == "" {
			cfg.NATS = srv.ClientURL()
		}
		fmt.Fprintf(os.Stderr, "quarry manager %s: embedded NATS %s\n", cfg.ID, srv.ClientURL())
	}
	m, err := manager.New(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "quarry manager %s: raft %s, http %s://%s\n", m.ID(), m.RaftAddr(), cfg.TLS.Scheme(), m.HTTPAddr())
	<-ctx.Done()
	cfg.Logger.Info("signal received; shutting down")
	return m.Close()
}

// ---- admin commands -------------------------------------------------------

// adminFlags are the flags of every admin command.
func adminFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "manager", Usage: "manager HTTP `URL[,URL…]`, tried in turn", Value: "http://127.0.0.1:8001", EnvVars: envVars("manager")},
		&cli.StringFlag{Name: "token", Usage: "admin token (needed for writes and GET /v1/config)", EnvVars: roleTokenEnv("admin")},
		secretFileFlag("token", "the admin token"),
		&cli.StringFlag{Name: "output", Usage: "table or json", Value: "table", EnvVars: envVars("output")},
		&cli.DurationFlag{Name: "timeout", Usage: "timeout of each call to a manager", Value: manager.DefaultClientTimeout, EnvVars: envVars("timeout")},
		tlsCAFlag(),
	}
}

// adminAction wraps an admin command: trailing flags (after positional
// arguments) are parsed too, --output is checked, and a client is built.
func adminAction(nargs int, usage string, fn func(c *cli.Context, cl *manager.Client, args []string, out string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		args, err := trailingFlags(c)
		if err != nil {
			return err
		}
		if len(args) != nargs {
			return fmt.Errorf("%s: want %s", c.Command.FullName(), usage)
		}
		out := c.String("output")
		if out != "table" && out != "json" {
			return fmt.Errorf("--output %q: want table or json", out)
		}
		token, err := secretValue(c, "token")
		if err != nil {
			return fmt.Errorf("%s: %w", c.Command.FullName(), err)
		}
		cl, err := manager.NewClient(strings.Split(c.String("manager"), ","), token, c.Duration("timeout"))
		if err != nil {
			return err
		}
		tlsCfg, err := tlsClientConfig(c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Command.FullName(), err)
		}
		cl.UseTLS(tlsCfg)
		return fn(c, cl, args, out)
	}
}

func callCtx(c *cli.Context) (context.Context, context.CancelFunc) {
	// Each call has its own timeout; this bounds the whole command (it may
	// try several managers).
	return context.WithTimeout(c.Context, 4*c.Duration("timeout"))
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func clusterCommand() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "cluster-wide views",
		Subcommands: []*cli.Command{{
			Name:  "status",
			Usage: "leader, generation, config, valid/complete per site, RF/SF met, peers, pending fixups",
			Flags: adminFlags(),
			Action: adminAction(0, "no arguments", func(c *cli.Context, cl *manager.Client, _ []string, out string) error {
				ctx, cancel := callCtx(c)
				defer cancel()
				st, err := cl.Status(ctx)
				if err != nil {
					return fmt.Errorf("cluster status: %w", err)
				}
				mg, err := cl.Managers(ctx)
				if err != nil {
					return fmt.Errorf("cluster status: %w", err)
				}
				if out == "json" {
					return printJSON(struct {
						fsm.Status
						Managers []manager.ManagerView `json:"managers"`
					}{st, mg.Managers})
				}
				return printStatus(os.Stdout, st, mg)
			}),
		}, bundleCommand()},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// printStatus prints `cluster status` for people, like Splunk's
// `show cluster-status`.
func printStatus(w io.Writer, st fsm.Status, mg manager.ManagersView) error {
	leader := st.Leader
	if leader == "" {
		leader = "(none: no quorum or election under way)"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "leader\t%s\n", leader)
	fmt.Fprintf(tw, "generation\t%d\n", st.Generation)
	fmt.Fprintf(tw, "maintenance\t%s\n", yesNo(st.Maintenance))
	fmt.Fprintf(tw, "valid\t%s\n", yesNo(st.Valid))
	fmt.Fprintf(tw, "complete\t%s\n", yesNo(st.Complete))
	fmt.Fprintf(tw, "replication factor met\t%s\n", yesNo(st.ReplicationFactorMet))
	fmt.Fprintf(tw, "search factor met\t%s\n", yesNo(st.SearchFactorMet))
	fmt.Fprintf(tw, "config\t%s\n", describeConfig(st.Config))
	tw.Flush()

	fmt.Fprintln(w, "\nSITES")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tVALID\tCOMPLETE\tINVALID BUCKETS\tINCOMPLETE BUCKETS")
	names := make([]string, 0, len(st.Sites))
	for n := range st.Sites {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := st.Sites[n]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", n, yesNo(s.Valid), yesNo(s.Complete), len(s.InvalidBuckets), len(s.IncompleteBuckets))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nMANAGERS")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSITE\tRAFT\tHTTP\tROLE")
	for _, m := range mg.Managers {
		role := "follower"
		if m.Leader {
			role = "leader"
		}
		if !m.Voter {
			role += " (non-voter)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Site, m.RaftAddr, m.HTTPAddr, role)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nPEERS")
	printPeerTable(w, st.Peers)

	fmt.Fprintln(w, "\nPENDING FIXUPS")
	if len(st.Fixups) == 0 {
		fmt.Fprintln(w, "none")
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUCKET\tLEVEL\tREASON\tTASK")
	for _, f := range st.Fixups {
		task := "-"
		if f.Task != 0 {
			task = strconv.FormatUint(f.Task, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Bucket, f.Level, f.Reason, task)
	}
	return tw.Flush()
}

func describeConfig(c fsm.Config) string {
	var parts []string
	if c.Multisite() {
		parts = append(parts, "sites="+strings.Join(c.Sites, ","),
			"site_replication_factor="+c.SiteReplicationFactor.String(),
			"site_search_factor="+c.SiteSearchFactor.String())
	} else {
		parts = append(parts, fmt.Sprintf("replication_factor=%d", c.ReplicationFactor), fmt.Sprintf("search_factor=%d", c.SearchFactor))
	}
	parts = append(parts, "heartbeat_timeout="+c.HeartbeatTimeout.String())
	var idx []string
	for _, ix := range c.Indexes {
		idx = append(idx, ix.Name)
	}
	parts = append(parts, "indexes="+strings.Join(idx, ","), fmt.Sprintf("hec_tokens=%d", len(c.HECTokens)))
	return strings.Join(parts, " ")
}

func printPeerTable(w io.Writer, peers []fsm.PeerStatus) {
	if len(peers) == 0 {
		fmt.Fprintln(w, "no peers registered")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tSITE\tSTATE\tBUCKETS\tPRIMARIES\tSEARCHABLE")
	for _, p := range peers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", p.ID, p.Site, p.State, p.Buckets, p.Primaries, p.Searchable)
	}
	tw.Flush()
}

func peersCommand() *cli.Command {
	return &cli.Command{
		Name:  "peers",
		Usage: "indexer peers as the managers know them",
		Subcommands: []*cli.Command{{
			Name:  "list",
			Usage: "every peer: site, state, buckets, primaries",
			Flags: adminFlags(),
			Action: adminAction(0, "no arguments", func(c *cli.Context, cl *manager.Client, _ []string, out string) error {
				ctx, cancel := callCtx(c)
				defer cancel()
				peers, err := cl.Peers(ctx)
				if err != nil {
					return fmt.Errorf("peers list: %w", err)
				}
				if out == "json" {
					if peers == nil {
						peers = []fsm.PeerView{}
					}
					return printJSON(map[string]any{"peers": peers})
				}
				if len(peers) == 0 {
					fmt.Println("no peers registered")
					return nil
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PEER\tSITE\tSTATE\tBUCKETS\tPRIMARIES\tSEARCHABLE\tHOST\tGUID")
				for _, p := range peers {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", p.ID, p.Site, p.State, p.Buckets, p.Primaries, p.Searchable, p.Host, p.GUID)
				}
				return tw.Flush()
			}),
		}},
	}
}

func bucketsCommand() *cli.Command {
	return &cli.Command{
		Name:  "buckets",
		Usage: "buckets, their copies and primaries",
		Subcommands: []*cli.Command{{
			Name:  "list",
			Usage: "buckets [--index NAME] [--peer ID]: copies (* searchable), primary per site",
			Flags: append(adminFlags(),
				&cli.StringFlag{Name: "index", Usage: "only buckets of this index", EnvVars: envVars("index")},
				&cli.StringFlag{Name: "peer", Usage: "only buckets with a copy on this peer", EnvVars: envVars("peer")},
			),
			Action: adminAction(0, "no arguments", func(c *cli.Context, cl *manager.Client, _ []string, out string) error {
				ctx, cancel := callCtx(c)
				defer cancel()
				bs, err := cl.Buckets(ctx, c.String("index"), c.String("peer"))
				if err != nil {
					return fmt.Errorf("buckets list: %w", err)
				}
				if out == "json" {
					if bs == nil {
						bs = []fsm.BucketView{}
					}
					return printJSON(map[string]any{"buckets": bs})
				}
				if len(bs) == 0 {
					fmt.Println("no buckets")
					return nil
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "BUCKET\tINDEX\tORIGIN\tSTATE\tEVENTS\tBYTES\tCOPIES\tPRIMARIES")
				for _, b := range bs {
					state := "warm"
					if b.Hot {
						state = "hot"
					}
					var copies []string
					for _, cp := range b.Copies {
						s := cp.Peer
						if cp.Searchable {
							s += "*"
						}
						if cp.Corrupt {
							s += "!"
						}
						copies = append(copies, s)
					}
					sites := make([]string, 0, len(b.Primary))
					for s := range b.Primary {
						sites = append(sites, s)
					}
					sort.Strings(sites)
					var prim []string
					for _, s := range sites {
						prim = append(prim, s+"="+b.Primary[s])
					}
					// The managers learn a bucket's size when it rolls; a hot
					// bucket's live counts are on its peers (GET /v1/buckets).
					events, size := strconv.FormatInt(b.Events, 10), strconv.FormatInt(b.Size, 10)
					if b.Hot {
						events, size = "-", "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.ID, b.Index, b.Origin, state, events, size, strings.Join(copies, " "), strings.Join(prim, " "))
				}
				return tw.Flush()
			}),
		}},
	}
}

func maintenanceCommand() *cli.Command {
	set := func(on bool) cli.ActionFunc {
		return adminAction(0, "no arguments", func(c *cli.Context, cl *manager.Client, _ []string, out string) error {
			ctx, cancel := callCtx(c)
			defer cancel()
			if err := cl.SetMaintenance(ctx, on); err != nil {
				return fmt.Errorf("maintenance: %w", err)
			}
			if out == "json" {
				return printJSON(map[string]bool{"maintenance": on})
			}
			fmt.Printf("maintenance mode %s\n", map[bool]string{true: "enabled", false: "disabled"}[on])
			return nil
		})
	}
	return &cli.Command{
		Name:  "maintenance",
		Usage: "maintenance mode: only primary fixup runs (no replication, no make-searchable)",
		Subcommands: []*cli.Command{
			{Name: "enable", Usage: "turn maintenance mode on", Flags: adminFlags(), Action: set(true)},
			{Name: "disable", Usage: "turn maintenance mode off", Flags: adminFlags(), Action: set(false)},
			{Name: "status", Usage: "say whether maintenance mode is on", Flags: adminFlags(),
				Action: adminAction(0, "no arguments", func(c *cli.Context, cl *manager.Client, _ []string, out string) error {
					ctx, cancel := callCtx(c)
					defer cancel()
					st, err := cl.Status(ctx)
					if err != nil {
						return fmt.Errorf("maintenance status: %w", err)
					}
					if out == "json" {
						return printJSON(map[string]bool{"maintenance": st.Maintenance})
					}
					fmt.Printf("maintenance mode %s\n", map[bool]string{true: "enabled", false: "disabled"}[st.Maintenance])
					return nil
				})},
		},
	}
}

func rebalanceCommand() *cli.Command {
	return &cli.Command{
		Name:  "rebalance",
		Usage: "rebalance work across peers",
		Subcommands: []*cli.Command{{
			Name:  "primaries",
			Usage: "even out primaries per peer within each site (site0: across all peers)",
			Flags: adminFlags(),
			Action: adminAction(0, "no arguments", func(c *cli.Context, cl *manager.Client, _ []string, out string) error {
				ctx, cancel := callCtx(c)
				defer cancel()
				if err := cl.Rebalance(ctx); err != nil {
					return fmt.Errorf("rebalance primaries: %w", err)
				}
				if out == "json" {
					return printJSON(map[string]bool{"rebalanced": true})
				}
				fmt.Println("primaries rebalanced")
				return nil
			}),
		}},
	}
}

// peerAdminSubcommands are the admin subcommands of `quarry peer` (offline,
// detention); the manager's CLI owns them, the peer's command lists them.
func peerAdminSubcommands() []*cli.Command {
	return []*cli.Command{{
		Name:      "offline",
		Usage:     "take a peer offline: move its primaries first (--enforce-counts: also wait until RF/SF hold without it, then decommission)",
		ArgsUsage: "<id> [--enforce-counts]",
		Flags: append(adminFlags(),
			&cli.BoolFlag{Name: "enforce-counts", Usage: "decommission: keep RF/SF met without the peer before it goes"},
		),
		Action: adminAction(1, "one peer id", func(c *cli.Context, cl *manager.Client, args []string, out string) error {
			ctx, cancel := callCtx(c)
			defer cancel()
			enforce := c.Bool("enforce-counts")
			if err := cl.Offline(ctx, args[0], enforce); err != nil {
				var ae *manager.APIError
				if errors.As(err, &ae) && ae.Code == "unknown_peer" {
					return fmt.Errorf("peer offline %s: no such peer", args[0])
				}
				return fmt.Errorf("peer offline %s: %w", args[0], err)
			}
			if out == "json" {
				return printJSON(map[string]any{"peer": args[0], "enforce_counts": enforce})
			}
			if enforce {
				fmt.Printf("peer %s decommissioning: primaries moving; it is removed once every bucket meets RF/SF without it\n", args[0])
			} else {
				fmt.Printf("peer %s going offline: primaries moving; it may stop now (cluster stays valid, not complete)\n", args[0])
			}
			return nil
		}),
	}, peerDetentionCommand()}
}
