package bus

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Any chunk size, window, message mix and resume point: the receiver gets
// exactly what was sent (from the resume point), in order, with boundaries,
// never holding more than the window.
func TestStreamProperty(t *testing.T) {
	_, snc, rnc := streamPair(t)
	rapid.Check(t, func(rt *rapid.T) {
		chunk := rapid.IntRange(1, 64).Draw(rt, "chunk")
		window := rapid.IntRange(1, 8).Draw(rt, "window")
		opts := StreamOptions{ChunkSize: chunk, Window: window}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		if rapid.Bool().Draw(rt, "bytes mode") {
			data := rapid.SliceOfN(rapid.Byte(), 0, 2000).Draw(rt, "data")
			chunks := (len(data) + chunk - 1) / chunk
			resume := rapid.IntRange(0, chunks).Draw(rt, "resume")
			r, err := NewReceiver(rnc, uint64(resume), opts)
			if err != nil {
				rt.Fatal(err)
			}
			snd, err := NewSender(ctx, snc, r.Invite())
			if err != nil {
				rt.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- SendReaderAt(ctx, snd, bytes.NewReader(data), int64(len(data))) }()
			got, err := io.ReadAll(r.Reader(ctx))
			if err != nil {
				rt.Fatal(err)
			}
			if cerr := r.Close(nil); cerr != nil {
				rt.Fatal(cerr)
			}
			if err := <-errc; err != nil {
				rt.Fatal(err)
			}
			if want := data[min(len(data), resume*chunk):]; !bytes.Equal(got, want) {
				rt.Fatalf("resume %d: got %d bytes, want %d", resume, len(got), len(want))
			}
			if r.MaxBuffered() > window {
				rt.Fatalf("buffered %d chunks, window %d", r.MaxBuffered(), window)
			}
			return
		}

		msgs := rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, 200), 0, 30).Draw(rt, "msgs")
		r, err := NewReceiver(rnc, 0, opts)
		if err != nil {
			rt.Fatal(err)
		}
		snd, err := NewSender(ctx, snc, r.Invite())
		if err != nil {
			rt.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			for _, m := range msgs {
				if err := snd.Send(ctx, m); err != nil {
					errc <- err
					return
				}
			}
			errc <- snd.Close(ctx)
		}()
		for i, want := range msgs {
			got, err := r.Next(ctx)
			if err != nil {
				rt.Fatalf("message %d: %v", i, err)
			}
			if !bytes.Equal(got, want) {
				rt.Fatalf("message %d: got %x, want %x", i, got, want)
			}
		}
		if _, err := r.Next(ctx); !errors.Is(err, io.EOF) {
			rt.Fatalf("after %d messages: %v, want EOF", len(msgs), err)
		}
		if err := r.Close(nil); err != nil {
			rt.Fatal(err)
		}
		if err := <-errc; err != nil {
			rt.Fatal(err)
		}
		if r.MaxBuffered() > window {
			rt.Fatalf("buffered %d chunks, window %d", r.MaxBuffered(), window)
		}
	})
}
