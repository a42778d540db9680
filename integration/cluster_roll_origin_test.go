package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// TestClusterRollOnlyByOrigin (issue 25 N2, SPEC §11): a peer that is not
// a hot bucket's origin — a replica holding a copy, or a peer holding
// none — sends a `rolled` event for it, under its own subject and with its
// own NATS user, at one block with a made-up checksum. Each is refused with
// an error reply naming fsm.ErrNotOrigin; the managers' state hash and
// every peer's files are unchanged, the bucket stays hot, and a replica
// restarted afterwards (which would be cut to a forged seal) keeps every
// block. The origin's own roll, which the managers at cluster version
// fsm.RollOriginVersion commit with its sender named, still seals the
// bucket at the origin's length.
func TestClusterRollOnlyByOrigin(t *testing.T) {
	c := Start(t, Options{RoleUsers: true, PeersPerSite: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c.WaitFor(20*time.Second, func() error {
		c.Mu.Lock()
		defer c.Mu.Unlock()
		for id, m := range c.Managers {
			if v := m.ClusterVersion(); v < fsm.RollOriginVersion {
				return fmt.Errorf("manager %s at cluster version %d", id, v)
			}
		}
		return nil
	})
	origin := "site1-p1"
	if _, un, err := c.IngestAcked(ctx, origin, Batches("roll", 300, 100), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest through %s: %v (%d batches not acked)", origin, err, len(un))
	}
	var bucket string
	holders := map[string]bool{}
	c.State(func(s *fsm.State) {
		for _, b := range s.BucketList("", origin) {
			if b.Origin == origin && b.Hot && len(b.Copies) > 1 {
				bucket = b.ID
				for _, cp := range b.Copies {
					holders[cp.Peer] = true
				}
			}
		}
	})
	if bucket == "" {
		t.Fatalf("no hot bucket of %s with a replica", origin)
	}
	blocks := c.Inventory(origin)[bucket].Blocks
	if blocks < 2 {
		t.Fatalf("the origin's copy has %d blocks, want several", blocks)
	}
	before := takeSnapshot(t, c)

	subj, _ := bus.NewSubjects("")
	var replica string
	for _, id := range c.PeerIDs() {
		if id == origin {
			continue
		}
		if holders[id] && replica == "" {
			replica = id
		}
		nc, err := bus.Connect(ctx, c.Bus.Server(siteOf(id)).ClientURL(), bus.ConnectOptions{Name: "forger " + id,
			User: id, Password: NATSPassword(id), Logger: quietLogger()})
		if err != nil {
			t.Fatalf("connect as %s: %v", id, err)
		}
		mc := mgrclient.NewManagerClient(nc, subj)
		mc.Sender = id
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = mc.BucketEvent(mctx, api.BucketEvent{RequestID: "forged-roll-" + id, Kind: api.EventRolled, Bucket: bucket, Peer: id,
			Blocks: 1, LastBlockChecksum: "0badc0de", Earliest: 0, Latest: 1, Events: 1})
		mcancel()
		nc.Close()
		if !bus.IsRemote(err, api.CodeBadRequest) || !strings.Contains(err.Error(), fsm.ErrNotOrigin.Error()) {
			t.Fatalf("a roll of %s's bucket sent by %s (holds a copy: %v): %v, want bad_request (%v)", origin, id, holders[id], err, fsm.ErrNotOrigin)
		}
	}
	if replica == "" {
		t.Fatal("no replica of the bucket")
	}
	if err := before.diff(takeSnapshot(t, c)); err != nil {
		t.Fatalf("a refused roll changed something: %v", err)
	}

	// A replica that registers again is not cut: there is no forged seal.
	c.StopPeer(replica)
	c.StartPeer(replica)
	c.WaitPeersUp(replica)
	c.State(func(s *fsm.State) {
		if bv := s.BucketViews([]string{bucket}); len(bv) != 1 || !bv[0].Hot {
			t.Fatalf("bucket %s after the forged rolls: %+v, want hot", bucket, bv)
		}
	})
	if got := c.Inventory(replica)[bucket].Blocks; got < blocks {
		t.Fatalf("replica %s holds %d blocks of %s after restarting, the origin %d", replica, got, bucket, blocks)
	}

	// The origin's own roll is committed, its sender named.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.Opts.TLS.Scheme()+"://"+c.Peer(origin).Addr()+"/v1/buckets/"+bucket+"/roll", nil)
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	res, err := c.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		t.Fatalf("roll through the origin: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("roll through the origin: HTTP %d", res.StatusCode)
	}
	c.WaitFor(20*time.Second, func() error {
		var err error
		c.State(func(s *fsm.State) {
			bv := s.BucketViews([]string{bucket})
			n, _, ok := s.SealedLength(bucket)
			if len(bv) != 1 || bv[0].Hot || !ok || int(n) < blocks {
				err = fmt.Errorf("bucket %s: %+v sealed at %d (%v), want warm and sealed at %d blocks or more", bucket, bv, n, ok, blocks)
			}
		})
		return err
	})
}
