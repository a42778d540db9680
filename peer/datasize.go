package peer

import (
	"github.com/quarry-dev/quarry/api"
	"maps"
)

// applyDataSizes hands the store the per-index roll sizes of the cluster
// config (max_data_size), at join and whenever the config is read again
// (every heartbeat), so a change reaches running peers within seconds.
func (p *Peer) applyDataSizes(cfg api.PeerConfig) {
	sizes := map[string]int64{}
	for _, ic := range cfg.Indexes {
		if ic.MaxDataSize > 0 {
			sizes[ic.Name] = ic.MaxDataSize
		}
	}
	if p.cl != nil && maps.Equal(p.cl.dataSizes, sizes) {
		return
	}
	p.store.Limits().SetMaxDataSizes(sizes)
	if p.cl != nil {
		p.cl.dataSizes = sizes
	}
	p.log.Info("index roll sizes from the cluster config", "max_data_size", sizes)
}

// applyRollLimits hands the store the cluster config's roll limits
// (max_hot_bytes, max_hot_span, max_hot_buckets: in a cluster they come
// from the managers, not from the peer's flags), at join and whenever the
// config is read again (every heartbeat), so a change reaches running peers
// within seconds, without a restart. A limit the config leaves at 0 keeps
// the peer's own.
func (p *Peer) applyRollLimits(cfg api.PeerConfig) {
	b, sp, n := p.store.Limits().RollLimits()
	if (cfg.MaxHotBytes <= 0 || cfg.MaxHotBytes == b) && (cfg.MaxHotSpan <= 0 || cfg.MaxHotSpan == sp) &&
		(cfg.MaxHotBuckets <= 0 || cfg.MaxHotBuckets == n) {
		return
	}
	p.store.Limits().SetRollLimits(cfg.MaxHotBytes, cfg.MaxHotSpan, cfg.MaxHotBuckets)
	b, sp, n = p.store.Limits().RollLimits()
	p.log.Info("roll limits from the cluster config", "max_hot_bytes", b, "max_hot_span", sp, "max_hot_buckets", n)
}
