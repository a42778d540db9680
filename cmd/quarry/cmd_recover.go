package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/manager"
)

// managerSubcommands are `quarry manager recover` and `quarry manager
// rebuild`: the two quorum-loss procedures of README "Quorum loss" and
// manager/DESIGN.md, "Recovery after quorum loss".
func managerSubcommands() []*cli.Command {
	return []*cli.Command{managerRecoverCommand(), managerRebuildCommand()}
}

func managerRecoverCommand() *cli.Command {
	return &cli.Command{
		Name:  "recover",
		Usage: "after losing quorum for good: give a stopped manager the list of surviving members (DATA_DIR/raft/peers.json)",
		Description: `Run on each surviving manager, stopped, with the same --members everywhere
(every survivor, itself included: id=raft-host:port as in --bootstrap). It refuses,
changing nothing, when the data dir has no Raft state, when a running manager holds it
(bolt lock), when --members does not include --id, or when any manager of the group
(those the data dir's member table names, and --manager) reports a leader. Otherwise
it writes DATA_DIR/raft/peers.json; start the manager with its usual command: it applies
the list with hashicorp/raft's RecoverCluster (keeping every entry its log holds),
moves the file aside and, with the other survivors, elects a leader. Then add managers
with --join as usual.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Usage: "this manager's --id", EnvVars: envVars("id")},
			&cli.StringFlag{Name: "data-dir", Usage: "this manager's --data-dir (the manager must be stopped)", EnvVars: envVars("data-dir")},
			&cli.StringFlag{Name: "members", Usage: "the surviving members `m1=host:port,…` (Raft addresses), this one included", EnvVars: envVars("members")},
			&cli.StringFlag{Name: "manager", Usage: "more manager HTTP `URL[,URL…]` to ask for a leader (besides the member table's)", EnvVars: envVars("manager")},
			&cli.DurationFlag{Name: "timeout", Usage: "timeout of each leader check and of the wait for the data dir's lock", Value: 2 * time.Second, EnvVars: envVars("timeout")},
			&cli.StringFlag{Name: "output", Usage: "table or json", Value: "table", EnvVars: envVars("output")},
			tlsCAFlag(),
		},
		Action: func(c *cli.Context) error {
			opts, err := recoverOptions(c)
			if err != nil {
				return err
			}
			ctx, cancel := callCtx(c)
			defer cancel()
			rep, err := manager.Recover(ctx, opts)
			if err != nil {
				return fmt.Errorf("manager recover: %w", err)
			}
			if c.String("output") == "json" {
				return printJSON(rep)
			}
			var members []string
			for _, m := range rep.Members {
				members = append(members, m.ID+"="+m.RaftAddr)
			}
			fmt.Printf("wrote %s: members %s\n", rep.PeersFile, strings.Join(members, ","))
			fmt.Printf("the data dir holds log index %d (term %d), %d peers, %d buckets; raft configuration was %s\n",
				rep.LastIndex, rep.LastTerm, rep.Peers, rep.Buckets, strings.Join(rep.Configured, ","))
			fmt.Printf("asked for a leader: %d managers, %d unreachable, none leads\n", len(rep.Checked), len(rep.Unreachable))
			fmt.Println("now start this manager with its usual command")
			return nil
		},
	}
}

// recoverOptions checks the recover flags and builds manager.Recover's input.
func recoverOptions(c *cli.Context) (manager.RecoverOptions, error) {
	if c.NArg() > 0 {
		return manager.RecoverOptions{}, fmt.Errorf("manager recover: unexpected arguments %q", c.Args().Slice())
	}
	if out := c.String("output"); out != "table" && out != "json" {
		return manager.RecoverOptions{}, fmt.Errorf("--output %q: want table or json", out)
	}
	if c.String("id") == "" {
		return manager.RecoverOptions{}, fmt.Errorf("manager recover: --id is required")
	}
	if c.String("data-dir") == "" {
		return manager.RecoverOptions{}, fmt.Errorf("manager recover: --data-dir is required")
	}
	members, err := manager.ParseBootstrap(c.String("members"))
	if err != nil {
		return manager.RecoverOptions{}, fmt.Errorf("manager recover: --members: %w", err)
	}
	if err := manager.ValidateMembers(c.String("id"), members); err != nil {
		return manager.RecoverOptions{}, fmt.Errorf("manager recover: %w", err)
	}
	opts := manager.RecoverOptions{ID: c.String("id"), DataDir: c.String("data-dir"), Members: members, Timeout: c.Duration("timeout")}
	if s := c.String("manager"); s != "" {
		opts.Managers = strings.Split(s, ",")
	}
	if c.String("tls-ca") != "" {
		if opts.TLS, err = tlsClientConfig(c); err != nil {
			return manager.RecoverOptions{}, fmt.Errorf("manager recover: %w", err)
		}
	}
	return opts, nil
}

func managerRebuildCommand() *cli.Command {
	return &cli.Command{
		Name:  "rebuild",
		Usage: "after every manager's data was lost: seal the buckets the peers' inventories rebuilt, each at its longest copy",
		Description: `Fresh managers (bootstrapped as usual, with the same config flags) adopt the buckets
the peers report when they re-register. Once every peer is back (quarry peers list),
run this once: every adopted warm bucket without a sealed length is sealed at its
longest copy, and the managers' fixups fetch into the shorter copies and restore the
replication and search factors. --expect-peers N refuses, changing nothing, while
fewer than N peers are Up. Running it again seals only what is still unsealed.`,
		Flags: append(adminFlags(),
			&cli.IntFlag{Name: "expect-peers", Usage: "refuse while fewer than N peers are Up", EnvVars: envVars("expect-peers")},
		),
		Action: adminAction(0, "no arguments", func(c *cli.Context, cl *manager.Client, _ []string, out string) error {
			if c.Int("expect-peers") < 0 {
				return fmt.Errorf("--expect-peers %d: want a count >= 0", c.Int("expect-peers"))
			}
			ctx, cancel := callCtx(c)
			defer cancel()
			v, err := cl.Rebuild(ctx, c.Int("expect-peers"))
			if err != nil {
				return fmt.Errorf("manager rebuild: %w", err)
			}
			if out == "json" {
				return printJSON(v)
			}
			fmt.Printf("%d peers Up, %d buckets; sealed %d rebuilt buckets at their longest copy\n", v.PeersUp, v.Buckets, len(v.Sealed))
			for _, s := range v.Sealed {
				fmt.Printf("  %s  %d blocks  (%d holders)\n", s.Bucket, s.Blocks, len(s.Lengths))
			}
			return nil
		}),
	}
}
