package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// AI budgets: the tokens model calls spend, per organization and per
// module per UTC day, held in the database so that every replica meters
// against the same count.
//
// A call is metered in two steps. AIReserve holds what the call may cost
// (its input's estimate plus the most it may write) before anything is
// sent, and refuses it, with an *AIBudgetError naming the budget, when
// either day's budget could not hold it: the check and the hold are one
// atomic step, so two concurrent calls can never both take the last
// tokens. AISettle then releases the hold and charges what the provider
// reported. A host that dies between the two leaves its hold counted
// until the day ends: the budget fails closed.

// AIBudget is an organization's daily token limits: its own, over all its
// modules, and each module's. In an override (AIBudgetPut) a 0 field
// takes the operator's default.
type AIBudget struct {
	OrgDailyTokens, ModuleDailyTokens int64
}

// AIReservation is a hold AIReserve took; AISettle ends it.
type AIReservation struct {
	Org, Module string
	Day         int64 // days since 1970-01-01, UTC
	Tokens      int64
}

// AIUsage is what a module (or, with Module "", a whole organization)
// spent on a day.
type AIUsage struct {
	Org, Module string
	Day         string // YYYY-MM-DD, UTC
	Used        int64  // tokens the settled calls cost
	Reserved    int64  // tokens held by calls in flight
	Calls       int64  // calls settled
}

// AIBudgetError is a reservation a budget refused. Its message names the
// budget, what is used, and what the call may need.
type AIBudgetError struct {
	Org, Module string
	Scope       string // "org" or "module"
	Limit       int64
	InUse       int64 // used or held by calls in flight
	Need        int64
}

func (e *AIBudgetError) Error() string {
	who := fmt.Sprintf("organization %s", e.Org)
	if e.Scope == "module" {
		who = fmt.Sprintf("module %s of organization %s", e.Module, e.Org)
	}
	return fmt.Sprintf("%s's daily ai budget of %d tokens: %d used, this call may need %d; it resets at 00:00 UTC, or the operator raises it (moat ai budget set --org %s)",
		who, e.Limit, e.InUse, e.Need, e.Org)
}

// Rule is how the audit trail names the budget: "ai budget org" or "ai
// budget module".
func (e *AIBudgetError) Rule() string { return "ai budget " + e.Scope }

// AIDay is the budget day of t: days since 1970-01-01, UTC.
func AIDay(t time.Time) int64 { return t.Unix() / 86400 }

func dayString(day int64) string { return time.Unix(day*86400, 0).UTC().Format(time.DateOnly) }

// maxAITokens bounds one reservation and one charge: sums of a day's
// usage stay far from overflowing int64.
const maxAITokens = 1 << 50

// AIReserve holds tokens against the budgets of sc's organization and of
// its module for the day of at: the organization's stored override
// (AIBudgetPut) or, where it has none, def. It returns an *AIBudgetError
// when either budget would be exceeded (nothing held then).
func (s *Store) AIReserve(ctx context.Context, sc Scope, at time.Time, tokens int64, def AIBudget) (AIReservation, error) {
	ab, err := s.aiBackend()
	if err != nil {
		return AIReservation{}, err
	}
	const op = "ai.reserve"
	if err := sc.validate(); err != nil {
		return AIReservation{}, err
	}
	if tokens < 0 || tokens > maxAITokens {
		return AIReservation{}, abi.Errorf(abi.CodeInvalidArgument, "%s: %d tokens is outside 0..%d", op, tokens, int64(maxAITokens))
	}
	if def.OrgDailyTokens < 1 || def.ModuleDailyTokens < 1 {
		return AIReservation{}, fmt.Errorf("store: %s: default budgets %+v must be positive", op, def)
	}
	day := AIDay(at)
	ref, err := ab.AIReserve(ctx, sc.Org, sc.Module, day, tokens, driver.AIBudgetLimits{Org: def.OrgDailyTokens, Module: def.ModuleDailyTokens})
	if err != nil {
		return AIReservation{}, sc.wrap(op, err)
	}
	if ref.Scope != "" {
		return AIReservation{}, &AIBudgetError{Org: sc.Org, Module: sc.Module, Scope: ref.Scope, Limit: ref.Limit, InUse: ref.InUse, Need: tokens}
	}
	return AIReservation{Org: sc.Org, Module: sc.Module, Day: day, Tokens: tokens}, nil
}

