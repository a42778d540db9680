package fsm

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

// TestPolicy is the policy table: each accepted policy with the per-site
// requirement SPEC §3 gives for a bucket from a given origin site, and each
// refusal with the words its error must carry.
func TestPolicy(t *testing.T) {
	three := []string{"site1", "site2", "site3"}
	for _, tc := range []struct {
		name     string
		sites    []string
		rf, sf   string
		origin   string         // site of the bucket's origin
		wantSite map[string]int // explicit RF counts for that origin
		wantRest int            // copies left to spread over the other sites
		refuse   string         // substring of the refusal; "" = accepted
	}{
		// origin:2,total:3 — two copies on the origin site, one more anywhere else.
		{name: "origin2 total3", sites: []string{"site1", "site2"}, rf: "origin:2,total:3", sf: "origin:1,total:2",
			origin: "site1", wantSite: map[string]int{"site1": 2}, wantRest: 1},
		// origin:1,site1:2,total:3 from site1: origin is also named, the larger (2) applies.
		{name: "explicit origin site, larger applies", sites: []string{"site1", "site2"}, rf: "origin:1,site1:2,total:3", sf: "origin:1,total:2",
			origin: "site1", wantSite: map[string]int{"site1": 2}, wantRest: 1},
		// …and from site2: one on the origin site, two on site1, nothing left.
		{name: "explicit site from another origin", sites: []string{"site1", "site2"}, rf: "origin:1,site1:2,total:3", sf: "origin:1,total:2",
			origin: "site2", wantSite: map[string]int{"site1": 2, "site2": 1}, wantRest: 0},
		// origin:2,site3:1,total:3 from site1: two at home, one on site3.
		{name: "origin2 site3", sites: three, rf: "origin:2,site3:1,total:3", sf: "origin:1,total:2",
			origin: "site1", wantSite: map[string]int{"site1": 2, "site3": 1}, wantRest: 0},
		// …from site3: max(2,1)=2 on site3, one more elsewhere.
		{name: "origin2 site3 from site3", sites: three, rf: "origin:2,site3:1,total:3", sf: "origin:1,total:2",
			origin: "site3", wantSite: map[string]int{"site3": 2}, wantRest: 1},
		{name: "SF > RF (origin)", sites: []string{"site1", "site2"}, rf: "origin:1,total:3", sf: "origin:2,total:2",
			refuse: "origin:2 is larger"},
		{name: "SF > RF (total)", sites: []string{"site1", "site2"}, rf: "origin:2,total:2", sf: "origin:1,total:3",
			refuse: "total:3 is larger"},
		{name: "SF > RF (site)", sites: []string{"site1", "site2"}, rf: "origin:1,site2:1,total:3", sf: "origin:1,site2:2,total:3",
			refuse: "site2:2 is larger"},
		{name: "total below explicit sum", sites: three, rf: "origin:2,site2:1,site3:1,total:3", sf: "origin:1,total:2",
			refuse: "below the explicit sum"},
		{name: "SF site the RF lacks", sites: three, rf: "origin:2,total:3", sf: "origin:1,site2:1,total:2",
			refuse: "which site_replication_factor"},
		{name: "unknown site", sites: []string{"site1", "site2"}, rf: "origin:2,site7:1,total:3", sf: "origin:1,total:2",
			refuse: "unknown site site7"},
		{name: "site0 in the sites", sites: []string{"site0", "site1"}, rf: "origin:2,total:3", sf: "origin:1,total:2",
			refuse: "site0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf, err := ParsePolicy(tc.rf)
			if err != nil {
				t.Fatal(err)
			}
			sf, err := ParsePolicy(tc.sf)
			if err != nil {
				t.Fatal(err)
			}
			c := DefaultConfig()
			c.Sites, c.SiteReplicationFactor, c.SiteSearchFactor = tc.sites, rf, sf
			err = c.Validate()
			if tc.refuse != "" {
				if err == nil || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("Validate = %v, want a refusal containing %q", err, tc.refuse)
				}
				// Refused through the FSM too, changing nothing.
				h := newHarness(t)
				h.refuse(&SetConfig{Config: c}, ErrBadConfig)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			site, rest := rf.Need(tc.origin)
			if !maps.Equal(site, tc.wantSite) || rest != tc.wantRest {
				t.Fatalf("Need(%s) = %v rest %d, want %v rest %d", tc.origin, site, rest, tc.wantSite, tc.wantRest)
			}
			if rf.String() != strings.Join(sortedPolicy(tc.rf), ",") {
				t.Fatalf("String() = %q", rf.String())
			}
		})
	}
}

