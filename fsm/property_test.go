package fsm

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// model drives a State with rapid-chosen commands and checks the invariants
// of SPEC §3 after every step.
type model struct {
	s     *State
	idx   uint64
	now   time.Time
	peers []string
	local int
}

func (m *model) apply(t *rapid.T, c Command) any {
	m.idx++
	m.now = m.now.Add(time.Second)
	before := m.s.Clone()
	r := m.s.ApplyCommand(m.idx, c)
	if _, failed := r.(error); failed {
		// A refused command changes nothing (but the applied index).
		before.d.Applied = m.idx
		b1, _ := before.Marshal()
		b2, _ := m.s.Marshal()
		if string(b1) != string(b2) {
			t.Fatalf("refused %T (%v) changed the state", c, r)
		}
	}
	m.checkGeneration(t, before, c)
	m.checkInvariants(t)
	return r
}

// checkGeneration: rule 1 — the generation changes exactly when an existing
// bucket's primary changed in any table or the set of serving peers
// changed, and then it is this entry's index.
func (m *model) checkGeneration(t *rapid.T, before *State, c Command) {
	moved := !slices.Equal(before.servingSet(), m.s.servingSet())
	for _, id := range before.bucketIDs() {
		b0 := before.d.Buckets[id]
		b1, ok := m.s.d.Buckets[id]
		if ok && !maps.Equal(b0.Primary, b1.Primary) {
			moved = true
		}
	}
	if x, ok := c.(*ExtendSeal); ok {
		// A seal extended under searches that used the old length starts
		// a generation even where no primary had to move (rule 1, as
		// amended for ExtendSeal).
		if b0, ok := before.d.Buckets[x.Bucket]; ok && b0.Sealed && b0.Blocks == x.From && b0.LastChecksum == x.FromChecksum &&
			m.s.d.Buckets[x.Bucket].Blocks == x.Blocks && x.Blocks > x.From {
			moved = true
		}
	}
	changed := before.d.Generation != m.s.d.Generation
	if moved != changed {
		t.Fatalf("%T: primaries/serving set changed=%v but generation changed=%v (%d -> %d)", c, moved, changed, before.d.Generation, m.s.d.Generation)
	}
	if changed && m.s.d.Generation != m.idx {
		t.Fatalf("%T: generation %d, want the entry's index %d", c, m.s.d.Generation, m.idx)
	}
}

