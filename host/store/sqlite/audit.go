package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// auditColumns is the number of columns auditInsert binds per row.
const auditColumns = 18

// auditChunk is the most rows one INSERT statement stores: 32 rows of 18
// parameters stay far below SQLite's limit of 32766.
const auditChunk = 32

// auditInserts[k] stores 1<<k rows in one statement. One statement per
// row spends more on the statement (reset, bind through database/sql,
// step) than on the row; a batch is stored with the statements of the
// powers of two its size adds up to, so six prepared statements cover
// every size.
var auditInserts = func() (qs [6]string) {
	for k := range qs {
		var b strings.Builder
		b.WriteString(`INSERT INTO audit_events (
	id, time, kind, decision, correlation_id, module, action, op, user_id, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, attrs
) VALUES `)
		for i := range 1 << k {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
		}
		qs[k] = b.String()
	}
	return qs
}()

// auditSegmentInsert stores one segment; a batch holds one per
// organization, so one statement each costs little.
const auditSegmentInsert = `INSERT INTO audit_segments (org, time_min, time_max, count, bloom, data) VALUES (?,?,?,?,?,?)`

// AuditInsert implements driver.Backend: one transaction for the batch.
func (d *DB) AuditInsert(ctx context.Context, rows []driver.AuditRow, segs []driver.AuditSegment) error {
	var stmts [len(auditInserts)]*sql.Stmt
	for k := range stmts {
		if 1<<k > len(rows) {
			break
		}
		var err error
		if stmts[k], err = d.prepared(ctx, d.w, auditInserts[k]); err != nil {
			return err
		}
	}
	var segStmt *sql.Stmt
	if len(segs) > 0 {
		var err error
		if segStmt, err = d.prepared(ctx, d.w, auditSegmentInsert); err != nil {
			return err
		}
	}
	args := make([]any, 0, auditColumns*min(len(rows), auditChunk))
	return d.inTx(ctx, func(tx *sql.Tx) error {
		for i := range segs {
			g := &segs[i]
			if _, err := tx.StmtContext(ctx, segStmt).ExecContext(ctx, g.Org, g.TimeMin, g.TimeMax, g.Count, g.Bloom, g.Data); err != nil {
				return fmt.Errorf("segment %d (org %q, %d events): %w", i, g.Org, g.Count, err)
			}
		}
		for i := 0; i < len(rows); {
			k := len(stmts) - 1
			for 1<<k > len(rows)-i {
				k--
			}
			n := 1 << k
			args = args[:0]
			for j := i; j < i+n; j++ {
				r := &rows[j]
				var attrs any // NULL when there are none
				if r.Attrs != "" {
					attrs = r.Attrs
				}
				args = append(args,
					r.ID, r.Time, r.Kind, r.Decision, r.CorrelationID, r.Module, r.Action, r.Op, r.User, r.Org,
					r.Rule, r.Reason, r.Code, r.MutationID, r.TaskID, r.ModelCallID, r.DurationNS, attrs)
			}
			if _, err := tx.StmtContext(ctx, stmts[k]).ExecContext(ctx, args...); err != nil {
				if isConstraint(err) {
					err = fmt.Errorf("%w: %w", driver.ErrConflict, err)
				}
				if n == 1 {
					return fmt.Errorf("event %d (%s): %w", i, rows[i].ID, err)
				}
				return fmt.Errorf("events %d to %d: %w", i, i+n-1, err)
			}
			i += n
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
	eq("user_id", f.User)
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

// AuditSegments implements driver.Backend.
func (d *DB) AuditSegments(ctx context.Context, f driver.AuditSegmentFilter) ([]driver.AuditSegment, error) {
	var q strings.Builder
	var args []any
	q.WriteString(`SELECT id, org, time_min, time_max, count, bloom FROM audit_segments WHERE 1`)
	if f.Org != "" {
		q.WriteString(" AND org = ?")
		args = append(args, f.Org)
	}
	if f.HasSince {
		q.WriteString(" AND time_max >= ?")
		args = append(args, f.Since)
	}
	if f.HasUntil {
		q.WriteString(" AND time_min < ?")
		args = append(args, f.Until)
	}
	if f.HasBefore {
		q.WriteString(" AND (time_max, id) < (?, ?)")
		args = append(args, f.BeforeTime, f.BeforeID)
	}
	q.WriteString(" ORDER BY time_max DESC, id DESC LIMIT ?")
	args = append(args, f.Limit)
	rows, err := d.r.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.AuditSegment
	for rows.Next() {
		var g driver.AuditSegment
		if err := rows.Scan(&g.ID, &g.Org, &g.TimeMin, &g.TimeMax, &g.Count, &g.Bloom); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// AuditSegmentData implements driver.Backend.
func (d *DB) AuditSegmentData(ctx context.Context, ids []int64) (map[int64][]byte, error) {
	out := make(map[int64][]byte, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), 256)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		q := `SELECT id, data FROM audit_segments WHERE id IN (?` + strings.Repeat(",?", n-1) + `)`
		if err := func() error {
			rows, err := d.r.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					id   int64
					data []byte
				)
				if err := rows.Scan(&id, &data); err != nil {
					return err
				}
				out[id] = data
			}
			return rows.Err()
		}(); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return out, nil
}

// AuditPrune implements driver.AuditPruner: the writer is the only one,
// so a batch is a plain DELETE of the oldest rows by the time indexes.
func (d *DB) AuditPrune(ctx context.Context, before int64, limit int) (events, segments, packed int64, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM audit_events WHERE rowid IN (SELECT rowid FROM audit_events WHERE time < ? ORDER BY time LIMIT ?)`, before, limit)
		if err != nil {
			return fmt.Errorf("audit prune: events: %w", err)
		}
		if events, err = res.RowsAffected(); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `DELETE FROM audit_segments WHERE id IN (SELECT id FROM audit_segments WHERE time_max < ? ORDER BY time_max LIMIT ?) RETURNING count`, before, limit)
		if err != nil {
			return fmt.Errorf("audit prune: segments: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var n int64
			if err := rows.Scan(&n); err != nil {
				return err
			}
			segments++
			packed += n
		}
		return rows.Err()
	})
	return events, segments, packed, err
}

var _ driver.AuditPruner = (*DB)(nil)
