package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// AIBackend is the ai family's storage (driver.Families).
var _ driver.AIBackend = (*DB)(nil)

// AI budgets on PostgreSQL: a reservation's UPDATE holds only while
// used + reserved + n stays within the limit, a condition PostgreSQL
// checks again on the row's newest version once it has the row's lock
// (READ COMMITTED), so of two replicas racing for a budget's last
// tokens one waits for the other and then sees its hold. Every
// transaction locks the organization's row before the module's.

const pgAILimits = `
SELECT
	coalesce((SELECT nullif(org_daily, 0) FROM ai_budgets WHERE org = $1), $2::bigint),
	coalesce((SELECT nullif(module_daily, 0) FROM ai_budgets WHERE org = $1), $3::bigint)`

const pgAIUsageRow = `
INSERT INTO ai_usage (org, module, day) VALUES ($1, $2, $3)
ON CONFLICT (org, day, module) DO NOTHING`

const pgAIHold = `
UPDATE ai_usage SET reserved = reserved + $4
WHERE org = $1 AND module = $2 AND day = $3 AND used + reserved + $4 <= $5
RETURNING used`

// AIReserve implements driver.Backend.
func (d *DB) AIReserve(ctx context.Context, org, module string, day, tokens int64, def driver.AIBudgetLimits) (ref driver.AIRefusal, err error) {
	errRefused := errors.New("refused")
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var lim driver.AIBudgetLimits
		if err := tx.QueryRow(ctx, pgAILimits, org, def.Org, def.Module).Scan(&lim.Org, &lim.Module); err != nil {
			return err
		}
		for _, row := range []struct {
			scope, module string
			limit         int64
		}{{"org", "", lim.Org}, {"module", module, lim.Module}} {
			if _, err := tx.Exec(ctx, pgAIUsageRow, org, row.module, day); err != nil {
				return err
			}
			var used int64
			err := tx.QueryRow(ctx, pgAIHold, org, row.module, day, tokens, row.limit).Scan(&used)
			if errors.Is(err, pgx.ErrNoRows) {
				ref = driver.AIRefusal{Scope: row.scope, Limit: row.limit}
				if err := tx.QueryRow(ctx, `SELECT used + reserved FROM ai_usage WHERE org = $1 AND module = $2 AND day = $3`,
					org, row.module, day).Scan(&ref.InUse); err != nil {
					return err
				}
				return errRefused // roll back the organization's hold
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errRefused) {
		return ref, nil
	}
	return driver.AIRefusal{}, err
}

// AISettle implements driver.Backend.
func (d *DB) AISettle(ctx context.Context, org, module string, day, reserved, used int64) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		for _, m := range []string{"", module} {
			if _, err := tx.Exec(ctx, `
UPDATE ai_usage SET reserved = greatest(reserved - $4, 0), used = used + $5, calls = calls + 1
WHERE org = $1 AND module = $2 AND day = $3`, org, m, day, reserved, used); err != nil {
				return err
			}
		}
		return nil
	})
}

// AIUsage implements driver.Backend.
func (d *DB) AIUsage(ctx context.Context, org string, from, to int64, limit int) ([]driver.AIUsageRow, error) {
	rows, err := d.pool.Query(ctx, `
SELECT org, module, day, used, reserved, calls FROM ai_usage
WHERE ($1 = '' OR org = $1) AND day BETWEEN $2 AND $3
ORDER BY day DESC, org COLLATE "C", module COLLATE "C"
LIMIT $4`, org, from, to, limit)
	if err != nil {
		return nil, err
	}
	var out []driver.AIUsageRow
	var r driver.AIUsageRow
	_, err = pgx.ForEachRow(rows, []any{&r.Org, &r.Module, &r.Day, &r.Used, &r.Reserved, &r.Calls}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// AIBudgetPut implements driver.Backend.
func (d *DB) AIBudgetPut(ctx context.Context, org string, l driver.AIBudgetLimits, at int64) error {
	_, err := d.pool.Exec(ctx, `
INSERT INTO ai_budgets (org, org_daily, module_daily, updated_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (org) DO UPDATE SET org_daily = excluded.org_daily, module_daily = excluded.module_daily, updated_at = excluded.updated_at`,
		org, l.Org, l.Module, at)
	return err
}

// AIBudgetGet implements driver.Backend.
func (d *DB) AIBudgetGet(ctx context.Context, org string) (l driver.AIBudgetLimits, found bool, err error) {
	err = d.pool.QueryRow(ctx, `SELECT org_daily, module_daily FROM ai_budgets WHERE org = $1`, org).Scan(&l.Org, &l.Module)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.AIBudgetLimits{}, false, nil
	}
	return l, err == nil, err
}

// AIBudgetDelete implements driver.Backend.
func (d *DB) AIBudgetDelete(ctx context.Context, org string) (bool, error) {
	tag, err := d.pool.Exec(ctx, `DELETE FROM ai_budgets WHERE org = $1`, org)
	return tag.RowsAffected() > 0, err
}
