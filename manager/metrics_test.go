package manager

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// scrapeMetrics reads m's /metrics into series → value.
func scrapeMetrics(t *testing.T, m *Manager) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + m.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// Fixup and Raft metrics: the open tasks by kind and the waiting buckets
// by level equal the committed state; closing one replicate task moves the
// replicate gauge by exactly -1, and its one proposal moves the applied
// counter and the apply-duration histogram by exactly 1; the generation
// gauge is /v1/status's.
func TestMetricsFixupsAndRaft(t *testing.T) {
	clock := newFakeClock() // never advanced: nobody leaves the grace period
	g := newGroup(t, 1, func(c *Config) { c.Now = clock.Now })
	l := g.leader()
	for _, p := range []string{"p1", "p2", "p3", "p4"} {
		g.apply(&fsm.RegisterPeer{ID: p, GUID: "g" + p, Site: fsm.DefaultSite, At: clock.Now()})
	}
	b1 := fsm.BucketID("main", "1", "gp1")
	g.apply(&fsm.AddBucket{ID: b1, Index: "main", Origin: "p1", Earliest: 1, Targets: []fsm.CopySpec{{Peer: "p2", Searchable: true}, {Peer: "p3"}}})
	g.apply(&fsm.RollBucket{Bucket: b1, Earliest: 1, Latest: 2, Size: 100, Events: 10, Blocks: 1, LastChecksum: "c1"})
	g.apply(&fsm.PeerDown{ID: "p2", Reason: "test", At: clock.Now()})
	var replicate uint64
	testutil.WaitFor(t, 10*time.Second, func() error {
		l.Read(func(s *fsm.State) {
			for _, tk := range s.Tasks() {
				if tk.Kind == fsm.TaskReplicate && tk.Target == "p4" {
					replicate = tk.ID
				}
			}
		})
		if replicate == 0 {
			return fmt.Errorf("no replicate task yet")
		}
		return nil
	})
	// Let the planner settle: a few more ticks plan nothing new.
	n := ticks(l)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if ticks(l) < n+3 {
			return fmt.Errorf("loop has not run")
		}
		return nil
	})
	before := scrapeMetrics(t, l)
	kinds, levels := map[fsm.TaskKind]int{}, map[string]int{}
	var gen uint64
	l.Read(func(s *fsm.State) {
		for _, tk := range s.Tasks() {
			kinds[tk.Kind]++
		}
		for _, f := range s.Status().Fixups {
			levels[f.Level.String()]++
		}
		gen = s.CurrentGeneration()
	})
	for _, k := range taskKinds {
		if got := before[fmt.Sprintf(`quarry_manager_fixup_queue_tasks{kind="%s"}`, k)]; got != float64(kinds[k]) {
			t.Errorf("fixup_queue_tasks{kind=%s} = %v, state has %d", k, got, kinds[k])
		}
	}
	for lv, want := range levels {
		if got := before[fmt.Sprintf(`quarry_manager_fixup_waiting_buckets{level="%s"}`, lv)]; got != float64(want) {
			t.Errorf("fixup_waiting_buckets{level=%s} = %v, status has %d", lv, got, want)
		}
	}
	if kinds[fsm.TaskReplicate] < 1 {
		t.Fatalf("no replicate task in %v", kinds)
	}
	if before["quarry_manager_generation"] != float64(gen) {
		t.Fatalf("generation gauge %v, state %d", before["quarry_manager_generation"], gen)
	}

	g.apply(&fsm.FixupDone{ID: replicate})
	after := scrapeMetrics(t, l)
	for series, want := range map[string]float64{
		`quarry_manager_fixup_queue_tasks{kind="replicate"}`: -1,
		"quarry_manager_commands_applied_total":              1,
		"quarry_manager_raft_apply_duration_seconds_count":   1,
	} {
		if got := after[series] - before[series]; got != want {
			t.Errorf("%s moved by %v, want %v", series, got, want)
		}
	}
}
