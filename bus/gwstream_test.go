package bus

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// Streams across a gateway: the receiver's inbox lives in site2, the
// sender's control inbox in site1; interest in each must cross the gateway
// before the other end's frames do.
func TestStreamAcrossGateway(t *testing.T) {
	s1, s2 := twoSites(t, "", "", nil)
	target := mustConnect(t, s2.ClientURL(), ConnectOptions{Name: "target p4"})
	source := mustConnect(t, s1.ClientURL(), ConnectOptions{Name: "source p1"})
	got := make(chan []byte, 1)
	svc, err := serveStreams(target, "quarry.repl.site2.p4", ServeOptions{Logger: quiet}, StreamOptions{ChunkSize: 4096, Window: 4},
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
	testutil.WaitFor(t, 5*time.Second, func() error { // the repl subject's interest crosses first
		snd, err = openStream(ctxTimeout(t, 250*time.Millisecond), source, "quarry.repl.site2.p4", copyMeta{Bucket: "warm"})
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
		snd, err := openStream(ctxTimeout(t, time.Second), source, "quarry.repl.site2.p4", copyMeta{Bucket: "warm"})
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