func (m *model) checkInvariants(t *rapid.T) {
	s := m.s
	copies := map[string]int{}
	for _, id := range s.bucketIDs() {
		b := s.d.Buckets[id]
		cands := s.candidates(b)
		for _, table := range s.tables() {
			p := b.Primary[table]
			if len(cands) > 0 && p == "" {
				t.Fatalf("bucket %s has searchable copies on %v but no primary for %s", id, cands, table)
			}
			if p == "" {
				continue
			}
			if !slices.Contains(cands, p) {
				t.Fatalf("bucket %s: primary for %s is %s, not a searchable copy on an Up peer (%v)", id, table, p, cands)
			}
			// A remote fill-in only when the site has no candidate.
			if table != Site0 && s.siteOf(p) != table {
				for _, c := range cands {
					if s.siteOf(c) == table {
						t.Fatalf("bucket %s: fill-in %s for %s although %s is there", id, p, table, c)
					}
				}
			}
		}
		for table := range b.Primary {
			if !slices.Contains(s.tables(), table) {
				t.Fatalf("bucket %s: primary for unknown table %s", id, table)
			}
		}
		if b.Hot && slices.Contains(cands, b.Origin) {
			for _, table := range []string{b.OriginSite, Site0} {
				if b.Primary[table] != b.Origin {
					t.Fatalf("hot bucket %s: primary for %s is %s, not its Up origin %s", id, table, b.Primary[table], b.Origin)
				}
			}
		}
		for p, c := range b.Copies {
			if c.Peer != p {
				t.Fatalf("bucket %s: copy keyed %s names %s", id, p, c.Peer)
			}
			copies[p]++
		}
	}
	// Detention: a flagged peer is never Up, a detained one always flagged.
	for _, id := range sortedKeys(s.d.Peers) {
		p := s.d.Peers[id]
		if (p.Detention != "" && p.State == StateUp) || (p.State == StateDetention && p.Detention == "") {
			t.Fatalf("peer %s: state %s with detention %q", id, p.State, p.Detention)
		}
	}
	// Derived counters agree with a rebuild (no copy counted twice), and
	// Clone copies the state exactly.
	c := roundTrip(s)
	checkClone(t, s)
	if !maps.Equal(copies, s.copyCount) || !maps.Equal(c.copyCount, s.copyCount) {
		t.Fatalf("copy counts %v, rebuilt %v", s.copyCount, copies)
	}
	for _, table := range s.tables() {
		if !maps.Equal(c.primaryCount[table], s.primaryCount[table]) {
			t.Fatalf("primary counts of %s drifted: %v vs %v", table, s.primaryCount[table], c.primaryCount[table])
		}
	}
	// The copy index, where built, agrees with the copies.
	if ci := s.ownCopyIndex(); ci != nil {
		for peer, set := range ci.m {
			for id := range set {
				if b, ok := s.d.Buckets[id]; !ok || b.Copies[peer] == nil {
					t.Fatalf("copy index: %s on %s, which holds no copy of it", id, peer)
				}
			}
		}
		for id, b := range s.d.Buckets {
			for peer := range b.Copies {
				if _, ok := ci.m[peer][id]; !ok {
					t.Fatalf("copy index: the copy of %s on %s is missing", id, peer)
				}
			}
		}
	}
	checkFrozen(t, s)      // frozen_test.go
	checkIncremental(t, s) // incremental_test.go
	// Marks belong to open tasks only, their peers sorted and distinct.
	for id, mk := range s.d.Marks {
		if _, open := s.d.Tasks[id]; !open {
			t.Fatalf("marks of closed task %d kept: %+v", id, mk)
		}
		for _, l := range [][]string{mk.Delivered, mk.Reported} {
			if !slices.IsSorted(l) || len(slices.Compact(slices.Clone(l))) != len(l) {
				t.Fatalf("marks of task %d not sorted and distinct: %+v", id, mk)
			}
		}
	}
}

// checkTargets: targets are distinct Up peers other than the origin; when
// not degraded, the bucket they make meets RF, SF and the site policy.
func (m *model) checkTargets(t *rapid.T, origin string, tc TargetChoice) {
	s := m.s
	seen := map[string]bool{origin: true}
	for _, x := range tc.Targets {
		if seen[x.Peer] {
			t.Fatalf("targets %v: two copies on %s", tc.Targets, x.Peer)
		}
		seen[x.Peer] = true
		if s.stateOf(x.Peer) != StateUp {
			t.Fatalf("target %s is %s", x.Peer, s.stateOf(x.Peer))
		}
	}
	b := &Bucket{OriginSite: s.siteOf(origin), Copies: map[string]*Copy{origin: {Peer: origin, Searchable: true}}}
	for _, x := range tc.Targets {
		b.Copies[x.Peer] = &Copy{Peer: x.Peer, Searchable: x.Searchable}
	}
	n, tl := s.needsOf(b), s.tallyOf(b)
	if !tc.Degraded && (!n.rfMet(tl) || !n.sfMet(tl)) {
		t.Fatalf("targets %+v from %s do not meet the policy %+v (tally %+v)", tc, origin, n, tl)
	}
	if tl.total > n.rfTotal || tl.totalSrch > n.sfTotal {
		t.Fatalf("targets %+v: more copies than the policy asks", tc)
	}
	up := 0
	for _, id := range sortedKeys(s.d.Peers) {
		if s.d.Peers[id].State == StateUp {
			up++
		}
	}
	if tl.total < min(n.rfTotal, up) {
		t.Fatalf("targets %+v: %d copies with %d peers Up", tc, tl.total, up)
	}
}

func TestProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &model{s: NewState(), now: epoch}
		var cfg Config
		switch rapid.IntRange(0, 3).Draw(t, "layout") {
		case 0:
			rf := rapid.IntRange(1, 3).Draw(t, "rf")
			cfg = singleSite(rf, rapid.IntRange(1, rf).Draw(t, "sf"))
		case 1:
			cfg = multiSite("origin:2,total:3", "origin:1,total:2", "site1", "site2")
		case 2:
			cfg = multiSite("origin:1,site1:2,total:3", "origin:1,site1:1,total:2", "site1", "site2")
		case 3:
			cfg = multiSite("origin:2,site3:1,total:4", "origin:1,total:2", "site1", "site2", "site3")
		}
		m.apply(t, &SetConfig{Config: cfg})
		sites := cfg.SiteNames()
		n := rapid.IntRange(3, 8).Draw(t, "peers")
		for i := range n {
			id := fmt.Sprintf("p%d", i+1)
			m.peers = append(m.peers, id)
			site := sites[i%len(sites)]
			if !cfg.Multisite() {
				site = ""
			}
			m.apply(t, &RegisterPeer{ID: id, GUID: guid(id), Site: site, Attrs: map[string]string{"n": id}, At: m.now})
		}
		peer := func(t *rapid.T) string { return rapid.SampledFrom(m.peers).Draw(t, "peer") }
		bucket := func(t *rapid.T) (*Bucket, bool) {
			ids := m.s.bucketIDs()
			if len(ids) == 0 {
				return nil, false
			}
			return m.s.d.Buckets[rapid.SampledFrom(ids).Draw(t, "bucket")], true
		}
		steps := map[string]func(*rapid.T){}
		for _, group := range []map[string]func(*rapid.T){
			bucketSteps(m, peer, bucket), sealSteps(m, peer, bucket), stateSteps(m, peer, bucket),
			inventorySteps(m, peer, bucket), frozenSteps(m, peer, bucket), savedSteps(m),
		} {
			maps.Copy(steps, group)
		}
		t.Repeat(steps)
	})
}

// bucketSteps: TestProperties' steps of adding buckets and copies, rolls, peers going down and coming back.
func bucketSteps(m *model, peer func(*rapid.T) string, bucket func(*rapid.T) (*Bucket, bool)) map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"addBucket": func(t *rapid.T) {
			origin := peer(t)
			tc, err := m.s.ChooseTargets(origin, "main")
			if err != nil {
				return
			}
			m.checkTargets(t, origin, tc)
			m.local++
			id := BucketID("main", fmt.Sprint(m.local), guid(origin))
			if _, failed := m.apply(t, &AddBucket{ID: id, Index: "main", Origin: origin, Targets: tc.Targets, Degraded: tc.Degraded}).(error); failed {
				t.Fatalf("chosen targets refused")
			}
		},
		"downPrimaryHolder": func(t *rapid.T) {
			var holders []string
			for _, id := range m.s.bucketIDs() {
				for _, tb := range sortedKeys(m.s.d.Buckets[id].Primary) {
					holders = append(holders, m.s.d.Buckets[id].Primary[tb])
				}
			}
			if len(holders) == 0 {
				return
			}
			m.apply(t, &PeerDown{ID: rapid.SampledFrom(holders).Draw(t, "holder"), At: m.now})
		},
		"down": func(t *rapid.T) { m.apply(t, &PeerDown{ID: peer(t), At: m.now}) },
		"comeBack": func(t *rapid.T) {
			p := peer(t)
			var inv []CopyInfo
			for _, id := range m.s.bucketIDs() {
				if c, ok := m.s.d.Buckets[id].Copies[p]; ok && rapid.IntRange(0, 5).Draw(t, "keep") > 0 {
					inv = append(inv, CopyInfo{Bucket: id, Searchable: c.Searchable})
				}
			}
			site := ""
			if pp, ok := m.s.d.Peers[p]; ok {
				site = pp.Site
			}
			m.apply(t, &RegisterPeer{ID: p, GUID: guid(p), Site: site, Inventory: inv, At: m.now})
		},
		"addCopy": func(t *rapid.T) {
			if b, ok := bucket(t); ok {
				m.apply(t, &AddCopy{Bucket: b.ID, Peer: peer(t), Searchable: rapid.Bool().Draw(t, "srch")})
			}
		},
		"searchable": func(t *rapid.T) {
			if b, ok := bucket(t); ok {
				m.apply(t, &CopySearchable{Bucket: b.ID, Peer: peer(t), Searchable: rapid.Bool().Draw(t, "srch")})
			}
		},
		"removeCopy": func(t *rapid.T) {
			if b, ok := bucket(t); ok {
				m.apply(t, &RemoveCopy{Bucket: b.ID, Peer: peer(t)})
			}
		},
		"roll": func(t *rapid.T) {
			if b, ok := bucket(t); ok {
				// A latest event up to two minutes old, a random size:
				// the retention step's rules then freeze some.
				latest := m.now.UnixNano() - int64(rapid.IntRange(0, 120).Draw(t, "age"))*int64(time.Second)
				// Sent by nobody named (an older group), by the origin,
				// or by any peer (refused unless it is the origin).
				origin := rapid.SampledFrom([]string{"", b.Origin, peer(t)}).Draw(t, "sender")
				m.apply(t, &RollBucket{Bucket: b.ID, Earliest: 1, Latest: latest, Size: int64(rapid.IntRange(0, 1000).Draw(t, "size")),
					Events: 1, Blocks: 3, LastChecksum: "c", Origin: origin})
			}
		},
	}
}

