package bus

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// frozenProxy forwards a client's TCP connection to a server; while its
// gate is locked, nothing the server sends reaches the client (a flush
// then waits), while the client's own writes still go through. It counts
// the PINGs the client sends (each flush sends one).
type frozenProxy struct {
	ln    net.Listener
	gate  sync.RWMutex
	pings atomic.Int64
}

func startFrozenProxy(t *testing.T, server string) *frozenProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &frozenProxy{ln: ln}
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				return
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				// Every protocol line is written whole in one flush of
				// the client's buffer here.
				pump(s, c, func(b []byte) { p.pings.Add(int64(bytes.Count(b, []byte("PING\r\n")))) })
			}()
			go func() {
				defer wg.Done()
				pump(c, s, func([]byte) {
					p.gate.RLock() // waits while the test holds the gate
					p.gate.RUnlock()
				})
			}()
		}
	}()
	return p
}

// pump copies src to dst, calling before on each piece before it is
// written, and closes dst when src ends.
func pump(dst, src net.Conn, before func([]byte)) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			before(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestReceiverInviteOnSameConn: a receiver whose invite goes out on its
// own connection (a search head's request) needs no round trip to the
// server before it returns — it returns while the server's answers are
// held back, where a receiver without the option waits for its flush —
// and its stream then works like any other.
func TestReceiverInviteOnSameConn(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	p := startFrozenProxy(t, s.ClientURL()[len("nats://"):])
	nc := mustConnect(t, "nats://"+p.ln.Addr().String(), ConnectOptions{Name: "head"})
	snc := mustConnect(t, s.ClientURL(), ConnectOptions{Name: "peer"})

	p.gate.Lock() // the server's answers stop reaching nc
	var thawOnce sync.Once
	thaw := func() { thawOnce.Do(p.gate.Unlock) }
	defer thaw()
	flushed := make(chan error, 1)
	go func() {
		r, err := NewReceiver(nc, 0, StreamOptions{})
		if err == nil {
			_ = r.Close(nil)
		}
		flushed <- err
	}()
	returned := time.Now()
	r, err := NewReceiver(nc, 0, StreamOptions{InviteOnSameConn: true})
	if err != nil {
		t.Fatalf("after %s: %v", time.Since(returned), err)
	}
	defer r.Close(nil)
	select {
	case err := <-flushed:
		t.Fatalf("a receiver without InviteOnSameConn returned (%v) while the server could not answer its flush", err)
	case <-time.After(300 * time.Millisecond):
		// still waiting for its flush, as it should
	}
	thaw()
	if err := <-flushed; err != nil {
		t.Fatalf("the receiver without the option, once the server answered: %v", err)
	}

	ctx := ctxTimeout(t, 5*time.Second)
	snd, err := NewSender(ctx, snc, r.Invite())
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, []byte("answer")); err != nil {
		t.Fatal(err)
	}
	go func() { _ = snd.Close(ctx) }()
	got, err := r.Next(ctx)
	if err != nil || string(got) != "answer" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestSenderNoFlushBeforeHello: NewSender's one round trip is its hello
// and the credit answering it; it sends no PING (a flush) of its own —
// its subscription goes out on the same connection before the hello.
func TestSenderNoFlushBeforeHello(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	p := startFrozenProxy(t, s.ClientURL()[len("nats://"):])
	snc := mustConnect(t, "nats://"+p.ln.Addr().String(), ConnectOptions{Name: "peer"})
	rnc := mustConnect(t, s.ClientURL(), ConnectOptions{Name: "head"})
	r := mustReceiver(t, rnc, 0, StreamOptions{})
	before := p.pings.Load()
	ctx := ctxTimeout(t, 5*time.Second)
	snd, err := NewSender(ctx, snc, r.Invite())
	if err != nil {
		t.Fatal(err)
	}
	if n := p.pings.Load() - before; n != 0 {
		t.Fatalf("NewSender sent %d PINGs", n)
	}
	if err := snd.Send(ctx, []byte("answer")); err != nil {
		t.Fatal(err)
	}
	go func() { _ = snd.Close(ctx) }()
	if got, err := r.Next(ctx); err != nil || string(got) != "answer" {
		t.Fatalf("got %q, %v", got, err)
	}
}
