package bus

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

// BenchmarkRequest measures one typed request/reply round trip on loopback.
func BenchmarkRequest(b *testing.B) {
	s, err := StartServer(context.Background(), ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	srv, _ := s.Connect(context.Background(), ConnectOptions{Logger: quiet})
	cli, _ := s.Connect(context.Background(), ConnectOptions{Logger: quiet})
	defer srv.Close()
	defer cli.Close()
	svc, err := Serve(srv, "quarry.mgr.echo", ServeOptions{Logger: quiet}, echo("n1"))
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Stop(context.Background())
	b.ResetTimer()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := Request[echoReq, echoResp](ctx, cli, "quarry.mgr.echo", echoReq{Text: "ping"}); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}

// BenchmarkStream measures stream throughput on loopback (64 MiB a run).
func BenchmarkStream(b *testing.B) {
	s, err := StartServer(context.Background(), ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	snc, _ := s.Connect(context.Background(), ConnectOptions{Logger: quiet})
	rnc, _ := s.Connect(context.Background(), ConnectOptions{Logger: quiet})
	defer snc.Close()
	defer rnc.Close()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		r, err := NewReceiver(rnc, 0, StreamOptions{})
		if err != nil {
			b.Fatal(err)
		}
		snd, err := NewSender(context.Background(), snc, r.Invite())
		if err != nil {
			b.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			errc <- SendReaderAt(context.Background(), snd, bytes.NewReader(data), int64(len(data)))
		}()
		n, err := io.Copy(io.Discard, r.Reader(context.Background()))
		if err != nil || n != int64(len(data)) {
			b.Fatalf("received %d bytes: %v", n, err)
		}
		if err := r.Close(nil); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamAcrossGateway measures stream throughput from site1 to
// site2 through a gateway on loopback (64 MiB a run).
func BenchmarkStreamAcrossGateway(b *testing.B) {
	ss, err := StartSites(context.Background(), SitesConfig{Sites: []string{"site1", "site2"}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer ss.Shutdown()
	snc, _ := ss.Server("site1").Connect(context.Background(), ConnectOptions{Logger: quiet})
	rnc, _ := ss.Server("site2").Connect(context.Background(), ConnectOptions{Logger: quiet})
	defer snc.Close()
	defer rnc.Close()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		r, err := NewReceiver(rnc, 0, StreamOptions{})
		if err != nil {
			b.Fatal(err)
		}
		snd, err := NewSender(context.Background(), snc, r.Invite())
		if err != nil {
			b.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			errc <- SendReaderAt(context.Background(), snd, bytes.NewReader(data), int64(len(data)))
		}()
		n, err := io.Copy(io.Discard, r.Reader(context.Background()))
		if err != nil || n != int64(len(data)) {
			b.Fatalf("received %d bytes: %v", n, err)
		}
		if err := r.Close(nil); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}
