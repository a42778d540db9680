package searchhead

import (
	"io"
	"net/http"
	"time"
)

// Slow clients (security review L3). The head's HTTP server has a header
// timeout (10 s) and an idle timeout (idleTimeout), but no server-wide
// ReadTimeout: net/http cancels a request's context when the connection's
// read deadline passes while the handler runs, and searches and exports
// run for minutes. Instead withBodyDeadline gives each request body
// Config.BodyReadTimeout (default 30 s) to arrive — a 4 MiB search body or
// a Splunk form at any sane rate — and lifts the deadline the moment the
// body ends. A client that trickles its body past it gets its connection
// closed and holds no goroutine longer. The JSON itself is parsed before
// the concurrency cap (admit): its cost is bounded by the body cap
// (maxRequestBytes) and this deadline, while admit needs the parsed
// request's token and search.

// DefaultBodyReadTimeout is Config.BodyReadTimeout's default.
const DefaultBodyReadTimeout = 30 * time.Second

// idleTimeout closes a keep-alive connection that sends no request.
const idleTimeout = 2 * time.Minute

// withBodyDeadline bounds how long each request's body may take to arrive.
func withBodyDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline once its body has ended (EOF): the
// server's background read that follows, which watches for the client
// going away, must not time out under a long search. After an error (the
// deadline passed, the client went away) the deadline stays, so the
// server's discard of the unread rest fails at once and it closes the
// connection.
type deadlineBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
}
