package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// CodePut implements driver.Backend. The IMMEDIATE transaction holds the
// file's write lock, which serializes it with every other put.
func (d *DB) CodePut(ctx context.Context, r driver.CodeRow, plan driver.CodePlan) (evicted []string, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
INSERT INTO code_artifacts (key, mac, stored_at, used_at, data) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET mac = excluded.mac, stored_at = excluded.stored_at, used_at = excluded.used_at, data = excluded.data`,
			r.Key, r.MAC, r.StoredAt, r.UsedAt, r.Data); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT key, length(data) FROM code_artifacts ORDER BY used_at DESC, key`)
		if err != nil {
			return err
		}
		var all []driver.CodeSize
		for rows.Next() {
			var c driver.CodeSize
			if err := rows.Scan(&c.Key, &c.Size); err != nil {
				rows.Close()
				return err
			}
			all = append(all, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range plan(all) {
			if _, err := tx.ExecContext(ctx, `DELETE FROM code_artifacts WHERE key = ?`, k); err != nil {
				return err
			}
			evicted = append(evicted, k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evicted, nil
}

// CodeGet implements driver.Backend: the read on the read pool, so a
// large artifact is not read under the write lock, then the used_at
// update, which is only a hint for eviction.
func (d *DB) CodeGet(ctx context.Context, key string, maxBytes, at int64) (*driver.CodeRow, error) {
	r := driver.CodeRow{Key: key}
	err := d.r.QueryRowContext(ctx, `
SELECT length(data), CASE WHEN length(data) <= ? THEN data END, mac, stored_at, used_at FROM code_artifacts WHERE key = ?`,
		maxBytes, key).Scan(&r.Size, &r.Data, &r.MAC, &r.StoredAt, &r.UsedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if _, err := d.w.ExecContext(ctx, `UPDATE code_artifacts SET used_at = ? WHERE key = ? AND used_at < ?`, at, key, at); err != nil {
		return nil, err
	}
	r.UsedAt = max(r.UsedAt, at)
	return &r, nil
}

// CodeUsage implements driver.Backend.
func (d *DB) CodeUsage(ctx context.Context) (bytes int64, n int, err error) {
	err = d.r.QueryRowContext(ctx, `SELECT coalesce(sum(length(data)), 0), count(*) FROM code_artifacts`).Scan(&bytes, &n)
	return bytes, n, err
}
