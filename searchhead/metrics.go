package searchhead

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quarry-dev/quarry/query"
)

// metrics are a search head's Prometheus series (quarry_searchhead_…).
type metrics struct {
	latency   prometheus.Histogram
	running   prometheus.Gauge
	rejected  prometheus.Counter
	cancelled prometheus.Counter
	retries   prometheus.Counter
	buckets   *prometheus.CounterVec
	scanned   *prometheus.CounterVec
	searches  prometheus.Counter
	partial   prometheus.Counter
	// unproven counts markers whose copy could not prove it is whole
	// (SPEC §5 "Completeness"): each such bucket went to another copy or
	// made the search partial, never a short answer marked complete.
	unproven *prometheus.CounterVec
	// limits counts searches ended by a limit of this head, per limit.
	limits *prometheus.CounterVec
	// knowledgeReloads counts knowledge bundles put in force after start.
	knowledgeReloads prometheus.Counter
	// knowledgeRefused counts changed --knowledge folders refused.
	knowledgeRefused prometheus.Counter
	// savedRuns counts the saved-search slots this head ran, per status
	// (scheduler.go).
	savedRuns *prometheus.CounterVec
	// topReruns counts tops searched again because the peers' bounded
	// partials did not decide them (query/topcounts.go).
	topReruns prometheus.Counter
	// soleReruns counts searches run again with sets and values because
	// a sole partial's final form met another part of its aggregate
	// (query/sole.go).
	soleReruns prometheus.Counter
	// solePartials counts searches that asked one peer for final dc
	// counts and perc values (query/sole.go).
	solePartials prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "quarry_searchhead_search_duration_seconds",
			Help: "Search latency on the head.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		running:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "quarry_searchhead_searches_running", Help: "Searches running now."}),
		rejected:  prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_searches_rejected_total", Help: "Searches refused with 429 (concurrency cap)."}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_searches_cancelled_total", Help: "Searches cancelled (client gone, time limit)."}),
		retries:   prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_bucket_retries_total", Help: "Buckets re-dispatched to another copy."}),
		buckets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_searchhead_buckets_total",
			Help: "Buckets per outcome: searched, skipped, failed, missing."}, []string{"outcome"}),
		scanned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_searchhead_events_scanned_total",
			Help: "Events peers decoded for this head, per peer."}, []string{"peer"}),
		searches: prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_searches_total", Help: "Searches completed."}),
		partial:  prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_searches_partial_total", Help: "Searches that returned partial results."}),
		unproven: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_searchhead_completeness_violations_total",
			Help: "Bucket answers refused because the copy could not prove it is whole, per reason: short (length differs from the table's), no_length (the marker named none), no_batch (a searched marker without its results), unknown (a bucket no table the head could fetch knows)."}, []string{"reason"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_searchhead_limit_hits_total",
			Help: "Searches this head refused or ended for a limit, per limit. Ended with 400 limit_exceeded: search_memory (--search-memory), eval_value (an eval value over 1 MiB in the head's commands), peer (a peer reached a limit: its own metrics name it). Refused before any fan-out, 400 bad_query or bad_preference: query_size, nesting, expression_height, regex, preference."}, []string{"limit"}),
		knowledgeReloads: prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_knowledge_reloads_total",
			Help: "Knowledge bundles put in force after start (--knowledge: a changed folder that parsed)."}),
		knowledgeRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_knowledge_refused_total",
			Help: "Changed --knowledge folders refused (read or parse error, logged with its line); the last good bundle stays in force."}),
		savedRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "quarry_searchhead_savedsearch_runs_total",
			Help: "Saved-search slots this head was granted and ran, per status: ok, failed (a failed attempt; the slot may be retried), unrecorded (the run ended but the managers did not record it)."}, []string{"status"}),
		topReruns: prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_top_reruns_total",
			Help: "top searches run a second time with every key because the peers' bounded partials (each peer's largest counts and a bound) did not prove the answer."}),
		soleReruns: prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_sole_partial_reruns_total",
			Help: "dc/perc searches run a second time with sets and values because a peer's final count or value met another part of the same aggregate (a failover, or a bucket the head's table did not know)."}),
		solePartials: prometheus.NewCounter(prometheus.CounterOpts{Name: "quarry_searchhead_sole_partial_searches_total",
			Help: "stats searches with a dc or perc whose buckets all went to one peer: it sent each dc's count and perc's value instead of its set or values."}),
	}
	reg.MustRegister(m.latency, m.running, m.rejected, m.cancelled, m.retries, m.buckets, m.scanned, m.searches, m.partial, m.unproven, m.limits, m.knowledgeReloads, m.knowledgeRefused, m.savedRuns, m.topReruns, m.soleReruns, m.solePartials)
	return m
}

func (m *metrics) limitHit(limit string) { m.limits.WithLabelValues(limit).Inc() }

func (m *metrics) observeSummary(s query.Summary) {
	m.searches.Inc()
	if s.Partial {
		m.partial.Inc()
	}
	b := s.Buckets
	m.buckets.WithLabelValues("searched").Add(float64(b.Successful - b.Skipped))
	m.buckets.WithLabelValues("skipped").Add(float64(b.Skipped))
	m.buckets.WithLabelValues("failed").Add(float64(b.Failed))
	m.buckets.WithLabelValues("missing").Add(float64(b.Missing))
}

func (m *metrics) observeScanned(per map[string]int64) {
	for p, n := range per {
		m.scanned.WithLabelValues(p).Add(float64(n))
	}
}
