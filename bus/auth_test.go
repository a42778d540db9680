package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// asyncErrors collects a connection's asynchronous errors.
type asyncErrors struct {
	mu   sync.Mutex
	errs []error
}

func (a *asyncErrors) add(err error) { a.mu.Lock(); a.errs = append(a.errs, err); a.mu.Unlock() }

func (a *asyncErrors) violation(subject string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.errs {
		if errors.Is(e, nats.ErrPermissionViolation) && strings.Contains(e.Error(), subject) {
			return nil
		}
	}
	return errors.New("no permissions violation for " + subject + " yet")
}

var testUsers = []User{
	{Name: "mgr", Password: "mgr-secret", Role: RoleManager},
	{Name: "peer", Password: "peer-secret", Role: RolePeer},
	{Name: "p1", Password: "p1-secret", Role: RolePeer, Site: "site1", Peer: "p1"},
	{Name: "sh", Password: "sh-secret", Role: RoleSearchHead, Head: "sh"},
	{Name: "watch", Password: "watch-secret", Role: RoleSubscriber},
}

func TestPeerCannotPublishFixupTask(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", User: "admin", Password: "admin-secret", Users: testUsers})
	url := s.ClientURL()
	p1 := mustConnect(t, url, ConnectOptions{User: "p1", Password: "p1-secret"})
	fixups, err := p1.SubscribeSync("quarry.fixup.site1.p1")
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Flush(); err != nil {
		t.Fatal(err)
	}

	var peerErrs asyncErrors
	peer := mustConnect(t, url, ConnectOptions{User: "peer", Password: "peer-secret", OnAsyncError: peerErrs.add})
	if err := peer.Publish("quarry.fixup.site1.p1", []byte(`{"task":"remove copy"}`)); err != nil {
		t.Fatal(err)
	}
	_ = peer.Flush()
	testutil.WaitFor(t, 5*time.Second, func() error { return peerErrs.violation("quarry.fixup.site1.p1") })

	// The manager may: its task is the first and only message p1 gets.
	mgr := mustConnect(t, url, ConnectOptions{User: "mgr", Password: "mgr-secret"})
	if err := mgr.Publish("quarry.fixup.site1.p1", []byte("from manager")); err != nil {
		t.Fatal(err)
	}
	m, err := fixups.NextMsg(2 * time.Second)
	if err != nil {
		t.Fatalf("manager's fixup task not delivered: %v", err)
	}
	if string(m.Data) != "from manager" {
		t.Fatalf("p1 received %q: the peer's forbidden task got through", m.Data)
	}
	if m, err := fixups.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("p1 received a second fixup message %q", m.Data)
	}
}

