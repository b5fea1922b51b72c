package driver

import "context"

// AIBudgetLimits are daily token limits: an organization's, over all its
// modules, and each of its modules'.
type AIBudgetLimits struct {
	Org, Module int64
}

// AIUsageRow is one row of the day's accounting: the tokens settled
// (Used), those held by calls in flight (Reserved), and the calls settled.
// Module "" is the organization's total; Day counts days since
// 1970-01-01, UTC.
type AIUsageRow struct {
	Org, Module           string
	Day                   int64
	Used, Reserved, Calls int64
}

// AIRefusal says which budget refused a reservation: Scope "org" or
// "module" ("" when none did), its limit, and what was used or reserved
// under it when it refused.
type AIRefusal struct {
	Scope        string
	Limit, InUse int64
}

// AIBackend is what a backend implements for the ai family: it meters
// model calls against daily token budgets, atomic across processes and
// replicas. Every method confines itself to the organization it is
// given. Like every family's storage it is optional (see Families).
type AIBackend interface {
	// AIReserve holds tokens against the day's budgets of org and of
	// its module, in one transaction: the organization's row first,
	// then the module's (one order for every caller, so two never
	// deadlock), each only while used + reserved + tokens stays within
	// its limit (the organization's override, stored by AIBudgetPut,
	// else def). Either both rows take the reservation or, with the
	// refusal said in AIRefusal and a nil error, neither does: no two
	// concurrent reservations can both take a budget's last tokens.
	AIReserve(ctx context.Context, org, module string, day, tokens int64, def AIBudgetLimits) (AIRefusal, error)
	// AISettle releases reserved tokens of a reservation AIReserve took
	// on day, and charges used in their place (used may be more than
	// reserved: what the provider reported is charged), counting one
	// call, on both rows, in one transaction.
	AISettle(ctx context.Context, org, module string, day, reserved, used int64) error
	// AIUsage lists org's rows (every organization's when org is "")
	// for days in [from, to], newest day first, then by organization
	// and module, at most limit.
	AIUsage(ctx context.Context, org string, from, to int64, limit int) ([]AIUsageRow, error)
	// AIBudgetPut stores org's limits, replacing any; a 0 field takes
	// the default. AIBudgetGet reads them (found false: none stored);
	// AIBudgetDelete removes them.
	AIBudgetPut(ctx context.Context, org string, limits AIBudgetLimits, at int64) error
	AIBudgetGet(ctx context.Context, org string) (limits AIBudgetLimits, found bool, err error)
	AIBudgetDelete(ctx context.Context, org string) (deleted bool, err error)
}
