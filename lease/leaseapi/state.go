package leaseapi

import "time"

// RoleState is one role as the application sees it: the body of GET
// /v1/roles/ROLE and of each watch event.
type RoleState struct {
	// Role names the role.
	Role string `json:"role"`
	// Leader says whether this replica leads the role.
	Leader bool `json:"leader"`
	// Epoch is the epoch of this replica's term while it leads; 0 while it
	// does not. It increases with every term of the role.
	Epoch int64 `json:"epoch"`
	// FenceToken is the term's fencing token, for leasectl.fence(token) in
	// the application's own transactions; nil while not leading.
	FenceToken *string `json:"fence_token"`
	// TermBegan is when this replica's term began; nil while not leading.
	TermBegan *time.Time `json:"term_began"`
	// ValidUntil is the latest moment the application may go on working as
	// the leader without asking again; nil while not leading. Past it, it
	// must stop its work until an answer gives a later one.
	ValidUntil *time.Time `json:"valid_until"`
}

// state returns r's state now, and records a promise made with it; a.mu
// is held.
func (a *API) state(r *role) RoleState {
	st := RoleState{Role: r.name, Leader: r.leading, Epoch: r.epoch}
	if !r.leading {
		return st
	}
	token, began, until := r.token, r.since.UTC(), a.validUntil(r)
	if until.After(r.promised) {
		r.promised = until
	}
	until = until.UTC()
	st.FenceToken, st.TermBegan, st.ValidUntil = &token, &began, &until
	return st
}

// States returns the state of every role, in Options.Roles order. Each
// ValidUntil in it counts as handed out to the application.
func (a *API) States() []RoleState {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]RoleState, 0, len(a.order))
	for _, name := range a.order {
		out = append(out, a.state(a.roles[name]))
	}
	return out
}

// State returns the state of the named role; false when the API does not
// serve it. Its ValidUntil counts as handed out to the application.
func (a *API) State(name string) (RoleState, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.roles[name]
	if r == nil {
		return RoleState{}, false
	}
	return a.state(r), true
}
