package peer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/knowledge"
)

// TestKnowledgeFetchChecksTheHash: a peer runs a search only with the
// knowledge bundle its request names — an answer whose files hash to
// something else (a forged or stale bundle) is refused, no answer is a
// clear error, and a good one is fetched once and then served from the
// cache.
func TestKnowledgeFetchChecksTheHash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, nc := startTestNATS(t, "search heads (fake)")
	subj, _ := bus.NewSubjects("quarry")
	good := knowledge.Files{"props.conf": []byte("[web]\nEXTRACT-u = u=(?<user>\\w+)\n")}
	forged := knowledge.Files{"props.conf": []byte("[web]\nEXTRACT-u = u=(?<user>x)\n")}
	var asked atomic.Int64
	var serve atomic.Pointer[knowledge.Files]
	sub, err := nc.Subscribe(subj.All("bundle"), func(m *nats.Msg) {
		asked.Add(1)
		b, _ := json.Marshal(api.KnowledgeFetch{Hash: good.Hash(), Files: *serve.Load()})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	s := &searchService{p: &Peer{log: log}, nc: nc, subj: subj}
	serve.Store(&forged)
	if _, err := s.knowledgeFor(ctx, good.Hash()); err == nil || !strings.Contains(err.Error(), "hash to") {
		t.Fatalf("forged bundle: %v, want a refusal naming the hash", err)
	}
	serve.Store(&good)
	k, err := s.knowledgeFor(ctx, good.Hash())
	if err != nil || k.Hash() != good.Hash() {
		t.Fatalf("good bundle: %v %v", k, err)
	}
	before := asked.Load()
	if k2, err := s.knowledgeFor(ctx, good.Hash()); err != nil || k2 != k || asked.Load() != before {
		t.Fatalf("second use: %v %v, asked %d times more; want the cached bundle", k2, err, asked.Load()-before)
	}
	if k, err := s.knowledgeFor(ctx, ""); k != nil || err != nil {
		t.Fatalf("no bundle named: %v %v", k, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	sub.Unsubscribe()
	if _, err := s.knowledgeFor(short, "sha256:00ff"); err == nil || !strings.Contains(err.Error(), "search heads") {
		t.Fatalf("nobody answers: %v", err)
	}
}
