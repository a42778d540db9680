package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// TestRegisterInventoryOverMaxPayload: a peer whose inventory does not fit
// one bus message (a 64 KiB max payload, 3,000 copies: about 0.9 MB of
// JSON) registers with every copy, sent in parts; a last part whose
// earlier parts the manager never saw is refused with upload_incomplete
// and registers nothing; a malformed part is refused (nothing of p2 is
// registered by any of them).
func TestRegisterInventoryOverMaxPayload(t *testing.T) {
	subj, _ := bus.NewSubjects(bus.DefaultPrefix)
	users := []bus.User{{Name: "mgr", Password: "mgr-pw", Role: bus.RoleManager}}
	for _, p := range []string{"p1", "p2"} {
		users = append(users, bus.User{Name: p, Password: p + "-pw", Role: bus.RolePeer, Site: "site1", Peer: p})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0", MaxPayload: 64 << 10,
		User: "admin", Password: "admin-pw", Users: users, Subjects: subj, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start bus: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	b := &testBus{srv: srv, subj: subj}
	g := newGroup(t, 1, func(c *Config) {
		c.NATS, c.NATSUser, c.NATSPassword = b.srv.ClientURL(), "mgr", "mgr-pw"
	})
	p1, p2 := newFakePeer(t, b, "p1"), newFakePeer(t, b, "p2")

	const n = 3000
	inv := make([]api.Copy, n)
	for i := range inv {
		inv[i] = api.Copy{Bucket: fsm.BucketID("main", fmt.Sprint(i), p1.guid), Index: "main", State: api.CopyHot, Searchable: true,
			Events: 1000, Blocks: 12, Bytes: 1 << 20, Earliest: int64(i) * 1e9, Latest: int64(i)*1e9 + 5e8,
			ContentHash: "sha256-0123456789abcdef0123456789abcdef", LastBlockChecksum: "crc-89abcdef"}
	}
	if enc, _ := json.Marshal(inv); len(enc) < 10*64<<10 {
		t.Fatalf("the inventory encodes in %d bytes: want at least 10 max payloads, or the test does not cross the limit", len(enc))
	}
	reply := p1.register(ctx, inv)
	if reply.Pending || reply.State != fsm.StateUp {
		t.Fatalf("register reply %+v: want Up, not pending", reply)
	}
	var got int
	g.leader().Read(func(s *fsm.State) { got = len(s.BucketList("", "p1")) })
	if got != n {
		t.Fatalf("after a multi-part register the managers hold %d of p1's %d copies", got, n)
	}

	// The last part of an upload whose other parts never came.
	regSubj, _ := b.subj.MgrOp(api.OpRegister, "p2")
	last := api.Register{V: api.WireVersionParts, Peer: "p2", GUID: p2.guid, Site: "site1", Upload: "u1", Part: 3, Parts: 3,
		Inventory: []api.Copy{{Bucket: fsm.BucketID("main", "1", p2.guid), Index: "main", State: api.CopyHot}}}
	if _, err := bus.Request[api.Register, api.RegisterReply](ctx, p2.nc, regSubj, last); !bus.IsRemote(err, api.CodeUploadIncomplete) {
		t.Fatalf("a last part without its upload: %v, want %s", err, api.CodeUploadIncomplete)
	}
	for _, bad := range []api.Register{
		{V: api.WireVersionParts, Peer: "p2", GUID: p2.guid, Upload: "u1", Part: 4, Parts: 3},
		{V: api.WireVersionParts, Peer: "p2", GUID: p2.guid, Upload: "", Part: 1, Parts: 3},
		{V: api.WireVersionParts, Peer: "p2", GUID: p2.guid, Upload: "u.1", Part: 1, Parts: 3},
		{V: api.WireVersionParts, Peer: "p2", GUID: p2.guid, Upload: "u1", Part: 1, Parts: api.MaxRegisterParts + 1},
		{V: api.WireVersion, Peer: "p2", GUID: p2.guid, Upload: "u1", Part: 2},
	} {
		if _, err := bus.Request[api.Register, api.RegisterReply](ctx, p2.nc, regSubj, bad); !bus.IsRemote(err, api.CodeBadRequest) {
			t.Fatalf("register part %+v: %v, want %s", bad, err, api.CodeBadRequest)
		}
	}
	g.leader().Read(func(s *fsm.State) {
		if _, ok := s.Peer("p2"); ok {
			t.Fatalf("p2 is registered after refused parts")
		}
	})
}
