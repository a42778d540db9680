package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer/repl"
)

// dirSnapshot is every file and folder under dir: path → content hash.
func dirSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// clusterSnapshot is every manager's state hash and every peer's files.
type clusterSnapshot struct {
	hashes map[string]manager.StateHash
	files  map[string]map[string]string
}

func takeSnapshot(t *testing.T, c *Cluster) clusterSnapshot {
	t.Helper()
	s := clusterSnapshot{hashes: map[string]manager.StateHash{}, files: map[string]map[string]string{}}
	c.Mu.Lock()
	mgrs := map[string]*manager.Manager{}
	for id, m := range c.Managers {
		mgrs[id] = m
	}
	c.Mu.Unlock()
	for id, m := range mgrs {
		h, err := m.StateHash()
		if err != nil {
			t.Fatal(err)
		}
		s.hashes[id] = h
	}
	for _, id := range c.PeerIDs() {
		s.files[id] = dirSnapshot(t, c.PeerDataDir(id))
	}
	return s
}

func (s clusterSnapshot) diff(o clusterSnapshot) error {
	for id, h := range s.hashes {
		if o.hashes[id] != h {
			return fmt.Errorf("manager %s: state %+v, then %+v", id, h, o.hashes[id])
		}
	}
	for id, files := range s.files {
		for path, sum := range files {
			if o.files[id][path] != sum {
				return fmt.Errorf("peer %s: %s changed or went (%s → %q)", id, path, sum, o.files[id][path])
			}
		}
		for path := range o.files[id] {
			if _, ok := files[path]; !ok {
				return fmt.Errorf("peer %s: %s appeared", id, path)
			}
		}
	}
	return nil
}

// asyncErrs collects a connection's asynchronous errors.
type asyncErrs struct {
	mu   sync.Mutex
	errs []error
}

func (a *asyncErrs) add(err error) { a.mu.Lock(); a.errs = append(a.errs, err); a.mu.Unlock() }

func (a *asyncErrs) violation(subject string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.errs {
		if errors.Is(e, nats.ErrPermissionViolation) && strings.Contains(e.Error(), subject) {
			return nil
		}
	}
	return fmt.Errorf("no permissions violation for %s yet", subject)
}

