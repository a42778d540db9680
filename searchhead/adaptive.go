package searchhead

import (
	"math"
	"sort"
	"sync"
	"time"
)

// adaptive keeps per-peer figures for `preference=_adaptive`, the C3 rank
// Elasticsearch's adaptive replica selection uses (Suresh et al., NSDI'15):
//
//	rank = R − 1/µ + q̂³/µ,   q̂ = 1 + outstanding·n + queue
//
// with R the EWMA of the response time this head measured, 1/µ the EWMA of
// the service time the peer reported (its time on the request), queue the
// EWMA of the searches the peer was running when it took the request,
// outstanding the requests this head has open to it and n the number of
// clients (1: this head). Peers without figures rank first so they get
// measured. After a ranking, the losers' figures drift toward the winner's
// (Elasticsearch's adjustment of non-winning nodes), so a peer once slow is
// tried again instead of starving.
type adaptive struct {
	mu    sync.Mutex
	peers map[string]*peerFigures
}

type peerFigures struct {
	has         bool
	response    float64 // ms, EWMA
	service     float64 // ms, EWMA
	queue       float64 // EWMA
	outstanding int
}

const ewmaAlpha = 0.3

func newAdaptive() *adaptive { return &adaptive{peers: map[string]*peerFigures{}} }

func (a *adaptive) fig(p string) *peerFigures {
	f := a.peers[p]
	if f == nil {
		f = &peerFigures{}
		a.peers[p] = f
	}
	return f
}

// begin counts a request sent to a peer.
func (a *adaptive) begin(p string) {
	a.mu.Lock()
	a.fig(p).outstanding++
	a.mu.Unlock()
}

// end records a finished (ok) or abandoned request.
func (a *adaptive) end(p string, response, service time.Duration, queue int, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.fig(p)
	if f.outstanding > 0 {
		f.outstanding--
	}
	if !ok {
		return
	}
	r, s := float64(response.Microseconds())/1000, float64(service.Microseconds())/1000
	if !f.has {
		f.has, f.response, f.service, f.queue = true, r, s, float64(queue)
		return
	}
	f.response = ewmaAlpha*r + (1-ewmaAlpha)*f.response
	f.service = ewmaAlpha*s + (1-ewmaAlpha)*f.service
	f.queue = ewmaAlpha*float64(queue) + (1-ewmaAlpha)*f.queue
}

func (f *peerFigures) rank(extra int) float64 {
	mu := 1 / math.Max(f.service, 0.001)
	q := 1 + float64(f.outstanding+extra) + f.queue
	return f.response - 1/mu + q*q*q/mu
}

// rank orders copies by C3 rank (best first); ties and unmeasured peers by
// id. It is called once per bucket; callers spread a search by planned().
func (a *adaptive) rank(copies []string) []string {
	return a.rankPlanned(copies, nil)
}

// rankPlanned ranks with planned extra outstanding requests per peer (the
// buckets of this search already given to it), so one search spreads.
func (a *adaptive) rankPlanned(copies []string, planned map[string]int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]string(nil), copies...)
	ranks := map[string]float64{}
	for _, c := range out {
		f := a.fig(c)
		if !f.has {
			ranks[c] = math.Inf(-1)
			continue
		}
		ranks[c] = f.rank(planned[c])
	}
	sort.SliceStable(out, func(i, j int) bool {
		if ranks[out[i]] != ranks[out[j]] {
			return ranks[out[i]] < ranks[out[j]]
		}
		return planned[out[i]] < planned[out[j]] || (planned[out[i]] == planned[out[j]] && out[i] < out[j])
	})
	if len(out) > 1 {
		if w := a.peers[out[0]]; w.has {
			for _, l := range out[1:] {
				if f := a.peers[l]; f.has {
					f.response += (w.response - f.response) * 0.1
					f.service += (w.service - f.service) * 0.1
				}
			}
		}
	}
	return out
}
