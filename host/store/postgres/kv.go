package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// kvLock locks the scope's kv_usage row (creating it at 0 bytes) and
// returns the bytes the scope stores. Every kv write takes it first: the
// usage triggers would lock the row anyway, after the kv row, and one
// order for every writer is what keeps two writers from deadlocking.
const kvLock = `
INSERT INTO kv_usage AS u (org, module, bytes) VALUES ($1, $2, 0)
ON CONFLICT (org, module) DO UPDATE SET bytes = u.bytes
RETURNING bytes`

const kvUpsert = `
INSERT INTO kv (org, module, key, value, updated_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (org, module, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`

// KVGet implements driver.Backend.
func (d *DB) KVGet(ctx context.Context, org, module, key string) (value []byte, found bool, err error) {
	err = d.pool.QueryRow(ctx, `SELECT value FROM kv WHERE org = $1 AND module = $2 AND key = $3`, org, module, []byte(key)).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return value, true, nil
}

// KVPut implements driver.Backend.
func (d *DB) KVPut(ctx context.Context, org, module, key string, value []byte, at int64) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var inUse int64
		if err := tx.QueryRow(ctx, kvLock, org, module).Scan(&inUse); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, kvUpsert, org, module, []byte(key), value, at)
		return err
	})
}

// KVPutWithin implements driver.Backend: the usage is read under the
// scope's lock (kvLock), and the size of the key being replaced after it,
// by a statement of its own whose snapshot sees every write committed
// before the lock was granted.
func (d *DB) KVPutWithin(ctx context.Context, org, module, key string, value []byte, at, quota int64) (inUse, adds int64, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, kvLock, org, module).Scan(&inUse); err != nil {
			return err
		}
		var old int64
		if err := tx.QueryRow(ctx, `
SELECT coalesce((SELECT octet_length(key) + octet_length(value) FROM kv WHERE org = $1 AND module = $2 AND key = $3), 0)`,
			org, module, []byte(key)).Scan(&old); err != nil {
			return err
		}
		adds = int64(len(key)+len(value)) - old
		if driver.OverQuota(quota, inUse, adds) {
			return driver.ErrOverQuota
		}
		_, err := tx.Exec(ctx, kvUpsert, org, module, []byte(key), value, at)
		return err
	})
	return inUse, adds, err
}

// KVWriteBatch implements driver.KVBatcher. It first locks the kv_usage
// row of every scope the batch writes, in (org, module) order: every
// writer, in this process or another replica, takes these locks before it
// touches a kv row, and one order for all of them is what keeps two
// batches from deadlocking. The writes then run in the batch's order, each
// as its single-write method would run it.
func (d *DB) KVWriteBatch(ctx context.Context, writes []driver.KVWrite) error {
	type scope struct{ org, module string }
	inUse := make(map[scope]int64, 4)
	for i := range writes {
		inUse[scope{writes[i].Org, writes[i].Module}] = 0
	}
	scopes := make([]scope, 0, len(inUse))
	for sc := range inUse {
		scopes = append(scopes, sc)
	}
	slices.SortFunc(scopes, func(a, b scope) int {
		return cmp.Or(strings.Compare(a.org, b.org), strings.Compare(a.module, b.module))
	})
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		for _, sc := range scopes {
			var n int64
			if err := tx.QueryRow(ctx, kvLock, sc.org, sc.module).Scan(&n); err != nil {
				return err
			}
		}
		for i := range writes {
			w := &writes[i]
			w.Err = nil
			if w.Delete {
				tag, err := tx.Exec(ctx, `DELETE FROM kv WHERE org = $1 AND module = $2 AND key = $3`, w.Org, w.Module, []byte(w.Key))
				if err != nil {
					return &driver.WriteError{Index: i, Err: err}
				}
				w.Deleted = tag.RowsAffected() > 0
				continue
			}
			if w.Quota > 0 {
				// The usage as the earlier writes of the batch left it:
				// the triggers keep it, and this transaction sees them.
				if err := tx.QueryRow(ctx, `
SELECT coalesce((SELECT bytes FROM kv_usage WHERE org = $1 AND module = $2), 0),
	coalesce((SELECT octet_length(key) + octet_length(value) FROM kv WHERE org = $1 AND module = $2 AND key = $3), 0)`,
					w.Org, w.Module, []byte(w.Key)).Scan(&w.InUse, &w.Adds); err != nil {
					return &driver.WriteError{Index: i, Err: err}
				}
				w.Adds = int64(len(w.Key)+len(w.Value)) - w.Adds
				if driver.OverQuota(w.Quota, w.InUse, w.Adds) {
					w.Err = driver.ErrOverQuota
					continue
				}
			}
			if _, err := tx.Exec(ctx, kvUpsert, w.Org, w.Module, []byte(w.Key), w.Value, w.At); err != nil {
				return &driver.WriteError{Index: i, Err: err}
			}
		}
		return nil
	})
}

// KVDelete implements driver.Backend.
func (d *DB) KVDelete(ctx context.Context, org, module, key string) (deleted bool, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var inUse int64
		if err := tx.QueryRow(ctx, kvLock, org, module).Scan(&inUse); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM kv WHERE org = $1 AND module = $2 AND key = $3`, org, module, []byte(key))
		deleted = tag.RowsAffected() > 0
		return err
	})
	return deleted, err
}

// KVList implements driver.Backend. Keys are bytea, which compares
// bytewise, and the bounds may be any bytes.
func (d *DB) KVList(ctx context.Context, org, module string, r driver.KeyRange, limit int) ([]string, error) {
	rows, err := d.pool.Query(ctx, `
SELECT key FROM kv WHERE org = $1 AND module = $2
	AND (key > $3 OR ($4 AND key = $3))
	AND (NOT $5 OR key < $6)
ORDER BY key LIMIT $7`, org, module, []byte(r.From), r.FromInclusive, r.HasTo, []byte(r.To), limit)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, min(limit, 64))
	var k []byte
	_, err = pgx.ForEachRow(rows, []any{&k}, func() error {
		keys = append(keys, string(k))
		return nil
	})
	return keys, err
}

// KVUsage implements driver.Backend.
func (d *DB) KVUsage(ctx context.Context, org, module string) (n int64, err error) {
	err = d.pool.QueryRow(ctx, `SELECT coalesce((SELECT bytes FROM kv_usage WHERE org = $1 AND module = $2), 0)`, org, module).Scan(&n)
	return n, err
}
