package postgres

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// TaskBackend is the tasks family's storage (driver.Families).
var _ driver.TaskBackend = (*DB)(nil)

// The task queue, shared by every replica on the database:
//   - an enqueue holds its scope's advisory lock (taskScopeLock) for its
//     transaction, so the idempotency key's lookup, the count of active
//     tasks and the insert cannot interleave with another replica's
//     enqueue of the same scope (READ COMMITTED: each statement after
//     the lock sees what the previous holder committed);
//   - a claim picks due rows FOR UPDATE SKIP LOCKED, so replicas claiming
//     at once take different tasks and never wait on each other, and
//     PostgreSQL re-checks a row's state under its lock;
//   - finishing an attempt updates only WHERE claim matches and the task
//     is running, so an attempt whose lease lapsed (and was claimed again)
//     cannot overwrite the task.

const taskColumns = `id, org, module, action, input, user_id, roles, correlation_id, key, schedule, state, attempts,
	max_attempts, run_at, lease_until, claim, coalesce(result, ''::bytea), error, code, created_at, updated_at, finished_at, origin`

// claimedColumns are taskColumns qualified, for the claim's RETURNING
// (its FROM names the picked ids too).
const claimedColumns = `tasks.id, tasks.org, tasks.module, tasks.action, tasks.input, tasks.user_id, tasks.roles,
	tasks.correlation_id, tasks.key, tasks.schedule, tasks.state, tasks.attempts, tasks.max_attempts, tasks.run_at,
	tasks.lease_until, tasks.claim, coalesce(tasks.result, ''::bytea), tasks.error, tasks.code, tasks.created_at,
	tasks.updated_at, tasks.finished_at, tasks.origin`

func taskDest(t *driver.TaskRow) []any {
	return []any{&t.ID, &t.Org, &t.Module, &t.Action, &t.Input, &t.User, &t.Roles, &t.CorrelationID, &t.Key, &t.Schedule,
		&t.State, &t.Attempts, &t.MaxAttempts, &t.RunAt, &t.LeaseUntil, &t.Claim, &t.Result, &t.Error, &t.Code,
		&t.CreatedAt, &t.UpdatedAt, &t.FinishedAt, &t.Origin}
}

func collectTasks(rows pgx.Rows) ([]driver.TaskRow, error) {
	out := []driver.TaskRow{}
	var t driver.TaskRow
	_, err := pgx.ForEachRow(rows, taskDest(&t), func() error {
		out = append(out, t)
		return nil
	})
	return out, err
}

// taskLockSpace is the first key of the two-key advisory locks of task
// scopes ('task' in ASCII); the second is a hash of the scope. Two scopes
// sharing a hash only serialize their enqueues.
const taskLockSpace = 0x7461736b

func taskScopeLock(org, module string) int32 {
	h := fnv.New32a()
	h.Write([]byte(org))
	h.Write([]byte{0})
	h.Write([]byte(module))
	return int32(h.Sum32())
}

