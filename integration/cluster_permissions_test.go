package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// TestPeerCannotPublishFixupTask: a peer's NATS user may replicate and
// call the managers but not publish a fixup task (NATS refuses it), while
// a manager's user may.
func TestPeerCannotPublishFixupTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0", Logger: quietLogger(),
		User: "admin", Password: "admin-pw",
		Users: []bus.User{
			{Name: "p1", Password: "p1-pw", Role: bus.RolePeer, Site: "site1", Peer: "p1"},
			{Name: "m1", Password: "m1-pw", Role: bus.RoleManager},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	subj, _ := bus.NewSubjects("")
	peerConn, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: "peer p1", User: "p1", Password: "p1-pw", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer peerConn.Close()
	mgrConn, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: "manager m1", User: "m1", Password: "m1-pw", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer mgrConn.Close()
	// p2's fixup subject has a server (the admin), so only permissions can
	// stop the request.
	adminConn, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: "admin", User: "admin", Password: "admin-pw", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer adminConn.Close()
	svc, err := mgrclient.ServeFixups(adminConn, subj, "site1", "p2", bus.ServeOptions{}, func(ctx context.Context, tk api.FixupTask) (api.FixupAck, error) {
		return api.FixupAck{Accepted: true}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	fixup, _ := subj.Fixup("site1", "p2")
	task := api.FixupTask{V: api.WireVersion, ID: 7, Kind: fsm.TaskRemoveCopy, Bucket: "main~0~G", Target: "p2", Destructive: true, To: "p2"}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = bus.Request[api.FixupTask, api.FixupAck](rctx, peerConn, fixup, task)
	rcancel()
	if !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("peer publishing a fixup task: %v, want ErrPermissionDenied", err)
	}
	rctx, rcancel = context.WithTimeout(ctx, 5*time.Second)
	ack, err := bus.Request[api.FixupTask, api.FixupAck](rctx, mgrConn, fixup, task)
	rcancel()
	if err != nil || !ack.Accepted {
		t.Fatalf("manager publishing a fixup task: %+v, %v", ack, err)
	}
}
