package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/manager"
)

// runManagerBusFlags parses `quarry manager ARGS` and returns the embedded
// node's role users as the command would start it with.
func runManagerBusFlags(t *testing.T, args ...string) ([]bus.User, manager.Config, error) {
	t.Helper()
	cmd := managerCommand()
	var (
		users []bus.User
		cfg   manager.Config
		err   error
	)
	cmd.Action = func(c *cli.Context) error {
		if cfg, err = managerConfig(c, nil); err == nil {
			users, err = embeddedBusUsers(c, cfg)
		}
		return nil
	}
	app := &cli.App{Name: "quarry", Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	if rerr := app.Run(append([]string{"quarry", "manager", "--id", "m1", "--data-dir", "/d", "--admin-token", "T"}, args...)); rerr != nil {
		return nil, cfg, rerr
	}
	return users, cfg, err
}

// TestManagerEmbeddedBusRoleUsers: `quarry manager --nats-listen` takes
// per-role users (--role-user, --role-user-file) for its embedded node, as
// `quarry bus` does (review M8): a client without credentials is refused,
// a peer's user cannot deliver a fixup task, the manager's own (admin)
// user can. --role-user without --nats-listen or without --nats-user is
// refused at start.
func TestManagerEmbeddedBusRoleUsers(t *testing.T) {
	clearSecretEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--role-user", "peer/site1/p1=p1:pw1"}, "needs --nats-listen"},
		{[]string{"--nats-listen", "127.0.0.1:0", "--role-user", "peer/site1/p1=p1:pw1"}, "needs --nats-user"},
		{[]string{"--nats-listen", "127.0.0.1:0", "--nats-user", "mgr", "--nats-password", "mpw", "--role-user", "peer=nopassword"}, "--role-user"},
	} {
		if _, _, err := runManagerBusFlags(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	users, cfg, err := runManagerBusFlags(t, "--nats-listen", "127.0.0.1:0", "--nats-user", "mgr", "--nats-password", "mpw",
		"--role-user-file", secretFile(t, "users", "peer/site1/p1=p1:pw1\nsubscriber=sub:spw\n"))
	if err != nil || len(users) != 2 {
		t.Fatalf("users %+v, %v: want two", users, err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := startEmbeddedBus(ctx, cfg, "127.0.0.1:0", users)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	quiet := cfg.Logger
	if nc, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: "anonymous", Logger: quiet}); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected to the embedded node")
	}
	p1, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: "p1", User: "p1", Password: "pw1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	mgr, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: "mgr", User: "mgr", Password: "mpw", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	type msg struct{ Text string }
	subj := "quarry.fixup.site1.p1"
	svc, err := bus.Serve(p1, subj, bus.ServeOptions{}, func(ctx context.Context, r msg) (msg, error) { return msg{Text: "done"}, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	defer rcancel()
	if _, err := bus.Request[msg, msg](rctx, p1, subj, msg{Text: "remove copy"}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("a peer's fixup task to itself: %v, want ErrPermissionDenied", err)
	}
	if r, err := bus.Request[msg, msg](rctx, mgr, subj, msg{}); err != nil || r.Text != "done" {
		t.Fatalf("the manager's fixup task: %+v, %v", r, err)
	}
}
