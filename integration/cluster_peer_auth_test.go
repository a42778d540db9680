package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// peerCall sends one request to a peer's API with an optional bearer
// token and returns the status and the decoded JSON body.
func peerCall(t *testing.T, method, url, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// copyOn is the managers' record of peer's copy of bucket (on manager m).
func copyOn(c *Cluster, managerID, bucket, peer string) (fsm.CopyView, bool) {
	var cv fsm.CopyView
	var ok bool
	c.Managers[managerID].Read(func(s *fsm.State) {
		for _, b := range s.BucketList("", "") {
			if b.ID != bucket {
				continue
			}
			for _, cp := range b.Copies {
				if cp.Peer == peer {
					cv, ok = cp, true
				}
			}
		}
	})
	return cv, ok
}

// TestClusterAPISearchableReachesManagers: in a cluster, a peer's roll and
// searchable endpoints take the managers' admin token only (401 without,
// 403 with a HEC token, and a refusal changes neither the peer's copy nor
// the managers' table); a journal-only copy made searchable through
// POST /v1/buckets/{id}/searchable is reported to the managers, and every
// manager's table then lists it searchable.
func TestClusterAPISearchableReachesManagers(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	origin := "site1-p1"
	if _, un, err := c.IngestAcked(ctx, origin, Batches("apisearchable", 200, 50), 30*time.Second); err != nil || len(un) > 0 {
		t.Fatalf("ingest: %v (%d batches not acknowledged)", err, len(un))
	}
	var bucket string
	for id, ci := range c.Inventory(origin) {
		if ci.State == "hot" && ci.Index == "main" {
			bucket = id
		}
	}
	if bucket == "" {
		t.Fatalf("no hot main bucket on %s: %v", origin, c.Inventory(origin))
	}
	roll := "http://" + c.Peer(origin).Addr() + "/v1/buckets/" + bucket + "/roll"
	if code, body := peerCall(t, "POST", roll, ""); code != 401 || body["code"] != "token_required" {
		t.Fatalf("roll without a token: %d %v", code, body)
	}
	if code, body := peerCall(t, "POST", roll, HECToken); code != 403 || body["code"] != "invalid_token" {
		t.Fatalf("roll with a HEC token: %d %v", code, body)
	}
	if c.Inventory(origin)[bucket].State != "hot" {
		t.Fatalf("a refused roll rolled %s", bucket)
	}
	if code, body := peerCall(t, "POST", roll, AdminToken); code != 200 {
		t.Fatalf("roll with the managers' admin token: %d %v", code, body)
	}
	// The bucket is warm everywhere; find its journal-only copy (SF
	// origin:1,total:2 of RF 3 leaves one).
	var holder string
	c.WaitFor(30*time.Second, func() error {
		holder = ""
		var b fsm.BucketView
		c.State(func(s *fsm.State) {
			for _, v := range s.BucketList("", "") {
				if v.ID == bucket {
					b = v
				}
			}
		})
		if b.ID == "" || b.Hot || len(b.Copies) != 3 {
			return fmt.Errorf("managers' bucket %+v: want warm with 3 copies", b)
		}
		for _, cp := range b.Copies {
			ci, ok := c.Inventory(cp.Peer)[bucket]
			if !ok || ci.State != "warm" {
				return fmt.Errorf("%s's copy of %s is %q", cp.Peer, bucket, ci.State)
			}
			if !cp.Searchable {
				if ci.Searchable {
					return fmt.Errorf("%s's copy is searchable but the managers list it journal-only", cp.Peer)
				}
				holder = cp.Peer
			}
		}
		if holder == "" {
			return errors.New("no journal-only copy")
		}
		return nil
	})
	searchable := "http://" + c.Peer(holder).Addr() + "/v1/buckets/" + bucket + "/searchable"
	before := c.Inventory(holder)[bucket]
	for _, tok := range []string{"", NoAckHECToken} {
		want := map[string]int{"": 401, NoAckHECToken: 403}[tok]
		if code, body := peerCall(t, "POST", searchable, tok); code != want {
			t.Fatalf("searchable with token %q: %d %v, want %d", tok, code, body, want)
		}
	}
	if now := c.Inventory(holder)[bucket]; !reflect.DeepEqual(now, before) {
		t.Fatalf("a refused searchable changed %s's copy: %+v → %+v", holder, before, now)
	}
	if cv, _ := copyOn(c, "m1", bucket, holder); cv.Searchable {
		t.Fatalf("a refused searchable reached the managers: %+v", cv)
	}
	code, body := peerCall(t, "POST", searchable, AdminToken)
	if code != 200 || body["reported"] != true {
		t.Fatalf("searchable with the admin token: %d %v, want 200 reported", code, body)
	}
	if !c.Inventory(holder)[bucket].Searchable {
		t.Fatalf("%s's copy of %s is not searchable after the 200", holder, bucket)
	}
	c.WaitFor(15*time.Second, func() error {
		for _, m := range slices.Sorted(maps.Keys(c.Managers)) {
			if cv, ok := copyOn(c, m, bucket, holder); !ok || !cv.Searchable {
				return fmt.Errorf("manager %s lists %s's copy of %s as %+v", m, holder, bucket, cv)
			}
		}
		return nil
	})
}