// TestClusterForgedSendersRefused (SPEC §6, §11): with one NATS user per
// process, nothing a peer or a search head forges in another's name gets
// through, and no id naming a path is taken. A peer publishing a
// register, heartbeat or corrupt report for another peer is refused by the
// server, and under its own subject with the other's id by the managers; a
// search head cannot register; a peer cannot subscribe to _INBOX.> or
// another user's inbox; a replication roll or frames for a bucket whose
// origin the sender is not are refused by the replica, under the origin's
// subject by the server; a traversal bucket id in frames, in an inventory
// or in a fixup task is refused. Every manager's state hash and every
// peer's files are the same before and after; ingest, replication and
// search still work.
func TestClusterForgedSendersRefused(t *testing.T) {
	c := Start(t, Options{RoleUsers: true, PeersPerSite: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	subj, _ := bus.NewSubjects("")
	origin := "site1-p1"
	acked, un, err := c.IngestAcked(ctx, origin, Batches("ident", 300, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest through %s: %v (%d batches not acked)", origin, err, len(un))
	}
	var bucket, target string
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", origin) {
			if b.Origin != origin || !b.Hot {
				continue
			}
			for _, cp := range b.Copies {
				if cp.Peer != origin {
					bucket, target = b.ID, cp.Peer
				}
			}
		}
	})
	if bucket == "" {
		t.Fatal("no hot bucket of site1-p1 with a replica")
	}
	var attacker string
	for _, id := range c.PeerIDs() {
		if id != origin && id != target {
			attacker = id
			break
		}
	}
	originGUID := c.Peer(origin).GUID()
	connect := func(user, pass, site string, errs *asyncErrs) *nats.Conn {
		t.Helper()
		o := bus.ConnectOptions{Name: "test " + user, User: user, Password: pass, Logger: quietLogger()}
		if errs != nil {
			o.OnAsyncError = errs.add
		}
		nc, err := bus.Connect(ctx, c.Bus.Server(site).ClientURL(), o)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	attErrs := &asyncErrs{}
	att := connect(attacker, NATSPassword(attacker), siteOf(attacker), attErrs)
	admin := connect(AdminNATSUser, AdminNATSPassword, "site1", nil)

	// The real frames of the bucket, read from its origin (a read is
	// anyone's), to forge with.
	fetchSubj, _ := subj.Repl(siteOf(origin), origin, AdminNATSUser)
	fetched, err := bus.Request[repl.Request, repl.Reply](ctx, admin, fetchSubj,
		repl.Request{V: repl.Version, Op: repl.OpFetch, Bucket: bucket, Index: "main", Origin: AdminNATSUser})
	if err != nil || len(fetched.Frames) == 0 {
		t.Fatalf("fetch %s from its origin: %d frames, %v", bucket, len(fetched.Frames), err)
	}

	// Settled: nothing moves while the forgeries are sent.
	before := settledSnapshot(t, c)

	toTarget, _ := subj.Repl(siteOf(target), target, attacker)
	send := func(r repl.Request) error {
		r.V = repl.Version
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		_, err := bus.Request[repl.Request, repl.Reply](rctx, att, toTarget, r)
		return err
	}
	refusedAsNotOrigin := func(what string, err error) {
		t.Helper()
		if !bus.IsRemote(err, bus.CodeBadRequest) || !strings.Contains(err.Error(), "not the bucket's origin") {
			t.Fatalf("%s: %v, want refused: not the bucket's origin", what, err)
		}
	}
	n := len(fetched.Frames)
	refusedAsNotOrigin("a forged roll claiming the origin", send(repl.Request{Op: repl.OpRoll, Bucket: bucket, Index: "main", Origin: origin, Blocks: n}))
	refusedAsNotOrigin("a forged roll from the attacker", send(repl.Request{Op: repl.OpRoll, Bucket: bucket, Index: "main", Origin: attacker, Blocks: n}))
	refusedAsNotOrigin("forged frames for the bucket", send(repl.Request{Op: repl.OpBlocks, Bucket: bucket, Index: "main", Origin: origin,
		First: 0, Frames: fetched.Frames}))
	refusedAsNotOrigin("forged frames making a new copy", send(repl.Request{Op: repl.OpBlocks, Bucket: fsm.BucketID("main", "977", originGUID),
		Index: "main", Origin: origin, Frames: fetched.Frames}))
	if err := send(repl.Request{Op: repl.OpBlocks, Bucket: fsm.BucketID("main", "978", originGUID), Index: "main", Origin: attacker,
		Task: 987654321, Frames: fetched.Frames}); err == nil {
		t.Fatal("frames under a task that is not open were taken")
	}
	for _, id := range []string{"main~7~x/../../..", "main~7~..", "../main~7~" + originGUID} {
		if err := send(repl.Request{Op: repl.OpBlocks, Bucket: id, Index: "main", Origin: attacker, Frames: fetched.Frames}); !bus.IsRemote(err, bus.CodeBadRequest) {
			t.Fatalf("frames for bucket %q: %v, want bad_request", id, err)
		}
	}
	if err := send(repl.Request{Op: repl.OpRoll, Bucket: "main~7~x/../../..", Index: "main", Origin: attacker, Blocks: 1}); !bus.IsRemote(err, bus.CodeBadRequest) {
		t.Fatalf("a roll of bucket main~7~x/../../..: %v, want bad_request", err)
	}
	// Even the origin's own roll never cuts a copy: one shorter than the
	// replica is refused (a cut is a confirmed truncate task's work). The
	// admin user may publish under the origin's subject, the origin's
	// user could.
	asOriginAdmin, _ := subj.Repl(siteOf(target), target, origin)
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = bus.Request[repl.Request, repl.Reply](rctx, admin, asOriginAdmin, repl.Request{V: repl.Version, Op: repl.OpRoll, Bucket: bucket,
		Index: "main", Origin: origin, Blocks: n - 1})
	rcancel()
	if !bus.IsRemote(err, bus.CodeBadRequest) || !strings.Contains(err.Error(), "does not truncate") {
		t.Fatalf("the origin's roll at %d of %d blocks: %v, want refused: a roll does not truncate", n-1, n, err)
	}
	// Under the origin's subject the server refuses the attacker.
	asOrigin, _ := subj.Repl(siteOf(target), target, origin)
	rctx, rcancel = context.WithTimeout(ctx, 5*time.Second)
	_, err = bus.Request[repl.Request, repl.Reply](rctx, att, asOrigin, repl.Request{V: repl.Version, Op: repl.OpRoll, Bucket: bucket, Index: "main", Origin: origin, Blocks: n})
	rcancel()
	if !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("a roll under the origin's subject: %v, want permission denied", err)
	}

	// Manager operations in another peer's name.
	forged := mgrclient.NewManagerClient(att, subj)
	forged.Sender = target
	own := mgrclient.NewManagerClient(att, subj)
	own.Sender = attacker
	for name, mc := range map[string]*mgrclient.ManagerClient{"under the victim's subject": forged, "under its own subject": own} {
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := mc.Register(mctx, api.Register{RequestID: "forged-" + name, Peer: target, GUID: "0BAD", Site: siteOf(target)})
		mcancel()
		checkForged(t, "register "+name, mc == forged, err)
		mctx, mcancel = context.WithTimeout(ctx, 10*time.Second)
		_, err = mc.Heartbeat(mctx, api.Heartbeat{Peer: target, GUID: c.Peer(target).GUID()})
		mcancel()
		checkForged(t, "heartbeat "+name, mc == forged, err)
		mctx, mcancel = context.WithTimeout(ctx, 10*time.Second)
		_, err = mc.BucketEvent(mctx, api.BucketEvent{RequestID: "forged-c-" + name, Kind: api.EventCorrupt, Bucket: bucket, Peer: target, Reason: "forged"})
		mcancel()
		checkForged(t, "corrupt report "+name, mc == forged, err)
	}
	// Its own registration with a traversal id in the inventory.
	mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = own.Register(mctx, api.Register{RequestID: "forged-inv", Peer: attacker, GUID: c.Peer(attacker).GUID(), Site: siteOf(attacker),
		Inventory: []api.Copy{{Bucket: "main~7~x/../../..", Index: "main", State: api.CopyWarm, Blocks: 1}}})
	mcancel()
	if !bus.IsRemote(err, api.CodeBadRequest) {
		t.Fatalf("register with a traversal inventory entry: %v, want bad_request", err)
	}
	// A search head cannot register as a peer.
	sh := mgrclient.NewManagerClient(connect("sh1", NATSPassword("sh1"), "site1", nil), subj)
	sh.Sender = "sh1"
	mctx, mcancel = context.WithTimeout(ctx, 10*time.Second)
	_, err = sh.Register(mctx, api.Register{RequestID: "sh-reg", Peer: "sh1", GUID: "5EA4C4", Site: "site1"})
	mcancel()
	if !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("a search head registering: %v, want permission denied", err)
	}
	// No one else's replies.
	for _, in := range []string{"_INBOX.>", bus.UserInbox(target) + ".>", bus.UserInbox("m1") + ".>"} {
		if _, err := att.Subscribe(in, func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		_ = att.Flush()
		c.WaitFor(5*time.Second, func() error { return attErrs.violation(in) })
	}
	// A fixup task naming a path (a manager's user: peers cannot publish
	// tasks at all) is refused by the peer.
	mgr := connect("m2", NATSPassword("m2"), siteOf(target), nil)
	fixSubj, _ := subj.Fixup(siteOf(target), target)
	for _, task := range []api.FixupTask{
		{V: api.WireVersion, ID: 424242, Kind: fsm.TaskRemoveCopy, Bucket: "main~7~x/../../..", Target: target, Destructive: true, To: target},
		{V: api.WireVersion, ID: 424243, Kind: fsm.TaskReplicate, Bucket: "main~7~..", Source: target, Target: "../x", To: target},
		{V: api.WireVersion, ID: 424244, Kind: fsm.TaskMakeSearchable, Bucket: bucket, Index: "../main", Target: target, To: target},
	} {
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		ack, err := bus.Request[api.FixupTask, api.FixupAck](fctx, mgr, fixSubj, task)
		fcancel()
		if err != nil || ack.Accepted || ack.Reason == "" {
			t.Fatalf("fixup task %+v: %+v, %v; want refused with a reason", task, ack, err)
		}
	}

	after := takeSnapshot(t, c)
	if err := before.diff(after); err != nil {
		t.Fatalf("forgeries changed something: %v", err)
	}

	// The cluster still works under per-process users: ingest through
	// another origin, replication, a search head's search over everything.
	more, un, err := c.IngestAcked(ctx, "site2-p1", Batches("ident2", 200, 100), 30*time.Second)
	if err != nil || len(un) > 0 {
		t.Fatalf("ingest through site2-p1: %v (%d batches not acked)", err, len(un))
	}
	waitComplete(t, c)
	h := c.StartSearchHead("sh1", "site1")
	a := search(t, h.URL(), map[string]any{"query": "*"})
	total := 0
	for _, b := range append(acked, more...) {
		total += len(b.Raws)
	}
	if a.Status != 200 || len(a.Resp.Results) != total {
		t.Fatalf("search through sh1: HTTP %d %s, %d results, want %d", a.Status, a.Error, len(a.Resp.Results), total)
	}
}

