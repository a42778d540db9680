package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Saved searches (issue 28 item 3, SPEC §5): the definitions, and per
// search the slots the search heads claimed, ran and finished. The state
// is its own type (savedSearches, held by stateData.Saved) with plain
// apply functions, not State methods. Exactly once per slot: a slot is
// granted to one head at a time under a lease whose end the claim's own
// time fixes (the proposer's clock, in the command, so Apply stays
// deterministic); a slot finished ok is closed and never granted again; a
// failed run is granted again up to MaxSlotAttempts times, then recorded
// failed. The cron spec and the alert condition are strings here: the
// managers validate them at add (package schedule) and the heads compute
// the slots, so this package imports nothing of ours.

// SavedSearchVersion is the cluster version that carries the saved-search
// commands (AddSavedSearch, RemoveSavedSearch, RunSavedSearch, ClaimSlot,
// FinishSlot).
const SavedSearchVersion = 9

// Limits of the saved searches.
const (
	// MaxSavedSearches caps the saved searches of a cluster.
	MaxSavedSearches = 256
	// MaxSlotRecords is how many slot records a search keeps (the newest).
	MaxSlotRecords = 20
	// MaxSlotAttempts is how many times a slot is granted before it is
	// recorded failed for good.
	MaxSlotAttempts = 3
	// maxOpenSlots bounds a search's open slots; past it the oldest is
	// recorded failed (abandoned).
	maxOpenSlots = 8
	// maxSavedField bounds a query, cron spec or condition.
	maxSavedField = 8192
	// MinSlotLease and MaxSlotLease bound a claim's lease.
	MinSlotLease = time.Second
	MaxSlotLease = 24 * time.Hour
)

// Slot statuses of a SlotRecord.
const (
	SlotOK      = "ok"
	SlotFailed  = "failed"
	SlotSkipped = "skipped"
	// SlotRetrying: the last attempt failed and another will be granted.
	SlotRetrying = "retrying"
)

// Errors of the saved-search commands.
var (
	// ErrSavedSearchExists: a saved search of that name exists.
	ErrSavedSearchExists = errors.New("saved search exists")
	// ErrUnknownSavedSearch: no saved search has that name.
	ErrUnknownSavedSearch = errors.New("unknown saved search")
	// ErrBadSavedSearch: a malformed saved search or slot command.
	ErrBadSavedSearch = errors.New("bad saved search")
	// ErrSlotNotHeld: a FinishSlot from a head that does not hold the
	// slot's current grant (its lease expired and another head took it,
	// or the slot is closed).
	ErrSlotNotHeld = errors.New("slot not held")
)

// SavedSearch is one saved search's definition.
type SavedSearch struct {
	Name     string `json:"name"`
	Search   string `json:"search"`
	Cron     string `json:"cron"`
	Earliest string `json:"earliest,omitempty"`
	Latest   string `json:"latest,omitempty"`
	Publish  string `json:"publish,omitempty"`
	AlertIf  string `json:"alert_if,omitempty"`
	// Created is when it was added (unix seconds, the proposer's clock):
	// its first slot is the first after it.
	Created int64 `json:"created"`
}

// SlotClaim is an open slot: granted (Head set, until LeaseUntil), or
// waiting for a head (a manual run, or a failed attempt to retry).
type SlotClaim struct {
	Slot       int64  `json:"slot"` // unix seconds
	Manual     bool   `json:"manual,omitempty"`
	Head       string `json:"head,omitempty"`
	Attempt    int    `json:"attempt"`
	LeaseUntil int64  `json:"lease_until"` // unix ns
	LastError  string `json:"last_error,omitempty"`
}