// sealSteps: TestProperties' steps of seals, lengths, extensions and short copies.
func sealSteps(m *model, peer func(*rapid.T) string, bucket func(*rapid.T) (*Bucket, bool)) map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"seal": func(t *rapid.T) {
			// As the manager seals: every holder's length, sealed at
			// the longest.
			if b, ok := bucket(t); ok {
				c := &SealBucket{Bucket: b.ID, LastChecksum: "c0"}
				for _, p := range sortedKeys(b.Copies) {
					n := int64(rapid.IntRange(0, 9).Draw(t, "blocks"))
					c.Lengths = append(c.Lengths, PeerLength{Peer: p, Blocks: n, LastChecksum: fmt.Sprintf("c%d", n)})
					if n > c.Blocks {
						c.Blocks, c.LastChecksum = n, fmt.Sprintf("c%d", n)
					}
				}
				// Final only from a group that carries it, as the
				// manager sends it (SealFinalVersion).
				v := m.s.ClusterVersion()
				var holders []string
				for _, l := range c.Lengths {
					holders = append(holders, l.Peer)
				}
				whole := m.s.SealAnsweredWhole(b.ID, holders)
				c.Final = v >= SealFinalVersion && whole
				was := b.Sealed
				if _, failed := m.apply(t, c).(error); !failed && !was {
					nb := m.s.d.Buckets[b.ID]
					if want := v >= SealFinalVersion && len(holders) > 0 && !whole; nb.Provisional != want {
						t.Fatalf("seal %+v at cluster version %d: provisional %v, want %v", c, v, nb.Provisional, want)
					}
				}
			}
		},
		"length": func(t *rapid.T) {
			if b, ok := bucket(t); ok {
				p := peer(t)
				n := int64(rapid.IntRange(0, 9).Draw(t, "blocks"))
				m.apply(t, &CopyLength{Bucket: b.ID, Peer: p, Blocks: n, LastChecksum: fmt.Sprintf("c%d", n)})
				if b, ok := m.s.d.Buckets[b.ID]; ok && b.Sealed {
					if c, ok := b.Copies[p]; ok && c.atSealed(b) {
						for _, tk := range m.s.d.Tasks {
							if tk.Bucket == b.ID && tk.Target == p && (tk.Kind == TaskFetch || tk.Kind == TaskTruncate) {
								t.Fatalf("task %+v open after its copy reported the sealed length", tk)
							}
						}
					}
				}
			}
		},
		"extend": func(t *rapid.T) {
			// A longer copy extends the seal: from the committed seal,
			// or from a stale one (refused, ErrSealMoved).
			b, ok := bucket(t)
			if !ok || len(b.Copies) == 0 {
				return
			}
			p := rapid.SampledFrom(sortedKeys(b.Copies)).Draw(t, "holder")
			from, sum := b.Blocks, b.LastChecksum
			stale := rapid.IntRange(0, 3).Draw(t, "stale") == 0
			if stale {
				from, sum = from+1, fmt.Sprintf("c%d", from+1)
			}
			n := from + int64(rapid.IntRange(1, 5).Draw(t, "more"))
			sealed := b.Sealed
			final := m.s.ClusterVersion() >= SealFinalVersion && !b.Provisional
			r := m.apply(t, &ExtendSeal{Bucket: b.ID, Peer: p, From: from, FromChecksum: sum, Blocks: n, LastChecksum: fmt.Sprintf("c%d", n)})
			_, failed := r.(error)
			if want := sealed && !stale && from > 0 && sum != "" && !final; failed == want {
				t.Fatalf("extend %s from %d (%q) to %d: refused=%v (%v), want refused=%v", b.ID, from, sum, n, failed, r, !want)
			}
			if failed {
				return
			}
			nb := m.s.d.Buckets[b.ID]
			if nb.Blocks != n || !nb.Copies[p].atSealed(nb) || m.s.d.Generation != m.idx {
				t.Fatalf("after the extension: bucket %+v, copy %+v, generation %d at %d", nb, nb.Copies[p], m.s.d.Generation, m.idx)
			}
			for _, tk := range m.s.d.Tasks {
				if tk.Bucket == b.ID && (tk.Kind == TaskFetch || tk.Kind == TaskTruncate) {
					t.Fatalf("task %+v open after the extension", tk)
				}
			}
		},
		"short": func(t *rapid.T) {
			if b, ok := bucket(t); ok {
				p := peer(t)
				m.apply(t, &CopyShort{Bucket: b.ID, Peer: p, Short: rapid.Bool().Draw(t, "short")})
				// A short copy is never a primary — unless the bucket is
				// sealed and the copy is known at the sealed length: a
				// fetch completed it (usable's rule).
				if b, ok := m.s.d.Buckets[b.ID]; ok {
					if c, ok := b.Copies[p]; ok && c.Short && !(b.Sealed && c.known() && c.atSealed(b)) {
						for table, q := range b.Primary {
							if q == p {
								t.Fatalf("short copy on %s is the primary for %s", p, table)
							}
						}
					}
				}
			}
		},
	}
}

