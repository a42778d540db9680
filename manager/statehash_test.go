package manager

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// TestStateHashSameOnEveryManager: GET /v1/state/hash answers the same
// hash on every manager once they have applied the same index, and the
// hash changes when the state does.
func TestStateHashSameOnEveryManager(t *testing.T) {
	g := newGroup(t, 3, nil)
	get := func(m *Manager) StateHash {
		t.Helper()
		res, err := http.Get("http://" + m.HTTPAddr() + "/v1/state/hash")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var h StateHash
		if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&h) != nil || len(h.Hash) != 64 {
			t.Fatalf("GET /v1/state/hash on %s: %d %+v", m.cfg.ID, res.StatusCode, h)
		}
		return h
	}
	same := func() StateHash {
		var first StateHash
		testutil.WaitFor(t, 10*time.Second, func() error {
			first = get(g.ms["m1"])
			for _, id := range []string{"m2", "m3"} {
				h := get(g.ms[id])
				if h.Applied != first.Applied || h.Hash != first.Hash {
					return fmt.Errorf("%s at %d %s, m1 at %d %s", id, h.Applied, h.Hash[:8], first.Applied, first.Hash[:8])
				}
			}
			return nil
		})
		return first
	}
	before := same()
	l := g.leader()
	req, _ := http.NewRequest(http.MethodPost, "http://"+l.HTTPAddr()+"/v1/maintenance", strings.NewReader(`{"enabled": true}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("maintenance on: %v %v", err, res)
	}
	res.Body.Close()
	after := same()
	if after.Hash == before.Hash || after.Applied <= before.Applied {
		t.Fatalf("hash did not follow the state: %+v then %+v", before, after)
	}
}
