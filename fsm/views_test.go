package fsm

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"
)

func keysOf(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The JSON of the views carries every field SPEC §7 names, spelled alike.
func TestViewsJSONShape(t *testing.T) {
	h := twoSites(t)
	b := h.warm("1", "a1", "a2", false, "b1", true)
	h.must(&PeerDown{ID: "a3"})
	st := h.s.Status()
	for _, k := range []string{"leader", "generation", "maintenance", "replication_factor_met", "search_factor_met", "valid", "complete", "sites", "peers", "fixups"} {
		if !slices.Contains(keysOf(t, st), k) {
			t.Errorf("status lacks %q", k)
		}
	}
	if got := keysOf(t, st.Sites["site1"]); !slices.Contains(got, "valid") || !slices.Contains(got, "complete") {
		t.Errorf("site status keys %v", got)
	}
	if got := keysOf(t, st.Peers[0]); !slices.Equal(got, []string{"buckets", "id", "primaries", "searchable", "site", "state"}) {
		t.Errorf("peer keys %v", got)
	}
	h.must(&PeerDown{ID: "b1"})
	st = h.s.Status()
	if got := keysOf(t, st.Fixups[0]); !slices.Equal(got, []string{"bucket", "level", "reason"}) {
		t.Errorf("fixup keys %v", got)
	}
	g, err := h.s.Generation("site1", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"generation", "version", "site", "peers", "primaries", "buckets"} {
		if !slices.Contains(keysOf(t, g), k) {
			t.Errorf("generation lacks %q", k)
		}
	}
	if got := keysOf(t, g.Peers[0]); !slices.Equal(got, []string{"attrs", "guid", "id", "site", "state"}) {
		t.Errorf("generation peer keys %v", got)
	}
	// origin is an addition to SPEC §7 (fresh=true reads hot buckets from
	// it), and so are a sealed bucket's sealed, blocks and checksum (the
	// length a search head checks a copy against, SPEC §5 Completeness).
	if got := keysOf(t, g.Buckets[b]); !slices.Equal(got, []string{"blocks", "checksum", "earliest", "hot", "index", "latest", "origin", "sealed", "searchable_on"}) {
		t.Errorf("generation bucket keys %v", got)
	}
	bl := h.s.BucketList("main", "a2")
	if len(bl) != 1 || bl[0].Primary["site1"] != "a1" || len(h.s.BucketList("", "b3")) != 0 || len(h.s.BucketList("web", "")) != 0 {
		t.Fatalf("bucket list %+v", bl)
	}
	pl := h.s.PeerList()
	if len(pl) != 6 || pl[0].ID != "a1" || pl[0].Primaries != 1 || pl[0].GUID != guid("a1") {
		t.Fatalf("peer list %+v", pl)
	}
}
