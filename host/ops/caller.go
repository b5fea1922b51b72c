package ops

import (
	"slices"

	"github.com/moat-sandbox/moat/abi"
)

// moat.caller tells a guest who it runs for: the invocation's principal
// (user, organization, roles) and correlation id, from Env, as the host
// authenticated them. It needs no capability: it tells the guest nothing
// the invocation does not already act as (every op runs as this
// principal), and without it a plugin that keeps per-user data has to
// trust a user id in its input, which the caller chooses. It mutates
// nothing and leaves nothing, so it is not audited per call, as config.get
// is not (docs/RATIONALE.md). The request is decoded as Empty: a guest
// that sends {"user":"bob"} still learns its own principal.

func init() {
	RegisterFamily(Family{Name: "moat", Ops: []Op{{Name: abi.OpCaller, Func: Typed(whoCalls)}}})
}

func whoCalls(env *Env, _ *abi.Empty) (*abi.CallerResponse, error) {
	roles := slices.Clone(env.Principal.Roles)
	if roles == nil {
		roles = []string{}
	}
	return &abi.CallerResponse{User: env.Principal.User, Org: env.Principal.Org, Roles: roles, CorrelationID: env.CorrelationID}, nil
}
