package bus

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/quarry-dev/quarry/internal/testutil"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// streamPair returns a server and two connections (sender side, receiver side).
func streamPair(t *testing.T) (*Server, *nats.Conn, *nats.Conn) {
	t.Helper()
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	return s, mustConnect(t, s.ClientURL(), ConnectOptions{Name: "sender"}), mustConnect(t, s.ClientURL(), ConnectOptions{Name: "receiver"})
}

func mustReceiver(t *testing.T, nc *nats.Conn, resume uint64, o StreamOptions) *Receiver {
	t.Helper()
	r, err := NewReceiver(nc, resume, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(errors.New("test over")) })
	return r
}

func mustSender(t *testing.T, nc *nats.Conn, inv Invite) *Sender {
	t.Helper()
	s, err := NewSender(ctxTimeout(t, 5*time.Second), nc, inv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Abort(errors.New("test over")) })
	return s
}

func TestStreamMultiMBExactBytes(t *testing.T) {
	_, snc, rnc := streamPair(t)
	data := randomBytes(t, 8<<20+12345) // not a multiple of the chunk size
	r := mustReceiver(t, rnc, 0, StreamOptions{})
	s := mustSender(t, snc, r.Invite())

	errc := make(chan error, 1)
	go func() {
		// Odd-sized writes: Write must re-cut them into full chunks.
		src := bytes.NewReader(data)
		buf := make([]byte, 77777)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := s.Write(buf[:n]); werr != nil {
					errc <- werr
					return
				}
			}
			if err == io.EOF {
				break
			}
		}
		errc <- s.Close(ctxTimeout(t, 20*time.Second))
	}()
	got, err := io.ReadAll(r.Reader(ctxTimeout(t, 20*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(nil); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("sender: %v", err)
	}
	if len(got) != len(data) || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("received %d bytes (sha %x), sent %d (sha %x)", len(got), sha256.Sum256(got), len(data), sha256.Sum256(data))
	}
	if want := uint64((len(data) + DefaultChunkSize - 1) / DefaultChunkSize); s.Sent() != want {
		t.Fatalf("sent %d chunks, want %d full chunks", s.Sent(), want)
	}
}

