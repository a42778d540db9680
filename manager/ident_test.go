package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// stateHash is the leader's committed state hash.
func stateHash(t *testing.T, m *Manager) StateHash {
	t.Helper()
	h, err := m.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// settledHash is the leader's state hash once its planner has nothing more
// to commit: the hash unchanged over three leader ticks (the registrations
// just made may still plan fixup tasks, which must not be mistaken for
// the refused requests' doing).
func settledHash(t *testing.T, m *Manager) StateHash {
	t.Helper()
	ticks := func() uint64 {
		m.leadMu.Lock()
		defer m.leadMu.Unlock()
		return m.term.ticks
	}
	var h StateHash
	testutil.WaitFor(t, 20*time.Second, func() error {
		h = stateHash(t, m)
		t0, deadline := ticks(), time.Now().Add(10*time.Second)
		for ticks() < t0+3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling the tick counter
		}
		if again := stateHash(t, m); again != h {
			return fmt.Errorf("state still moving: %+v → %+v", h, again)
		}
		return nil
	})
	return h
}

// TestNATSRefusesTraversalIDs: ids from the network are validated where
// they arrive (SPEC §6): a register inventory, a targets request, a bucket
// event or a generation request naming a path is refused as bad_request,
// and the committed state does not move.
func TestNATSRefusesTraversalIDs(t *testing.T) {
	b := startTestBus(t, "p1")
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p1 := newFakePeer(t, b, "p1")
	p1.register(ctx, nil)
	// p1 heartbeats, so no PeerDown (no heartbeat for heartbeat_timeout)
	// moves the state while the refusals are checked (seen under load).
	p1.startHeartbeats()
	defer p1.stopHeartbeats()
	l := g.leader()
	before := settledHash(t, l)

	bad := []string{"main~7~x/../../..", "main~7~..", "..~7~g", "main~../x~g", "main~7~g\\..", "Main~7~g", "main~7~g~x", "main~-1~g"}
	for _, id := range bad {
		_, err := p1.cli.Register(ctx, api.Register{RequestID: "reg-bad-" + id, Peer: "p1", GUID: p1.guid, Site: "site1",
			Inventory: []api.Copy{{Bucket: id, Index: "main", State: api.CopyWarm, Blocks: 1}}})
		if !bus.IsRemote(err, api.CodeBadRequest) {
			t.Fatalf("register with inventory entry %q: %v, want bad_request", id, err)
		}
		_, err = p1.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "ev-" + id, Kind: api.EventCopyAdded, Bucket: id, Peer: "p1"})
		if !bus.IsRemote(err, api.CodeBadRequest) {
			t.Fatalf("bucket event for %q: %v, want bad_request", id, err)
		}
	}
	for _, r := range []api.TargetsRequest{
		{RequestID: "t1", Index: "../main", LocalID: "1", Origin: "p1"},
		{RequestID: "t2", Index: "main", LocalID: "1/../..", Origin: "p1"},
		{RequestID: "t3", Index: "main", LocalID: "1", Origin: "p1/.."},
	} {
		if _, err := p1.cli.Targets(ctx, r); !bus.IsRemote(err, api.CodeBadRequest) {
			t.Fatalf("targets %+v: %v, want bad_request", r, err)
		}
	}
	if _, err := p1.cli.Generation(ctx, "../site1", 0); !bus.IsRemote(err, api.CodeBadRequest) {
		t.Fatalf("generation for site ../site1: %v, want bad_request", err)
	}
	if after := stateHash(t, l); after != before {
		t.Fatalf("state moved: %+v → %+v", before, after)
	}
	var n int
	l.Read(func(s *fsm.State) { n = len(s.BucketList("", "")) })
	if n != 0 {
		t.Fatalf("%d buckets after refused requests", n)
	}
}

