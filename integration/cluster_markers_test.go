package integration

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// TestSearchMarkersTravelTogether: to a head that reads framed messages
// (api.SearchRequest.Framed), a peer sends the markers of buckets that
// match nothing as marker lists, and no batch for them — every bucket's
// marker exactly once, saying how many batches came before it, in fewer
// messages than buckets; to a head that does not, one message per batch
// and per marker, as before.
func TestSearchMarkersTravelTogether(t *testing.T) {
	c := Start(t, Options{})
	for _, tag := range []string{"mk1", "mk2", "mk3"} {
		searchIngest(t, c, tag, 400) // each round rolls its buckets
	}
	var prim string
	var gen, version uint64
	c.State(func(s *fsm.State) {
		gen, version = s.CurrentGeneration(), s.TableVersion()
		v, _ := s.Generation("site1", 0)
		count := map[string]int{}
		for _, p := range v.Primaries {
			count[p]++
			if count[p] > count[prim] {
				prim = p
			}
		}
		if count[prim] < 3 {
			t.Fatalf("site1's busiest peer %s holds %d primaries, want 3 or more", prim, count[prim])
		}
	})
	nc, err := nats.Connect(c.Bus.Server("site1").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, framed := range []bool{true, false} {
		rcv, err := bus.NewReceiver(nc, 0, bus.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req := api.SearchRequest{V: api.WireVersion, ID: "mk", Head: "test", Query: "zqxneverterm", NowNS: time.Now().UnixNano(),
			Generation: gen, TableVersion: version, TableSite: "site1", Invites: map[string]bus.Invite{prim: rcv.Invite()}, TimeoutMs: 10000, Framed: framed}
		if err := bus.Publish(nc, "quarry.search.site1."+prim, req); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		markers, batches, messages, done := map[string]int{}, map[string]int{}, 0, false
		mark := func(x api.SearchMsg) {
			markers[x.Bucket]++
			if x.Outcome == api.MarkerSearched && (x.Batches == nil || *x.Batches != batches[x.Bucket]) {
				t.Fatalf("framed %v: bucket %s marked after %d batches, saying %v", framed, x.Bucket, batches[x.Bucket], x.Batches)
			}
		}
		for !done {
			b, err := rcv.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("framed %v: %v", framed, err)
			}
			m, err := api.DecodeSearchMsg(b)
			if err != nil {
				t.Fatalf("framed %v: %v", framed, err)
			}
			messages++
			switch m.Kind {
			case api.SearchBatch:
				if framed {
					t.Fatalf("framed: a batch for bucket %s, which has no events", m.Bucket)
				}
				batches[m.Bucket]++
			case api.SearchMarker:
				mark(m)
			case api.SearchMarkers:
				if !framed {
					t.Fatalf("a marker list to a head that did not ask: %+v", m)
				}
				for _, x := range m.Markers {
					mark(x)
				}
			case api.SearchDone:
				done = true
			case api.SearchBeat:
				messages--
			default:
				t.Fatalf("framed %v: unexpected %+v", framed, m)
			}
		}
		cancel()
		rcv.Close(nil)
		if !done {
			t.Fatalf("framed %v: no done", framed)
		}
		for b, n := range markers {
			if n != 1 {
				t.Fatalf("framed %v: bucket %s has %d markers", framed, b, n)
			}
		}
		if len(markers) < 3 {
			t.Fatalf("framed %v: markers for %d buckets, want 3 or more", framed, len(markers))
		}
		// messages: the batches', the markers' and the done
		if framed && messages >= len(markers)+1 {
			t.Fatalf("framed: %d messages for %d markers: not sent together", messages, len(markers))
		}
		if !framed && messages != len(markers)+len(batches)+1 {
			t.Fatalf("not framed: %d messages for %d markers and %d batches", messages, len(markers), len(batches))
		}
	}
}
