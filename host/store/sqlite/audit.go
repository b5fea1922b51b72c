package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/host/store/driver"
)

const auditInsert = `
INSERT INTO audit_events (
	id, time, kind, decision, correlation_id, module, action, op, user_id, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, attrs
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// AuditInsert implements driver.Backend: one transaction for the batch.
func (d *DB) AuditInsert(ctx context.Context, rows []driver.AuditRow) error {
	ins, err := d.prepared(ctx, d.w, auditInsert)
	if err != nil {
		return err
	}
	return d.inTx(ctx, func(tx *sql.Tx) error {
		stmt := tx.StmtContext(ctx, ins)
		for i := range rows {
			r := &rows[i]
			var attrs any // NULL when there are none
			if r.Attrs != "" {
				attrs = r.Attrs
			}
			if _, err := stmt.ExecContext(ctx,
				r.ID, r.Time, r.Kind, r.Decision, r.CorrelationID, r.Module, r.Action, r.Op, r.User, r.Org,
				r.Rule, r.Reason, r.Code, r.MutationID, r.TaskID, r.ModelCallID, r.DurationNS, attrs,
			); err != nil {
				if isConstraint(err) {
					err = fmt.Errorf("%w: %w", driver.ErrConflict, err)
				}
				return fmt.Errorf("event %d (%s): %w", i, r.ID, err)
			}
		}
		return nil
	})
}

// AuditQuery implements driver.Backend.
func (d *DB) AuditQuery(ctx context.Context, f driver.AuditFilter) ([]driver.AuditRow, error) {
	var q strings.Builder
	var args []any
	q.WriteString(`
SELECT id, time, kind, decision, correlation_id, module, action, op, user_id, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, attrs
FROM audit_events WHERE 1`)
	eq := func(col, v string) {
		if v != "" {
			q.WriteString(" AND " + col + " = ?")
			args = append(args, v)
		}
	}
	eq("correlation_id", f.CorrelationID)
	eq("module", f.Module)
	eq("decision", f.Decision)
	eq("kind", f.Kind)
	eq("org", f.Org)
	if f.HasSince {
		q.WriteString(" AND time >= ?")
		args = append(args, f.Since)
	}
	if f.HasUntil {
		q.WriteString(" AND time < ?")
		args = append(args, f.Until)
	}
	q.WriteString(" ORDER BY time DESC, id DESC LIMIT ?")
	args = append(args, f.Limit)

	rows, err := d.r.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]driver.AuditRow, 0, min(f.Limit, 64))
	for rows.Next() {
		var (
			r     driver.AuditRow
			attrs sql.NullString
		)
		if err := rows.Scan(&r.ID, &r.Time, &r.Kind, &r.Decision, &r.CorrelationID, &r.Module, &r.Action, &r.Op, &r.User, &r.Org,
			&r.Rule, &r.Reason, &r.Code, &r.MutationID, &r.TaskID, &r.ModelCallID, &r.DurationNS, &attrs); err != nil {
			return nil, err
		}
		r.Attrs = attrs.String
		out = append(out, r)
	}
	return out, rows.Err()
}