// SlotRecord is one slot's outcome.
type SlotRecord struct {
	Slot       int64  `json:"slot"`
	Manual     bool   `json:"manual,omitempty"`
	Status     string `json:"status"`
	Head       string `json:"head,omitempty"`
	Attempts   int    `json:"attempts,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	Count      int64  `json:"count"`
	Error      string `json:"error,omitempty"`
	At         int64  `json:"at"` // unix ns of the command that recorded it
}

// SavedSearchState is a saved search with its slots.
type SavedSearchState struct {
	SavedSearch
	// LastSlot is the newest scheduled slot granted or skipped (unix
	// seconds; 0: none yet): a scheduled slot at or before it is never
	// granted as new.
	LastSlot int64        `json:"last_slot,omitempty"`
	Open     []SlotClaim  `json:"open,omitempty"` // by slot, then manual
	Runs     []SlotRecord `json:"runs,omitempty"` // oldest first, at most MaxSlotRecords
}

// savedSearches is the saved-search part of the state: the searches,
// sorted by name.
type savedSearches struct {
	Searches []*SavedSearchState `json:"searches"`
}

func (ss *savedSearches) clone() *savedSearches {
	if ss == nil {
		return nil
	}
	out := &savedSearches{Searches: make([]*SavedSearchState, len(ss.Searches))}
	for i, s := range ss.Searches {
		out.Searches[i] = s.clone()
	}
	return out
}

func (s *SavedSearchState) clone() *SavedSearchState {
	c := *s
	c.Open = slices.Clone(s.Open)
	c.Runs = slices.Clone(s.Runs)
	return &c
}

func (ss *savedSearches) find(name string) (int, bool) {
	if ss == nil {
		return 0, false
	}
	return slices.BinarySearchFunc(ss.Searches, name, func(s *SavedSearchState, n string) int { return strings.Compare(s.Name, n) })
}

// SavedSearches lists the saved searches with their slots, by name (deep
// copies: the caller may keep them).
func SavedSearches(s *State) []SavedSearchState {
	if s.d.Saved == nil {
		return nil
	}
	out := make([]SavedSearchState, len(s.d.Saved.Searches))
	for i, x := range s.d.Saved.Searches {
		out[i] = *x.clone()
	}
	return out
}

// SavedSearchNamed is one saved search with its slots.
func SavedSearchNamed(s *State, name string) (SavedSearchState, bool) {
	i, ok := s.d.Saved.find(name)
	if !ok {
		return SavedSearchState{}, false
	}
	return *s.d.Saved.Searches[i].clone(), true
}

// ValidSavedSearchName accepts [A-Za-z0-9_-]{1,64}.
func ValidSavedSearchName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: name %q: want 1 to 64 characters", ErrBadSavedSearch, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: name %q: only letters, digits, '_' and '-'", ErrBadSavedSearch, name)
		}
	}
	return nil
}

// AddSavedSearch adds a saved search (ErrSavedSearchExists if the name
// is taken; ErrBadSavedSearch past MaxSavedSearches). Now (unix ns, the
// proposer's clock) becomes Created.
type AddSavedSearch struct {
	ReqID
	Search SavedSearch `json:"search"`
	Now    int64       `json:"now"`
}

// RemoveSavedSearch removes a saved search, its open slots and records.
type RemoveSavedSearch struct {
	ReqID
	Name string `json:"name"`
}

// RunSavedSearch queues a manual slot at Now (unix ns; the slot is its
// second, or the next one free): an open slot no head holds, which the
// first head to claim it runs once. The result is a SlotQueued.
type RunSavedSearch struct {
	ReqID
	Name string `json:"name"`
	Now  int64  `json:"now"`
}

// SlotQueued is RunSavedSearch's result.
type SlotQueued struct {
	Index uint64 `json:"index"`
	Slot  int64  `json:"slot"`
}

// ClaimSlot asks for slot Slot of search Name for Head at Now (unix ns),
// for LeaseMS. A scheduled slot after LastSlot is new: Skipped lists the
// slots between LastSlot and it that no head ran (recorded skipped); an
// open slot is granted when no head holds it or its lease ended. The
// result is a SlotGrant.
type ClaimSlot struct {
	ReqID
	Name    string  `json:"name"`
	Slot    int64   `json:"slot"`
	Manual  bool    `json:"manual,omitempty"`
	Head    string  `json:"head"`
	Now     int64   `json:"now"`
	LeaseMS int64   `json:"lease_ms"`
	Skipped []int64 `json:"skipped,omitempty"`
}

// SlotGrant is ClaimSlot's result: Granted, with the attempt and the
// lease's end, or the reason it was refused.
type SlotGrant struct {
	Index      uint64 `json:"index"`
	Granted    bool   `json:"granted"`
	Attempt    int    `json:"attempt,omitempty"`
	LeaseUntil int64  `json:"lease_until,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// FinishSlot records the outcome of Head's attempt Attempt of a slot:
// Status SlotOK or SlotFailed. Refused (ErrSlotNotHeld) unless Head holds
// that attempt.
type FinishSlot struct {
	ReqID
	Name       string `json:"name"`
	Slot       int64  `json:"slot"`
	Manual     bool   `json:"manual,omitempty"`
	Head       string `json:"head"`
	Attempt    int    `json:"attempt"`
	Status     string `json:"status"`
	DurationMS int64  `json:"duration_ms"`
	Count      int64  `json:"count"`
	Error      string `json:"error,omitempty"`
	Now        int64  `json:"now"`
}

func (AddSavedSearch) Type() CommandType    { return CmdAddSavedSearch }
func (RemoveSavedSearch) Type() CommandType { return CmdRemoveSavedSearch }
func (RunSavedSearch) Type() CommandType    { return CmdRunSavedSearch }
func (ClaimSlot) Type() CommandType         { return CmdClaimSlot }
func (FinishSlot) Type() CommandType        { return CmdFinishSlot }

func init() {
	register(CmdAddSavedSearch, applyAddSavedSearch)
	register(CmdRemoveSavedSearch, applyRemoveSavedSearch)
	register(CmdRunSavedSearch, applyRunSavedSearch)
	register(CmdClaimSlot, applyClaimSlot)
	register(CmdFinishSlot, applyFinishSlot)
}

func applyAddSavedSearch(s *State, idx uint64, c *AddSavedSearch) (any, error) {
	d := c.Search
	if err := ValidSavedSearchName(d.Name); err != nil {
		return nil, err
	}
	if strings.TrimSpace(d.Search) == "" || strings.TrimSpace(d.Cron) == "" {
		return nil, fmt.Errorf("%w: %s: search and cron are required", ErrBadSavedSearch, d.Name)
	}
	for _, f := range []string{d.Search, d.Cron, d.Earliest, d.Latest, d.Publish, d.AlertIf} {
		if len(f) > maxSavedField {
			return nil, fmt.Errorf("%w: %s: a field is longer than %d bytes", ErrBadSavedSearch, d.Name, maxSavedField)
		}
	}
	i, found := s.d.Saved.find(d.Name)
	if found {
		return nil, fmt.Errorf("%w: %q", ErrSavedSearchExists, d.Name)
	}
	if s.d.Saved == nil {
		s.d.Saved = &savedSearches{}
	}
	if len(s.d.Saved.Searches) >= MaxSavedSearches {
		return nil, fmt.Errorf("%w: %s: the cluster holds %d saved searches, the most it keeps", ErrBadSavedSearch, d.Name, MaxSavedSearches)
	}
	d.Created = c.Now / int64(time.Second)
	s.d.Saved.Searches = slices.Insert(s.d.Saved.Searches, i, &SavedSearchState{SavedSearch: d})
	return nil, nil
}

func applyRemoveSavedSearch(s *State, idx uint64, c *RemoveSavedSearch) (any, error) {
	i, ok := s.d.Saved.find(c.Name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownSavedSearch, c.Name)
	}
	s.d.Saved.Searches = slices.Delete(s.d.Saved.Searches, i, i+1)
	if len(s.d.Saved.Searches) == 0 {
		s.d.Saved = nil
	}
	return nil, nil
}

