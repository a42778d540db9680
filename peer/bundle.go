package peer

import (
	"context"
	"fmt"

	"github.com/quarry-dev/quarry/knowledge"
)

// The configuration bundle on a cluster peer (SPEC §5, issue 28): the
// managers' config names the bundle in force by hash; a peer running
// another fetches the files over NATS (mgr.bundle.<peer>), parses them
// exactly as the leader did before accepting them, and hands HEC the rules
// for every request from then on. The hash it runs goes out with each
// heartbeat (PeerStats.Bundle) for `quarry cluster bundle status`. A
// bundle that fails to fetch or parse leaves the last good one in force and
// is tried again on the next beat.

// fetchBundle fetches and parses the bundle named hash ("" none: nil rules,
// the built-in sourcetypes only).
func (p *Peer) fetchBundle(ctx context.Context, hash string) (*knowledge.IndexRules, error) {
	if hash == "" {
		return nil, nil
	}
	reply, err := p.cl.cp.Bundle(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch configuration bundle %s: %w", hash, err)
	}
	files := knowledge.FilesFromText(reply.Files)
	if got := files.Hash(); got != reply.Hash {
		return nil, fmt.Errorf("configuration bundle: the managers sent %s with content hashing to %s", reply.Hash, got)
	}
	rules, err := knowledge.ParseIndexRules(files)
	if err != nil {
		return nil, fmt.Errorf("configuration bundle %s: %w", reply.Hash, err)
	}
	return rules, nil
}

// refreshBundle puts the bundle named hash in force unless it already is;
// false when it could not (the caller fetches the config again next beat).
// The managers may have moved on between the config and the fetch: the
// rules fetched are put in force whatever their hash, and the next config
// names the newer one.
func (p *Peer) refreshBundle(ctx context.Context, hash string) bool {
	if p.hec.IndexRulesHash() == hash {
		return true
	}
	rules, err := p.fetchBundle(ctx, hash)
	if err != nil {
		p.log.Error("configuration bundle not applied; the last one stays in force", "err", err, "running", p.hec.IndexRulesHash())
		return false
	}
	p.hec.SetIndexRules(rules)
	p.log.Info("configuration bundle in force", "bundle", p.hec.IndexRulesHash())
	return true
}
