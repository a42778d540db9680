package manager

import (
	"context"
	"slices"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// savedSearchOp serves <prefix>.mgr.savedsearch.<head> (api.OpSavedSearch):
// a search head's scheduler lists the saved searches, claims a slot and
// finishes it. The head is the subject's sender (its NATS user may publish
// only under its own name, bus/auth.go) and must not be a registered peer;
// a claim or finish is stamped with this leader's clock, so Apply stays
// deterministic and every slot's lease is measured on one clock.
func savedSearchOp(ps *peerService, ctx context.Context, r api.SavedSearchRequest) (api.SavedSearchReply, error) {
	m := ps.m
	const what = "saved search"
	if r.Head == "" {
		return api.SavedSearchReply{}, bus.Errorf(api.CodeBadRequest, "%s: head is required", what)
	}
	if err := checkIDs(what, "search head", r.Head); err != nil {
		return api.SavedSearchReply{}, err
	}
	if err := sentBy(ctx, what, r.Head); err != nil {
		return api.SavedSearchReply{}, err
	}
	var isPeer bool
	m.state.Read(func(s *fsm.State) { _, isPeer = s.Peer(r.Head) })
	if isPeer {
		return api.SavedSearchReply{}, bus.Errorf(api.CodeRefused, "%s: %s is a registered peer, not a search head", what, r.Head)
	}
	reply := api.SavedSearchReply{V: api.WireVersion, Now: time.Now().UnixNano()}
	switch r.Action {
	case api.SavedList:
		m.state.Read(func(s *fsm.State) { reply.Searches = fsm.SavedSearches(s) })
		return reply, nil
	case api.SavedClaim:
		if r.Claim == nil {
			return reply, bus.Errorf(api.CodeBadRequest, "%s: claim without its slot", what)
		}
		c := *r.Claim
		c.ReqID, c.Head, c.Now = fsm.ReqID{}, r.Head, reply.Now
		// The log keeps only what the state records: the newest skipped.
		slices.Sort(c.Skipped)
		c.Skipped = slices.Compact(c.Skipped)
		c.Skipped = c.Skipped[max(0, len(c.Skipped)-fsm.MaxSlotRecords):]
		res, err := m.Apply(ctx, &c)
		if err != nil {
			return reply, err
		}
		g, ok := res.(fsm.SlotGrant)
		if !ok {
			return reply, bus.Errorf(api.CodeRefused, "%s: claim of %s/%d answered %T", what, c.Name, c.Slot, res)
		}
		reply.Grant = &g
		return reply, nil
	case api.SavedFinish:
		if r.Finish == nil {
			return reply, bus.Errorf(api.CodeBadRequest, "%s: finish without its slot", what)
		}
		f := *r.Finish
		f.ReqID, f.Head, f.Now = fsm.ReqID{}, r.Head, reply.Now
		_, err := m.Apply(ctx, &f)
		return reply, err
	}
	return reply, bus.Errorf(api.CodeBadRequest, "%s: action %q, want %q, %q or %q", what, r.Action, api.SavedList, api.SavedClaim, api.SavedFinish)
}