func savedNamed(s *State, name string) (*SavedSearchState, error) {
	i, ok := s.d.Saved.find(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownSavedSearch, name)
	}
	return s.d.Saved.Searches[i], nil
}

func applyRunSavedSearch(s *State, idx uint64, c *RunSavedSearch) (any, error) {
	ss, err := savedNamed(s, c.Name)
	if err != nil {
		return nil, err
	}
	slot := c.Now / int64(time.Second)
	for ss.openAt(slot, true) >= 0 || ss.recordAt(slot, true) >= 0 {
		slot++
	}
	ss.addOpen(SlotClaim{Slot: slot, Manual: true}, c.Now)
	return SlotQueued{Index: idx, Slot: slot}, nil
}

func applyClaimSlot(s *State, idx uint64, c *ClaimSlot) (any, error) {
	ss, err := savedNamed(s, c.Name)
	if err != nil {
		return nil, err
	}
	if err := ValidName("search head", c.Head); err != nil {
		return nil, fmt.Errorf("%w: claim of %s: %v", ErrBadSavedSearch, c.Name, err)
	}
	lease := min(max(time.Duration(c.LeaseMS)*time.Millisecond, MinSlotLease), MaxSlotLease)
	refuse := func(why string) (any, error) { return SlotGrant{Index: idx, Reason: why}, nil }
	i := ss.openAt(c.Slot, c.Manual)
	if i < 0 {
		switch {
		case c.Manual:
			return refuse("no manual run is queued at that slot")
		case c.Slot <= ss.LastSlot:
			return refuse(fmt.Sprintf("slot %d is not after the last scheduled slot %d: it was run or skipped", c.Slot, ss.LastSlot))
		}
		// The newest skipped slots between the last one and this one,
		// at most as many as the records kept.
		skipped := slices.Compact(slices.Sorted(slices.Values(c.Skipped)))
		skipped = slices.DeleteFunc(skipped, func(sl int64) bool { return sl <= ss.LastSlot || sl >= c.Slot })
		for _, sl := range skipped[max(0, len(skipped)-MaxSlotRecords):] {
			ss.record(SlotRecord{Slot: sl, Status: SlotSkipped, Error: "no search head ran it in time", At: c.Now})
		}
		ss.LastSlot = c.Slot
		ss.addOpen(SlotClaim{Slot: c.Slot}, c.Now)
		if i = ss.openAt(c.Slot, false); i < 0 { // addOpen keeps the slot it adds
			return refuse("slot not open")
		}
	}
	o := &ss.Open[i]
	if o.Head == c.Head && c.Now < o.LeaseUntil {
		// The holder asking again (a retried request): the same grant.
		return SlotGrant{Index: idx, Granted: true, Attempt: o.Attempt, LeaseUntil: o.LeaseUntil}, nil
	}
	if o.Head != "" && c.Now < o.LeaseUntil {
		return refuse(fmt.Sprintf("held by search head %s until %s", o.Head, time.Unix(0, o.LeaseUntil).UTC().Format(time.RFC3339Nano)))
	}
	if o.Attempt >= MaxSlotAttempts {
		why := o.LastError
		if o.Head != "" {
			why = fmt.Sprintf("search head %s's lease ended without a result", o.Head)
		}
		ss.close(i, SlotRecord{Status: SlotFailed, Head: o.Head, Attempts: o.Attempt, Error: why, At: c.Now})
		return refuse(fmt.Sprintf("failed after %d attempts", MaxSlotAttempts))
	}
	o.Head, o.Attempt, o.LeaseUntil = c.Head, o.Attempt+1, c.Now+int64(lease)
	return SlotGrant{Index: idx, Granted: true, Attempt: o.Attempt, LeaseUntil: o.LeaseUntil}, nil
}

