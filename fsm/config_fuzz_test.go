package fsm

import (
	"encoding/json"
	"testing"
)

// FuzzConfigAPI feeds POST /v1/config bodies, decoded as the manager
// decodes them, to the config rules and then to the state machine on a
// cluster with peers and a bucket: a config is refused by Validate or by
// SetConfig (changing nothing) or applied; it never panics, and an applied
// config reads back as it was set.
func FuzzConfigAPI(f *testing.F) {
	good, _ := json.Marshal(multiSite("origin:2,total:3", "origin:1,total:2", "site1", "site2"))
	f.Add(good)
	single, _ := json.Marshal(DefaultConfig())
	f.Add(single)
	f.Add([]byte(`{"replication_factor":0,"search_factor":5}`))
	f.Add([]byte(`{"sites":["site1"],"site_replication_factor":"origin:9,total:1"}`))
	f.Add([]byte(`{"hec_tokens":[{"token":"t","indexes":["main","a b"]}],"indexes":["main"]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var cfg Config
		if json.Unmarshal(body, &cfg) != nil {
			return
		}
		if cfg.Validate() != nil {
			return
		}
		h := newHarness(t)
		h.config(multiSite("origin:1,total:2", "origin:1,total:1", "site1", "site2"))
		h.peer("p1", "site1")
		h.peer("p2", "site2")
		h.bucket("1", "p1", "p2", true)
		before, _ := h.s.Marshal()
		r := h.apply(&SetConfig{Config: cfg})
		if _, refused := r.(error); refused {
			after, _ := h.s.Marshal()
			if string(stripApplied(before)) != string(stripApplied(after)) {
				t.Fatalf("config %s refused with %v but changed the state", body, r)
			}
			return
		}
		got, _ := json.Marshal(h.s.Config())
		want, _ := json.Marshal(cfg)
		var gv, wv any
		_ = json.Unmarshal(got, &gv)
		_ = json.Unmarshal(want, &wv)
		gb, _ := json.Marshal(gv)
		wb, _ := json.Marshal(wv)
		if string(gb) != string(wb) {
			t.Fatalf("config applied reads back differently:\n set %s\n got %s", wb, gb)
		}
	})
}
