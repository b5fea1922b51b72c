package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/host/store"
)

// PermAIUsage reads the organization's model-call usage and daily budgets
// (GET /v1/ai/usage). Like the module permissions, it is held by
// DefaultModuleRole unless the profile's role_permissions gives it to a
// role.
const PermAIUsage = "ai.usage"

// AIUsageJSON is GET /v1/ai/usage's answer: the organization's daily
// budgets (Override: an operator set them with moat ai budget set) and
// its usage per day, the organization's total (module "") and each
// module's, newest day first.
type AIUsageJSON struct {
	Org    string         `json:"org"`
	Budget AIBudgetJSON   `json:"budget"`
	Days   []AIUsageEntry `json:"days"`
}

// AIBudgetJSON is an organization's daily token budgets.
type AIBudgetJSON struct {
	OrgDailyTokens    int64 `json:"org_daily_tokens"`
	ModuleDailyTokens int64 `json:"module_daily_tokens"`
	Override          bool  `json:"override"`
}

// AIUsageEntry is one day of one module (or, with Module "", of the whole
// organization).
type AIUsageEntry struct {
	Day      string `json:"day"`
	Module   string `json:"module"`
	Used     int64  `json:"used"`
	Reserved int64  `json:"reserved"`
	Calls    int64  `json:"calls"`
}

// aiUsage answers GET /v1/ai/usage?days=N (1..31, default 7: today and
// the days before) for the caller's organization only.
func (s *Server) aiUsage(c echo.Context) error {
	p := principalOf(c)
	if err := s.mayManage(c, PermAIUsage, ""); err != nil {
		return err
	}
	if s.ai == nil {
		return problem(http.StatusNotFound, "not_found", "this server has no model providers configured (ai: in its configuration)")
	}
	days := 7
	if v := c.QueryParam("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 31 {
			return problem(http.StatusBadRequest, "invalid_argument", "days=%q: give a number from 1 to 31", clip(v))
		}
		days = n
	}
	ctx := c.Request().Context()
	now := time.Now()
	rows, err := s.store.AIUsage(ctx, store.AIUsageFilter{Org: p.Org, Since: now.AddDate(0, 0, 1-days), Until: now})
	if err != nil {
		return fromHostError(err)
	}
	out := AIUsageJSON{Org: p.Org, Days: make([]AIUsageEntry, len(rows))}
	def := s.ai.Budgets()
	b, found, err := s.store.AIBudgetGet(ctx, p.Org)
	if err != nil {
		return fromHostError(err)
	}
	out.Budget = AIBudgetJSON{OrgDailyTokens: def.OrgDailyTokens, ModuleDailyTokens: def.ModuleDailyTokens, Override: found}
	if b.OrgDailyTokens > 0 {
		out.Budget.OrgDailyTokens = b.OrgDailyTokens
	}
	if b.ModuleDailyTokens > 0 {
		out.Budget.ModuleDailyTokens = b.ModuleDailyTokens
	}
	for i, r := range rows {
		out.Days[i] = AIUsageEntry{Day: r.Day, Module: r.Module, Used: r.Used, Reserved: r.Reserved, Calls: r.Calls}
	}
	return c.JSON(http.StatusOK, out)
}