// TestNATSSenderIsThePeer: every operation's subject names its sender
// (quarry.mgr.<op>.<sender>), a narrowed peer user may publish only under
// its own id, and the manager checks the operation's peer id against the
// sender: p1 cannot register, heartbeat, report a corrupt copy or ask
// targets for p2 — refused by the server under p2's subject, by the
// manager under its own — and a heartbeat with another GUID is not taken.
func TestNATSSenderIsThePeer(t *testing.T) {
	b := startTestBus(t, "p1", "p2")
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p1, p2 := newFakePeer(t, b, "p1"), newFakePeer(t, b, "p2")
	warm := fsm.BucketID("main", "0", p2.guid)
	p1.register(ctx, nil)
	p2.register(ctx, []api.Copy{{Bucket: warm, Index: "main", State: api.CopyWarm, Searchable: true, Blocks: 3, Events: 9}})
	// Both heartbeat, so no PeerDown moves the state meanwhile.
	for _, p := range []*fakePeer{p1, p2} {
		p.startHeartbeats()
		defer p.stopHeartbeats()
	}
	l := g.leader()
	before := settledHash(t, l)

	// Under p2's subject: the server refuses p1's user.
	forged := mgrclient.NewManagerClient(p1.nc, b.subj)
	forged.Sender = "p2"
	if _, err := forged.Register(ctx, api.Register{RequestID: "forged-1", Peer: "p2", GUID: "guid-evil", Site: "site1"}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("p1 registering under p2's subject: %v, want permission denied", err)
	}
	if _, err := forged.Heartbeat(ctx, api.Heartbeat{Peer: "p2", GUID: p2.guid}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("p1 heartbeating under p2's subject: %v, want permission denied", err)
	}
	if _, err := forged.BucketEvent(ctx, api.BucketEvent{RequestID: "forged-2", Kind: api.EventCorrupt, Bucket: warm, Peer: "p2"}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("p1 reporting p2's copy corrupt under p2's subject: %v, want permission denied", err)
	}
	// Under its own subject with p2 in the body: the manager refuses it.
	for what, call := range map[string]func() error{
		"register": func() error {
			_, err := p1.cli.Register(ctx, api.Register{RequestID: "forged-3", Peer: "p2", GUID: "guid-evil", Site: "site1"})
			return err
		},
		"heartbeat": func() error { _, err := p1.cli.Heartbeat(ctx, api.Heartbeat{Peer: "p2", GUID: p2.guid}); return err },
		"corrupt report": func() error {
			_, err := p1.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "forged-4", Kind: api.EventCorrupt, Bucket: warm, Peer: "p2"})
			return err
		},
		"copy removed": func() error {
			_, err := p1.cli.BucketEvent(ctx, api.BucketEvent{RequestID: "forged-5", Kind: api.EventCopyRemoved, Bucket: warm, Peer: "p2"})
			return err
		},
		"targets": func() error {
			_, err := p1.cli.Targets(ctx, api.TargetsRequest{RequestID: "forged-6", Index: "main", LocalID: "5", Origin: "p2"})
			return err
		},
		"fixup result": func() error {
			_, err := p1.cli.FixupResult(ctx, api.FixupResult{ID: 1, Peer: "p2", OK: true})
			return err
		},
		"confirm": func() error { _, err := p1.cli.Confirm(ctx, 1, "p2"); return err },
	} {
		err := call()
		if !bus.IsRemote(err, api.CodeBadRequest) || !strings.Contains(err.Error(), ErrNotSender.Error()) {
			t.Fatalf("p1 sending a %s for p2: %v, want bad_request (%v)", what, err, ErrNotSender)
		}
	}
	// A heartbeat of another incarnation (GUID) is not taken.
	if r, err := p2.cli.Heartbeat(ctx, api.Heartbeat{Peer: "p2", GUID: "guid-evil"}); err != nil || !r.Reregister {
		t.Fatalf("heartbeat with another GUID: %+v, %v; want reregister", r, err)
	}
	if r, err := p2.cli.Heartbeat(ctx, api.Heartbeat{Peer: "p2"}); err != nil || !r.Reregister {
		t.Fatalf("heartbeat without a GUID: %+v, %v; want reregister", r, err)
	}
	if after := stateHash(t, l); after != before {
		t.Fatalf("state moved: %+v → %+v", before, after)
	}
	// p2 itself is heard.
	if r, err := p2.cli.Heartbeat(ctx, api.Heartbeat{Peer: "p2", GUID: p2.guid}); err != nil || r.Reregister {
		t.Fatalf("p2's own heartbeat: %+v, %v", r, err)
	}
}

// TestNATSSearchHeadCannotRegister: a search head's user may send only
// generation and config requests under its own name: registering as a
// peer is refused by the server, its generation request is answered.
func TestNATSSearchHeadCannotRegister(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := startTestBusWith(t, []string{"sh1"})
	subj := b.subj
	g := newGroup(t, 1, func(c *Config) { c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw" })
	l := g.leader()
	// The bootstrap seed (config, indexes) is committed after the
	// election and the cluster version is raised at the first leader
	// tick: the state compared is the settled one, or those entries look
	// like the search head's doing (seen under -race and in CI).
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !l.mux.seeded() {
			return errors.New("seed not committed yet")
		}
		return nil
	})
	var cfg fsm.Config
	l.Read(func(s *fsm.State) { cfg = s.Config() })
	cfg.HECTokens = append(cfg.HECTokens, fsm.HECToken{Token: "hec-secret-1", Ack: true})
	g.apply(&fsm.SetConfig{Config: cfg})
	before := settledHash(t, l)
	sh := mgrclient.NewManagerClient(b.connect(t, "sh1", "sh1-pw"), subj)
	sh.Sender = "sh1"
	if _, err := sh.Register(ctx, api.Register{RequestID: "sh-reg", Peer: "sh1", GUID: "guid-sh1", Site: "site1"}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("search head registering as a peer: %v, want permission denied", err)
	}
	if _, err := sh.Heartbeat(ctx, api.Heartbeat{Peer: "sh1", GUID: "guid-sh1"}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("search head heartbeating: %v, want permission denied", err)
	}
	if _, err := sh.Targets(ctx, api.TargetsRequest{RequestID: "sh-t", Index: "main", LocalID: "1", Origin: "sh1"}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("search head asking targets: %v, want permission denied", err)
	}
	if _, err := sh.FetchGeneration(ctx, fsm.Site0, 0, 0); err != nil {
		t.Fatalf("search head's generation request: %v", err)
	}
	// Review L1: a head gets the search tokens' digests, never the HEC
	// tokens' or the admin token's; naming itself as a peer is refused.
	pc, err := sh.Config(ctx, "")
	if err != nil {
		t.Fatalf("search head's config request: %v", err)
	}
	if len(pc.HECTokens) != 0 || pc.AdminTokenDigest != "" || pc.ID == "" {
		t.Fatalf("search head's config carries HEC tokens %v, admin digest %q (id %q): want none, under the whole config's id", pc.HECTokens, pc.AdminTokenDigest, pc.ID)
	}
	if _, err := sh.Config(ctx, "sh1"); !bus.IsRemote(err, api.CodeRefused) {
		t.Fatalf("search head asking a peer's config under its own name: %v, want refused", err)
	}
	if _, err := sh.Bundle(ctx, "sh1"); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("search head asking the configuration bundle: %v, want permission denied", err)
	}
	if after := stateHash(t, l); after != before {
		t.Fatalf("state moved: %+v → %+v", before, after)
	}
}
