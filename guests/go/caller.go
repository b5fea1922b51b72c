package moat

import "github.com/moat-sandbox/moat/abi"

// Principal is who an invocation runs for, as [Caller] returns it: the
// user and organization the host authenticated, the user's roles, and the
// correlation id the host's log records and audit events carry.
type Principal struct {
	User          string
	Org           string
	Roles         []string // never nil
	CorrelationID string
}

// HasRole reports whether p holds role.
func (p Principal) HasRole(role string) bool {
	for _, r := range p.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// Caller returns who the invocation runs for (the op moat.caller). It
// needs no grant. The principal is the host's, never anything in the
// input: key per-user data by Caller().User, not by a user id the caller
// sends, which anyone can write.
func Caller() (Principal, error) {
	var resp abi.CallerResponse
	if err := Call(abi.OpCaller, nil, &resp); err != nil {
		return Principal{}, err
	}
	if resp.User == "" || resp.Org == "" {
		return Principal{}, abi.Errorf(abi.CodeInternal, "op %s: the reply names no user or organization", abi.OpCaller)
	}
	if resp.Roles == nil {
		resp.Roles = []string{}
	}
	return Principal{User: resp.User, Org: resp.Org, Roles: resp.Roles, CorrelationID: resp.CorrelationID}, nil
}
