package peer

import (
	"maps"

	"github.com/quarry-dev/quarry/fsm"
)

// applyDataSizes hands the store the per-index roll sizes of the cluster
// config (max_data_size), at join and whenever the config is read again
// (every heartbeat), so a change reaches running peers within seconds.
func (p *Peer) applyDataSizes(cfg fsm.Config) {
	sizes := map[string]int64{}
	for _, ic := range cfg.Indexes {
		if ic.MaxDataSize > 0 {
			sizes[ic.Name] = ic.MaxDataSize
		}
	}
	if p.cl != nil && maps.Equal(p.cl.dataSizes, sizes) {
		return
	}
	p.store.SetMaxDataSizes(sizes)
	if p.cl != nil {
		p.cl.dataSizes = sizes
	}
	p.log.Info("index roll sizes from the cluster config", "max_data_size", sizes)
}