// sortedPolicy puts origin first, sites by name, total last.
func sortedPolicy(s string) []string {
	var origin, total string
	var sites []string
	for _, p := range strings.Split(s, ",") {
		switch {
		case strings.HasPrefix(p, "origin:"):
			origin = p
		case strings.HasPrefix(p, "total:"):
			total = p
		default:
			sites = append(sites, p)
		}
	}
	out := []string{origin}
	for i := range sites {
		for j := i + 1; j < len(sites); j++ {
			if sites[j] < sites[i] {
				sites[i], sites[j] = sites[j], sites[i]
			}
		}
	}
	return append(append(out, sites...), total)
}

// A bucket from site1 under origin:1,site1:2,total:3 keeps two copies on
// site1: the targets say so, and a lost site1 copy is restored there.
func TestExplicitOriginSiteKeepsTwoCopies(t *testing.T) {
	h := newHarness(t)
	h.config(multiSite("origin:1,site1:2,total:3", "origin:1,total:2", "site1", "site2"))
	for _, p := range []string{"a1", "a2", "a3"} {
		h.peer(p, "site1")
	}
	for _, p := range []string{"b1", "b2"} {
		h.peer(p, "site2")
	}
	tc, err := h.s.ChooseTargets("a1", "main")
	if err != nil {
		t.Fatal(err)
	}
	// Origin a1 is one of site1's two; the other goes to a2 (fewest copies,
	// then id); the rest (1) goes to site2, b1 by id.
	if got := targetsString(tc); got != "a2 b1" {
		t.Fatalf("targets %s", got)
	}
}

func targetsString(tc TargetChoice) string {
	var out []string
	for _, t := range tc.Targets {
		out = append(out, t.Peer)
	}
	return strings.Join(out, " ")
}

func TestParsePolicyErrors(t *testing.T) {
	for _, s := range []string{"", "total:3", "origin:2", "origin:2,total:3,origin:1", "origin:x,total:3",
		"origin:2,total:3,site0:1", "origin:2,site1,total:3", "origin:2,rack1:1,total:3", "origin:-1,total:3",
		"origin:1,site1:1,site1:1,total:3", "origin:1,site64:1,total:2", "origin:1,site01:1,total:2"} {
		if _, err := ParsePolicy(s); err == nil {
			t.Errorf("ParsePolicy(%q) accepted", s)
		}
	}
	p, err := ParsePolicy(" origin:2 , site2:1 ,total:3")
	if err != nil || p.String() != "origin:2,site2:1,total:3" {
		t.Fatalf("%v %v", p, err)
	}
}

func TestSingleSiteConfig(t *testing.T) {
	c := singleSite(2, 3)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "search_factor 3 is larger") {
		t.Fatalf("SF > RF: %v", err)
	}
	c = DefaultConfig()
	c.HeartbeatTimeout = c.HeartbeatPeriod
	if c.Validate() == nil {
		t.Fatal("timeout = period accepted")
	}
	c = DefaultConfig()
	c.TargetTimeout = -time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "target_timeout") {
		t.Fatalf("negative target_timeout: %v", err)
	}
	c = DefaultConfig()
	c.HECTokens = []HECToken{{Token: "tok12345", Indexes: []string{"web"}}}
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "tok12345") {
		t.Fatalf("unknown token index: %v (and the token must not be echoed)", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"origin:2,total:3", "origin:1,site1:2,total:3", "origin:2,site3:1,total:3", "", "origin:1", "site0:1,origin:1,total:1", "origin:99999999999999999999,total:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			return
		}
		q, err := ParsePolicy(p.String())
		if err != nil || q.String() != p.String() {
			t.Fatalf("%q -> %q does not parse back: %v", s, p.String(), err)
		}
	})
}
