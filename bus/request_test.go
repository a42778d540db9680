package bus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestRequestReplySingleNode(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	srv := mustConnect(t, s.ClientURL(), ConnectOptions{})
	cli := mustConnect(t, s.ClientURL(), ConnectOptions{})
	mustServe(t, srv, "quarry.mgr.echo", ServeOptions{}, echo("n1"))

	resp, err := Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), cli, "quarry.mgr.echo", echoReq{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if resp != (echoResp{Text: "hi", Server: "n1", Deadline: true}) {
		t.Fatalf("got %+v", resp)
	}

	// A handler error travels back typed, with its code.
	_, err = Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), cli, "quarry.mgr.echo", echoReq{Text: "x", Fail: "not_leader"})
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != "not_leader" || re.Message != "asked to fail: x" || re.Subject != "quarry.mgr.echo" {
		t.Fatalf("got %v (%#v), want remote not_leader error", err, re)
	}
	if !IsRemote(err, "not_leader") {
		t.Fatalf("IsRemote false for %v", err)
	}

	// An undecodable request never reaches the handler.
	m := nats.NewMsg("quarry.mgr.echo")
	m.Header.Set(HeaderCodec, "msgpack/9")
	m.Data = []byte{1, 2, 3}
	reply, err := cli.RequestMsg(m, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(HeaderErrorCode); code != CodeBadRequest {
		t.Fatalf("bad codec got code %q (%s), want %s", code, reply.Data, CodeBadRequest)
	}
}

func TestNoRespondersIsFastAndDistinctFromTimeout(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	cli := mustConnect(t, s.ClientURL(), ConnectOptions{})
	srv := mustConnect(t, s.ClientURL(), ConnectOptions{})

	start := time.Now()
	_, err := Request[echoReq, echoResp](ctxTimeout(t, 5*time.Second), cli, "quarry.mgr.nobody", echoReq{})
	if !errors.Is(err, ErrNoResponders) || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrNoResponders only", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("no-responders took %s with a 5s deadline; want it at once", took)
	}

	mustServe(t, srv, "quarry.mgr.slow", ServeOptions{}, echo("n1"))
	start = time.Now()
	_, err = Request[echoReq, echoResp](ctxTimeout(t, 300*time.Millisecond), cli, "quarry.mgr.slow", echoReq{Block: true})
	if !errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoResponders) {
		t.Fatalf("got %v, want ErrTimeout only", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("timeout after %s, before the 300ms deadline", took)
	}
}

func TestServeStopAndQueueGroup(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	cli := mustConnect(t, s.ClientURL(), ConnectOptions{})
	a := mustConnect(t, s.ClientURL(), ConnectOptions{})
	b := mustConnect(t, s.ClientURL(), ConnectOptions{})

	var na, nb atomic.Int64
	count := func(n *atomic.Int64, name string) Handler[echoReq, echoResp] {
		return func(ctx context.Context, r echoReq) (echoResp, error) {
			n.Add(1)
			return echoResp{Text: r.Text, Server: name}, nil
		}
	}
	sa := mustServe(t, a, "quarry.mgr.q", ServeOptions{Queue: "managers"}, count(&na, "a"))
	mustServe(t, b, "quarry.mgr.q", ServeOptions{Queue: "managers"}, count(&nb, "b"))
	const n = 60
	for i := range n {
		if _, err := Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), cli, "quarry.mgr.q", echoReq{Text: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if na.Load()+nb.Load() != n {
		t.Fatalf("handled %d+%d requests, want exactly %d (once each)", na.Load(), nb.Load(), n)
	}

	// After Stop, the other member serves everything.
	if err := sa.Stop(ctxTimeout(t, time.Second)); err != nil {
		t.Fatal(err)
	}
	before := na.Load()
	for range 20 {
		resp, err := Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), cli, "quarry.mgr.q", echoReq{})
		if err != nil || resp.Server != "b" {
			t.Fatalf("after stop: %+v, %v; want b to answer", resp, err)
		}
	}
	if na.Load() != before {
		t.Fatalf("stopped service handled %d more requests", na.Load()-before)
	}
}

func TestServeStopCancelsRunningHandlers(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	cli := mustConnect(t, s.ClientURL(), ConnectOptions{})
	srv := mustConnect(t, s.ClientURL(), ConnectOptions{})
	started := make(chan struct{})
	svc := mustServe(t, srv, "quarry.mgr.block", ServeOptions{}, func(ctx context.Context, r echoReq) (echoResp, error) {
		close(started)
		<-ctx.Done()
		return echoResp{}, ctx.Err()
	})
	errc := make(chan error, 1)
	go func() {
		_, err := Request[echoReq, echoResp](ctxTimeout(t, 10*time.Second), cli, "quarry.mgr.block", echoReq{})
		errc <- err
	}()
	<-started
	stopCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := svc.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !IsRemote(err, CodeShutdown) {
			t.Fatalf("got %v, want remote %s", err, CodeShutdown)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("request not answered after Stop")
	}
}
