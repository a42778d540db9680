package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/bus"
)

// busCommand runs one NATS node of the quarry bus (SPEC §8): a single node,
// a node of a site's cluster (--cluster-listen, --routes), and/or a site's
// gateway to other sites (--gateway-listen, --gateways site2=nats://…).
// Beyond SPEC §8 it takes --gateway-advertise (the address other sites
// dial, for containers), --tls-cert/--tls-key/--tls-ca (SPEC §11: TLS on
// clients, monitoring, routes and gateways), --http-listen (nats-server
// monitoring, with /healthz for `quarry health`), --role-user (per-role users, SPEC §11;
// --password and --role-user also from files: --password-file,
// --role-user-file, secrets.go) and
// --subject-prefix (the prefix the role permissions are written for), and
// --print-auth-config, which prints those users and permissions as a
// nats-server authorization block for deployments on an external NATS.
func busCommand() *cli.Command {
	return &cli.Command{
		Name:  "bus",
		Usage: "run a NATS node of the quarry bus (embedded nats-server)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "server name, unique in the deployment", Required: true, EnvVars: envVars("name")},
			&cli.StringFlag{Name: "site", Usage: "site this node serves (its cluster and gateway name)", Required: true, EnvVars: envVars("site")},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:4222", Usage: "client address host:port (port 0: any free port)", EnvVars: envVars("listen")},
			&cli.StringFlag{Name: "cluster-listen", Usage: "route address host:port for the other nodes of this site", EnvVars: envVars("cluster-listen")},
			&cli.StringSliceFlag{Name: "routes", Usage: "route URLs of the other nodes of this site (nats-route://host:port)", EnvVars: envVars("routes")},
			&cli.StringFlag{Name: "gateway-listen", Usage: "gateway address host:port for other sites", EnvVars: envVars("gateway-listen")},
			&cli.StringFlag{Name: "gateway-advertise", Usage: "host:port other sites dial for this gateway (containers, NAT); default the listen address", EnvVars: envVars("gateway-advertise")},
			&cli.StringSliceFlag{Name: "gateways", Usage: "other sites' gateways, site=nats://host:port (repeat for more)", EnvVars: envVars("gateways")},
			&cli.StringFlag{Name: "user", Usage: "admin user: turns on authentication; routes and gateways use it too (with --role-user, routes and gateways need it or mutual TLS)", EnvVars: envVars("user")},
			&cli.StringFlag{Name: "password", Usage: "admin password", EnvVars: envVars("password")},
			secretFileFlag("password", "the admin password"),
			&cli.StringSliceFlag{Name: "role-user", Usage: "per-role user ROLE=NAME:PASSWORD, ROLE one of manager, peer, searchhead, subscriber (may only subscribe to results and generation notices, e.g. nats sub), admin, or peer/SITE/PEER for one peer and searchhead/HEAD for one search head (each then sends only under its own id, SPEC §6; repeat)", EnvVars: envVars("role-user")},
			secretListFileFlag("role-user", "the per-role users"),
			&cli.StringFlag{Name: "tls-cert", Usage: "PEM certificate `FILE`: every connection must use TLS — clients, monitoring (HTTPS), and routes and gateways (mutual TLS, needs --tls-ca)", EnvVars: envVars("tls-cert")},
			tlsKeyFlag(), tlsCAFlag(),
			&cli.StringFlag{Name: "http-listen", Usage: "monitoring address host:port (/healthz, /varz, /connz, /routez, /gatewayz)", EnvVars: envVars("http-listen")},
			&cli.StringFlag{Name: "subject-prefix", Value: bus.DefaultPrefix, Usage: "first token of every quarry subject", EnvVars: envVars("subject-prefix")},
			&cli.BoolFlag{Name: "print-auth-config", Usage: "print the users and role permissions as a nats-server authorization block (for an external NATS) and exit", EnvVars: envVars("print-auth-config")},
			&cli.DurationFlag{Name: "ready-timeout", Value: bus.DefaultReadyTimeout, Usage: "how long to wait for the server to accept connections", EnvVars: envVars("ready-timeout")},
		},
		Action: runBus,
	}
}

func runBus(c *cli.Context) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("role", "bus")
	subjects, err := bus.NewSubjects(c.String("subject-prefix"))
	if err != nil {
		return err
	}
	gateways, err := bus.ParseGateways(c.StringSlice("gateways"))
	if err != nil {
		return err
	}
	password, err := secretValue(c, "password")
	if err != nil {
		return err
	}
	roleUsers, err := secretValues(c, "role-user", c.StringSlice("role-user"))
	if err != nil {
		return err
	}
	var users []bus.User
	for _, v := range roleUsers {
		u, err := bus.ParseRoleUser(v)
		if err != nil {
			return err
		}
		users = append(users, u)
	}
	if c.Bool("print-auth-config") {
		conf, err := bus.AuthorizationConfig(subjects, c.String("user"), password, users)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(conf)
		return err
	}
	cfg := bus.ServerConfig{
		Name:             c.String("name"),
		Site:             c.String("site"),
		Listen:           c.String("listen"),
		ClusterListen:    c.String("cluster-listen"),
		Routes:           c.StringSlice("routes"),
		GatewayListen:    c.String("gateway-listen"),
		GatewayAdvertise: c.String("gateway-advertise"),
		Gateways:         gateways,
		HTTPListen:       c.String("http-listen"),
		TLSCert:          c.String("tls-cert"),
		TLSKey:           c.String("tls-key"),
		TLSCA:            c.String("tls-ca"),
		User:             c.String("user"),
		Password:         password,
		Users:            users,
		Subjects:         subjects,
		Logger:           log,
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	readyCtx, cancel := context.WithTimeout(ctx, c.Duration("ready-timeout"))
	srv, err := bus.StartServer(readyCtx, cfg)
	cancel()
	if err != nil {
		return err
	}
	log.Info("bus ready", "name", cfg.Name, "site", cfg.Site,
		"client_url", srv.ClientURL(), "cluster_url", srv.ClusterURL(),
		"gateway_url", srv.GatewayURL(), "monitor_url", srv.MonitorURL(),
		"auth", cfg.User != "" || len(users) > 0, "tls", cfg.TLSCert != "")
	<-ctx.Done()
	log.Info("bus shutting down", "name", cfg.Name)
	start := time.Now()
	srv.Shutdown()
	log.Info("bus stopped", "name", cfg.Name, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
