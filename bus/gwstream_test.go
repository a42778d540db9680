package bus

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

// Streams across a gateway: the receiver's inbox lives in site2, the
// sender's control inbox in site1; interest in each must cross the gateway
// before the other end's frames do.
func TestStreamAcrossGateway(t *testing.T) {
	s1, s2 := twoSites(t, "", "", nil)
	target := mustConnect(t, s2.ClientURL(), ConnectOptions{Name: "target p4"})
	source := mustConnect(t, s1.ClientURL(), ConnectOptions{Name: "source p1"})
	got := make(chan []byte, 1)
	svc, err := ServeStreams(target, "quarry.repl.site2.p4", ServeOptions{Logger: quiet}, StreamOptions{ChunkSize: 4096, Window: 4},
		func(ctx context.Context, m copyMeta, accept func(uint64) (*Receiver, error)) error {
			r, err := accept(0)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(r.Reader(ctx))
			got <- b
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	var snd *Sender
	waitFor(t, 5*time.Second, func() error { // the repl subject's interest crosses first
		snd, err = OpenStream(ctxTimeout(t, 250*time.Millisecond), source, "quarry.repl.site2.p4", copyMeta{Bucket: "warm"})
		return err
	})
	data := randomBytes(t, 100_000)
	if err := SendReaderAt(ctxTimeout(t, 10*time.Second), snd, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("got %d bytes, want %d", len(b), len(data))
	}
	// Many short streams in a row: each new inbox must be usable at once.
	for i := range 30 {
		snd, err := OpenStream(ctxTimeout(t, time.Second), source, "quarry.repl.site2.p4", copyMeta{Bucket: "warm"})
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if err := SendReaderAt(ctxTimeout(t, 5*time.Second), snd, bytes.NewReader(data[:5000]), 5000); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if b := <-got; !bytes.Equal(b, data[:5000]) {
			t.Fatalf("stream %d: got %d bytes", i, len(b))
		}
	}
}

// A search head in site1 collects streams from peers in site2: each
// collector inbox is fresh, so joins race its interest across the gateway.
func TestCollectorAcrossGateway(t *testing.T) {
	s1, s2 := twoSites(t, "", "", nil)
	peer := mustConnect(t, s2.ClientURL(), ConnectOptions{Name: "peer p4"})
	sh := mustConnect(t, s1.ClientURL(), ConnectOptions{Name: "searchhead sh1"})
	for i := range 20 {
		col, err := NewCollector(sh, StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			ctx := ctxTimeout(t, 5*time.Second)
			snd, err := JoinCollector(ctx, peer, col.Inbox(), "p4")
			if err != nil {
				errc <- err
				return
			}
			if err := snd.Send(ctx, []byte("result")); err != nil {
				errc <- err
				return
			}
			errc <- snd.Close(ctx)
		}()
		ctx := ctxTimeout(t, 5*time.Second)
		from, r, err := col.Accept(ctx)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		msg, err := r.Next(ctx)
		if err != nil || from != "p4" || string(msg) != "result" {
			t.Fatalf("round %d: %q from %q, %v", i, msg, from, err)
		}
		if _, err := r.Next(ctx); err != io.EOF {
			t.Fatalf("round %d: %v, want EOF", i, err)
		}
		_ = r.Close(nil)
		if err := <-errc; err != nil {
			t.Fatalf("round %d: sender: %v", i, err)
		}
		col.Close()
	}
}