func TestRolePermissionsTable(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", User: "admin", Password: "admin-secret", Users: testUsers})
	url := s.ClientURL()
	admin := mustConnect(t, url, ConnectOptions{User: "admin", Password: "admin-secret"})
	// The admin sees every message that gets through.
	seen, err := admin.SubscribeSync("quarry.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = admin.Flush()

	type conn struct {
		nc   *nats.Conn
		errs *asyncErrors
	}
	conns := map[string]conn{}
	for _, u := range testUsers {
		e := &asyncErrors{}
		conns[u.Name] = conn{mustConnect(t, url, ConnectOptions{User: u.Name, Password: u.Password, OnAsyncError: e.add}), e}
	}
	pubs := []struct {
		user, subject string
		allowed       bool
	}{
		{"peer", "quarry.fixup.site1.p2", false},
		{"p1", "quarry.fixup.site1.p2", false},
		{"peer", "quarry.gen", false},
		{"peer", "quarry.results.x", false},
		{"peer", "quarry.search.site1", false},
		{"peer", "quarry.repl.site2.p4", true},
		{"peer", "quarry.mgr.heartbeat", true},
		{"peer", "quarry.bundle.abc", true},
		{"sh", "quarry.repl.site1.p1", false},
		{"sh", "quarry.fixup.site1.p1", false},
		{"sh", "quarry.gen", false},
		{"sh", "quarry.search.site1", true},
		{"sh", "quarry.results.errors", true},
		{"sh", "quarry.mgr.generation.sh", true},
		{"sh", "quarry.mgr.config.sh", true},
		{"sh", "quarry.mgr.generation.sh2", false},
		{"sh", "quarry.mgr.register.sh", false},
		{"sh", "quarry.mgr.heartbeat.sh", false},
		{"sh", "quarry.mgr.targets.sh", false},
		{"sh", "quarry.mgr.bundle.sh", false},
		{"p1", "quarry.mgr.bundle.p1", true},
		{"p1", "quarry.mgr.bundle.p2", false},
		// saved searches: a head claims slots under its own name and
		// publishes alerts; a peer does neither
		{"sh", "quarry.mgr.savedsearch.sh", true},
		{"sh", "quarry.mgr.savedsearch.sh2", false},
		{"sh", "quarry.alerts.errors", true},
		{"p1", "quarry.mgr.savedsearch.p1", false},
		{"peer", "quarry.mgr.savedsearch.p1", false},
		{"p1", "quarry.alerts.errors", false},
		{"p1", "quarry.mgr.register.p1", true},
		{"p1", "quarry.mgr.heartbeat.p1", true},
		{"p1", "quarry.mgr.register.p2", false},
		{"p1", "quarry.mgr.heartbeat.p2", false},
		{"p1", "quarry.mgr.bucket.p2", false},
		{"p1", "quarry.mgr.heartbeat", false},
		{"p1", "quarry.repl.site1.p2.p1", true},
		{"p1", "quarry.repl.site1.p2.p3", false},
		{"p1", "quarry.repl.site1.p2", false},
		{"mgr", "quarry.fixup.site2.p4", true},
		{"mgr", "quarry.gen", true},
		{"mgr", "quarry.repl.site1.p1", false},
		{"mgr", "quarry.search.site1", false},
		// idempotency key lookups (peer/DESIGN.md "Idempotent retries"):
		// peers ask under their own id only; no other role at all
		{"p1", "quarry.idem.site2.p4.p1", true},
		{"p1", "quarry.idem.site2.p4.p2", false},
		{"peer", "quarry.idem.site1.p2.p1", true},
		{"sh", "quarry.idem.site1.p1.sh", false},
		{"sh", "quarry.idem.site1.p1.p2", false},
		{"mgr", "quarry.idem.site1.p1.m1", false},
		{"watch", "quarry.idem.site1.p1.x", false},
		{"watch", "quarry.gen", false},
		{"watch", "quarry.results.x", false},
		{"watch", "quarry.mgr.heartbeat", false},
	}
	for _, p := range pubs {
		c := conns[p.user]
		if err := c.nc.Publish(p.subject, []byte(p.user+" "+p.subject)); err != nil {
			t.Fatal(err)
		}
		_ = c.nc.Flush()
		if p.allowed {
			m, err := seen.NextMsg(2 * time.Second)
			if err != nil || string(m.Data) != p.user+" "+p.subject {
				t.Fatalf("%s publishing %s: allowed, but admin saw %v, %v", p.user, p.subject, m, err)
			}
			if err := c.errs.violation(p.subject); err == nil {
				t.Fatalf("%s publishing %s: allowed, but got a violation", p.user, p.subject)
			}
		} else {
			testutil.WaitFor(t, 2*time.Second, func() error { return c.errs.violation(p.subject) })
		}
	}
	if m, err := seen.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("a forbidden message got through: %q on %s", m.Data, m.Subject)
	}

	// A peer narrowed to site1/p1 cannot listen to another peer's tasks.
	p1 := conns["p1"]
	if _, err := p1.nc.Subscribe("quarry.fixup.site1.p2", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	_ = p1.nc.Flush()
	testutil.WaitFor(t, 2*time.Second, func() error { return p1.errs.violation("quarry.fixup.site1.p2") })
	// Nor to another user's replies: its inbox is _INBOX.p1.> only.
	for _, sub := range []string{"_INBOX.>", "_INBOX.sh.>", "_INBOX.mgr.x"} {
		if _, err := p1.nc.Subscribe(sub, func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		_ = p1.nc.Flush()
		testutil.WaitFor(t, 2*time.Second, func() error { return p1.errs.violation(sub) })
	}
	// Nor to a site's searches or another peer's: each search request, and
	// the stream invite in it, reaches only its own peer (M4).
	for _, sub := range []string{"quarry.search.site1", "quarry.search.site1.p2", "quarry.search.>", "quarry.search.*.*"} {
		if _, err := p1.nc.Subscribe(sub, func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		_ = p1.nc.Flush()
		testutil.WaitFor(t, 2*time.Second, func() error { return p1.errs.violation(sub) })
	}
	// Nor to knowledge bundle fetches: only search heads answer them (and
	// a peer checks what it gets against the hash it asked for).
	if _, err := p1.nc.Subscribe("quarry.bundle.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	_ = p1.nc.Flush()
	testutil.WaitFor(t, 2*time.Second, func() error { return p1.errs.violation("quarry.bundle.>") })
	// Nor to another peer's key lookups.
	if _, err := p1.nc.Subscribe("quarry.idem.site1.p2.*", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	_ = p1.nc.Flush()
	testutil.WaitFor(t, 2*time.Second, func() error { return p1.errs.violation("quarry.idem.site1.p2.*") })
	// Nor a search head to fixup tasks or key lookups at all.
	sh := conns["sh"]
	for _, sub := range []string{"quarry.fixup.>", "quarry.idem.>"} {
		if _, err := sh.nc.Subscribe(sub, func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		_ = sh.nc.Flush()
		testutil.WaitFor(t, 2*time.Second, func() error { return sh.errs.violation(sub) })
	}
	// A subscriber hears generation notices and results, and no replication.
	w := conns["watch"]
	gen, err := w.nc.SubscribeSync("quarry.gen")
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.nc.SubscribeSync("quarry.results.>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.nc.Subscribe("quarry.repl.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	_ = w.nc.Flush()
	testutil.WaitFor(t, 2*time.Second, func() error { return w.errs.violation("quarry.repl.>") })
	conns["mgr"].nc.Publish("quarry.gen", []byte("gen 7"))
	conns["sh"].nc.Publish("quarry.results.errors", []byte("rows"))
	if m, err := gen.NextMsg(2 * time.Second); err != nil || string(m.Data) != "gen 7" {
		t.Fatalf("subscriber on quarry.gen: %v, %v", m, err)
	}
	if m, err := res.NextMsg(2 * time.Second); err != nil || string(m.Data) != "rows" {
		t.Fatalf("subscriber on quarry.results.>: %v, %v", m, err)
	}
}

func TestRolesRequestReplyThroughInboxes(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", Users: testUsers})
	mgr := mustConnect(t, s.ClientURL(), ConnectOptions{User: "mgr", Password: "mgr-secret"})
	p1 := mustConnect(t, s.ClientURL(), ConnectOptions{User: "p1", Password: "p1-secret"})
	mustServe(t, mgr, "quarry.mgr.register.*", ServeOptions{}, echo("leader"))
	resp, err := Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), p1, "quarry.mgr.register.p1", echoReq{Text: "p1"})
	if err != nil || resp.Server != "leader" {
		t.Fatalf("peer → manager request: %+v, %v", resp, err)
	}
	// Replies travel to the requester's own inboxes.
	if in := p1.NewInbox(); !strings.HasPrefix(in, "_INBOX.p1.") {
		t.Fatalf("p1's inbox %q: want _INBOX.p1.…", in)
	}
	// A stream from the manager to the peer: credits go to the manager's
	// inbox, chunks to the peer's, each subscribed by its owner only.
	rcv, err := NewReceiver(p1, 0, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(nil)
	errc := make(chan error, 1)
	go func() {
		snd, err := NewSender(ctxTimeout(t, 5*time.Second), mgr, rcv.Invite())
		if err == nil {
			if err = snd.Send(ctxTimeout(t, 5*time.Second), []byte("table")); err == nil {
				err = snd.Close(ctxTimeout(t, 5*time.Second))
			}
		}
		errc <- err
	}()
	b, err := rcv.Next(ctxTimeout(t, 5*time.Second))
	if err != nil || string(b) != "table" {
		t.Fatalf("stream through per-user inboxes: %q, %v", b, err)
	}
	if _, err := rcv.Next(ctxTimeout(t, 5*time.Second)); err == nil {
		t.Fatal("want the end of the stream")
	}
	rcv.Close(nil)
	if err := <-errc; err != nil {
		t.Fatalf("sender: %v", err)
	}
}

func TestBadCredentialsFailFast(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", Users: testUsers})
	start := time.Now()
	_, err := Connect(ctxTimeout(t, 5*time.Second), s.ClientURL(), ConnectOptions{User: "peer", Password: "wrong", Logger: quiet})
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("got %v, want an authorization error", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("bad credentials took %s to fail", time.Since(start))
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

func TestGatewayWithAuthCarriesFixupAcrossSites(t *testing.T) {
	s1, s2 := twoSites(t, "admin", "admin-secret", []User{
		{Name: "mgr", Password: "m", Role: RoleManager},
		{Name: "p4", Password: "p", Role: RolePeer, Site: "site2", Peer: "p4"},
	})
	p4 := mustConnect(t, s2.ClientURL(), ConnectOptions{User: "p4", Password: "p"})
	mgr := mustConnect(t, s1.ClientURL(), ConnectOptions{User: "mgr", Password: "m"})
	got := make(chan string, 16)
	if _, err := p4.Subscribe("quarry.fixup.site2.p4", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	_ = p4.Flush()
	testutil.WaitFor(t, 5*time.Second, func() error {
		_ = mgr.Publish("quarry.fixup.site2.p4", []byte("task"))
		_ = mgr.Flush()
		select {
		case <-got:
			return nil
		case <-time.After(100 * time.Millisecond):
			return errors.New("fixup task not delivered across the gateway")
		}
	})
}

func TestRequestOnForbiddenSubjectIsDeniedFast(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", Users: testUsers})
	mgr := mustConnect(t, s.ClientURL(), ConnectOptions{User: "mgr", Password: "mgr-secret"})
	p1 := mustConnect(t, s.ClientURL(), ConnectOptions{User: "p1", Password: "p1-secret"})
	peer := mustConnect(t, s.ClientURL(), ConnectOptions{User: "peer", Password: "peer-secret"})
	// Someone serves the subject: without the permission check the request
	// would be answered.
	handled := make(chan struct{}, 1)
	mustServe(t, p1, "quarry.fixup.site1.p1", ServeOptions{}, func(ctx context.Context, r echoReq) (echoResp, error) {
		handled <- struct{}{}
		return echoResp{Text: "done"}, nil
	})
	start := time.Now()
	_, err := Request[echoReq, echoResp](ctxTimeout(t, 5*time.Second), peer, "quarry.fixup.site1.p1", echoReq{Text: "remove copy"})
	if !errors.Is(err, ErrPermissionDenied) || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrPermissionDenied", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("denial took %s with a 5s deadline", took)
	}
	if !strings.Contains(err.Error(), "quarry.fixup.site1.p1") {
		t.Fatalf("error %q does not name the subject", err)
	}
	select {
	case <-handled:
		t.Fatal("the forbidden fixup task reached the peer")
	default:
	}
	// The manager's request goes through.
	if r, err := Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), mgr, "quarry.fixup.site1.p1", echoReq{}); err != nil || r.Text != "done" {
		t.Fatalf("manager's fixup request: %+v, %v", r, err)
	}
}

func TestViolationSubject(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
		ok   bool
	}{
		{fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "quarry.fixup.s.p"`), "quarry.fixup.s.p", true},
		{fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "quarry.fixup.>"`), "", false},
		{errors.New(`Permissions Violation for Publish to "x"`), "", false},
		{fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to ""`), "", false},
	} {
		got, ok := violationSubject(c.err)
		if got != c.want || ok != c.ok {
			t.Errorf("%v: got %q %v, want %q %v", c.err, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseRoleUser(f *testing.F) {
	for _, s := range []string{"manager=m:pw", "peer/site1/p1=p1:pw", "peer=p", "=x:y", "boss=a:b", "peer/a.b/c=x:y", "searchhead=sh:p:w"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseRoleUser(s)
		if err != nil {
			return
		}
		// Whatever parses is a valid user with buildable permissions.
		if err := u.validate(); err != nil {
			t.Fatalf("%q parsed to invalid %+v: %v", s, u, err)
		}
		if _, err := RolePermissions(Subjects{}, u); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
	})
}

// TestNarrowedPeerHearsItsOwnSubjects: a peer narrowed to site1/p1 may
// subscribe every subject a peer of a named site listens on — its site's
// and the default site's search and replication subjects (a single-site
// cluster lists every peer under "default"), its fixups, the generation
// notices — with no permissions violation, and hears what is sent there.
// (quarry dev logged a Subscription Violation per peer for
// quarry.search.default before the default site's search subjects were
// allowed.)
func TestNarrowedPeerHearsItsOwnSubjects(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", User: "admin", Password: "admin-secret", Users: testUsers})
	subj, err := NewSubjects(DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	admin := mustConnect(t, s.ClientURL(), ConnectOptions{User: "admin", Password: "admin-secret"})
	e := &asyncErrors{}
	p1 := mustConnect(t, s.ClientURL(), ConnectOptions{User: "p1", Password: "p1-secret", OnAsyncError: e.add})
	var subjects []string
	for _, site := range []string{"site1", replDefaultSite} {
		one, _ := subj.SearchPeer(site, "p1")
		repl, _ := subj.ReplTo(site, "p1")
		subjects = append(subjects, one, repl)
	}
	fixup, _ := subj.Fixup("site1", "p1")
	subjects = append(subjects, fixup, subj.Gen())
	subs := map[string]*nats.Subscription{}
	for _, sb := range subjects {
		sub, err := p1.SubscribeSync(sb)
		if err != nil {
			t.Fatal(err)
		}
		subs[sb] = sub
	}
	if err := p1.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, sb := range subjects {
		if err := admin.Publish(sb, []byte(sb)); err != nil {
			t.Fatal(err)
		}
		_ = admin.Flush()
		if m, err := subs[sb].NextMsg(2 * time.Second); err != nil || string(m.Data) != sb {
			t.Fatalf("p1 on %s: %v, %v", sb, m, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.errs) != 0 {
		t.Fatalf("p1 subscribing its own subjects: %v", e.errs)
	}
}
