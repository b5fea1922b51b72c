package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// TaskBackend is the tasks family's storage (driver.Families).
var _ driver.TaskBackend = (*DB)(nil)

// The task queue. Every write runs on the single writer connection in an
// IMMEDIATE transaction, so an enqueue's key lookup, count and insert, a
// claim's selection and update, and a schedule tick's record are atomic
// against every other writer, in this process (one connection) and in
// others (the file lock).

const taskColumns = `id, org, module, action, input, user_id, roles, correlation_id, key, schedule, state, attempts,
	max_attempts, run_at, lease_until, claim, coalesce(result, x''), error, code, created_at, updated_at, finished_at, origin`

func taskDest(t *driver.TaskRow) []any {
	return []any{&t.ID, &t.Org, &t.Module, &t.Action, &t.Input, &t.User, &t.Roles, &t.CorrelationID, &t.Key, &t.Schedule,
		&t.State, &t.Attempts, &t.MaxAttempts, &t.RunAt, &t.LeaseUntil, &t.Claim, &t.Result, &t.Error, &t.Code,
		&t.CreatedAt, &t.UpdatedAt, &t.FinishedAt, &t.Origin}
}

func scanTasks(rows *sql.Rows) ([]driver.TaskRow, error) {
	defer rows.Close()
	out := []driver.TaskRow{}
	for rows.Next() {
		var t driver.TaskRow
		if err := rows.Scan(taskDest(&t)...); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// insertTask checks the key and the quota of t's scope and stores t,
// inside tx.
func insertTask(ctx context.Context, tx *sql.Tx, t driver.TaskRow, maxActive int) (id string, existing bool, err error) {
	if t.Key != "" {
		err := tx.QueryRowContext(ctx, `SELECT id FROM tasks WHERE org = ? AND module = ? AND key = ?`, t.Org, t.Module, t.Key).Scan(&id)
		if err == nil {
			return id, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", false, err
		}
	}
	if maxActive > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE org = ? AND module = ? AND state IN ('queued', 'running')`,
			t.Org, t.Module).Scan(&n); err != nil {
			return "", false, err
		}
		if n >= maxActive {
			return "", false, driver.ErrOverQuota
		}
	}
	_, err = tx.ExecContext(ctx, `
INSERT INTO tasks (id, org, module, action, input, user_id, roles, correlation_id, key, schedule, state, attempts,
	max_attempts, run_at, created_at, updated_at, origin)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)`,
		t.ID, t.Org, t.Module, t.Action, t.Input, t.User, t.Roles, t.CorrelationID, t.Key, t.Schedule, t.State,
		t.MaxAttempts, t.RunAt, t.CreatedAt, t.UpdatedAt, t.Origin)
	if isConstraint(err) {
		return "", false, driver.ErrConflict
	}
	if err != nil {
		return "", false, err
	}
	return t.ID, false, nil
}

// TaskEnqueue implements driver.Backend.
func (d *DB) TaskEnqueue(ctx context.Context, t driver.TaskRow, maxActive int) (id string, existing bool, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		id, existing, err = insertTask(ctx, tx, t, maxActive)
		return err
	})
	return id, existing, err
}

// TaskGet implements driver.Backend.
func (d *DB) TaskGet(ctx context.Context, org, module, id string) (*driver.TaskRow, error) {
	q := `SELECT ` + taskColumns + ` FROM tasks WHERE id = ? AND org = ?`
	args := []any{id, org}
	if module != "" {
		q += ` AND module = ?`
		args = append(args, module)
	}
	var t driver.TaskRow
	err := d.r.QueryRowContext(ctx, q, args...).Scan(taskDest(&t)...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// TaskList implements driver.Backend.
func (d *DB) TaskList(ctx context.Context, f driver.TaskFilter) ([]driver.TaskRow, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"org", f.Org}, {"module", f.Module}, {"state", f.State}, {"id", f.ID}, {"user_id", f.User}, {"origin", f.Origin}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if f.HasBefore {
		where = append(where, "(created_at < ? OR created_at = ? AND id < ?)")
		args = append(args, f.BeforeCreated, f.BeforeCreated, f.BeforeID)
	}
	q := `SELECT ` + taskColumns + ` FROM tasks`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	rows, err := d.r.QueryContext(ctx, q, append(args, f.Limit)...)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}

// TaskClaim implements driver.Backend.
func (d *DB) TaskClaim(ctx context.Context, origin string, now, leaseUntil int64, claim string, limit int, expiredError, expiredCode string) ([]driver.TaskRow, error) {
	var out []driver.TaskRow
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
UPDATE tasks SET state = 'failed', error = ?, code = ?, finished_at = ?, updated_at = ?, lease_until = 0, claim = ''
WHERE state = 'running' AND lease_until < ? AND attempts >= max_attempts AND origin = ?`, expiredError, expiredCode, now, now, now, origin); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `
UPDATE tasks SET state = 'running', attempts = attempts + 1, lease_until = ?, claim = ?, updated_at = ?
WHERE id IN (
	SELECT id FROM (
		SELECT id, run_at AS due FROM tasks WHERE state = 'queued' AND run_at <= ? AND origin = ?
		UNION ALL
		SELECT id, lease_until AS due FROM tasks WHERE state = 'running' AND lease_until < ? AND origin = ?
	) ORDER BY due LIMIT ?)
RETURNING `+taskColumns, leaseUntil, claim, now, now, origin, now, origin, limit)
		if err != nil {
			return err
		}
		out, err = scanTasks(rows)
		return err
	})
	return out, err
}

