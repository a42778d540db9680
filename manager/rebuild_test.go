package manager

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// TestRebuildAPI: POST /v1/rebuild seals a bucket rebuilt from two
// inventories at its longest copy; expect_peers above the peers Up is 409
// peers_missing and seals nothing, a bad expect_peers 400, no token 401; a
// second rebuild seals nothing; a follower redirects to the leader.
func TestRebuildAPI(t *testing.T) {
	g := newGroup(t, 2, nil)
	b := fsm.BucketID("main", "1", "guid-p1")
	now := time.Now()
	g.apply(&fsm.RegisterPeer{ID: "p2", GUID: "guid-p2", Site: fsm.DefaultSite, At: now,
		Inventory: []fsm.CopyInfo{{Bucket: b, Searchable: true, Index: "main", Blocks: 3}}})
	g.apply(&fsm.RegisterPeer{ID: "p1", GUID: "guid-p1", Site: fsm.DefaultSite, At: now,
		Inventory: []fsm.CopyInfo{{Bucket: b, Searchable: true, Index: "main", Blocks: 5}}})
	l := g.leader()
	var follower *Manager
	for _, m := range g.ms {
		if m != l {
			follower = m
		}
	}
	sealed := func() bool {
		var ok bool
		l.Read(func(s *fsm.State) {
			for _, v := range s.BucketList("", "") {
				ok = v.ID == b && v.Sealed
			}
		})
		return ok
	}
	ctx := context.Background()
	cl, err := NewClient([]string{"http://" + follower.HTTPAddr()}, testToken, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ae *APIError
	if _, err := cl.Rebuild(ctx, 3); !errors.As(err, &ae) || ae.Code != "peers_missing" || ae.Status != http.StatusConflict || sealed() {
		t.Fatalf("rebuild expecting 3 peers of 2: %v (sealed %v)", err, sealed())
	}
	if code, body := post(t, http.DefaultClient, "http://"+l.HTTPAddr()+"/v1/rebuild?expect_peers=x", testToken, ""); code != http.StatusBadRequest {
		t.Fatalf("bad expect_peers: %d %s", code, body)
	}
	if code, _ := post(t, http.DefaultClient, "http://"+l.HTTPAddr()+"/v1/rebuild", "", ""); code != http.StatusUnauthorized || sealed() {
		t.Fatalf("rebuild without the token: %d", code)
	}
	v, err := cl.Rebuild(ctx, 2)
	if err != nil || len(v.Sealed) != 1 || v.Sealed[0].Blocks != 5 || len(v.Sealed[0].Lengths) != 2 || v.PeersUp != 2 || !sealed() {
		t.Fatalf("rebuild: %+v %v (sealed %v)", v, err, sealed())
	}
	if v, err := cl.Rebuild(ctx, 0); err != nil || len(v.Sealed) != 0 {
		t.Fatalf("second rebuild: %+v %v", v, err)
	}
}
