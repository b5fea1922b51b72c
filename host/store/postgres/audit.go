package postgres

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// auditInsert stores a whole batch in one statement (so atomically, and in
// one round trip whatever its size): each column is an array, and unnest
// turns them back into rows.
const auditInsert = `
INSERT INTO audit_events (
	id, time, kind, decision, correlation_id, module, action, op, user_id, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, attrs)
SELECT id, time, kind, decision, correlation_id, module, action, op, user_id, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, nullif(attrs, '')
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
	$10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::bigint[], $18::text[])
	AS t(id, time, kind, decision, correlation_id, module, action, op, user_id, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, attrs)`

// AuditInsert implements driver.Backend.
func (d *DB) AuditInsert(ctx context.Context, rows []driver.AuditRow) error {
	n := len(rows)
	text := make([][]string, 16)
	for i := range text {
		text[i] = make([]string, n)
	}
	times, durations := make([]int64, n), make([]int64, n)
	for i := range rows {
		r := &rows[i]
		for j, v := range [...]string{r.ID, r.Kind, r.Decision, r.CorrelationID, r.Module, r.Action, r.Op, r.User, r.Org,
			r.Rule, r.Reason, r.Code, r.MutationID, r.TaskID, r.ModelCallID, r.Attrs} {
			text[j][i] = v
		}
		times[i], durations[i] = r.Time, r.DurationNS
	}
	_, err := d.pool.Exec(ctx, auditInsert,
		text[0], times, text[1], text[2], text[3], text[4], text[5], text[6], text[7], text[8],
		text[9], text[10], text[11], text[12], text[13], text[14], durations, text[15])
	return conflict(err)
}

// AuditQuery implements driver.Backend.
func (d *DB) AuditQuery(ctx context.Context, f driver.AuditFilter) ([]driver.AuditRow, error) {
	var q strings.Builder
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	q.WriteString(`
SELECT id, time, kind, decision, correlation_id, module, action, op, user_id, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, coalesce(attrs, '')
FROM audit_events WHERE true`)
	for _, c := range []struct{ col, v string }{
		{"correlation_id", f.CorrelationID}, {"module", f.Module}, {"decision", f.Decision}, {"kind", f.Kind}, {"org", f.Org},
	} {
		if c.v != "" {
			q.WriteString(" AND " + c.col + " = " + arg(c.v))
		}
	}
	if f.HasSince {
		q.WriteString(" AND time >= " + arg(f.Since))
	}
	if f.HasUntil {
		q.WriteString(" AND time < " + arg(f.Until))
	}
	q.WriteString(" ORDER BY time DESC, id DESC LIMIT " + arg(f.Limit))
	rows, err := d.pool.Query(ctx, q.String(), args...)
	if err != nil {
		return nil, err
	}
	out := make([]driver.AuditRow, 0, min(f.Limit, 64))
	var r driver.AuditRow
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Time, &r.Kind, &r.Decision, &r.CorrelationID, &r.Module, &r.Action, &r.Op, &r.User, &r.Org,
		&r.Rule, &r.Reason, &r.Code, &r.MutationID, &r.TaskID, &r.ModelCallID, &r.DurationNS, &r.Attrs}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}
