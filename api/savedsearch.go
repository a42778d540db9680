package api

import "github.com/quarry-dev/quarry/fsm"

// OpSavedSearch is <prefix>.mgr.savedsearch.<head>: a search head's
// scheduler lists the saved searches, claims a slot and finishes it
// (SavedSearchRequest.Action). Only search heads send it (bus/auth.go);
// the leader checks Head against the sender.
const OpSavedSearch = "savedsearch"

// Actions of a SavedSearchRequest.
const (
	SavedList   = "list"
	SavedClaim  = "claim"
	SavedFinish = "finish"
)

// SavedSearchRequest is one scheduler call. Head is the sending search
// head (the subject's last token). Claim carries fsm.ClaimSlot's fields
// without the head and the time (the leader stamps its own clock); Finish
// fsm.FinishSlot's likewise.
type SavedSearchRequest struct {
	V      int             `json:"v"`
	Head   string          `json:"head"`
	Action string          `json:"action"`
	Claim  *fsm.ClaimSlot  `json:"claim,omitempty"`
	Finish *fsm.FinishSlot `json:"finish,omitempty"`
}

// Version is the request's wire version.
func (r SavedSearchRequest) Version() int { return r.V }

// SavedSearchReply answers a SavedSearchRequest: the saved searches with
// their open slots and records (list), or the claim's grant (claim).
// Now is the leader's clock (unix ns) when it answered, so a head can see
// how far its own clock is off.
type SavedSearchReply struct {
	V        int                    `json:"v"`
	Now      int64                  `json:"now"`
	Searches []fsm.SavedSearchState `json:"searches,omitempty"`
	Grant    *fsm.SlotGrant         `json:"grant,omitempty"`
}

// SlotHeader is the NATS header on every message a saved search's run
// publishes to <prefix>.results.<name>: "<name>/<slot unix seconds>", or
// "<name>/manual-<slot>" for a manual run, so a subscriber can tell runs
// apart (and drop a repeat, see README "Saved searches and alerts").
const SlotHeader = "Quarry-Slot"

// Alert is the message a saved search publishes to
// <prefix>.alerts.<name> when its alert condition holds for a run.
type Alert struct {
	Name      string `json:"name"`
	Slot      int64  `json:"slot"`
	Manual    bool   `json:"manual,omitempty"`
	Count     int64  `json:"count"`
	Condition string `json:"condition"`
	Search    string `json:"search"`
}
