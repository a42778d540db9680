package hec

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/peer/store"
)

// A shipper that never reads acks on one fixed channel (review 2026-12-06,
// the stuck channel) got 503 code 9 for ever once MaxPendingAcks were
// unread. Sweep, run on a timer by the peer, forgets acks unread for
// AckIdle (the channel stays: it is in use) and channels idle for
// ChannelIdle; the shipper is served again, and the counts match.
func TestSweepFreesAStuckChannel(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir(), GUID: "g1", Searchable: true, BlockInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	now := fixedNow
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	h := New(Config{Store: st, Tokens: []Token{{Value: "ack", Ack: true}, {Value: "noack"}}, MaxPendingAcks: 2,
		ChannelIdle: 10 * time.Minute, AckIdle: 5 * time.Minute, Now: clock})
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f := &fixture{st: st, srv: srv}
	send := func(ch string, want int) {
		t.Helper()
		status, r := f.post(t, "/services/collector/event", "Splunk ack", ch, good)
		if r.Code != want {
			t.Fatalf("channel %s: %d %+v, want code %d", ch, status, r, want)
		}
	}
	send(chanA, 0)
	send(chanA, 0)
	send(chanA, 9) // two unread acks: the channel is full
	// Another token's shipper is served while chanA is stuck.
	if status, r := f.post(t, "/services/collector/event", "Splunk noack", "", good); status != 200 || r.Code != 0 {
		t.Fatalf("another token beside the stuck channel: %d %+v", status, r)
	}
	advance(4 * time.Minute)
	if c, a := h.Sweep(); c != 0 || a != 0 {
		t.Fatalf("sweep before AckIdle forgot %d channels, %d acks", c, a)
	}
	send(chanB, 0) // chanB's ack is younger
	advance(2 * time.Minute)
	if c, a := h.Sweep(); c != 0 || a != 2 {
		t.Fatalf("sweep after AckIdle forgot %d channels, %d acks; want 0, 2", c, a)
	}
	send(chanA, 0) // served again
	if got := f.acks(t, "Splunk ack", chanA, 0, 1); got["0"] || got["1"] {
		t.Fatalf("forgotten acks read as %v, want false", got)
	}
	advance(11 * time.Minute)
	if c, a := h.Sweep(); c != 2 || a != 2 {
		t.Fatalf("sweep after ChannelIdle forgot %d channels, %d acks; want 2, 2", c, a)
	}
	if n := h.tokens.Load().byKey; len(n) != 2 {
		t.Fatalf("tokens %d", len(n))
	}
	for _, tk := range h.tokens.Load().byKey {
		if len(tk.channels) != 0 || tk.pending.Load() != 0 {
			t.Fatalf("after the sweeps: %d channels, %d pending", len(tk.channels), tk.pending.Load())
		}
	}
}