func applyFinishSlot(s *State, idx uint64, c *FinishSlot) (any, error) {
	ss, err := savedNamed(s, c.Name)
	if err != nil {
		return nil, err
	}
	if c.Status != SlotOK && c.Status != SlotFailed {
		return nil, fmt.Errorf("%w: finish of %s: status %q, want %q or %q", ErrBadSavedSearch, c.Name, c.Status, SlotOK, SlotFailed)
	}
	i := ss.openAt(c.Slot, c.Manual)
	if i < 0 || ss.Open[i].Head != c.Head || ss.Open[i].Attempt != c.Attempt {
		return nil, fmt.Errorf("%w: %s slot %d attempt %d by %s", ErrSlotNotHeld, c.Name, c.Slot, c.Attempt, c.Head)
	}
	o := &ss.Open[i]
	rec := SlotRecord{Status: c.Status, Head: c.Head, Attempts: c.Attempt, DurationMS: c.DurationMS, Count: c.Count, Error: c.Error, At: c.Now}
	if c.Status == SlotOK || o.Attempt >= MaxSlotAttempts {
		ss.close(i, rec)
		return nil, nil
	}
	// Failed with attempts left: released at once for the next claim.
	o.Head, o.LeaseUntil, o.LastError = "", c.Now, c.Error
	rec.Status, rec.Slot, rec.Manual = SlotRetrying, o.Slot, o.Manual
	ss.record(rec)
	return nil, nil
}

