package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// AIBackend is the ai family's storage (driver.Families).
var _ driver.AIBackend = (*DB)(nil)

// AI budgets on SQLite: ai_usage holds a row per organization (module '')
// and per module per day; a reservation is one IMMEDIATE transaction,
// which holds the file's write lock, so the checks and the holds of two
// reservations never interleave, from one process or several.

// aiLimits reads the organization's override; a 0 field (or no row) is
// the default the caller binds as ?2 and ?3.
const aiLimits = `
SELECT
	coalesce((SELECT nullif(org_daily, 0) FROM ai_budgets WHERE org = ?1), ?2),
	coalesce((SELECT nullif(module_daily, 0) FROM ai_budgets WHERE org = ?1), ?3)`

const aiUsageRow = `
INSERT INTO ai_usage (org, module, day) VALUES (?1, ?2, ?3)
ON CONFLICT (org, day, module) DO NOTHING`

// aiHold takes ?4 tokens on a row when they fit under ?5; no row comes
// back when they do not.
const aiHold = `
UPDATE ai_usage SET reserved = reserved + ?4
WHERE org = ?1 AND module = ?2 AND day = ?3 AND used + reserved + ?4 <= ?5
RETURNING used`

const aiInUse = `SELECT used + reserved FROM ai_usage WHERE org = ?1 AND module = ?2 AND day = ?3`

// AIReserve implements driver.Backend.
func (d *DB) AIReserve(ctx context.Context, org, module string, day, tokens int64, def driver.AIBudgetLimits) (ref driver.AIRefusal, err error) {
	var st [4]*sql.Stmt
	for i, q := range [...]string{aiLimits, aiUsageRow, aiHold, aiInUse} {
		if st[i], err = d.prepared(ctx, d.w, q); err != nil {
			return ref, err
		}
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return ref, err
	}
	defer func() {
		if err != nil || ref.Scope != "" {
			tx.Rollback()
		}
	}()
	var lim driver.AIBudgetLimits
	if err := tx.StmtContext(ctx, st[0]).QueryRowContext(ctx, org, def.Org, def.Module).Scan(&lim.Org, &lim.Module); err != nil {
		return ref, err
	}
	for _, row := range []struct {
		scope, module string
		limit         int64
	}{{"org", "", lim.Org}, {"module", module, lim.Module}} {
		if _, err := tx.StmtContext(ctx, st[1]).ExecContext(ctx, org, row.module, day); err != nil {
			return ref, err
		}
		var used int64
		err := tx.StmtContext(ctx, st[2]).QueryRowContext(ctx, org, row.module, day, tokens, row.limit).Scan(&used)
		if errors.Is(err, sql.ErrNoRows) {
			ref = driver.AIRefusal{Scope: row.scope, Limit: row.limit}
			if err := tx.StmtContext(ctx, st[3]).QueryRowContext(ctx, org, row.module, day).Scan(&ref.InUse); err != nil {
				return driver.AIRefusal{}, err
			}
			return ref, nil
		}
		if err != nil {
			return ref, err
		}
	}
	return ref, tx.Commit()
}

const aiSettle = `
UPDATE ai_usage SET reserved = max(reserved - ?4, 0), used = used + ?5, calls = calls + 1
WHERE org = ?1 AND module = ?2 AND day = ?3`

// AISettle implements driver.Backend.
func (d *DB) AISettle(ctx context.Context, org, module string, day, reserved, used int64) (err error) {
	st, err := d.prepared(ctx, d.w, aiSettle)
	if err != nil {
		return err
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	for _, m := range []string{"", module} {
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, org, m, day, reserved, used); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// AIUsage implements driver.Backend.
func (d *DB) AIUsage(ctx context.Context, org string, from, to int64, limit int) ([]driver.AIUsageRow, error) {
	rows, err := d.r.QueryContext(ctx, `
SELECT org, module, day, used, reserved, calls FROM ai_usage
WHERE (?1 = '' OR org = ?1) AND day BETWEEN ?2 AND ?3
ORDER BY day DESC, org, module
LIMIT ?4`, org, from, to, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.AIUsageRow
	for rows.Next() {
		var r driver.AIUsageRow
		if err := rows.Scan(&r.Org, &r.Module, &r.Day, &r.Used, &r.Reserved, &r.Calls); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// AIBudgetPut implements driver.Backend.
func (d *DB) AIBudgetPut(ctx context.Context, org string, l driver.AIBudgetLimits, at int64) error {
	_, err := d.w.ExecContext(ctx, `
INSERT INTO ai_budgets (org, org_daily, module_daily, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (org) DO UPDATE SET org_daily = excluded.org_daily, module_daily = excluded.module_daily, updated_at = excluded.updated_at`,
		org, l.Org, l.Module, at)
	return err
}

// AIBudgetGet implements driver.Backend.
func (d *DB) AIBudgetGet(ctx context.Context, org string) (l driver.AIBudgetLimits, found bool, err error) {
	err = d.r.QueryRowContext(ctx, `SELECT org_daily, module_daily FROM ai_budgets WHERE org = ?`, org).Scan(&l.Org, &l.Module)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.AIBudgetLimits{}, false, nil
	}
	return l, err == nil, err
}

// AIBudgetDelete implements driver.Backend.
func (d *DB) AIBudgetDelete(ctx context.Context, org string) (bool, error) {
	res, err := d.w.ExecContext(ctx, `DELETE FROM ai_budgets WHERE org = ?`, org)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
