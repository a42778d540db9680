package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

func TestRegisterValidate(t *testing.T) {
	ok := Register{Peer: "p1", GUID: "g1", Site: "site1", Inventory: []Copy{{Bucket: "main~1~g1", State: CopyWarm}}}
	cases := []struct {
		name string
		mod  func(*Register)
		want string // "" = valid
	}{
		{"valid", func(*Register) {}, ""},
		{"no site is fine (single site)", func(r *Register) { r.Site = "" }, ""},
		{"no peer", func(r *Register) { r.Peer = "" }, "peer and guid are required"},
		{"no guid", func(r *Register) { r.GUID = "" }, "peer and guid are required"},
		{"peer with a dot", func(r *Register) { r.Peer = "p.1" }, "peer name"},
		{"site with a space", func(r *Register) { r.Site = "site 1" }, "site name"},
		{"copy without bucket", func(r *Register) { r.Inventory[0].Bucket = "" }, "no bucket id"},
		{"copy with a bad state", func(r *Register) { r.Inventory[0].State = "frozen" }, `state "frozen"`},
		{"copy with a path bucket id", func(r *Register) { r.Inventory[0].Bucket = "main~7~x/../../.." }, "only letters, digits"},
		{"copy with a two-part bucket id", func(r *Register) { r.Inventory[0].Bucket = "main~7" }, "is not <index>~<localid>~<originGUID>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			r.Inventory = append([]Copy(nil), ok.Inventory...)
			c.mod(&r)
			err := r.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
		})
	}
}

func TestCheckVersion(t *testing.T) {
	for v := 0; v <= MaxWireVersion; v++ {
		if err := CheckVersion("x", v); err != nil {
			t.Fatalf("version %d refused: %v", v, err)
		}
	}
	if err := CheckVersion("heartbeat", MaxWireVersion+1); !bus.IsRemote(err, CodeVersion) {
		t.Fatalf("newer version: %v, want %s", err, CodeVersion)
	}
}

// The compatibility rule: a receiver ignores fields it does not know.
func TestUnknownFieldsIgnored(t *testing.T) {
	var h Heartbeat
	if err := json.Unmarshal([]byte(`{"v":1,"peer":"p1","guid":"g","stats":{"copies":3,"future":true},"later_field":[1,2]}`), &h); err != nil {
		t.Fatal(err)
	}
	if h.Peer != "p1" || h.Stats.Copies != 3 {
		t.Fatalf("decoded %+v", h)
	}
}

func TestCopyInfo(t *testing.T) {
	c := Copy{Bucket: "main~1~g", Index: "main", State: CopyHot, Searchable: true, Events: 5, Blocks: 2, Bytes: 100, Earliest: 1, Latest: 2, Corrupt: true}
	want := fsm.CopyInfo{Bucket: "main~1~g", Searchable: true, Hot: true, Blocks: 2, Corrupt: true, Index: "main", Earliest: 1, Latest: 2, Size: 100, Events: 5}
	if got := c.CopyInfo(); got != want {
		t.Fatalf("CopyInfo %+v, want %+v", got, want)
	}
}

func FuzzRegisterDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"peer":"p1","guid":"g","site":"site1","inventory":[{"bucket":"main~1~g","state":"warm"}]}`))
	f.Add([]byte(`{"peer":"a.b","guid":""}`))
	f.Add([]byte(`{"inventory":[{"state":"hot"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Register
		if json.Unmarshal(b, &r) != nil {
			return
		}
		if r.Validate() != nil {
			return
		}
		// Valid: the peer (and site) make subject tokens.
		s, _ := bus.NewSubjects(bus.DefaultPrefix)
		site := r.Site
		if site == "" {
			site = "default"
		}
		if _, err := s.Fixup(site, r.Peer); err != nil {
			t.Fatalf("valid register %+v makes no fixup subject: %v", r, err)
		}
	})
}

// TestSearchRequestRefusesTraversalBuckets: a search request's explicit
// bucket list is checked where a peer receives it (fsm.ValidBucketID): an
// id naming a path is refused before any lookup.
func TestSearchRequestRefusesTraversalBuckets(t *testing.T) {
	ok := SearchRequest{V: WireVersion, ID: "s1", Query: "*", Invites: map[string]bus.Invite{"p1": {}}, Buckets: []string{"main~7~G1"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid request: %v", err)
	}
	for _, id := range []string{"main~7~x/../../..", "main~7~..", "..~7~G1", "main~../..~G1", "main~7~G1\\x", "main~7~G1~x", "main~7"} {
		r := ok
		r.Buckets = []string{"main~1~G1", id}
		if err := r.Validate(); err == nil || !errors.Is(err, fsm.ErrBadID) {
			t.Errorf("bucket %q: %v, want %v", id, err, fsm.ErrBadID)
		}
	}
}

// Every request a receiver answers knows its wire version (Request).
var (
	_ Request = Register{}
	_ Request = Heartbeat{}
	_ Request = TargetsRequest{}
	_ Request = BucketEvent{}
	_ Request = GenerationRequest{}
	_ Request = ConfigRequest{}
	_ Request = ConfirmRequest{}
	_ Request = FixupResult{}
	_ Request = BucketsRequest{}
	_ Request = FixupTask{}
)

// TestKeyAnswerOrigins: a key answer's origins are GUIDs, at most
// MaxKeyOrigins; an answer from a peer that predates them (no origins_v)
// decodes with OriginsV 0 and no origins, and still validates.
func TestKeyAnswerOrigins(t *testing.T) {
	ok := KeyAnswer{V: WireVersion, Known: true, BodyHash: strings.Repeat("ab", 32), Total: 3, Spans: [][2]uint32{{0, 3}},
		OriginsV: KeyOriginsVersion, Origins: []string{"0F1E2D3C-4B5A-4968-8776-A5B4C3D2E1F0"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid answer refused: %v", err)
	}
	bad := ok
	bad.Origins = []string{"a/../b"}
	if err := bad.Validate(); err == nil {
		t.Fatal("an origin that is not a GUID was taken")
	}
	bad.Origins = []string{"g1", "g2", "g3", "g4", "g5"}
	if err := bad.Validate(); err == nil {
		t.Fatal("more than MaxKeyOrigins origins were taken")
	}
	var old KeyAnswer
	if err := json.Unmarshal([]byte(`{"v":1,"known":true,"body_hash":"`+strings.Repeat("ab", 32)+`","total":3,"spans":[[0,3]]}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.OriginsV != 0 || old.Origins != nil || old.Validate() != nil {
		t.Fatalf("an older peer's answer: %+v %v", old, old.Validate())
	}
	b, _ := json.Marshal(KeyAnswer{V: WireVersion})
	if strings.Contains(string(b), "origins") {
		t.Fatalf("an unknown key's answer carries origins: %s", b)
	}
}
