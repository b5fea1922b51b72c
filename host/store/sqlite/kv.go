package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/host/store/driver"
)

const kvGet = `SELECT value FROM kv WHERE org = ? AND module = ? AND key = ?`

// kvUpsert stores a key's value, replacing any value it had. coalesce
// guards the empty blob the same way in SQL: an empty value is a value,
// never NULL.
const kvUpsert = `
INSERT INTO kv (org, module, key, value, updated_at)
VALUES (?, ?, ?, coalesce(?, x''), ?)
ON CONFLICT (org, module, key) DO UPDATE SET
	value = excluded.value,
	updated_at = excluded.updated_at`

// kvQuotaCheck reads, in a put's transaction, the bytes the scope stores
// (kept by the kv_usage triggers) and the bytes of the key being replaced.
const kvQuotaCheck = `
SELECT
	coalesce((SELECT bytes FROM kv_usage WHERE org = ?1 AND module = ?2), 0),
	coalesce((SELECT octet_length(key) + length(value) FROM kv WHERE org = ?1 AND module = ?2 AND key = ?3), 0)`

// KVGet implements driver.Backend.
//
// The read is one primary-key lookup of a bounded key and value, and a
// reader in WAL mode waits for no writer (busy_timeout bounds the rare
// wait on the WAL index), so it runs without the caller's cancellation:
// with a context that can be cancelled, database/sql and the driver each
// start a goroutine per statement to watch it, and waking them costs the
// read more than the read itself (measured: 41 → 23 µs for an
// interpreted plugin's first read of a call, server's greet bench).
func (d *DB) KVGet(ctx context.Context, org, module, key string) (value []byte, found bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	ctx = context.WithoutCancel(ctx)
	st, err := d.prepared(ctx, d.r, kvGet)
	if err != nil {
		return nil, false, err
	}
	err = st.QueryRowContext(ctx, org, module, key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return value, true, nil
}

// KVPut implements driver.Backend.
func (d *DB) KVPut(ctx context.Context, org, module, key string, value []byte, at int64) error {
	st, err := d.prepared(ctx, d.w, kvUpsert)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, org, module, key, value, at)
	return err
}

// KVPutWithin implements driver.Backend: the check and the write run in
// one IMMEDIATE transaction, which holds the file's write lock.
func (d *DB) KVPutWithin(ctx context.Context, org, module, key string, value []byte, at, quota int64) (_, _ int64, err error) {
	// Prepared before the transaction: the writer pool's one connection
	// is the transaction's until it ends, so preparing inside would wait
	// for itself.
	check, err := d.prepared(ctx, d.w, kvQuotaCheck)
	if err != nil {
		return 0, 0, err
	}
	upsert, err := d.prepared(ctx, d.w, kvUpsert)
	if err != nil {
		return 0, 0, err
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	// in use: the scope's bytes; old: those of the key and value being
	// replaced, if any. One variable, so one allocation for Scan.
	var read [2]int64
	if err := tx.StmtContext(ctx, check).QueryRowContext(ctx, org, module, key).Scan(&read[0], &read[1]); err != nil {
		return 0, 0, err
	}
	inUse, adds := read[0], int64(len(key)+len(value))-read[1]
	if driver.OverQuota(quota, inUse, adds) {
		return inUse, adds, driver.ErrOverQuota
	}
	if _, err := tx.StmtContext(ctx, upsert).ExecContext(ctx, org, module, key, value, at); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	return inUse, adds, nil
}

const kvDelete = `DELETE FROM kv WHERE org = ? AND module = ? AND key = ?`

// KVWriteBatch implements driver.KVBatcher: one IMMEDIATE transaction for
// the batch, so one commit (one append of the dirtied pages to the WAL)
// for all of its writes. SQLite undoes a failed statement alone, but the
// batch is rolled back all the same, as the contract says.
func (d *DB) KVWriteBatch(ctx context.Context, writes []driver.KVWrite) (err error) {
	// Prepared before the transaction (see KVPutWithin).
	var st [3]*sql.Stmt
	for i, q := range [...]string{kvQuotaCheck, kvUpsert, kvDelete} {
		if st[i], err = d.prepared(ctx, d.w, q); err != nil {
			return err
		}
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
	check, upsert, del := tx.StmtContext(ctx, st[0]), tx.StmtContext(ctx, st[1]), tx.StmtContext(ctx, st[2])
	var read [2]int64
	for i := range writes {
		w := &writes[i]
		w.Err = nil
		if w.Delete {
			res, err := del.ExecContext(ctx, w.Org, w.Module, w.Key)
			if err != nil {
				return &driver.WriteError{Index: i, Err: err}
			}
			n, err := res.RowsAffected()
			if err != nil {
				return &driver.WriteError{Index: i, Err: err}
			}
			w.Deleted = n > 0
			continue
		}
		if w.Quota > 0 {
			if err := check.QueryRowContext(ctx, w.Org, w.Module, w.Key).Scan(&read[0], &read[1]); err != nil {
				return &driver.WriteError{Index: i, Err: err}
			}
			w.InUse, w.Adds = read[0], int64(len(w.Key)+len(w.Value))-read[1]
			if driver.OverQuota(w.Quota, w.InUse, w.Adds) {
				w.Err = driver.ErrOverQuota
				continue
			}
		}
		if _, err := upsert.ExecContext(ctx, w.Org, w.Module, w.Key, w.Value, w.At); err != nil {
			return &driver.WriteError{Index: i, Err: err}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// KVDelete implements driver.Backend.
func (d *DB) KVDelete(ctx context.Context, org, module, key string) (bool, error) {
	res, err := d.w.ExecContext(ctx, kvDelete, org, module, key)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// KVList implements driver.Backend. The key column's BINARY collation
// (memcmp) is the bytewise order.
func (d *DB) KVList(ctx context.Context, org, module string, r driver.KeyRange, limit int) ([]string, error) {
	var q strings.Builder
	args := []any{org, module, r.From}
	q.WriteString(`SELECT key FROM kv WHERE org = ? AND module = ?`)
	if r.FromInclusive {
		q.WriteString(` AND key >= ?`)
	} else {
		q.WriteString(` AND key > ?`)
	}
	if r.HasTo {
		q.WriteString(` AND key < ?`)
		args = append(args, r.To)
	}
	q.WriteString(` ORDER BY key LIMIT ?`)
	args = append(args, limit)
	rows, err := d.r.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := make([]string, 0, min(limit, 64))
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// KVUsage implements driver.Backend.
func (d *DB) KVUsage(ctx context.Context, org, module string) (n int64, err error) {
	err = d.r.QueryRowContext(ctx,
		`SELECT coalesce((SELECT bytes FROM kv_usage WHERE org = ? AND module = ?), 0)`, org, module).Scan(&n)
	return n, err
}
