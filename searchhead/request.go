package searchhead

// What the head asks of the peers: the request a search sends, and which
// first requests a search's buckets take (the default plan or explicit
// lists, and whether one peer serves them all: a sole partial,
// query/sole.go).

import (
	"context"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
)

// request is the search request sent with invites for the listed buckets
// (none: the default plan), in every compact form this head reads.
func (r *run) request(invites map[string]bus.Invite, buckets []string) api.SearchRequest {
	timeout := time.Until(deadlineOf(r.ctx))
	return api.SearchRequest{V: api.WireVersion, ID: r.id, Head: r.h.cfg.ID, Query: r.req.Query,
		Earliest: r.req.Earliest, Latest: r.req.Latest, NowNS: r.nowNS,
		Generation: r.generation, TableVersion: r.version, TableSite: r.tsite,
		Buckets: buckets, Sealed: r.sealedLengths(buckets), CountsBinary: true, CountsTop: r.countsTop, SetsBinary: true, NumsBinary: true, SolePartial: r.sole, Framed: true, Indexes: r.indexes, Invites: invites, TimeoutMs: timeout.Milliseconds(),
		BeatMs: min(time.Second, r.h.cfg.PeerTimeout/3).Milliseconds(), Knowledge: r.plan.Knowledge().Hash()}
}

// sealedLengths are the sealed lengths of the listed buckets the search's
// table knows sealed (api.SearchRequest.Sealed): the length proof checks
// against, so a longer copy answers for exactly it.
func (r *run) sealedLengths(buckets []string) map[string]api.CopyLength {
	var out map[string]api.CopyLength
	for _, id := range buckets {
		br := r.buckets[id]
		if br == nil || !br.info.Sealed || br.info.Blocks <= 0 || br.info.Checksum == "" {
			continue
		}
		if out == nil {
			out = map[string]api.CopyLength{}
		}
		out[id] = api.CopyLength{Blocks: br.info.Blocks, Checksum: br.info.Checksum}
	}
	return out
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Hour)
}

// byDefaultPlan reports whether a planned bucket's first request is the
// default plan (its primary, invited with the search) rather than an
// explicit list.
func (r *run) byDefaultPlan(br *bucketRun) bool {
	return !r.pref.Explicit() && !(r.req.Fresh && br.info.Hot) && br.chain[0] == br.primary
}

// servedByOne reports whether every bucket the search reads goes first to
// one peer in one request (all by the default plan, or all by explicit
// list): that peer then sends one aggregate partial for them all, merged
// with nothing (run.distinct; a site's searchable copies often sit on the
// peer that ingested them).
func (r *run) servedByOne() bool {
	peer, dflt, n := "", false, 0
	for _, br := range r.buckets {
		if br.state != bPending {
			continue
		}
		d := r.byDefaultPlan(br)
		if n > 0 && (br.chain[0] != peer || d != dflt) {
			return false
		}
		peer, dflt = br.chain[0], d
		n++
	}
	return n > 0
}
