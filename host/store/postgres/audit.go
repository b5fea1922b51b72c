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

// auditSegmentInsert stores a batch's segments, one statement like
// auditInsert; auditBothInsert stores segments and rows in one statement
// (a data-modifying WITH runs whether or not the query reads it), so a
// batch stays atomic and one round trip.
const (
	auditSegmentInsert = `
INSERT INTO audit_segments (org, time_min, time_max, count, bloom, data)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::integer[], $5::bytea[], $6::bytea[])`
	auditBothInsert = `
WITH segments AS (
	INSERT INTO audit_segments (org, time_min, time_max, count, bloom, data)
	SELECT * FROM unnest($19::text[], $20::bigint[], $21::bigint[], $22::integer[], $23::bytea[], $24::bytea[])
)` + auditInsert
)

// segmentArgs returns segs as the six arrays auditSegmentInsert binds.
func segmentArgs(segs []driver.AuditSegment) []any {
	n := len(segs)
	orgs, mins, maxs, counts := make([]string, n), make([]int64, n), make([]int64, n), make([]int32, n)
	blooms, data := make([][]byte, n), make([][]byte, n)
	for i := range segs {
		g := &segs[i]
		orgs[i], mins[i], maxs[i], counts[i], blooms[i], data[i] = g.Org, g.TimeMin, g.TimeMax, int32(g.Count), g.Bloom, g.Data
	}
	return []any{orgs, mins, maxs, counts, blooms, data}
}

// AuditInsert implements driver.Backend.
func (d *DB) AuditInsert(ctx context.Context, rows []driver.AuditRow, segs []driver.AuditSegment) error {
	if len(rows) == 0 {
		if len(segs) == 0 {
			return nil
		}
		_, err := d.pool.Exec(ctx, auditSegmentInsert, segmentArgs(segs)...)
		return err
	}
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
	args := []any{text[0], times, text[1], text[2], text[3], text[4], text[5], text[6], text[7], text[8],
		text[9], text[10], text[11], text[12], text[13], text[14], durations, text[15]}
	q := auditInsert
	if len(segs) > 0 {
		q, args = auditBothInsert, append(args, segmentArgs(segs)...)
	}
	_, err := d.pool.Exec(ctx, q, args...)
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
		{"correlation_id", f.CorrelationID}, {"module", f.Module}, {"decision", f.Decision}, {"kind", f.Kind}, {"org", f.Org}, {"user_id", f.User},
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
	// Ids compare bytewise (the C collation) as on SQLite and in the
	// store's merge of rows and segments, whatever the database's locale.
	q.WriteString(` ORDER BY time DESC, id COLLATE "C" DESC LIMIT ` + arg(f.Limit))
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

// AuditSegments implements driver.Backend.
func (d *DB) AuditSegments(ctx context.Context, f driver.AuditSegmentFilter) ([]driver.AuditSegment, error) {
	var q strings.Builder
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	q.WriteString(`SELECT id, org, time_min, time_max, count, bloom FROM audit_segments WHERE true`)
	if f.Org != "" {
		q.WriteString(" AND org = " + arg(f.Org))
	}
	if f.HasSince {
		q.WriteString(" AND time_max >= " + arg(f.Since))
	}
	if f.HasUntil {
		q.WriteString(" AND time_min < " + arg(f.Until))
	}
	if f.HasBefore {
		q.WriteString(" AND (time_max, id) < (" + arg(f.BeforeTime) + ", " + arg(f.BeforeID) + ")")
	}
	q.WriteString(" ORDER BY time_max DESC, id DESC LIMIT " + arg(f.Limit))
	rows, err := d.pool.Query(ctx, q.String(), args...)
	if err != nil {
		return nil, err
	}
	var (
		out   []driver.AuditSegment
		g     driver.AuditSegment
		count int32
	)
	_, err = pgx.ForEachRow(rows, []any{&g.ID, &g.Org, &g.TimeMin, &g.TimeMax, &count, &g.Bloom}, func() error {
		g.Count = int(count)
		out = append(out, g)
		g.Bloom = nil // ForEachRow scans into the same variables
		return nil
	})
	return out, err
}

// AuditSegmentData implements driver.Backend.
func (d *DB) AuditSegmentData(ctx context.Context, ids []int64) (map[int64][]byte, error) {
	out := make(map[int64][]byte, len(ids))
	rows, err := d.pool.Query(ctx, `SELECT id, data FROM audit_segments WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	var (
		id   int64
		data []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &data}, func() error {
		out[id], data = data, nil
		return nil
	})
	return out, err
}

// AuditPrune implements driver.AuditPruner. The rows of a batch are
// taken FOR UPDATE SKIP LOCKED, so replicas pruning at once each delete
// rows the other has not taken, and none waits for another's batch; each
// batch is its own short transaction, so a large table is never locked
// for long.
func (d *DB) AuditPrune(ctx context.Context, before int64, limit int) (events, segments, packed int64, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM audit_events WHERE id IN (
	SELECT id FROM audit_events WHERE time < $1 ORDER BY time LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
		if err != nil {
			return err
		}
		events = tag.RowsAffected()
		return tx.QueryRow(ctx, `
WITH gone AS (
	DELETE FROM audit_segments WHERE id IN (
		SELECT id FROM audit_segments WHERE time_max < $1 ORDER BY time_max LIMIT $2 FOR UPDATE SKIP LOCKED)
	RETURNING count)
SELECT count(*), coalesce(sum(count), 0) FROM gone`, before, limit).Scan(&segments, &packed)
	})
	return events, segments, packed, err
}

var _ driver.AuditPruner = (*DB)(nil)
