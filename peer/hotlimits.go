package peer

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/store"
)

// The peer-wide ingest limits of review M3 live in the store
// (store/hotcap.go); the peer tells it which indexes are declared — those
// a token or the cluster config names, which --max-indexes never refuses —
// and exports what the limits did.

// tokenIndexes are the indexes HEC tokens name (their lists and default
// indexes): declared by the operator who wrote the tokens.
func tokenIndexes(tokens []hec.Token) []string {
	var out []string
	for _, t := range tokens {
		out = append(out, t.Indexes...)
		if t.DefaultIndex != "" {
			out = append(out, t.DefaultIndex)
		}
	}
	return out
}

// declareIndexes hands the store the indexes a cluster config declares:
// its index list and every index its HEC tokens name. An index auto-created
// elsewhere in the cluster is not declared here: this peer counts it
// against --max-indexes until it holds a copy of it.
func (p *Peer) declareIndexes(cfg api.PeerConfig) {
	var names []string
	for _, ic := range cfg.Indexes {
		names = append(names, ic.Name)
	}
	for _, t := range cfg.HECTokens {
		names = append(names, t.Indexes...)
		if t.DefaultIndex != "" {
			names = append(names, t.DefaultIndex)
		}
	}
	p.store.Limits().SetDeclaredIndexes(names)
}

// registerLimitMetrics exports the peer-wide limits: how many hot buckets
// and indexes the peer holds against their caps, and a counter for each
// time a limit acted.
func registerLimitMetrics(reg prometheus.Registerer, st *store.Store) {
	s := &st.Stats
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("quarry_peer_hot_buckets", "Hot buckets this peer originates, over all indexes (quarantine buckets included, hot replicas not).",
		func() float64 { return float64(st.Limits().HotBuckets()) })
	gauge("quarry_peer_hot_buckets_limit", "The cap on hot buckets over all indexes (--max-hot-buckets-total).",
		func() float64 { return float64(st.Options().MaxHotBucketsTotal) })
	gauge("quarry_peer_indexes", "Indexes this peer holds a copy of.", func() float64 { return float64(st.Limits().IndexCount()) })
	gauge("quarry_peer_indexes_limit", "The cap on indexes held that are not declared (--max-indexes; -1: no cap).",
		func() float64 { return float64(st.Options().MaxIndexes) })
	counter("quarry_peer_hot_cap_rolls_total", "Hot buckets rolled, least recently written first, to make room for a new one under --max-hot-buckets-total.",
		func() float64 { return float64(s.HotCapRolls.Load()) })
	counter("quarry_peer_idle_rolls_total", "Hot buckets rolled because they received no event for --max-hot-idle.",
		func() float64 { return float64(s.IdleRolls.Load()) })
	counter("quarry_peer_hot_cap_refused_total", "Requests refused whole (HEC 400 code 7) because they alone needed more hot buckets than --max-hot-buckets-total.",
		func() float64 { return float64(s.HotCapRefused.Load()) })
	counter("quarry_peer_index_cap_refused_total", "Requests refused whole (HEC 400 code 7) because they named a new index while the peer held --max-indexes.",
		func() float64 { return float64(s.IndexCapRefused.Load()) })
}