// stateSteps: TestProperties' steps of the cluster version, marks, maintenance, detention, retention, planning.
func stateSteps(m *model, peer func(*rapid.T) string, bucket func(*rapid.T) (*Bucket, bool)) map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"rebalance": func(t *rapid.T) { m.apply(t, &RebalancePrimaries{}) },
		"clusterVersion": func(t *rapid.T) {
			v := rapid.IntRange(1, Version).Draw(t, "version")
			before := m.s.ClusterVersion()
			r := m.apply(t, &SetClusterVersion{Version: v})
			if _, failed := r.(error); failed != (v < before) || m.s.ClusterVersion() != max(v, before) {
				t.Fatalf("SetClusterVersion %d from %d: %v, now %d", v, before, r, m.s.ClusterVersion())
			}
		},
		"mark": func(t *rapid.T) {
			ids := sortedTaskIDs(m.s.d.Tasks)
			if len(ids) == 0 {
				return
			}
			id := rapid.SampledFrom(ids).Draw(t, "task")
			kind := rapid.SampledFrom([]string{MarkDelivered, MarkReported}).Draw(t, "kind")
			p := peer(t)
			if _, failed := m.apply(t, &MarkFixup{Task: id, Peer: p, Kind: kind}).(error); failed || !m.s.Marked(kind, id, p) {
				t.Fatalf("mark %s of open task %d for %s not recorded", kind, id, p)
			}
		},
		"maintenance": func(t *rapid.T) { m.apply(t, &SetMaintenance{Enabled: rapid.Bool().Draw(t, "on")}) },
		"offline": func(t *rapid.T) {
			m.apply(t, &PeerOffline{ID: peer(t), EnforceCounts: rapid.Bool().Draw(t, "enforce"), At: m.now})
		},
		"detention": func(t *rapid.T) {
			m.apply(t, &SetPeerState{ID: peer(t), State: StateDetention, At: m.now})
		},
		"setDetention": func(t *rapid.T) {
			by := rapid.SampledFrom([]DetentionBy{DetentionManual, DetentionDisk}).Draw(t, "by")
			m.apply(t, &SetDetention{ID: peer(t), Enabled: rapid.Bool().Draw(t, "on"), By: by, At: m.now})
		},
		"diskRule": func(t *rapid.T) {
			// The free-disk rule alone, with random reports.
			disk := map[string]DiskReport{}
			for _, p := range m.peers {
				disk[p] = DiskReport{Free: int64(rapid.IntRange(0, 200).Draw(t, "free")), Total: 200}
			}
			hb := map[string]time.Time{}
			for _, p := range m.peers {
				hb[p] = m.now
			}
			rule := DetentionRule{FreeBytes: 50, HysteresisBytes: 20}
			for _, c := range checkedPlan(t, m.s, PlanInput{Now: m.now, LastHeartbeat: hb, Disk: disk, Detention: rule}) {
				if _, failed := m.apply(t, c).(error); failed {
					t.Fatalf("planned %T %+v refused", c, c)
				}
			}
			for _, id := range sortedKeys(m.s.d.Peers) {
				p := m.s.d.Peers[id]
				if p.State == StateUp && disk[id].Free < rule.FreeBytes {
					t.Fatalf("peer %s Up with %d bytes free after the rule", id, disk[id].Free)
				}
				if p.Detention == DetentionDisk && p.State == StateDetention && disk[id].Free >= rule.FreeBytes+rule.HysteresisBytes {
					t.Fatalf("peer %s still in disk detention with %d bytes free", id, disk[id].Free)
				}
			}
		},
		"retention": func(t *rapid.T) {
			// Retention rules for the planner's steps to apply
			// (the ordered index against the full pass).
			c := m.s.d.Config.clone()
			ic := IndexConfig{Name: "main"}
			if rapid.Bool().Draw(t, "period") {
				ic.FrozenTimePeriod = time.Duration(rapid.IntRange(1, 120).Draw(t, "seconds")) * time.Second
			}
			if rapid.Bool().Draw(t, "max") {
				ic.MaxTotalBytes = int64(rapid.IntRange(0, 5000).Draw(t, "maxBytes"))
			}
			c.Indexes = []IndexConfig{ic}
			m.apply(t, &SetConfig{Config: c})
		},
		"corrupt": func(t *rapid.T) {
			if b, ok := bucket(t); ok {
				m.apply(t, &MarkCorrupt{Bucket: b.ID, Peer: peer(t)})
			}
		},
		"plan": func(t *rapid.T) {
			hb := map[string]time.Time{}
			for _, p := range m.peers {
				if rapid.IntRange(0, 9).Draw(t, "alive") > 0 {
					hb[p] = m.now
				}
			}
			for _, c := range checkedPlan(t, m.s, PlanInput{Now: m.now, LastHeartbeat: hb}) {
				checkStreamingTask(t, m.s, c)
				checkRebuildHeld(t, m.s, c)
				if _, failed := m.apply(t, c).(error); failed {
					t.Fatalf("planned %T %+v refused", c, c)
				}
			}
		},
		"finishTasks": func(t *rapid.T) {
			for _, id := range sortedTaskIDs(m.s.d.Tasks) {
				m.apply(t, &FixupDone{ID: id, Failed: rapid.IntRange(0, 4).Draw(t, "fail") == 0})
			}
		},
		// Rebuild from inventories (rebuild.go): a peer reports buckets
		// nobody knew, some of an origin that registers later ("late"),
		// with random lengths; the operator's rebuild seals them.
	}
}

