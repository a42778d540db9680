package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/query"
)

// Search-time knowledge on a cluster peer (SPEC §5, issue 28 item 2): a
// search request names its knowledge bundle by hash; the peer runs it with
// exactly that bundle — from its cache, or fetched from the search heads on
// <prefix>.bundle.<hex> and checked against the hash — or refuses the
// request, so no search runs half with another bundle. The cache keeps the
// last knowledgeCached bundles.

const (
	knowledgeCached  = 8
	knowledgeTimeout = 5 * time.Second
)

type knowledgeCache struct {
	mu    sync.Mutex
	byKey map[string]*query.Knowledge
	order []string
	fetch sync.Mutex // one fetch at a time: a burst of searches asks once
}

// knowledgeFor returns the bundle named hash ("": none).
func (s *searchService) knowledgeFor(ctx context.Context, hash string) (*query.Knowledge, error) {
	if hash == "" {
		return nil, nil
	}
	kc := &s.know
	if k := kc.get(hash); k != nil {
		return k, nil
	}
	kc.fetch.Lock()
	defer kc.fetch.Unlock()
	if k := kc.get(hash); k != nil {
		return k, nil
	}
	subj, err := s.subj.Bundle(api.BundleToken(hash))
	if err != nil {
		return nil, fmt.Errorf("knowledge bundle %s: %w", hash, err)
	}
	ctx, cancel := context.WithTimeout(ctx, knowledgeTimeout)
	defer cancel()
	msg, err := s.nc.RequestWithContext(ctx, subj, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch knowledge bundle %s from the search heads: %w", hash, err)
	}
	var f api.KnowledgeFetch
	if err := json.Unmarshal(msg.Data, &f); err != nil {
		return nil, fmt.Errorf("knowledge bundle %s: %w", hash, err)
	}
	files := knowledge.Files(f.Files)
	if got := files.Hash(); got != hash {
		return nil, fmt.Errorf("knowledge bundle %s: the files sent hash to %s", hash, got)
	}
	b, err := knowledge.ParseSearchBundle(files)
	if err != nil {
		return nil, fmt.Errorf("knowledge bundle %s: %w", hash, err)
	}
	k, err := query.CompileKnowledge(b)
	if err != nil {
		return nil, fmt.Errorf("knowledge bundle %s: %w", hash, err)
	}
	kc.put(hash, k)
	s.p.log.Info("knowledge bundle fetched", "bundle", hash)
	return k, nil
}

func (kc *knowledgeCache) get(hash string) *query.Knowledge {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	return kc.byKey[hash]
}

func (kc *knowledgeCache) put(hash string, k *query.Knowledge) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if kc.byKey == nil {
		kc.byKey = map[string]*query.Knowledge{}
	}
	kc.byKey[hash] = k
	kc.order = append(kc.order, hash)
	if len(kc.order) > knowledgeCached {
		delete(kc.byKey, kc.order[0])
		kc.order = kc.order[1:]
	}
}