func TestStreamMessagesKeepBoundaries(t *testing.T) {
	_, snc, rnc := streamPair(t)
	r := mustReceiver(t, rnc, 0, StreamOptions{ChunkSize: 1000, Window: 8})
	s := mustSender(t, snc, r.Invite())
	rng := mrand.New(mrand.NewPCG(1, 2))
	var msgs [][]byte
	for i := range 300 {
		n := rng.IntN(3500) // 0 … 3.5 chunks: empty, single and multi-chunk messages
		if i == 0 {
			n = 0
		}
		msgs = append(msgs, randomBytes(t, n))
	}
	errc := make(chan error, 1)
	go func() {
		ctx := ctxTimeout(t, 10*time.Second)
		for _, m := range msgs {
			if err := s.Send(ctx, m); err != nil {
				errc <- err
				return
			}
		}
		errc <- s.Close(ctx)
	}()
	ctx := ctxTimeout(t, 10*time.Second)
	for i, want := range msgs {
		got, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d: got %d bytes, want %d", i, len(got), len(want))
		}
	}
	if _, err := r.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
	if err := r.Close(nil); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestStreamSlowConsumerBoundsSender(t *testing.T) {
	_, snc, rnc := streamPair(t)
	const window, chunks = 4, 120
	r := mustReceiver(t, rnc, 0, StreamOptions{ChunkSize: 1024, Window: window})
	s := mustSender(t, snc, r.Invite())
	go func() {
		ctx := ctxTimeout(t, 20*time.Second)
		for i := range chunks {
			if err := s.SendChunk(ctx, bytes.Repeat([]byte{byte(i)}, 1024), true); err != nil {
				return
			}
		}
		_ = s.Close(ctx)
	}()
	ctx := ctxTimeout(t, 20*time.Second)
	// Before anything is taken the sender fills its window, and stops there.
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := s.Sent(); n < window {
			return fmt.Errorf("sender sent %d chunks, window %d", n, window)
		}
		return nil
	})
	maxInFlight := uint64(0)
	for consumed := uint64(0); ; consumed++ {
		// In flight = sent but not yet taken by this consumer. The
		// sender may only run ahead by the window.
		if inFlight := s.Sent() - consumed; inFlight > window {
			t.Fatalf("sender has %d chunks in flight with %d credits", inFlight, window)
		} else {
			maxInFlight = max(maxInFlight, inFlight)
		}
		c, err := r.NextChunk(ctx)
		if errors.Is(err, io.EOF) {
			if consumed != chunks {
				t.Fatalf("stream ended after %d chunks, want %d", consumed, chunks)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if c.Seq != consumed || c.Data[0] != byte(consumed) {
			t.Fatalf("chunk %d: got seq %d byte %d", consumed, c.Seq, c.Data[0])
		}
		time.Sleep(time.Millisecond) // a slow consumer (not synchronisation)
	}
	if maxInFlight != window {
		t.Fatalf("sender never filled its window (max in flight %d): the test did not slow it", maxInFlight)
	}
	if mb := r.MaxBuffered(); mb > window {
		t.Fatalf("receiver buffered %d chunks, window %d", mb, window)
	}
	_ = r.Close(nil)
}

func TestStreamSenderDeathDetectedByReceiver(t *testing.T) {
	s, _, rnc := streamPair(t)
	snc, err := Connect(ctxTimeout(t, 2*time.Second), s.ClientURL(), ConnectOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer snc.Close()
	const idle = time.Second
	r := mustReceiver(t, rnc, 0, StreamOptions{ChunkSize: 1024, Window: 8, Heartbeat: 200 * time.Millisecond, IdleTimeout: idle})
	snd := mustSender(t, snc, r.Invite())
	ctx := ctxTimeout(t, 5*time.Second)
	for i := range 3 {
		if err := snd.SendChunk(ctx, []byte{byte(i)}, true); err != nil {
			t.Fatal(err)
		}
	}
	_ = snc.Flush()
	snc.Close() // the sender dies: no end, no abort
	died := time.Now()
	for i := range 3 {
		if c, err := r.NextChunk(ctx); err != nil || c.Seq != uint64(i) {
			t.Fatalf("chunk %d before the death: %+v, %v", i, c, err)
		}
	}
	_, err = r.NextChunk(ctx)
	if !errors.Is(err, ErrStreamStalled) {
		t.Fatalf("got %v, want ErrStreamStalled", err)
	}
	if took := time.Since(died); took > idle+3*time.Second { // generous: -race on a loaded 2-core CI box
		t.Fatalf("sender death detected after %s (idle timeout %s)", took, idle)
	}
}

func TestStreamReceiverDeathDetectedBySender(t *testing.T) {
	s, snc, _ := streamPair(t)
	rnc, err := Connect(ctxTimeout(t, 2*time.Second), s.ClientURL(), ConnectOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	const idle = time.Second
	r := mustReceiver(t, rnc, 0, StreamOptions{ChunkSize: 1024, Window: 2, Heartbeat: 200 * time.Millisecond, IdleTimeout: idle})
	snd := mustSender(t, snc, r.Invite())
	ctx := ctxTimeout(t, 5*time.Second)
	rnc.Close() // the receiver dies
	died := time.Now()
	var sendErr error
	for i := 0; sendErr == nil; i++ {
		sendErr = snd.SendChunk(ctx, []byte{byte(i)}, true)
	}
	if !errors.Is(sendErr, ErrStreamStalled) {
		t.Fatalf("got %v, want ErrStreamStalled", sendErr)
	}
	if took := time.Since(died); took > idle+3*time.Second { // generous: -race on a loaded 2-core CI box
		t.Fatalf("receiver death detected after %s (idle timeout %s)", took, idle)
	}
}

// copyMeta describes a warm-bucket copy in the resume test.
type copyMeta struct {
	Bucket string `json:"bucket"`
	Size   int64  `json:"size"`
}

// cutReaderAt closes a connection once a read reaches cutAt.
type cutReaderAt struct {
	data  []byte
	cutAt int64
	cut   func()
	once  sync.Once
}

func (c *cutReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if c.cut != nil && off >= c.cutAt {
		c.once.Do(c.cut)
	}
	return bytes.NewReader(c.data).ReadAt(p, off)
}

func TestStreamResumeAfterCut(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	target := mustConnect(t, s.ClientURL(), ConnectOptions{Name: "target"})
	const chunk = 64 << 10
	data := randomBytes(t, 3<<20+999)
	total := uint64((len(data) + chunk - 1) / chunk)

	// The target keeps what it received, chunk by chunk, like a partial
	// bucket file, and resumes from the first chunk it lacks.
	var (
		mu      sync.Mutex
		file    = make([]byte, len(data))
		have    uint64
		results = make(chan error, 4)
		resumes = make(chan uint64, 4)
	)
	svc, err := serveStreams(target, "quarry.repl.site1.p2", ServeOptions{Logger: quiet},
		StreamOptions{ChunkSize: chunk, Window: 4, Heartbeat: 250 * time.Millisecond, IdleTimeout: 2 * time.Second},
		func(ctx context.Context, m copyMeta, accept func(uint64) (*Receiver, error)) error {
			if m.Bucket != "db_1_2_p1" || m.Size != int64(len(data)) {
				return Errorf(CodeBadRequest, "unexpected bucket %+v", m)
			}
			mu.Lock()
			from := have
			mu.Unlock()
			resumes <- from
			r, err := accept(from)
			if err != nil {
				return err
			}
			for {
				c, err := r.NextChunk(ctx)
				if errors.Is(err, io.EOF) {
					results <- nil
					return nil
				}
				if err != nil {
					results <- err
					return err
				}
				mu.Lock()
				copy(file[int(c.Seq)*chunk:], c.Data)
				have = c.Seq + 1
				mu.Unlock()
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })

	// First attempt: the source's connection dies a third of the way in.
	src1, err := Connect(ctxTimeout(t, 2*time.Second), s.ClientURL(), ConnectOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer src1.Close()
	snd, err := openStream(ctxTimeout(t, 2*time.Second), src1, "quarry.repl.site1.p2", copyMeta{"db_1_2_p1", int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	if r := <-resumes; r != 0 {
		t.Fatalf("fresh copy resumed at %d", r)
	}
	err = SendReaderAt(ctxTimeout(t, 10*time.Second), snd, &cutReaderAt{data: data, cutAt: 1 << 20, cut: src1.Close}, int64(len(data)))
	if err == nil {
		t.Fatal("the cut copy succeeded")
	}
	if err := <-results; !errors.Is(err, ErrStreamStalled) {
		t.Fatalf("target after the cut: %v, want ErrStreamStalled", err)
	}
	mu.Lock()
	got := have
	mu.Unlock()
	if got == 0 || got >= total {
		t.Fatalf("target has %d of %d chunks after the cut", got, total)
	}

	// Second attempt resumes where the target stopped.
	src2 := mustConnect(t, s.ClientURL(), ConnectOptions{Name: "source again"})
	snd2, err := openStream(ctxTimeout(t, 2*time.Second), src2, "quarry.repl.site1.p2", copyMeta{"db_1_2_p1", int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	if r := <-resumes; r != got || snd2.Resume() != got {
		t.Fatalf("resumed at %d (sender %d), target had %d", r, snd2.Resume(), got)
	}
	if err := SendReaderAt(ctxTimeout(t, 10*time.Second), snd2, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	if sent := snd2.Sent() - snd2.Resume(); sent != total-got {
		t.Fatalf("resumed copy sent %d chunks, want %d", sent, total-got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Equal(file, data) {
		t.Fatal("resumed copy differs from the source")
	}
}

func TestStreamHandlerRejectAndAbort(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	rnc := mustConnect(t, s.ClientURL(), ConnectOptions{})
	snc := mustConnect(t, s.ClientURL(), ConnectOptions{})
	svc, err := serveStreams(rnc, "quarry.repl.site1.p3", ServeOptions{Logger: quiet}, StreamOptions{ChunkSize: 100, Window: 2},
		func(ctx context.Context, m copyMeta, accept func(uint64) (*Receiver, error)) error {
			if m.Bucket == "unknown" {
				return Errorf("unknown_bucket", "no bucket %s", m.Bucket)
			}
			r, err := accept(0)
			if err != nil {
				return err
			}
			if _, err := r.NextChunk(ctx); err != nil {
				return err
			}
			return errors.New("disk full")
		})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())

	if _, err := openStream(ctxTimeout(t, 2*time.Second), snc, "quarry.repl.site1.p3", copyMeta{Bucket: "unknown"}); !IsRemote(err, "unknown_bucket") {
		t.Fatalf("rejected open: %v, want remote unknown_bucket", err)
	}
	if _, err := openStream(ctxTimeout(t, 2*time.Second), snc, "quarry.repl.site1.nobody", copyMeta{}); !errors.Is(err, ErrNoResponders) {
		t.Fatalf("open to nobody: %v, want ErrNoResponders", err)
	}
	snd, err := openStream(ctxTimeout(t, 2*time.Second), snc, "quarry.repl.site1.p3", copyMeta{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 5*time.Second)
	var sendErr error
	for i := 0; sendErr == nil && i < 1000; i++ {
		sendErr = snd.SendChunk(ctx, []byte("x"), true)
	}
	if sendErr == nil {
		sendErr = snd.Close(ctx)
	}
	if !errors.Is(sendErr, ErrStreamAborted) || !bytes.Contains([]byte(sendErr.Error()), []byte("disk full")) {
		t.Fatalf("got %v, want the receiver's abort with its reason", sendErr)
	}
}

// rawFrames drives a Receiver with hand-made frames.
func TestStreamReceiverDetectsGapCorruptionAndCreditOverrun(t *testing.T) {
	_, snc, rnc := streamPair(t)
	cases := []struct {
		name   string
		frames func(ctrl string) [][]byte
		want   error
	}{
		{"gap", func(ctrl string) [][]byte {
			return [][]byte{frame{kind: kindHello, payload: []byte(ctrl)}.encode(),
				frame{kind: kindData, seq: 0, payload: []byte("a")}.encode(),
				frame{kind: kindData, seq: 2, payload: []byte("c")}.encode()}
		}, ErrStreamGap},
		{"lost last chunk seen by ping", func(ctrl string) [][]byte {
			return [][]byte{frame{kind: kindHello, payload: []byte(ctrl)}.encode(),
				frame{kind: kindPing, seq: 1}.encode()}
		}, ErrStreamGap},
		{"lost chunk seen by end", func(ctrl string) [][]byte {
			return [][]byte{frame{kind: kindHello, payload: []byte(ctrl)}.encode(),
				frame{kind: kindEnd, seq: 3}.encode()}
		}, ErrStreamGap},
		{"reordered", func(ctrl string) [][]byte {
			return [][]byte{frame{kind: kindHello, payload: []byte(ctrl)}.encode(),
				frame{kind: kindData, seq: 1, payload: []byte("b")}.encode()}
		}, ErrStreamGap},
		{"corrupt", func(ctrl string) [][]byte {
			b := frame{kind: kindData, seq: 0, payload: []byte("abc")}.encode()
			b[len(b)-1] ^= 0x40
			return [][]byte{frame{kind: kindHello, payload: []byte(ctrl)}.encode(), b}
		}, ErrStreamCorrupt},
		{"credit overrun", func(ctrl string) [][]byte {
			out := [][]byte{frame{kind: kindHello, payload: []byte(ctrl)}.encode()}
			for i := range 3 { // window is 2
				out = append(out, frame{kind: kindData, seq: uint64(i), payload: []byte("x")}.encode())
			}
			return out
		}, ErrStreamProtocol},
		{"data before hello", func(string) [][]byte {
			return [][]byte{frame{kind: kindData, seq: 0, payload: []byte("x")}.encode()}
		}, ErrStreamProtocol},
		{"truncated frame", func(ctrl string) [][]byte {
			return [][]byte{frame{kind: kindHello, payload: []byte(ctrl)}.encode(), {1, 2, 3}}
		}, ErrStreamCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustReceiver(t, rnc, 0, StreamOptions{Window: 2})
			ctrl := snc.NewInbox()
			aborts, err := snc.SubscribeSync(ctrl)
			if err != nil {
				t.Fatal(err)
			}
			defer aborts.Unsubscribe()
			_ = snc.Flush()
			for _, f := range c.frames(ctrl) {
				if err := snc.Publish(r.Invite().Inbox, f); err != nil {
					t.Fatal(err)
				}
			}
			// Consume nothing until the receiver failed: taking a chunk
			// would grant a credit and hide an overrun.
			testutil.WaitFor(t, 3*time.Second, func() error {
				r.mu.Lock()
				defer r.mu.Unlock()
				if r.err == nil {
					return errors.New("receiver has not failed yet")
				}
				return nil
			})
			ctx := ctxTimeout(t, 3*time.Second)
			var err2 error
			for err2 == nil {
				_, err2 = r.NextChunk(ctx)
			}
			if !errors.Is(err2, c.want) {
				t.Fatalf("got %v, want %v", err2, c.want)
			}
			if c.name == "data before hello" {
				return // the receiver does not know where to send an abort
			}
			// The sender is told: an abort frame reaches its control inbox.
			for {
				m, err := aborts.NextMsg(2 * time.Second)
				if err != nil {
					t.Fatalf("no abort sent to the sender: %v", err)
				}
				if f, err := decodeFrame(m.Data); err == nil && f.kind == kindAbort {
					break
				}
			}
		})
	}
}

func TestStreamPeerToPeerUnderPermissions(t *testing.T) {
	users := []User{
		{Name: "p1", Password: "a", Role: RolePeer, Site: "site1", Peer: "p1"},
		{Name: "p2", Password: "b", Role: RolePeer, Site: "site1", Peer: "p2"},
	}
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", Users: users})
	p1 := mustConnect(t, s.ClientURL(), ConnectOptions{User: "p1", Password: "a"})
	p2 := mustConnect(t, s.ClientURL(), ConnectOptions{User: "p2", Password: "b"})
	var got atomic.Int64
	svc, err := serveStreams(p2, "quarry.repl.site1.p2.*", ServeOptions{Logger: quiet}, StreamOptions{},
		func(ctx context.Context, m copyMeta, accept func(uint64) (*Receiver, error)) error {
			r, err := accept(0)
			if err != nil {
				return err
			}
			n, err := io.Copy(io.Discard, r.Reader(ctx))
			got.Store(n)
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	data := randomBytes(t, 1<<20)
	snd, err := openStream(ctxTimeout(t, 2*time.Second), p1, "quarry.repl.site1.p2.p1", copyMeta{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := SendReaderAt(ctxTimeout(t, 10*time.Second), snd, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if got.Load() != int64(len(data)) {
		t.Fatalf("p2 received %d bytes, want %d", got.Load(), len(data))
	}
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(frame{kind: kindData, seq: 7, flags: flagEOM, payload: []byte("hello")}.encode())
	f.Add(frame{kind: kindHello, payload: []byte("_INBOX.x")}.encode())
	f.Add(frame{kind: kindCredit, seq: 1 << 40}.encode())
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrStreamCorrupt) && !errors.Is(err, ErrStreamProtocol) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		// A frame that decodes re-encodes to the same bytes.
		if again := fr.encode(); !bytes.Equal(again, b) {
			t.Fatalf("round trip: %x → %+v → %x", b, fr, again)
		}
	})
}

func TestStreamThrottle(t *testing.T) {
	_, snc, rnc := streamPair(t)
	r := mustReceiver(t, rnc, 0, StreamOptions{ChunkSize: 16 << 10})
	s := mustSender(t, snc, r.Invite())
	const rate = 2 << 20 // 2 MiB/s
	s.Throttle(rate)
	data := randomBytes(t, 1<<20)
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		errc <- SendReaderAt(ctxTimeout(t, 10*time.Second), s, bytes.NewReader(data), int64(len(data)))
	}()
	got, err := io.ReadAll(r.Reader(ctxTimeout(t, 10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close(nil)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// 1 MiB at 2 MiB/s, less the initial burst of rate/10: at least ~450 ms.
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("1 MiB at 2 MiB/s took only %s", took)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("throttled copy differs")
	}
}

// TestStreamMaxMessage (review M1): a receiver with MaxMessage takes
// messages up to it whole, and a message past it ends the stream with
// ErrMessageTooLarge before more than the cap is held — the sender's
// stream is aborted rather than left to fill the receiver.
func TestStreamMaxMessage(t *testing.T) {
	_, snc, rnc := streamPair(t)
	r := mustReceiver(t, rnc, 0, StreamOptions{ChunkSize: 1000, Window: 8, MaxMessage: 2500})
	s := mustSender(t, snc, r.Invite())
	fits, over := randomBytes(t, 2500), randomBytes(t, 1<<20)
	errc := make(chan error, 1)
	go func() {
		ctx := ctxTimeout(t, 10*time.Second)
		if err := s.Send(ctx, fits); err != nil {
			errc <- err
			return
		}
		errc <- s.Send(ctx, over)
	}()
	ctx := ctxTimeout(t, 10*time.Second)
	if got, err := r.Next(ctx); err != nil || !bytes.Equal(got, fits) {
		t.Fatalf("a message of exactly MaxMessage: %d bytes, %v", len(got), err)
	}
	if got, err := r.Next(ctx); !errors.Is(err, ErrMessageTooLarge) || got != nil {
		t.Fatalf("a message past MaxMessage: %d bytes, %v; want ErrMessageTooLarge", len(got), err)
	}
	if err := <-errc; !errors.Is(err, ErrStreamAborted) {
		t.Fatalf("the sender of the large message: %v, want ErrStreamAborted", err)
	}
}