// inventorySteps: TestProperties' steps of rebuilds from inventories and claimed copies.
func inventorySteps(m *model, peer func(*rapid.T) string, bucket func(*rapid.T) (*Bucket, bool)) map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"rebuildInventory": func(t *rapid.T) {
			p := peer(t)
			var inv []CopyInfo
			seen := map[string]bool{}
			for range rapid.IntRange(1, 3).Draw(t, "reported") {
				origin := rapid.SampledFrom(append([]string{"late"}, m.peers...)).Draw(t, "origin")
				id := BucketID("main", fmt.Sprintf("r%d", rapid.IntRange(0, 4).Draw(t, "rid")), guid(origin))
				if seen[id] {
					continue
				}
				seen[id] = true
				n := int64(rapid.IntRange(0, 6).Draw(t, "blocks"))
				inv = append(inv, CopyInfo{Bucket: id, Searchable: true, Index: "main", Blocks: n, Events: 10 * n,
					Earliest: 100 - n, Latest: 100 + n, Size: 1000 * n, Hot: origin == p && rapid.Bool().Draw(t, "hot")})
			}
			for _, id := range m.s.bucketIDs() {
				if c, ok := m.s.d.Buckets[id].Copies[p]; ok && !seen[id] {
					inv = append(inv, CopyInfo{Bucket: id, Searchable: c.Searchable, Blocks: c.Blocks})
				}
			}
			site := ""
			if pp, ok := m.s.d.Peers[p]; ok {
				site = pp.Site
			}
			reg := &RegisterPeer{ID: p, GUID: guid(p), Site: site, Inventory: inv, At: m.now}
			// Claims of known buckets the managers cannot vouch for
			// (inventory.go) are not adopted: judged before the entry.
			unvouched := map[string]bool{}
			tasks := m.s.taskBucketsFor(p)
			for _, ci := range inv {
				if b, ok := m.s.lookup(ci.Bucket); ok && !m.s.vouches(b, reg.ID, reg.GUID, tasks) {
					unvouched[ci.Bucket] = true
				}
			}
			if _, failed := m.apply(t, reg).(error); failed {
				return
			}
			for _, ci := range inv {
				b, ok := m.s.d.Buckets[ci.Bucket]
				if _, frozen := m.s.d.Frozen[ci.Bucket]; frozen {
					continue
				}
				if unvouched[ci.Bucket] {
					if ok && b.Copies[p] != nil {
						t.Fatalf("unvouched claim of %s by %s adopted: %+v", ci.Bucket, p, b.Copies[p])
					}
					continue
				}
				if !ok || b.Copies[p] == nil {
					t.Fatalf("reported %s on %s is not in the table: %+v", ci.Bucket, p, b)
				}
				if !b.Hot && !b.Sealed && ci.Latest > b.Latest {
					t.Fatalf("rebuilt %s: latest %d, a copy reported %d", b.ID, b.Latest, ci.Latest)
				}
			}
		},
		// A peer claims copies of buckets it may not hold (review M5):
		// from InventoryVersion a claim the managers cannot vouch for
		// is not adopted, and is never a primary.
		"claimForeign": func(t *rapid.T) {
			p := peer(t)
			pp, ok := m.s.d.Peers[p]
			if !ok {
				return
			}
			var inv []CopyInfo
			for _, id := range m.s.bucketIDs() {
				if c, ok := m.s.d.Buckets[id].Copies[p]; ok {
					inv = append(inv, CopyInfo{Bucket: id, Searchable: c.Searchable, Blocks: c.Blocks})
				}
			}
			ids := m.s.bucketIDs()
			if len(ids) == 0 {
				return
			}
			claimed := rapid.SampledFrom(ids).Draw(t, "claimed")
			if _, held := m.s.d.Buckets[claimed].Copies[p]; held {
				return
			}
			inv = append(inv, CopyInfo{Bucket: claimed, Searchable: true, Blocks: int64(rapid.IntRange(0, 6).Draw(t, "blocks"))})
			reg := &RegisterPeer{ID: p, GUID: pp.GUID, Site: pp.Site, Inventory: inv, At: m.now}
			vouched := m.s.vouches(m.s.d.Buckets[claimed], reg.ID, reg.GUID, m.s.taskBucketsFor(p))
			if _, failed := m.apply(t, reg).(error); failed {
				return
			}
			b, ok := m.s.d.Buckets[claimed]
			if !ok {
				return
			}
			if _, adopted := b.Copies[p]; adopted != vouched {
				t.Fatalf("claim of %s by %s: adopted %v, vouched %v (cluster version %d)", claimed, p, adopted, vouched, m.s.ClusterVersion())
			}
			if !vouched {
				for table, primary := range b.Primary {
					if primary == p {
						t.Fatalf("unvouched claimant %s is %s's primary for %s", p, claimed, table)
					}
				}
			}
		},
	}
}

