package mgrclient

import (
	"encoding/json"
	"fmt"
	"github.com/quarry-dev/quarry/api"
	"strings"
	"testing"
)

// TestSplitInventory: every part of a split Register encodes within the
// limit (with the part fields at their widest), the parts in order are the
// whole inventory, and an entry that alone exceeds the limit is refused.
func TestSplitInventory(t *testing.T) {
	inv := make([]api.Copy, 5000)
	for i := range inv {
		inv[i] = api.Copy{Bucket: fmt.Sprintf("main~%d~guid-p1", i), Index: "main", State: api.CopyWarm, Events: int64(i), Blocks: 3,
			ContentHash: strings.Repeat("h", i%97)}
	}
	r := api.Register{RequestID: "reg-p1", Peer: "p1", GUID: "guid-p1", Site: "site1", Attrs: map[string]string{"rack": "r1"}, Inventory: inv}
	for _, limit := range []int{8 << 10, 64 << 10, 1 << 20} {
		parts, err := splitInventory(r, limit)
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		var joined []api.Copy
		for i, p := range parts {
			msg := r
			msg.V, msg.Upload, msg.Part, msg.Parts, msg.Inventory = api.WireVersionParts, "u17649152001234567891", i+1, len(parts), p
			b, _ := json.Marshal(msg)
			if len(b) > limit {
				t.Fatalf("limit %d: part %d of %d encodes in %d bytes", limit, i+1, len(parts), len(b))
			}
			if len(p) == 0 {
				t.Fatalf("limit %d: part %d is empty", limit, i+1)
			}
			joined = append(joined, p...)
		}
		if len(joined) != len(inv) {
			t.Fatalf("limit %d: the parts hold %d copies, want %d", limit, len(joined), len(inv))
		}
		for i := range joined {
			if joined[i].Bucket != inv[i].Bucket {
				t.Fatalf("limit %d: copy %d is %s, want %s", limit, i, joined[i].Bucket, inv[i].Bucket)
			}
		}
	}
	huge := r
	huge.Inventory = []api.Copy{{Bucket: "main~1~guid-p1", ContentHash: strings.Repeat("x", 10<<10)}, inv[0]}
	if _, err := splitInventory(huge, 8<<10); err == nil {
		t.Fatal("an entry over the limit was split, want an error")
	}
}