// AISettle ends r: its hold is released and used charged instead (used
// is clamped to 0..2^50).
func (s *Store) AISettle(ctx context.Context, r AIReservation, used int64) error {
	ab, err := s.aiBackend()
	if err != nil {
		return err
	}
	sc := Scope{Org: r.Org, Module: r.Module}
	if err := sc.validate(); err != nil {
		return err
	}
	used = min(max(used, 0), maxAITokens)
	if err := ab.AISettle(ctx, r.Org, r.Module, r.Day, r.Tokens, used); err != nil {
		return sc.wrap("ai.settle", err)
	}
	return nil
}

// AIUsageFilter selects AIUsage rows: Org's ("" for every organization),
// for the days from Since to Until (inclusive; zero: today), newest day
// first, at most Limit (<= 0: 1000; capped at 10000).
type AIUsageFilter struct {
	Org          string
	Since, Until time.Time
	Limit        int
}

// AIUsage lists what the filter selects.
func (s *Store) AIUsage(ctx context.Context, f AIUsageFilter) ([]AIUsage, error) {
	ab, err := s.aiBackend()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	from, to := AIDay(now), AIDay(now)
	if !f.Since.IsZero() {
		from = AIDay(f.Since)
	}
	if !f.Until.IsZero() {
		to = AIDay(f.Until)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	rows, err := ab.AIUsage(ctx, f.Org, from, to, min(limit, 10000))
	if err != nil {
		return nil, fmt.Errorf("store: ai.usage org=%q: %w", f.Org, err)
	}
	out := make([]AIUsage, len(rows))
	for i, r := range rows {
		out[i] = AIUsage{Org: r.Org, Module: r.Module, Day: dayString(r.Day), Used: r.Used, Reserved: r.Reserved, Calls: r.Calls}
	}
	return out, nil
}

// validateOrg checks an organization named outside a principal (an
// operator's command).
func validateOrg(op, org string) error {
	if org == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "%s: the organization is empty; name one", op)
	}
	return validateText(op, "organization", org, 256, "name an existing organization")
}

// AIBudgetPut stores org's budget override; a 0 field takes the default.
func (s *Store) AIBudgetPut(ctx context.Context, org string, b AIBudget) error {
	ab, err := s.aiBackend()
	if err != nil {
		return err
	}
	const op = "ai.budget.put"
	if err := validateOrg(op, org); err != nil {
		return err
	}
	for _, v := range []int64{b.OrgDailyTokens, b.ModuleDailyTokens} {
		if v < 0 || v > maxAITokens {
			return abi.Errorf(abi.CodeInvalidArgument, "%s: %d tokens is outside 0..%d (0: the default)", op, v, int64(maxAITokens))
		}
	}
	if err := ab.AIBudgetPut(ctx, org, driver.AIBudgetLimits{Org: b.OrgDailyTokens, Module: b.ModuleDailyTokens}, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("store: %s org=%q: %w", op, org, err)
	}
	return nil
}

// AIBudgetGet returns org's stored override, and whether there is one.
func (s *Store) AIBudgetGet(ctx context.Context, org string) (AIBudget, bool, error) {
	ab, err := s.aiBackend()
	if err != nil {
		return AIBudget{}, false, err
	}
	const op = "ai.budget.get"
	if err := validateOrg(op, org); err != nil {
		return AIBudget{}, false, err
	}
	l, found, err := ab.AIBudgetGet(ctx, org)
	if err != nil {
		return AIBudget{}, false, fmt.Errorf("store: %s org=%q: %w", op, org, err)
	}
	return AIBudget{OrgDailyTokens: l.Org, ModuleDailyTokens: l.Module}, found, nil
}

// AIBudgetDelete removes org's override (its budgets are the defaults
// again) and reports whether there was one.
func (s *Store) AIBudgetDelete(ctx context.Context, org string) (bool, error) {
	ab, err := s.aiBackend()
	if err != nil {
		return false, err
	}
	const op = "ai.budget.delete"
	if err := validateOrg(op, org); err != nil {
		return false, err
	}
	deleted, err := ab.AIBudgetDelete(ctx, org)
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return false, fmt.Errorf("store: %s org=%q: %w", op, org, err)
	}
	return deleted, nil
}