// frozenSteps: TestProperties' steps of late origins, rebuild seals, freezing.
func frozenSteps(m *model, peer func(*rapid.T) string, bucket func(*rapid.T) (*Bucket, bool)) map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"lateOrigin": func(t *rapid.T) {
			var inv []CopyInfo
			for _, id := range m.s.bucketIDs() {
				if _, _, g, _ := ParseBucketID(id); g == guid("late") && rapid.Bool().Draw(t, "holds") {
					inv = append(inv, CopyInfo{Bucket: id, Searchable: true, Blocks: int64(rapid.IntRange(0, 6).Draw(t, "blocks"))})
				}
			}
			site := ""
			if m.s.d.Config.Multisite() {
				site = m.s.d.Config.Sites[0]
			}
			if _, failed := m.apply(t, &RegisterPeer{ID: "late", GUID: guid("late"), Site: site, Inventory: inv, At: m.now}).(error); failed {
				return
			}
			for _, ci := range inv {
				if b, ok := m.s.d.Buckets[ci.Bucket]; ok && b.Origin != "late" {
					t.Fatalf("bucket %s of late's guid has origin %q after late registered", b.ID, b.Origin)
				}
			}
		},
		"rebuildSeal": func(t *rapid.T) {
			for _, seal := range m.s.RebuildSeals() {
				if _, failed := m.apply(t, seal).(error); failed {
					t.Fatalf("rebuild seal %+v refused", seal)
				}
				b := m.s.d.Buckets[seal.Bucket]
				for _, peer := range sortedKeys(b.Copies) {
					if c := b.Copies[peer]; c.known() && c.Blocks > b.Blocks {
						t.Fatalf("rebuilt %s sealed at %d below %s's %d blocks", b.ID, b.Blocks, peer, c.Blocks)
					}
				}
			}
			if again := m.s.RebuildSeals(); len(again) > 0 {
				t.Fatalf("rebuild seals left after applying them: %+v", again)
			}
		},
		// Retention (frozen.go): a whole-bucket freeze, and a peer that
		// returns with copies of frozen buckets in its inventory.
		"freeze": func(t *rapid.T) {
			if b, ok := bucket(t); ok {
				if r, ok := m.apply(t, &CreateFixup{Kind: TaskFreeze, Level: LevelRetention, Bucket: b.ID, At: m.now}).(Result); ok {
					m.apply(t, &FixupDone{ID: r.Index})
				}
			}
		},
		"comeBackFrozen": func(t *rapid.T) {
			p := peer(t)
			var inv []CopyInfo
			for _, id := range sortedKeys(m.s.d.Frozen) {
				if rapid.Bool().Draw(t, "holds") {
					inv = append(inv, CopyInfo{Bucket: id, Blocks: 3})
				}
			}
			site := ""
			if pp, ok := m.s.d.Peers[p]; ok {
				site = pp.Site
			}
			m.apply(t, &RegisterPeer{ID: p, GUID: guid(p), Site: site, Inventory: inv, At: m.now})
			for _, ci := range inv {
				if _, back := m.s.d.Buckets[ci.Bucket]; back {
					t.Fatalf("frozen bucket %s came back through %s's inventory", ci.Bucket, p)
				}
				if fz := m.s.d.Frozen[ci.Bucket]; fz == nil || !slices.Contains(fz.Holders, p) {
					t.Fatalf("%s returned with frozen %s but is not its holder: %+v", p, ci.Bucket, fz)
				}
			}
		},
	}
}

