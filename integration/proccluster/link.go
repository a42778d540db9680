package proccluster

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
)

// Link is a TCP forwarder on loopback that carries one direction of the
// gateway traffic between two sites' NATS nodes (each node's --gateways
// and --gateway-advertise name the other side's Link, so no gossiped
// address bypasses it). Cutting it is a real network cut between the
// sites: the processes and the nodes keep running, only the link fails.
type Link struct {
	Name   string
	ln     net.Listener
	target string
	log    *slog.Logger

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	refuse  bool          // reset mode: new connections are closed at once
	blocked chan struct{} // blackhole mode: non-nil while forwarding is held
	closed  bool
}

// Link cut modes.
const (
	// CutReset closes every connection through the link and refuses new
	// ones (the peer sees a reset, as behind a rebooted router).
	CutReset = "reset"
	// CutBlackhole keeps the connections but forwards nothing (packets
	// dropped silently, as behind a failed switch): neither side notices
	// until its own timeouts fire; what was held is delivered at the heal.
	CutBlackhole = "blackhole"
)

// newLink forwards what ln accepts to target; ln is the link's own.
func newLink(name string, ln net.Listener, target string, log *slog.Logger) *Link {
	l := &Link{Name: name, ln: ln, target: target, log: log, conns: map[net.Conn]struct{}{}}
	go l.accept()
	return l
}

// Addr is the address the link listens on.
func (l *Link) Addr() string { return l.ln.Addr().String() }

func (l *Link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		refuse := l.refuse || l.closed
		if !refuse {
			l.conns[c] = struct{}{}
		}
		l.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		go l.serve(c)
	}
}

func (l *Link) serve(c net.Conn) {
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		l.drop(c)
		return
	}
	l.mu.Lock()
	if l.refuse || l.closed {
		l.mu.Unlock()
		up.Close()
		l.drop(c)
		return
	}
	l.conns[up] = struct{}{}
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { l.pipe(up, c); done <- struct{}{} }()
	go func() { l.pipe(c, up); done <- struct{}{} }()
	<-done
	l.drop(c)
	l.drop(up)
}

// pipe copies src to dst, holding each chunk while the link is blackholed.
func (l *Link) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			l.mu.Lock()
			hold := l.blocked
			l.mu.Unlock()
			if hold != nil {
				<-hold
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				l.log.Debug("link copy ended", "link", l.Name, "err", err)
			}
			return
		}
	}
}

func (l *Link) drop(c net.Conn) {
	c.Close()
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// Cut cuts the link in mode (CutReset or CutBlackhole) until Heal.
func (l *Link) Cut(mode string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if mode == CutBlackhole {
		if l.blocked == nil {
			l.blocked = make(chan struct{})
		}
		return
	}
	l.refuse = true
	for c := range l.conns {
		c.Close()
	}
}

// Heal restores the link: new connections are accepted and held bytes flow.
func (l *Link) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refuse = false
	if l.blocked != nil {
		close(l.blocked)
		l.blocked = nil
	}
}

// Close stops the link for good.
func (l *Link) Close() {
	l.Heal()
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.ln.Close()
}
