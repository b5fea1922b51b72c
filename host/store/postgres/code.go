package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// codeLock is the advisory lock every CodePut holds for its transaction
// ('moat' 'cod' in ASCII): puts are rare (one per compilation), and
// serializing them is what keeps the budget across replicas.
const codeLock = 0x6d6f6174_636f64

// CodePut implements driver.Backend.
func (d *DB) CodePut(ctx context.Context, r driver.CodeRow, plan driver.CodePlan) (evicted []string, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		evicted = nil
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(codeLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO code_artifacts (key, mac, stored_at, used_at, data) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (key) DO UPDATE SET mac = excluded.mac, stored_at = excluded.stored_at, used_at = excluded.used_at, data = excluded.data`,
			r.Key, r.MAC, r.StoredAt, r.UsedAt, r.Data); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT key, octet_length(data)::bigint FROM code_artifacts ORDER BY used_at DESC, key COLLATE "C"`)
		if err != nil {
			return err
		}
		var all []driver.CodeSize
		var c driver.CodeSize
		if _, err := pgx.ForEachRow(rows, []any{&c.Key, &c.Size}, func() error {
			all = append(all, c)
			return nil
		}); err != nil {
			return err
		}
		drop := plan(all)
		if len(drop) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM code_artifacts WHERE key = ANY($1)`, drop); err != nil {
				return err
			}
		}
		evicted = drop
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evicted, nil
}

// CodeGet implements driver.Backend in one statement: octet_length reads
// the size from the value's header without fetching it, and the data is
// returned only within maxBytes.
func (d *DB) CodeGet(ctx context.Context, key string, maxBytes, at int64) (*driver.CodeRow, error) {
	r := driver.CodeRow{Key: key}
	err := d.pool.QueryRow(ctx, `
UPDATE code_artifacts SET used_at = greatest(used_at, $3) WHERE key = $1
RETURNING octet_length(data)::bigint, CASE WHEN octet_length(data) <= $2 THEN data END, mac, stored_at, used_at`,
		key, maxBytes, at).Scan(&r.Size, &r.Data, &r.MAC, &r.StoredAt, &r.UsedAt)
	if err != nil {
		return nil, notFound(err)
	}
	return &r, nil
}

// CodeUsage implements driver.Backend.
func (d *DB) CodeUsage(ctx context.Context) (bytes int64, n int, err error) {
	err = d.pool.QueryRow(ctx, `SELECT coalesce(sum(octet_length(data)), 0)::bigint, count(*) FROM code_artifacts`).Scan(&bytes, &n)
	return bytes, n, err
}