// checkRebuildHeld: a bucket rebuilt from inventories whose copies disagree
// on their length gets no copy made and none removed before its rebuild
// seal (it could remove or copy from a short copy).
func checkRebuildHeld(t *rapid.T, s *State, c Command) {
	x, ok := c.(*CreateFixup)
	if !ok || (x.Kind != TaskReplicate && x.Kind != TaskRemoveCopy && x.Kind != TaskMakeSearchable) {
		return
	}
	if b := s.d.Buckets[x.Bucket]; b != nil && awaitsRebuild(b) {
		t.Fatalf("planned %+v for %s, which awaits its rebuild seal: %+v", x, b.ID, b)
	}
}

// checkStreamingTask: a planned fetch goes to a copy of known length shorter
// than the sealed one, or to a copy its origin reported short (its length
// may stay unknown: the origin no longer rolls it), from a copy at the
// sealed length; a planned truncate to a copy of known length longer than
// it.
func checkStreamingTask(t *rapid.T, s *State, c Command) {
	x, ok := c.(*CreateFixup)
	if !ok || (x.Kind != TaskFetch && x.Kind != TaskTruncate) {
		return
	}
	b := s.d.Buckets[x.Bucket]
	tc := b.Copies[x.Target]
	if !b.Sealed || tc == nil || (!tc.known() && !(x.Kind == TaskFetch && tc.Short)) {
		t.Fatalf("planned %+v for bucket %+v, copy %+v", x, b, tc)
	}
	switch x.Kind {
	case TaskFetch:
		if sc := b.Copies[x.Source]; tc.Blocks >= b.Blocks || sc == nil || !sc.atSealed(b) {
			t.Fatalf("planned fetch %+v: target %+v, source %+v, sealed at %d", x, tc, sc, b.Blocks)
		}
	case TaskTruncate:
		if tc.Blocks <= b.Blocks {
			t.Fatalf("planned truncate %+v: target %+v, sealed at %d", x, tc, b.Blocks)
		}
	}
}
