package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftHandshakeTimeout bounds the TLS handshake of one Raft connection,
// either end: a peer that connects and says nothing (a plain TCP client, a
// port scanner) is dropped after it instead of holding a goroutine.
const raftHandshakeTimeout = 5 * time.Second

// tlsStreamLayer is the Raft transport's stream layer when the managers run
// TLS (DESIGN.md, "Raft over TLS"): a TCP listener whose connections are
// mutual TLS, and a dialer with the same config. Both ends present the
// manager certificate, verify the other's against the CA and require it to
// carry the manager role, so only a holder of a manager certificate of the
// deployment's CA takes part in Raft — a plain connection, one with a
// certificate of another CA, or a peer's or search head's certificate
// (review M6), is closed during the handshake, before Raft reads a byte.
type tlsStreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	config    *tls.Config // tlsconfig.Files.Mutual(tlsconfig.RaftRoles...)
}

// newTLSStreamLayer listens on bind; advertise (nil: the bound address) is
// what the other managers dial, and must be a usable IP address.
func newTLSStreamLayer(bind string, advertise net.Addr, config *tls.Config) (*tlsStreamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	l := &tlsStreamLayer{ln: ln, advertise: advertise, config: config}
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok || addr.IP == nil || addr.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft address %s is not advertisable: bind a specific address", l.Addr())
	}
	return l, nil
}

// Accept returns the next connection, its server-side handshake done on
// its first read or write (under raftHandshakeTimeout), so one slow client
// does not hold up the accept loop.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, l.config)}, nil
}

func (l *tlsStreamLayer) Close() error { return l.ln.Close() }

func (l *tlsStreamLayer) Addr() net.Addr {
	if l.advertise != nil {
		return l.advertise
	}
	return l.ln.Addr()
}

// Dial connects to another manager and completes the handshake within
// timeout; the certificate must name the host of address (an IP SAN for an
// IP address).
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 || timeout > raftHandshakeTimeout {
		timeout = raftHandshakeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: l.config}
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("raft tls dial %s: %w", address, err)
	}
	return c, nil
}

// handshakeConn is a server-side TLS connection whose handshake runs, with
// a deadline, on first use.
type handshakeConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *handshakeConn) handshake() error {
	c.once.Do(func() {
		if err := c.Conn.SetDeadline(time.Now().Add(raftHandshakeTimeout)); err != nil {
			c.err = err
			return
		}
		if c.err = c.Conn.Handshake(); c.err != nil {
			c.Conn.Close()
			return
		}
		c.err = c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

func (c *handshakeConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *handshakeConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
