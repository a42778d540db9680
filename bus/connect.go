package bus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultConnectTimeout bounds the first connection when ctx has no deadline.
const DefaultConnectTimeout = 10 * time.Second

// ConnectOptions configure a client connection to the bus.
type ConnectOptions struct {
	// Name is the connection name servers show in /connz ("peer p1", …).
	Name string
	// User and Password authenticate, unless the URL carries credentials.
	User, Password string
	// Logger gets connection events and asynchronous errors (default
	// slog.Default()).
	Logger *slog.Logger
	// OnAsyncError, if set, also receives every asynchronous error:
	// permissions violations (errors.Is(err, nats.ErrPermissionViolation)),
	// slow-consumer drops, …
	OnAsyncError func(error)
	// OnReconnect, when set, is called after the connection came back
	// (on nats.go's reconnect goroutine: keep it short).
	OnReconnect func()
	// TLSCA is a PEM file of the CA that signed the server's certificate;
	// setting it makes TLS required.
	TLSCA string
	// Options are extra nats.go options, applied last.
	Options []nats.Option
}

// StalePingInterval is how often a client pings its server; two
// unanswered pings make the connection stale (Connect).
const StalePingInterval = 2 * time.Second

// Connect connects to the bus at url (an embedded server's ClientURL or an
// external NATS; several URLs separated by commas), retrying the first
// connection until ctx's deadline (DefaultConnectTimeout without one) so a
// role may start before its bus. Once connected it reconnects forever.
// Headers are required (the no-responders answer depends on them).
func Connect(ctx context.Context, url string, o ConnectOptions) (*nats.Conn, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultConnectTimeout)
		defer cancel()
	}
	watch := newViolationWatch()
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.Timeout(2 * time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A connection whose server went silent (a cut network, not a
		// closed socket) is given up after PingInterval × MaxPingsOut and
		// the client moves to another URL: 2 s × 2, so a manager or peer
		// on a cut-off node rejoins the bus in seconds, well inside a
		// heartbeat_timeout (the nats.go default, 2 min × 2, left a leader
		// deaf for half a minute in the e2e site2 cut).
		nats.PingInterval(StalePingInterval),
		nats.MaxPingsOutstanding(2),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("nats async error", "conn", o.Name, "subject", subj, "err", err)
			watch.report(err)
			if o.OnAsyncError != nil {
				o.OnAsyncError(err)
			}
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "conn", o.Name, "err", err)
			}
		}),
		nats.ClosedHandler(func(nc *nats.Conn) { watches.Delete(nc) }),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "conn", o.Name, "url", nc.ConnectedUrlRedacted())
			if o.OnReconnect != nil {
				o.OnReconnect()
			}
		}),
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	// Replies, stream chunks and credits come to this user's own inboxes
	// (_INBOX.<user>.…), the only ones its permissions let it subscribe.
	if user := connectUser(o.User, url); user != "" && ValidToken("user", user) == nil {
		opts = append(opts, nats.CustomInboxPrefix(UserInbox(user)))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	opts = append(opts, o.Options...)
	backoff := 50 * time.Millisecond
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			if !nc.HeadersSupported() {
				nc.Close()
				return nil, fmt.Errorf("bus: connect %s: server does not support headers", redact(url))
			}
			watches.Store(nc, watch)
			return nc, nil
		}
		// Bad credentials or certificates will not get better by retrying.
		var certErr *tls.CertificateVerificationError
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
			errors.As(err, &certErr) || errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) {
			return nil, fmt.Errorf("bus: connect %s: %w", redact(url), err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: connect %s: %w (%w)", redact(url), err, ctx.Err())
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// Connect connects a client to this embedded server.
func (s *Server) Connect(ctx context.Context, o ConnectOptions) (*nats.Conn, error) {
	if o.User == "" && s.cfg.User != "" {
		o.User, o.Password = s.cfg.User, s.cfg.Password
	}
	return Connect(ctx, s.ClientURL(), o)
}

// connectUser is the user a connection authenticates as: o.User, or the
// user of the first URL that carries one.
func connectUser(user, urls string) string {
	if user != "" {
		return user
	}
	for _, p := range strings.Split(urls, ",") {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil && u.User.Username() != "" {
			return u.User.Username()
		}
	}
	return ""
}

// redact hides passwords in (comma-separated) URLs for error messages.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
