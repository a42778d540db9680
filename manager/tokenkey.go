package manager

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// ensureTokenKey gives the cluster its token key (review L1, fsm
// tokenkey.go) once the group agreed fsm.TokenKeyVersion: the leader draws
// 32 random bytes here — never in Apply, which must be deterministic —
// and proposes fsm.SetTokenKey. The FSM keeps the first key committed, so
// two leaders that each drew one agree on it. From then on every digest
// that leaves the managers is keyed. The key is never logged.
func (m *Manager) ensureTokenKey(ctx context.Context) {
	var has bool
	var cv int
	m.state.Read(func(s *fsm.State) { has, cv = fsm.TokenKeyOf(s) != nil, s.ClusterVersion() })
	if has || cv < fsm.TokenKeyVersion || m.cfg.buildVersion() < fsm.TokenKeyVersion {
		return
	}
	key := make([]byte, fsm.TokenKeySize)
	if _, err := rand.Read(key); err != nil {
		m.log.Error("drawing the cluster's token key failed; will retry", "err", err)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := m.Apply(rctx, &fsm.SetTokenKey{ReqID: fsm.ReqID{RequestID: "token-key"}, Key: key})
	switch {
	case err == nil:
		m.log.Info("cluster token key set: token digests that leave the managers are keyed from now on")
	case errors.Is(err, fsm.ErrTokenKeyExists):
		// Another leader's key was committed first; it stays.
	case ctx.Err() == nil:
		m.log.Warn("setting the cluster's token key failed; will retry", "err", err)
	}
}
