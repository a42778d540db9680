package searchhead

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/query"
)

// The search-time knowledge bundle on a search head (SPEC §5, issue 28
// item 2): loaded from --knowledge DIR at start (a bad one stops the
// start), checked again every KnowledgeReload; a changed folder that
// parses is put in force for the searches that start from then on, a bad
// one is logged with its line-numbered error and the last good one stays.
// Every search names its bundle by hash (api.SearchRequest.Knowledge) and
// takes it whole from start to end; peers fetch it by that hash on
// <prefix>.bundle.<hex>, which the head answers for the last few bundles
// it held, so a search that started before a change still runs with its
// own.

// KnowledgeReload is how often a head looks at its --knowledge folder.
const KnowledgeReload = 2 * time.Second

// knownBundles is how many bundles a head keeps serving by hash.
const knownBundles = 4

type knowledgeStore struct {
	dir  string
	cur  atomic.Pointer[query.Knowledge]
	mu   sync.Mutex
	kept []api.KnowledgeFetch // newest last
	sub  *nats.Subscription
}

// loadKnowledge reads, parses and compiles the folder: the bundle and its
// files.
func loadKnowledge(dir string) (*query.Knowledge, knowledge.Files, error) {
	files, err := knowledge.LoadKnowledgeDir(dir)
	if err != nil {
		return nil, nil, err
	}
	k, err := compileKnowledge(files)
	return k, files, err
}

// compileKnowledge parses and compiles files already read.
func compileKnowledge(files knowledge.Files) (*query.Knowledge, error) {
	b, err := knowledge.ParseSearchBundle(files)
	if err != nil {
		return nil, err
	}
	return query.CompileKnowledge(b)
}

// startKnowledge loads the head's bundle (if any), serves bundle fetches
// and watches the folder.
func (h *Head) startKnowledge() error {
	if h.cfg.KnowledgeDir == "" {
		return nil
	}
	ks := &knowledgeStore{dir: h.cfg.KnowledgeDir}
	k, files, err := loadKnowledge(ks.dir)
	if err != nil {
		return fmt.Errorf("searchhead: --knowledge %s: %w", ks.dir, err)
	}
	ks.put(k, files)
	ks.sub, err = h.nc.Subscribe(h.subj.All("bundle"), func(m *nats.Msg) {
		tok := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		if f, ok := ks.find(tok); ok {
			b, _ := json.Marshal(f)
			_ = m.Respond(b)
		}
	})
	if err != nil {
		return fmt.Errorf("searchhead: serve knowledge bundles: %w", err)
	}
	h.know = ks
	h.log.Info("knowledge bundle in force", "bundle", k.Hash(), "dir", ks.dir)
	h.wg.Add(1)
	go h.watchKnowledge()
	return nil
}

func (ks *knowledgeStore) put(k *query.Knowledge, files knowledge.Files) {
	ks.mu.Lock()
	ks.kept = append(ks.kept, api.KnowledgeFetch{Hash: k.Hash(), Files: files})
	if len(ks.kept) > knownBundles {
		ks.kept = ks.kept[len(ks.kept)-knownBundles:]
	}
	ks.mu.Unlock()
	ks.cur.Store(k)
}

func (ks *knowledgeStore) find(tok string) (api.KnowledgeFetch, bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, f := range ks.kept {
		if api.BundleToken(f.Hash) == tok {
			return f, true
		}
	}
	return api.KnowledgeFetch{}, false
}

// watchKnowledge reloads the folder when its content changes.
func (h *Head) watchKnowledge() {
	defer h.wg.Done()
	ks := h.know
	t := time.NewTicker(KnowledgeReload)
	defer t.Stop()
	failed := ""
	for {
		select {
		case <-h.stop:
			_ = ks.sub.Unsubscribe()
			return
		case <-t.C:
		}
		files, err := knowledge.LoadKnowledgeDir(ks.dir)
		if err != nil {
			if failed != err.Error() {
				h.metrics.knowledgeRefused.Inc()
				h.log.Error("knowledge bundle not reloaded; the last good one stays in force", "dir", ks.dir, "err", err)
				failed = err.Error()
			}
			continue
		}
		if files.Hash() == ks.cur.Load().Hash() {
			continue
		}
		k, err := compileKnowledge(files) // the files just read, not a second read
		if err != nil {
			if failed != err.Error() {
				h.metrics.knowledgeRefused.Inc()
				h.log.Error("knowledge bundle refused; the last good one stays in force", "dir", ks.dir, "err", err)
				failed = err.Error()
			}
			continue
		}
		failed = ""
		ks.put(k, files)
		h.metrics.knowledgeReloads.Inc()
		h.log.Info("knowledge bundle in force", "bundle", k.Hash(), "dir", ks.dir)
	}
}

// knowledge is the bundle a search starting now runs with, nil: none.
func (h *Head) knowledge() *query.Knowledge {
	if h.know == nil {
		return nil
	}
	return h.know.cur.Load()
}
