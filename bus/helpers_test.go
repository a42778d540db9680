package bus

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

var quiet = slog.New(slog.DiscardHandler)

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustStartServer starts an embedded server on random loopback ports; the
// test shuts it down.
func mustStartServer(t *testing.T, cfg ServerConfig) *Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := StartServer(ctxTimeout(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatalf("start server %s: %v", cfg.Name, err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// mustConnect connects to url; the test closes the connection.
func mustConnect(t *testing.T, url string, o ConnectOptions) *nats.Conn {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	if o.Name == "" {
		o.Name = t.Name()
	}
	nc, err := Connect(ctxTimeout(t, 5*time.Second), url, o)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func mustServe[Req, Resp any](t *testing.T, nc *nats.Conn, subject string, o ServeOptions, h Handler[Req, Resp]) *Service {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	svc, err := Serve(nc, subject, o, h)
	if err != nil {
		t.Fatalf("serve %s: %v", subject, err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	return svc
}

type echoReq struct {
	Text  string `json:"text"`
	Fail  string `json:"fail,omitempty"`
	Block bool   `json:"block,omitempty"`
}

type echoResp struct {
	Text     string `json:"text"`
	Server   string `json:"server"`
	Deadline bool   `json:"deadline"`
}

// echo answers with its text and who answered; Fail makes it fail with that
// code; Block waits for the context.
func echo(name string) Handler[echoReq, echoResp] {
	return func(ctx context.Context, r echoReq) (echoResp, error) {
		if r.Fail != "" {
			return echoResp{}, Errorf(r.Fail, "asked to fail: %s", r.Text)
		}
		if r.Block {
			<-ctx.Done()
			return echoResp{}, ctx.Err()
		}
		_, dl := ctx.Deadline()
		return echoResp{Text: r.Text, Server: name, Deadline: dl}, nil
	}
}