func insertTask(ctx context.Context, tx pgx.Tx, t driver.TaskRow, maxActive int) (id string, existing bool, err error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, int32(taskLockSpace), taskScopeLock(t.Org, t.Module)); err != nil {
		return "", false, err
	}
	if t.Key != "" {
		err := tx.QueryRow(ctx, `SELECT id FROM tasks WHERE org = $1 AND module = $2 AND key = $3`, t.Org, t.Module, t.Key).Scan(&id)
		if err == nil {
			return id, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", false, err
		}
	}
	if maxActive > 0 {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE org = $1 AND module = $2 AND state IN ('queued', 'running')`,
			t.Org, t.Module).Scan(&n); err != nil {
			return "", false, err
		}
		if n >= maxActive {
			return "", false, driver.ErrOverQuota
		}
	}
	_, err = tx.Exec(ctx, `
INSERT INTO tasks (id, org, module, action, input, user_id, roles, correlation_id, key, schedule, state, attempts,
	max_attempts, run_at, created_at, updated_at, origin)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 0, $12, $13, $14, $15, $16)`,
		t.ID, t.Org, t.Module, t.Action, t.Input, t.User, t.Roles, t.CorrelationID, t.Key, t.Schedule, t.State,
		t.MaxAttempts, t.RunAt, t.CreatedAt, t.UpdatedAt, t.Origin)
	if err != nil {
		return "", false, conflict(err)
	}
	return t.ID, false, nil
}

// TaskEnqueue implements driver.Backend.
func (d *DB) TaskEnqueue(ctx context.Context, t driver.TaskRow, maxActive int) (id string, existing bool, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		id, existing, err = insertTask(ctx, tx, t, maxActive)
		return err
	})
	return id, existing, err
}

// TaskGet implements driver.Backend.
func (d *DB) TaskGet(ctx context.Context, org, module, id string) (*driver.TaskRow, error) {
	var t driver.TaskRow
	err := d.pool.QueryRow(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1 AND org = $2 AND ($3 = '' OR module = $3)`,
		id, org, module).Scan(taskDest(&t)...)
	if err != nil {
		return nil, notFound(err)
	}
	return &t, nil
}

// TaskList implements driver.Backend.
func (d *DB) TaskList(ctx context.Context, f driver.TaskFilter) ([]driver.TaskRow, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	for _, c := range []struct{ col, v string }{{"org", f.Org}, {"module", f.Module}, {"state", f.State}, {"id", f.ID}, {"user_id", f.User}, {"origin", f.Origin}} {
		if c.v != "" {
			where = append(where, c.col+" = "+arg(c.v))
		}
	}
	if f.HasBefore {
		where = append(where, "(created_at, id) < ("+arg(f.BeforeCreated)+", "+arg(f.BeforeID)+")")
	}
	q := `SELECT ` + taskColumns + ` FROM tasks`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ` + arg(f.Limit)
	rows, err := d.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return collectTasks(rows)
}

// TaskClaim implements driver.Backend.
func (d *DB) TaskClaim(ctx context.Context, origin string, now, leaseUntil int64, claim string, limit int, expiredError, expiredCode string) ([]driver.TaskRow, error) {
	var out []driver.TaskRow
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
UPDATE tasks SET state = 'failed', error = $1, code = $2, finished_at = $3, updated_at = $3, lease_until = 0, claim = ''
WHERE id IN (SELECT id FROM tasks WHERE state = 'running' AND lease_until < $3 AND attempts >= max_attempts AND origin = $4
	FOR UPDATE SKIP LOCKED)`, expiredError, expiredCode, now, origin); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
WITH queued AS (
	SELECT id, run_at AS due FROM tasks WHERE state = 'queued' AND run_at <= $1 AND origin = $5
	ORDER BY run_at LIMIT $4 FOR UPDATE SKIP LOCKED
), lapsed AS (
	SELECT id, lease_until AS due FROM tasks WHERE state = 'running' AND lease_until < $1 AND attempts < max_attempts AND origin = $5
	ORDER BY lease_until LIMIT $4 FOR UPDATE SKIP LOCKED
), pick AS (
	SELECT id FROM (SELECT id, due FROM queued UNION ALL SELECT id, due FROM lapsed) d ORDER BY due LIMIT $4
)
UPDATE tasks SET state = 'running', attempts = tasks.attempts + 1, lease_until = $2, claim = $3, updated_at = $1
FROM pick WHERE tasks.id = pick.id
RETURNING `+claimedColumns, now, leaseUntil, claim, limit, origin)
		if err != nil {
			return err
		}
		out, err = collectTasks(rows)
		return err
	})
	return out, err
}

// TaskExtend implements driver.Backend.
func (d *DB) TaskExtend(ctx context.Context, id, claim string, leaseUntil int64) error {
	tag, err := d.pool.Exec(ctx, `UPDATE tasks SET lease_until = $1 WHERE id = $2 AND claim = $3 AND state = 'running'`, leaseUntil, id, claim)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return driver.ErrNotFound
	}
	return nil
}

// TaskFinish implements driver.Backend.
func (d *DB) TaskFinish(ctx context.Context, id, claim string, u driver.TaskUpdate) error {
	tag, err := d.pool.Exec(ctx, `
