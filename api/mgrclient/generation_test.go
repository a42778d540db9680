package mgrclient

import (
	"context"
	"fmt"
	"github.com/quarry-dev/quarry/api"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

func fakeView(n int) fsm.GenerationView {
	v := fsm.GenerationView{Generation: 7, Version: 99, Site: "site1", Full: true,
		Primaries: make(map[string]string, n), Buckets: make(map[string]fsm.BucketInfo, n)}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("main~%d~0123456789abcdef0123456789abcdef", i)
		v.Primaries[id] = "site1-p1"
		v.Buckets[id] = fsm.BucketInfo{Index: "main", Earliest: int64(i), Latest: int64(i + 1), SearchableOn: []string{"site1-p1", "site2-p3"}}
	}
	return v
}

func testFetch(t *testing.T, n int) {
	nc := startBus(t)
	s, _ := bus.NewSubjects("")
	view := fakeView(n)
	svc, err := bus.Serve(nc, mustOp(t, s, api.OpGeneration), bus.ServeOptions{}, func(ctx context.Context, r api.GenerationRequest) (api.GenerationReply, error) {
		if r.Invite == nil {
			return api.GenerationReply{V: api.WireVersion, View: view}, nil
		}
		if err := SendGeneration(ctx, nc, *r.Invite, func() (fsm.GenerationView, error) { return view, nil }); err != nil {
			return api.GenerationReply{}, err
		}
		return api.GenerationReply{V: api.WireVersion, Streamed: true}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mc := NewManagerClient(nc, s)
	mc.Sender = "p1"
	mc.FetchTimeout = 5 * time.Minute // a million buckets on a loaded machine
	got, err := mc.FetchGeneration(ctx, "site1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Primaries) != n || len(got.Buckets) != n || got.Generation != 7 || got.Version != 99 {
		t.Fatalf("fetched %d primaries, %d buckets, generation %d version %d; want %d, 7, 99", len(got.Primaries), len(got.Buckets), got.Generation, got.Version, n)
	}
}

// A table larger than the bus's max payload (1 MiB) transfers.
func TestFetchGenerationLargerThanMaxPayload(t *testing.T) { testFetch(t, 20000) }
