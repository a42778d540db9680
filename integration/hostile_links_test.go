package integration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// TestHostileRogueBusNodes (review M6; SECURITY.md "bus ↔ bus routes and
// gateways"; the hostile-process suite): a NATS server holding a valid
// peer's certificate, then one holding a search head's, tries to join a
// site's bus as a route and to connect to a site as a gateway from a
// made-up site (site9), against the cluster's own bus nodes (TLS with one
// certificate per role, one NATS user per process, a route listener on
// every node). The rogue is given the bus's admin user and password as
// well, which routes and gateways also authenticate with, so the role in
// its certificate is all that stands in its way. Each attempt is refused
// in the TLS handshake (the real node logs the role it saw); no real node
// gains a route or a gateway and the rogue sees no remote; a forged fixup
// task published on the rogue never reaches the peer's fixup subject on
// the real bus, nor does a real message on that subject reach the rogue's
// subscriber of everything; every manager's state hash and every peer's
// files are the same afterwards.
func TestHostileRogueBusNodes(t *testing.T) {
	certs, err := tlsconfig.GenerateRoles(t.TempDir(), []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	logs := &handshakeLog{}
	c := Start(t, Options{RoleUsers: true, PeersPerSite: 2, TLS: certs[tlsconfig.RolePeer], TLSRoles: certs, Routes: true,
		Logger: slog.New(logs)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ctx, "site1-p1", Batches("rogue", 200, 100), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v (%d batches not acked)", err, len(un))
	}
	waitComplete(t, c)
	before := settledSnapshot(t, c)
	links := busLinks(t, c)
	for _, s := range c.Bus.Servers {
		if out, _ := gatewayNames(t, s); len(out) != len(c.Opts.Sites)-1 || s.ClusterURL() == "" {
			t.Fatalf("%s before the attempts: %s, route listener %q; want a gateway to each other site and a route listener", s.Name(), links[s.Site()], s.ClusterURL())
		}
	}
	for _, a := range []rogueNode{
		{role: tlsconfig.RolePeer, link: "route", site: "site1"},
		{role: tlsconfig.RolePeer, link: "gateway", site: "site2"},
		{role: tlsconfig.RoleSearchHead, link: "route", site: "site2"},
		{role: tlsconfig.RoleSearchHead, link: "gateway", site: "site1"},
	} {
		start := time.Now()
		a.t, a.ctx, a.c, a.files, a.logs = t, ctx, c, certs[a.role], logs
		a.attempt(links)
		t.Logf("a %s certificate as a %s into %s: refused, nothing crossed (%v)", a.role, a.link, a.site, time.Since(start).Round(time.Millisecond))
	}
	if got := busLinks(t, c); !maps.Equal(got, links) {
		t.Fatalf("the real bus nodes' links changed: %v, then %v", links, got)
	}
	if err := before.diff(takeSnapshot(t, c)); err != nil {
		t.Fatalf("rogue bus nodes changed something: %v", err)
	}
}

// rogueNode is one attempt of TestHostileRogueBusNodes: a NATS node
// presenting files (a certificate of role) dials site's real bus node as
// a route (of site's cluster) or a gateway (of site9).
type rogueNode struct {
	role, link, site string

	t     *testing.T
	ctx   context.Context
	c     *Cluster
	files tlsconfig.Files
	logs  *handshakeLog
}

// attempt starts the rogue node and checks that its link is refused for
// its certificate's role, that neither side has a link the other did not
// have (links: every real node's, before), and that no message crosses.
func (a rogueNode) attempt(links map[string]string) {
	t := a.t
	t.Helper()
	real := a.c.Bus.Server(a.site)
	mark := a.logs.mark()
	cfg := bus.ServerConfig{Name: "rogue-" + a.role + "-" + a.link, Site: a.site, Listen: "127.0.0.1:0",
		User: AdminNATSUser, Password: AdminNATSPassword,
		TLSCert: a.files.Cert, TLSKey: a.files.Key, TLSCA: a.files.CA, Logger: quietLogger()}
	switch a.link {
	case "route":
		if real.ClusterURL() == "" {
			t.Fatalf("%s has no route listener (Options.Routes)", real.Name())
		}
		cfg.ClusterListen, cfg.Routes = "127.0.0.1:0", []string{real.ClusterURL()}
	case "gateway":
		cfg.Site = "site9"
		cfg.GatewayListen, cfg.Gateways = "127.0.0.1:0", map[string][]string{a.site: {real.GatewayURL()}}
	}
	rogue, err := bus.StartServer(a.ctx, cfg)
	if err != nil {
		t.Fatalf("start the rogue node: %v", err)
	}
	t.Cleanup(rogue.Shutdown)
	defer rogue.Shutdown()
	// The rogue dialled and the real node refused it in the handshake,
	// for the role its certificate carries (not for a password: it has
	// the admin's).
	wantLine := []string{"TLS " + a.link + " handshake error", fmt.Sprintf("carries role %s, this link wants role bus or manager", a.role)}
	testutil.WaitFor(t, 20*time.Second, func() error { return a.logs.since(mark, wantLine...) })
	if n := rogue.RoutedServers(); n != 0 {
		t.Fatalf("the rogue node has routes to %d nodes, want 0", n)
	}
	if out, in := gatewayNames(t, rogue); len(out)+len(in) != 0 {
		t.Fatalf("the rogue node has gateways out %v, in %v; want none", out, in)
	}
	if got := busLinks(t, a.c); !maps.Equal(got, links) {
		t.Fatalf("the real bus nodes' links changed: %v, then %v", links, got)
	}
	a.nothingCrosses(rogue)
}

// nothingCrosses: a fixup task forged on the rogue node, for the first
// peer of the site it dialled, never reaches that subject on the real bus
// (a witness subscribes there beside the peer), and a real task there
// never reaches the rogue's subscriber of every subject.
func (a rogueNode) nothingCrosses(rogue *bus.Server) {
	t, c := a.t, a.c
	t.Helper()
	target := a.site + "-p1"
	subj, _ := bus.NewSubjects("")
	fixSubj, err := subj.Fixup(a.site, target)
	if err != nil {
		t.Fatal(err)
	}
	witness := a.connect(c.Bus.Server(a.site).ClientURL())
	onReal := make(chan *nats.Msg, 64)
	if _, err := witness.ChanSubscribe(fixSubj, onReal); err != nil {
		t.Fatal(err)
	}
	rc := a.connect(rogue.ClientURL())
	onRogue := make(chan *nats.Msg, 256)
	if _, err := rc.ChanSubscribe(">", onRogue); err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{witness, rc} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The forged task: a destructive removal of a copy the peer holds,
	// as only a manager may send.
	forged := api.FixupTask{V: api.WireVersion, ID: 880001, Kind: fsm.TaskRemoveCopy, Bucket: bucketHeldBy(c, target),
		Target: target, Destructive: true, To: target}
	if err := bus.Publish(rc, fixSubj, forged); err != nil {
		t.Fatal(err)
	}
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The positive control, sent after the forged task was flushed into
	// the rogue node: a task on the same subject from the other site's
	// real node (across the real gateway), which the peer answers (it
	// refuses it: its bucket id names a path, so nothing changes).
	sender := a.connect(c.Bus.Server(otherSite(c, a.site)).ClientURL())
	control := api.FixupTask{V: api.WireVersion, ID: 880002, Kind: fsm.TaskRemoveCopy, Bucket: "main~7~x/../../..", Target: target,
		Destructive: true, To: target}
	rctx, rcancel := context.WithTimeout(a.ctx, 10*time.Second)
	ack, err := bus.Request[api.FixupTask, api.FixupAck](rctx, sender, fixSubj, control)
	rcancel()
	if err != nil || ack.Accepted || ack.Reason == "" {
		t.Fatalf("the control task through the real bus: %+v, %v; want refused with a reason", ack, err)
	}
	// Once both controls are in, the forged task is published again: a
	// link that came up just before the first would by then have carried
	// the real side's interest in the subject to the rogue.
	a.watch(onReal, onRogue, forged.ID, control.ID, func() {
		if err := bus.Publish(rc, fixSubj, forged); err != nil {
			t.Fatal(err)
		}
		if err := rc.Flush(); err != nil {
			t.Fatal(err)
		}
	})
}

// watch reads what the real witness (onReal) and the rogue's subscriber
// (onRogue) receive: first until each has its own side's message (the
// control on the real bus, the forged task on the rogue, so both
// subscriptions work), then, after again (the forged task published once
// more), for a bounded window. "Never arrives" is that window: a forged
// task that crossed would travel one link, no farther than the control's
// gateway hop, and the first was on its way before the control was even
// sent (it was flushed into the rogue first); the window after the
// controls arrived leaves room for scheduling on a loaded machine.
// Neither may see the other side's message at any time. (With the role
// check off, so that the rogue links, this catches the forged task on the
// real bus, across a route and a gateway.)
func (a rogueNode) watch(onReal, onRogue <-chan *nats.Msg, forgedID, controlID uint64, again func()) {
	t := a.t
	t.Helper()
	const window = 2 * time.Second
	id := func(m *nats.Msg) uint64 {
		var task api.FixupTask
		if bus.Decode(m, &task) != nil {
			return 0
		}
		return task.ID
	}
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	var realGot, rogueGot bool
	var after <-chan time.Time
	for {
		select {
		case m := <-onReal:
			switch id(m) {
			case forgedID:
				t.Fatalf("the task forged on the rogue %s node reached %s on the real bus", a.link, m.Subject)
			case controlID:
				realGot = true
			}
		case m := <-onRogue:
			switch id(m) {
			case controlID:
				t.Fatalf("a real task on %s reached the rogue %s node", m.Subject, a.link)
			case forgedID:
				rogueGot = true
			}
		case <-deadline.C:
			t.Fatalf("control messages: on the real bus %v, on the rogue node %v; want both", realGot, rogueGot)
		case <-after:
			return
		}
		if realGot && rogueGot && after == nil {
			again()
			after = time.After(window)
		}
	}
}

func (a rogueNode) connect(url string) *nats.Conn {
	a.t.Helper()
	nc, err := bus.Connect(a.ctx, url, bus.ConnectOptions{Name: "test rogue " + a.link, User: AdminNATSUser, Password: AdminNATSPassword,
		Logger: quietLogger(), TLSCA: a.files.CA})
	if err != nil {
		a.t.Fatalf("connect to %s: %v", url, err)
	}
	a.t.Cleanup(nc.Close)
	return nc
}

// busLinks describes every real bus node's links: the nodes it routes to,
// the sites of its outbound and inbound gateways.
func busLinks(t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range c.Bus.Servers {
		gout, gin := gatewayNames(t, s)
		out[s.Site()] = fmt.Sprintf("routes to %d nodes, gateways out %v, in %v", s.RoutedServers(), gout, gin)
	}
	return out
}

// gatewayNames are the sites of s's outbound and inbound gateways, sorted.
func gatewayNames(t *testing.T, s *bus.Server) (out, in []string) {
	t.Helper()
	gz, err := s.NATS().Gatewayz(&server.GatewayzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(gz.OutboundGateways)), slices.Sorted(maps.Keys(gz.InboundGateways))
}

// bucketHeldBy is a bucket peer holds a copy of ("" if none).
func bucketHeldBy(c *Cluster, peer string) string {
	var id string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			for _, cp := range b.Copies {
				if cp.Peer == peer {
					id = b.ID
				}
			}
		}
	})
	return id
}

// otherSite is a site of c other than site.
func otherSite(c *Cluster, site string) string {
	for _, s := range c.Opts.Sites {
		if s != site {
			return s
		}
	}
	return site
}

// handshakeLog is a slog.Handler keeping the messages of warnings and
// errors that tell of a refused TLS handshake (the bus nodes log one per
// refused route or gateway); everything else is dropped.
type handshakeLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *handshakeLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *handshakeLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "handshake error") {
		h.mu.Lock()
		h.lines = append(h.lines, r.Message)
		h.mu.Unlock()
	}
	return nil
}

func (h *handshakeLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *handshakeLog) WithGroup(string) slog.Handler      { return h }

// mark is the count of lines so far, for since.
func (h *handshakeLog) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lines)
}

// since finds a line after mark that contains every part.
func (h *handshakeLog) since(mark int, parts ...string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.lines[mark:] {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("no log line with %q since the rogue started (%d lines in all)", parts, len(h.lines))
}
