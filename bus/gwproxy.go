package bus

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"sync"
	"time"
)

// gatewayProxy fronts one site's gateway port on loopback so that tests
// can cut a site off the others while its own clients stay connected (a
// real gateway partition, not a dead server). Every inbound gateway
// connection of the site goes through it (the site advertises the proxy's
// address); the proxy learns which site dialled from the CONNECT line the
// soliciting server sends first, so it can drop the connections of one
// remote site, or all of them.
type gatewayProxy struct {
	site   string
	ln     net.Listener
	target string

	mu        sync.Mutex
	blockAll  bool
	blockFrom map[string]bool
	conns     map[*proxiedConn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

type proxiedConn struct {
	client, server net.Conn
	from           string // the dialling site, once known
}

func (pc *proxiedConn) close() { pc.client.Close(); pc.server.Close() }

func startGatewayProxy(site string) (*gatewayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &gatewayProxy{site: site, ln: ln, blockFrom: map[string]bool{}, conns: map[*proxiedConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *gatewayProxy) addr() string { return p.ln.Addr().String() }

func (p *gatewayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.blockAll || p.closed || p.target == "" {
			p.mu.Unlock()
			c.Close()
			continue
		}
		target := p.target
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		pc := &proxiedConn{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pc.close()
			continue
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // server → client, as is
			defer p.wg.Done()
			_, _ = io.Copy(c, s)
			pc.close()
		}()
		go func() { // client → server, after reading who dials
			defer p.wg.Done()
			defer p.drop(pc)
			br := bufio.NewReader(c)
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			from := connectGateway(line)
			p.mu.Lock()
			pc.from = from
			blocked := p.blockAll || p.blockFrom[from]
			p.mu.Unlock()
			if blocked {
				return
			}
			if _, err := s.Write(line); err != nil {
				return
			}
			_, _ = io.Copy(s, br)
		}()
	}
}

func (p *gatewayProxy) drop(pc *proxiedConn) {
	pc.close()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// connectGateway returns the "gateway" field of a CONNECT protocol line.
func connectGateway(line []byte) string {
	rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("CONNECT "))
	if !ok {
		return ""
	}
	var ci struct {
		Gateway string `json:"gateway"`
	}
	_ = json.Unmarshal(rest, &ci)
	return ci.Gateway
}

// block drops and refuses connections from site ("" = from every site).
func (p *gatewayProxy) block(site string) {
	p.mu.Lock()
	if site == "" {
		p.blockAll = true
	} else {
		p.blockFrom[site] = true
	}
	var drop []*proxiedConn
	for pc := range p.conns {
		if site == "" || pc.from == site {
			drop = append(drop, pc)
		}
	}
	p.mu.Unlock()
	for _, pc := range drop {
		pc.close()
	}
}

// unblock lets connections from site ("" = every site) through again.
func (p *gatewayProxy) unblock(site string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if site == "" {
		p.blockAll = false
	} else {
		delete(p.blockFrom, site)
	}
}

func (p *gatewayProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]*proxiedConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, pc := range conns {
		pc.close()
	}
	p.wg.Wait()
}
