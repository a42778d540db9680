package mgrclient

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

func startBus(t *testing.T) *nats.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := bus.Connect(ctx, srv.ClientURL(), bus.ConnectOptions{Name: "t", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ManagerClient retries while nobody serves (an election) and while the
// answering manager says it is not the leader, then gets the answer.
func TestManagerClientRetries(t *testing.T) {
	nc := startBus(t)
	s, _ := bus.NewSubjects(bus.DefaultPrefix)
	c := NewManagerClient(nc, s)
	c.Sender = "p1"
	subj, _ := s.MgrOp(api.OpHeartbeat, "p1")

	// Nobody serves: the call retries until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := c.Heartbeat(ctx, api.Heartbeat{Peer: "p1"})
	cancel()
	if !errors.Is(err, bus.ErrNoResponders) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no server: %v, want no responders retried until the deadline", err)
	}

	// A deposed leader answers not_leader twice, then a leader serves.
	var calls atomic.Int32
	svc, err := bus.Serve(nc, subj, bus.ServeOptions{}, func(ctx context.Context, h api.Heartbeat) (api.HeartbeatReply, error) {
		if calls.Add(1) <= 2 {
			return api.HeartbeatReply{}, bus.Errorf(api.CodeNotLeader, "not me")
		}
		return api.HeartbeatReply{V: api.WireVersion, State: fsm.StateUp}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Heartbeat(ctx, api.Heartbeat{Peer: "p1"})
	if err != nil || r.State != fsm.StateUp || calls.Load() != 3 {
		t.Fatalf("heartbeat %+v, %v after %d calls; want Up after 3", r, err, calls.Load())
	}
	// Other remote errors are returned at once.
	svc2, err := bus.Serve(nc, mustOp(t, s, api.OpRegister), bus.ServeOptions{}, func(ctx context.Context, r api.Register) (api.RegisterReply, error) {
		return api.RegisterReply{}, bus.Errorf(api.CodeRefused, "guid in use")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc2.Stop(context.Background())
	start := time.Now()
	if _, err := c.Register(ctx, api.Register{Peer: "p1", GUID: "g"}); !bus.IsRemote(err, api.CodeRefused) || time.Since(start) > time.Second {
		t.Fatalf("refused register: %v after %v", err, time.Since(start))
	}
}

func mustOp(t *testing.T, s bus.Subjects, op string) string {
	subj, err := s.MgrOp(op, "p1")
	if err != nil {
		t.Fatal(err)
	}
	return subj
}
