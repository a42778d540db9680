package mgrclient

import (
	"context"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
)

// SavedSearches lists the saved searches with their open slots and records
// (a search head's scheduler; Sender must be the head's name).
func (c *ManagerClient) SavedSearches(ctx context.Context) (api.SavedSearchReply, error) {
	return call[api.SavedSearchRequest, api.SavedSearchReply](ctx, c, api.OpSavedSearch,
		api.SavedSearchRequest{V: api.WireVersion, Head: c.Sender, Action: api.SavedList})
}

// ClaimSlot asks the leader for a slot (the leader fills in the head and
// its clock).
func (c *ManagerClient) ClaimSlot(ctx context.Context, cl fsm.ClaimSlot) (fsm.SlotGrant, error) {
	r, err := call[api.SavedSearchRequest, api.SavedSearchReply](ctx, c, api.OpSavedSearch,
		api.SavedSearchRequest{V: api.WireVersion, Head: c.Sender, Action: api.SavedClaim, Claim: &cl})
	if err != nil || r.Grant == nil {
		return fsm.SlotGrant{}, err
	}
	return *r.Grant, nil
}

// FinishSlot records a slot's outcome.
func (c *ManagerClient) FinishSlot(ctx context.Context, f fsm.FinishSlot) error {
	_, err := call[api.SavedSearchRequest, api.SavedSearchReply](ctx, c, api.OpSavedSearch,
		api.SavedSearchRequest{V: api.WireVersion, Head: c.Sender, Action: api.SavedFinish, Finish: &f})
	return err
}