UPDATE tasks SET state = $1, result = $2, error = $3, code = $4, run_at = CASE WHEN $1 = 'queued' THEN $5 ELSE run_at END,
	attempts = attempts + $6, updated_at = $7, finished_at = $8, lease_until = 0, claim = ''
WHERE id = $9 AND claim = $10 AND state = 'running'`,
		u.State, u.Result, u.Error, u.Code, u.RunAt, u.AttemptsDelta, u.At, u.FinishedAt, id, claim)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return driver.ErrNotFound
	}
	return nil
}

// TaskCancel implements driver.Backend.
func (d *DB) TaskCancel(ctx context.Context, org, module, id string, at int64) (*driver.TaskRow, bool, error) {
	var t driver.TaskRow
	changed := false
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
UPDATE tasks SET state = 'cancelled', finished_at = $1, updated_at = $1, lease_until = 0, claim = ''
WHERE id = $2 AND org = $3 AND ($4 = '' OR module = $4) AND state IN ('queued', 'running')`, at, id, org, module)
		if err != nil {
			return err
		}
		changed = tag.RowsAffected() == 1
		return notFound(tx.QueryRow(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1 AND org = $2 AND ($3 = '' OR module = $3)`,
			id, org, module).Scan(taskDest(&t)...))
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
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
UPDATE tasks SET state = 'queued', attempts = 0, run_at = $1, updated_at = $1, finished_at = 0, result = NULL, error = '', code = ''
WHERE id = $2 AND org = $3 AND state IN ('failed', 'cancelled')`, at, id, org)
		if err != nil {
			return err
		}
		changed = tag.RowsAffected() == 1
		return notFound(tx.QueryRow(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1 AND org = $2`, id, org).Scan(taskDest(&t)...))
	})
	if err != nil {
		return nil, false, err
	}
	return &t, changed, nil
}

// TaskPrune implements driver.Backend.
func (d *DB) TaskPrune(ctx context.Context, finishedBefore, ticksBefore int64, limit int) (int, error) {
	var n int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE finished_at > 0 AND finished_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
			finishedBefore, limit)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `DELETE FROM schedule_ticks WHERE tick < $1`, ticksBefore)
		return err
	})
	return int(n), err
}

// ScheduleFire implements driver.Backend: the tick's primary key decides
// which replica fires it (INSERT ... ON CONFLICT DO NOTHING: one insert
// wins, the others see the committed row and insert nothing).
func (d *DB) ScheduleFire(ctx context.Context, t driver.TaskRow, schedule string, tick int64, maxActive int) (fired bool, err error) {
	over := false
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO schedule_ticks (org, module, schedule, tick, task_id) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING`, t.Org, t.Module, schedule, tick, t.ID)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		fired = true
		_, _, err = insertTask(ctx, tx, t, maxActive)
		if errors.Is(err, driver.ErrOverQuota) {
			over = true
			_, err = tx.Exec(ctx, `UPDATE schedule_ticks SET task_id = '' WHERE org = $1 AND module = $2 AND schedule = $3 AND tick = $4`,
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
	rows, err := d.pool.Query(ctx, `SELECT state, count(*) FROM tasks GROUP BY state`)
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
	var oldest *int64
	if err := d.pool.QueryRow(ctx, `SELECT min(run_at) FROM tasks WHERE state = 'queued' AND run_at <= $1`, now).Scan(&oldest); err != nil {
		return nil, 0, err
	}
	if oldest == nil {
		return by, 0, nil
	}
	return by, *oldest, nil
}
