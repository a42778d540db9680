package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quarry-dev/quarry/bus"
)

type heartbeat struct {
	Peer string `json:"peer"`
}

type heartbeatAck struct {
	Generation uint64 `json:"generation"`
}

// A manager serves an op only while it leads; a peer asks, and tells "nobody
// serves this" (an election) from a slow leader.
func Example_leaderOnlyService() {
	ctx := context.Background()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	mgr, _ := srv.Connect(ctx, bus.ConnectOptions{Name: "manager m1"})
	peer, _ := srv.Connect(ctx, bus.ConnectOptions{Name: "peer p1"})
	defer mgr.Close()
	defer peer.Close()

	var subjects bus.Subjects
	all, _ := subjects.MgrOpAny("heartbeat")     // quarry.mgr.heartbeat.*
	subj, _ := subjects.MgrOp("heartbeat", "p1") // quarry.mgr.heartbeat.p1
	// On gaining leadership (after raft.Barrier):
	svc, _ := bus.Serve(mgr, all, bus.ServeOptions{}, func(ctx context.Context, hb heartbeat) (heartbeatAck, error) {
		if bus.SubjectSender(bus.RequestSubject(ctx)) != hb.Peer {
			return heartbeatAck{}, bus.Errorf(bus.CodeBadRequest, "not sent by %s", hb.Peer)
		}
		return heartbeatAck{Generation: 7}, nil
	})

	reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	ack, err := bus.Request[heartbeat, heartbeatAck](reqCtx, peer, subj, heartbeat{Peer: "p1"})
	cancel()
	fmt.Println(ack.Generation, err)

	// On losing leadership:
	_ = svc.Stop(ctx)
	reqCtx, cancel = context.WithTimeout(ctx, 2*time.Second)
	_, err = bus.Request[heartbeat, heartbeatAck](reqCtx, peer, subj, heartbeat{Peer: "p1"})
	cancel()
	fmt.Println(errors.Is(err, bus.ErrNoResponders))
	// Output:
	// 7 <nil>
	// true
}
