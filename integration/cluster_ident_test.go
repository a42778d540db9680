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
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
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