// TaskExtend implements driver.Backend.
func (d *DB) TaskExtend(ctx context.Context, id, claim string, leaseUntil int64) error {
	return d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tasks SET lease_until = ? WHERE id = ? AND claim = ? AND state = 'running'`, leaseUntil, id, claim)
		return affectedOne(res, err)
	})
}

func affectedOne(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return driver.ErrNotFound
	}
	return nil
}

// TaskFinish implements driver.Backend.
func (d *DB) TaskFinish(ctx context.Context, id, claim string, u driver.TaskUpdate) error {
	return d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
UPDATE tasks SET state = ?, result = ?, error = ?, code = ?, run_at = CASE WHEN ? = 'queued' THEN ? ELSE run_at END,
	attempts = attempts + ?, updated_at = ?, finished_at = ?, lease_until = 0, claim = ''
WHERE id = ? AND claim = ? AND state = 'running'`,
			u.State, u.Result, u.Error, u.Code, u.State, u.RunAt, u.AttemptsDelta, u.At, u.FinishedAt, id, claim)
		return affectedOne(res, err)
	})
}

// TaskCancel implements driver.Backend.
func (d *DB) TaskCancel(ctx context.Context, org, module, id string, at int64) (*driver.TaskRow, bool, error) {
	var t driver.TaskRow
	changed := false
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		scope, args := `id = ? AND org = ?`, []any{id, org}
		if module != "" {
			scope += ` AND module = ?`
			args = append(args, module)
		}
		res, err := tx.ExecContext(ctx, `
UPDATE tasks SET state = 'cancelled', finished_at = ?, updated_at = ?, lease_until = 0, claim = ''
WHERE `+scope+` AND state IN ('queued', 'running')`, append([]any{at, at}, args...)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		changed = n == 1
		err = tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE `+scope, args...).Scan(taskDest(&t)...)
		if errors.Is(err, sql.ErrNoRows) {
			return driver.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return &t, changed, nil
}

// TaskRetry implements driver.Backend.
func (d *DB) TaskRetry(ctx context.Context, org, id string, at int64) (*driver.TaskRow, bool, error) {
	var t driver.TaskRow
	changed := false
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
UPDATE tasks SET state = 'queued', attempts = 0, run_at = ?, updated_at = ?, finished_at = 0, result = NULL, error = '', code = ''
WHERE id = ? AND org = ? AND state IN ('failed', 'cancelled')`, at, at, id, org)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		changed = n == 1
		err = tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ? AND org = ?`, id, org).Scan(taskDest(&t)...)
		if errors.Is(err, sql.ErrNoRows) {
			return driver.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return &t, changed, nil
}

// TaskPrune implements driver.Backend.
func (d *DB) TaskPrune(ctx context.Context, finishedBefore, ticksBefore int64, limit int) (int, error) {
	var n int64
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE finished_at > 0 AND finished_at < ? LIMIT ?)`, finishedBefore, limit)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM schedule_ticks WHERE tick < ?`, ticksBefore)
		return err
	})
	return int(n), err
}

// ScheduleFire implements driver.Backend.
func (d *DB) ScheduleFire(ctx context.Context, t driver.TaskRow, schedule string, tick int64, maxActive int) (fired bool, err error) {
	over := false
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO schedule_ticks (org, module, schedule, tick, task_id) VALUES (?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING`, t.Org, t.Module, schedule, tick, t.ID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return err
		}
		fired = true
		_, _, err = insertTask(ctx, tx, t, maxActive)
		if errors.Is(err, driver.ErrOverQuota) {
			// The tick stays recorded, without its task: commit it,
			// and report the bound.
			over = true
			_, err = tx.ExecContext(ctx, `UPDATE schedule_ticks SET task_id = '' WHERE org = ? AND module = ? AND schedule = ? AND tick = ?`,
				t.Org, t.Module, schedule, tick)
		}
		return err
	})
	if err == nil && over {
		err = driver.ErrOverQuota
	}
	return fired, err
}

// TaskStats implements driver.TaskStatser.
func (d *DB) TaskStats(ctx context.Context, now int64) (map[string]int64, int64, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT state, count(*) FROM tasks GROUP BY state`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	by := map[string]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, 0, err
		}
		by[st] = n
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var oldest sql.NullInt64
	if err := d.r.QueryRowContext(ctx, `SELECT min(run_at) FROM tasks WHERE state = 'queued' AND run_at <= ?`, now).Scan(&oldest); err != nil {
		return nil, 0, err
	}
	return by, oldest.Int64, nil
}