// openAt is the index of the open slot (slot, manual), or -1.
func (s *SavedSearchState) openAt(slot int64, manual bool) int {
	for i, o := range s.Open {
		if o.Slot == slot && o.Manual == manual {
			return i
		}
	}
	return -1
}

// recordAt is the index of the record of (slot, manual), or -1.
func (s *SavedSearchState) recordAt(slot int64, manual bool) int {
	for i, r := range s.Runs {
		if r.Slot == slot && r.Manual == manual {
			return i
		}
	}
	return -1
}

// addOpen adds an open slot in (slot, manual) order; past maxOpenSlots
// the oldest other open slot is recorded failed (abandoned), never the
// one added.
func (s *SavedSearchState) addOpen(o SlotClaim, now int64) {
	i, _ := slices.BinarySearchFunc(s.Open, o, compareSlots)
	s.Open = slices.Insert(s.Open, i, o)
	if len(s.Open) > maxOpenSlots {
		j := 0
		if compareSlots(s.Open[0], o) == 0 {
			j = 1
		}
		old := s.Open[j]
		s.close(j, SlotRecord{Status: SlotFailed, Head: old.Head, Attempts: old.Attempt,
			Error: fmt.Sprintf("abandoned: more than %d slots open", maxOpenSlots), At: now})
	}
}

// compareSlots orders open slots by slot, a scheduled one before a
// manual one of the same second.
func compareSlots(a, b SlotClaim) int {
	switch {
	case a.Slot < b.Slot:
		return -1
	case a.Slot > b.Slot:
		return 1
	case a.Manual == b.Manual:
		return 0
	case b.Manual:
		return -1
	}
	return 1
}

// close removes open slot i and records its outcome.
func (s *SavedSearchState) close(i int, rec SlotRecord) {
	rec.Slot, rec.Manual = s.Open[i].Slot, s.Open[i].Manual
	s.Open = slices.Delete(s.Open, i, i+1)
	if len(s.Open) == 0 {
		s.Open = nil
	}
	s.record(rec)
}

// record sets the record of rec's slot (replacing an earlier one of the
// same slot) and keeps the newest MaxSlotRecords, by slot.
func (s *SavedSearchState) record(rec SlotRecord) {
	if j := s.recordAt(rec.Slot, rec.Manual); j >= 0 {
		s.Runs[j] = rec
		return
	}
	j, _ := slices.BinarySearchFunc(s.Runs, rec.Slot, func(r SlotRecord, slot int64) int {
		if r.Slot <= slot {
			return -1
		}
		return 1
	})
	s.Runs = slices.Insert(s.Runs, j, rec)
	if n := len(s.Runs) - MaxSlotRecords; n > 0 {
		s.Runs = slices.Delete(s.Runs, 0, n)
	}
}
