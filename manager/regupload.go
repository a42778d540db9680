package manager

import (
	"sync"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
)

// registerUploads holds the parts of multi-part Register messages
// (api.Register.Parts): an inventory too large for one bus message. One
// upload per peer is kept, in memory only: a newer upload id replaces an
// older one, and an upload untouched for uploadTTL is dropped. The whole
// inventory is registered in one FSM command when the last part arrives
// with every part present; a last part without the others (a leader change
// during the upload, or a dropped upload) is refused with
// api.CodeUploadIncomplete and the peer sends the upload again.
//
// Bounded: at most api.MaxRegisterParts parts of at most one bus message
// each per peer, and only peers whose id passed Validate.
type registerUploads struct {
	mu sync.Mutex
	m  map[string]*regUpload // peer id → its upload in progress
}

type regUpload struct {
	id    string
	guid  string
	parts [][]api.Copy
	got   int
	seen  time.Time
}

const uploadTTL = 2 * time.Minute

// add records part r and, when it completes the upload, returns the whole
// Register (with the inventory in part order) and done.
func (u *registerUploads) add(r api.Register, now time.Time) (api.Register, bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]*regUpload{}
	}
	for peer, up := range u.m {
		if now.Sub(up.seen) > uploadTTL {
			delete(u.m, peer)
		}
	}
	up := u.m[r.Peer]
	if up == nil || up.id != r.Upload || up.guid != r.GUID || len(up.parts) != r.Parts {
		up = &regUpload{id: r.Upload, guid: r.GUID, parts: make([][]api.Copy, r.Parts)}
		u.m[r.Peer] = up
	}
	up.seen = now
	if up.parts[r.Part-1] == nil {
		up.got++
	}
	inv := r.Inventory
	if inv == nil {
		inv = []api.Copy{}
	}
	up.parts[r.Part-1] = inv
	if r.Part < r.Parts {
		return api.Register{}, false, nil
	}
	delete(u.m, r.Peer)
	if up.got != r.Parts {
		return api.Register{}, false, bus.Errorf(api.CodeUploadIncomplete,
			"register %s: upload %s has %d of %d parts (send it again)", r.Peer, r.Upload, up.got, r.Parts)
	}
	n := 0
	for _, p := range up.parts {
		n += len(p)
	}
	whole := r
	whole.Upload, whole.Part, whole.Parts = "", 0, 0
	whole.Inventory = make([]api.Copy, 0, n)
	for _, p := range up.parts {
		whole.Inventory = append(whole.Inventory, p...)
	}
	return whole, true, nil
}
