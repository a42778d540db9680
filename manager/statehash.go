package manager

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/quarry-dev/quarry/fsm"
)

// StateHash is this manager's committed cluster state summed up: the Raft
// index of the last applied command and a SHA-256 of the state's
// deterministic encoding. Two managers that applied the same log to the
// same index hold the same hash (fsm's determinism rule); the end-to-end
// suite compares them after faults.
type StateHash struct {
	ID      string `json:"id"`
	Applied uint64 `json:"applied"`
	Hash    string `json:"hash"`
}

// StateHash reads the state once, under its lock.
func (m *Manager) StateHash() (StateHash, error) {
	out := StateHash{ID: m.cfg.ID}
	var err error
	m.Read(func(s *fsm.State) {
		var b []byte
		if b, err = s.Marshal(); err != nil {
			return
		}
		sum := sha256.Sum256(b)
		out.Applied, out.Hash = s.AppliedIndex(), hex.EncodeToString(sum[:])
	})
	return out, err
}

// handleStateHash is GET /v1/state/hash (an addition to SPEC §7).
func (m *Manager) handleStateHash(w http.ResponseWriter, r *http.Request) {
	h, err := m.StateHash()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error(), "code": "state_encode"})
		return
	}
	writeJSON(w, http.StatusOK, h)
}
