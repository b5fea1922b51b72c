package host

import (
	"context"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
)

// withBudget starts the invocation's host budget (see package budget) and
// returns ctx carrying it: the transports, the ops and the audit trail
// charge what the invocation makes the host hold or write. The first time
// the invocation hits a limit, a deny event names it (rule: the limit's
// knob, code resource_exhausted or too_large), so each kind of refusal is
// on the trail once, not once per refused call.
func (m *Module) withBudget(ctx context.Context, req *Request, lim Limits) context.Context {
	b := budget.New(lim.Budget, func(knob, reason string) {
		code := abi.CodeResourceExhausted
		if knob == budget.KnobHTTPRequestBytes || knob == budget.KnobHTTPResponseBytes {
			code = abi.CodeTooLarge
		}
		m.host.audit.Record(ctx, audit.Event{Kind: audit.KindDecision, Decision: audit.Deny, CorrelationID: req.CorrelationID,
			Module: m.name, Action: req.Action, User: req.Principal.User, Org: req.Principal.Org,
			Rule: knob, Code: string(code), Reason: reason})
	})
	return budget.With(ctx, b)
}

// budgetAttrs are the attributes of an invocation event that say what
// the invocation used of its budget, when it hit a limit: which, and how
// many ops were refused after the audit budget ran out. Nil otherwise, to
// keep the common row small.
func budgetAttrs(b *budget.Budget) map[string]string {
	u := b.Usage()
	if len(u.Exhausted) == 0 {
		return nil
	}
	return map[string]string{
		"budget_exhausted":   strings.Join(u.Exhausted, ","),
		"budget_audit_rows":  strconv.Itoa(u.AuditRows),
		"budget_ops_refused": strconv.Itoa(u.RefusedOps),
		"budget_peak_held":   strconv.FormatInt(u.PeakHeldBytes, 10),
	}
}
