package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
)

// runManagerFlags parses `quarry manager ARGS` and returns the config the
// command would start with.
func runManagerFlags(t *testing.T, args ...string) (manager.Config, error) {
	t.Helper()
	cmd := managerCommand()
	var hec *repeatable
	for _, f := range cmd.Flags {
		if g, ok := f.(*cli.GenericFlag); ok && g.Name == "hec-token" {
			hec = g.Value.(*repeatable)
		}
	}
	var (
		got    manager.Config
		cfgErr error
	)
	cmd.Action = func(c *cli.Context) error {
		got, cfgErr = managerConfig(c, hec.values)
		return nil
	}
	app := &cli.App{Name: "quarry", Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	if err := app.Run(append([]string{"quarry", "manager"}, args...)); err != nil {
		return got, err
	}
	return got, cfgErr
}

func TestManagerFlagsSeedConfig(t *testing.T) {
	t.Setenv("QUARRY_INDEX", "")
	t.Setenv("QUARRY_HEC_TOKEN", "envtok=web;plain")
	cfg, err := runManagerFlags(t, "--id", "m2", "--data-dir", "/d", "--admin-token", "T",
		"--bootstrap", "m1=127.0.0.1:7001,m2=127.0.0.1:7002",
		"--sites", "site1,site2", "--site-replication-factor", "origin:2,total:3", "--site-search-factor", "origin:1,total:2",
		"--heartbeat-timeout", "7s", "--index", "web", "--index", "app",
		"--hec-token", "t1=web,app", "--hec-token", "t2:useack=false",
		"--nats", "nats://10.0.0.1:4222", "--raft-snapshot-threshold", "100")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "m2" || cfg.NATS != "nats://10.0.0.1:4222" || len(cfg.Bootstrap) != 2 || cfg.SnapshotThreshold != 100 || cfg.TrailingLogs != 100 {
		t.Fatalf("manager config %+v", cfg)
	}
	s := cfg.Seed
	if strings.Join(s.Sites, ",") != "site1,site2" || s.SiteReplicationFactor.String() != "origin:2,total:3" || s.HeartbeatTimeout != 7*time.Second {
		t.Fatalf("seed %+v", s)
	}
	var idx []string
	for _, ix := range s.Indexes {
		idx = append(idx, ix.Name)
	}
	if strings.Join(idx, ",") != "main,web,app" {
		t.Fatalf("indexes %v, want main,web,app", idx)
	}
	var toks []string
	for _, tk := range s.HECTokens {
		toks = append(toks, fmt.Sprintf("%s=%s:%v", tk.Token, strings.Join(tk.Indexes, ","), tk.Ack))
	}
	if strings.Join(toks, " ") != "envtok=web:true plain=:true t1=web,app:true t2=:false" {
		t.Fatalf("hec tokens %v", toks)
	}
	// Unset config flags keep fsm's defaults.
	def := fsm.DefaultConfig()
	if s.ReplicationFactor != def.ReplicationFactor || s.SearchFactor != def.SearchFactor || s.MaxHotBuckets != def.MaxHotBuckets {
		t.Fatalf("seed %+v does not keep the defaults", s)
	}
}

func TestManagerFlagsRefused(t *testing.T) {
	t.Setenv("QUARRY_HEC_TOKEN", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--search-factor", "4"}, "cluster config refused"},
		{[]string{"--site-search-factor", "origin:x"}, "--site-search-factor"},
		{[]string{"--sites", "site1,site0"}, "cluster config refused"},
		{[]string{"--hec-token", "=x"}, "--hec-token"},
		{[]string{"--hec-token", "x:useack=maybe"}, "--hec-token"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--bootstrap", "m1=nope"}, "--bootstrap"},
	} {
		_, err := runManagerFlags(t, append([]string{"--id", "m1", "--data-dir", "/d", "--admin-token", "T"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

func TestTrailingFlags(t *testing.T) {
	var (
		args    []string
		enforce bool
		mgr     string
	)
	cmd := peerAdminSubcommands()[0]
	cmd.Action = func(c *cli.Context) error {
		var err error
		args, err = trailingFlags(c)
		enforce, mgr = c.Bool("enforce-counts"), c.String("manager")
		return err
	}
	app := &cli.App{Name: "quarry", Commands: []*cli.Command{{Name: "peer", Subcommands: []*cli.Command{cmd}}}, ExitErrHandler: func(*cli.Context, error) {}}
	if err := app.Run([]string{"quarry", "peer", "offline", "p1", "--enforce-counts", "--manager", "http://m:1"}); err != nil {
		t.Fatal(err)
	}
	if len(args) != 1 || args[0] != "p1" || !enforce || mgr != "http://m:1" {
		t.Fatalf("args %v enforce %v manager %q", args, enforce, mgr)
	}
	if err := app.Run([]string{"quarry", "peer", "offline", "p1", "--bogus"}); err == nil || !strings.Contains(err.Error(), "unknown flag --bogus") {
		t.Fatalf("unknown trailing flag: %v", err)
	}
}
