package searchhead

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSlowBodyIsCut (security review L3): a client that trickles its body
// has its connection closed once BodyReadTimeout passes, while a body that
// arrives in time leaves no deadline behind — a handler running well past
// it (a long search) keeps its request context.
func TestSlowBodyIsCut(t *testing.T) {
	const d = 300 * time.Millisecond
	type outcome struct {
		err      error
		ctxAlive bool
	}
	done := make(chan outcome, 4)
	srv := httptest.NewUnstartedServer(withBodyDeadline(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if err != nil {
			done <- outcome{err: err}
			return
		}
		// A long search: well past the body deadline.
		select {
		case <-r.Context().Done():
			done <- outcome{ctxAlive: false}
		case <-time.After(3 * d):
			done <- outcome{ctxAlive: true}
			io.WriteString(w, "ok")
		}
	})))
	srv.Start()
	defer srv.Close()

	// In time: the handler outlives the deadline with its context alive.
	res, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"query":"*"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if o := <-done; o.err != nil || !o.ctxAlive || string(b) != "ok" {
		t.Fatalf("a body in time: %+v, answer %q; want the handler to finish with its context alive", o, b)
	}

	// Trickled: 10 of 1,000 bytes, then nothing.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"query\":")
	select {
	case o := <-done:
		if o.err == nil {
			t.Fatalf("a trickled body was read whole: %+v", o)
		}
	case <-time.After(10 * d):
		t.Fatalf("a trickled body still held its handler after %v (deadline %v)", 10*d, d)
	}
	conn.SetReadDeadline(time.Now().Add(10 * d))
	if _, err := bufio.NewReader(conn).ReadString('\n'); err == nil {
		// An answer is fine too (the handler may write one); the
		// connection must not stay open for more.
		_, err = io.Copy(io.Discard, conn)
		if err != nil {
			t.Fatalf("the trickling connection stayed open: %v", err)
		}
	}
	if el := time.Since(start); el > 10*d {
		t.Fatalf("the trickling client was cut after %v, want about %v", el, d)
	}
}