// checkForged: under the victim's subject the server refuses (permission
// denied), under the sender's own the managers do (bad_request).
func checkForged(t *testing.T, what string, victimSubject bool, err error) {
	t.Helper()
	if victimSubject {
		if !errors.Is(err, bus.ErrPermissionDenied) {
			t.Fatalf("%s: %v, want permission denied", what, err)
		}
		return
	}
	if !bus.IsRemote(err, api.CodeBadRequest) || !strings.Contains(err.Error(), manager.ErrNotSender.Error()) {
		t.Fatalf("%s: %v, want bad_request (%v)", what, err, manager.ErrNotSender)
	}
}

// TestClusterRoleUsersFixupCopies: with one NATS user per process, a
// peer killed after its buckets rolled gets its copies made again by
// fixup: each source pushes under its own subject with the task's id, each
// target confirms the transfer with the leader before it takes a block
// (peer/replsender.go), and the cluster is complete again.
func TestClusterRoleUsersFixupCopies(t *testing.T) {
	c := Start(t, Options{RoleUsers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, un, err := c.IngestAcked(ctx, "site1-p1", Batches("fix", 600, 100), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v (%d batches not acked)", err, len(un))
	}
	waitComplete(t, c)
	victim := ""
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			for _, cp := range b.Copies {
				if cp.Peer != b.Origin && victim == "" {
					victim = cp.Peer
				}
			}
		}
	})
	if victim == "" {
		t.Fatal("no replica to lose")
	}
	c.KillPeer(victim)
	c.WaitFor(60*time.Second, func() error {
		var err error
		c.State(func(s *fsm.State) {
			if p, _ := s.Peer(victim); p.State != fsm.StateDown {
				err = fmt.Errorf("%s is %s", victim, p.State)
			}
		})
		return err
	})
	waitComplete(t, c)
	moved := 0
	for _, id := range c.PeerIDs() {
		if p := c.Peer(id); p != nil {
			for _, n := range p.Transfers() {
				moved += n
			}
		}
	}
	if moved == 0 {
		t.Fatal("the cluster is complete again, but no fixup transfer moved data")
	}
}
