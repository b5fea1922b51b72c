package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// SecretBackend is the secrets family's storage (driver.Families).
var _ driver.SecretBackend = (*DB)(nil)

// secretsLock is the first key of the advisory lock that serializes
// SecretPut per organization across replicas ('sec' in ASCII); the second
// is hashtext(org).
const secretsLock = 0x736563

// SecretPut implements driver.SecretBackend: under a transaction-scoped
// advisory lock of the organization, so that the count and the insert of
// two replicas cannot interleave.
func (d *DB) SecretPut(ctx context.Context, r driver.SecretRow, maxPerOrg int) (created bool, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(secretsLock), r.Org); err != nil {
			return err
		}
		var exists, n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE name = $2), count(*) FROM secrets WHERE org = $1`, r.Org, r.Name).Scan(&exists, &n); err != nil {
			return err
		}
		if exists == 0 && n >= maxPerOrg {
			return driver.ErrOverQuota
		}
		created = exists == 0
		_, err := tx.Exec(ctx, `
INSERT INTO secrets (org, name, ciphertext, nonce, key_id, created_at, updated_at, created_by, updated_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (org, name) DO UPDATE SET ciphertext = excluded.ciphertext, nonce = excluded.nonce, key_id = excluded.key_id,
	updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
			r.Org, r.Name, r.Ciphertext, r.Nonce, r.KeyID, r.CreatedAt, r.UpdatedAt, r.CreatedBy, r.UpdatedBy)
		return err
	})
	return created, err
}

// SecretGet implements driver.SecretBackend.
func (d *DB) SecretGet(ctx context.Context, org, name string) (*driver.SecretRow, error) {
	var r driver.SecretRow
	err := d.pool.QueryRow(ctx, `SELECT org, name, ciphertext, nonce, key_id, created_at, updated_at, created_by, updated_by FROM secrets WHERE org = $1 AND name = $2`, org, name).
		Scan(&r.Org, &r.Name, &r.Ciphertext, &r.Nonce, &r.KeyID, &r.CreatedAt, &r.UpdatedAt, &r.CreatedBy, &r.UpdatedBy)
	if err != nil {
		return nil, notFound(err)
	}
	return &r, nil
}

// Secrets implements driver.SecretBackend.
func (d *DB) Secrets(ctx context.Context, org string) ([]driver.SecretRow, error) {
	rows, err := d.pool.Query(ctx, `SELECT org, name, key_id, created_at, updated_at, created_by, updated_by FROM secrets WHERE org = $1 ORDER BY name COLLATE "C"`, org)
	if err != nil {
		return nil, err
	}
	out := []driver.SecretRow{}
	var r driver.SecretRow
	_, err = pgx.ForEachRow(rows, []any{&r.Org, &r.Name, &r.KeyID, &r.CreatedAt, &r.UpdatedAt, &r.CreatedBy, &r.UpdatedBy}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// SecretDelete implements driver.SecretBackend.
func (d *DB) SecretDelete(ctx context.Context, org, name string) error {
	tag, err := d.pool.Exec(ctx, `DELETE FROM secrets WHERE org = $1 AND name = $2`, org, name)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrNotFound
	}
	return nil
}

// SecretsNotUnder implements driver.SecretBackend, in the byte order of
// org and name (COLLATE "C"), so that the pages' bound means what Go's
// string order means.
func (d *DB) SecretsNotUnder(ctx context.Context, keyID, afterOrg, afterName string, limit int) ([]driver.SecretRow, error) {
	rows, err := d.pool.Query(ctx, `SELECT org, name, ciphertext, nonce, key_id, created_at, updated_at, created_by, updated_by FROM secrets
WHERE key_id <> $1 AND (org COLLATE "C", name COLLATE "C") > ($2 COLLATE "C", $3 COLLATE "C")
ORDER BY org COLLATE "C", name COLLATE "C" LIMIT $4`, keyID, afterOrg, afterName, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []driver.SecretRow{}
	for rows.Next() {
		var r driver.SecretRow
		if err := rows.Scan(&r.Org, &r.Name, &r.Ciphertext, &r.Nonce, &r.KeyID, &r.CreatedAt, &r.UpdatedAt, &r.CreatedBy, &r.UpdatedBy); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// SecretReseal implements driver.SecretBackend.
func (d *DB) SecretReseal(ctx context.Context, r driver.SecretRow, oldKeyID string, oldNonce []byte) error {
	tag, err := d.pool.Exec(ctx, `UPDATE secrets SET ciphertext = $1, nonce = $2, key_id = $3 WHERE org = $4 AND name = $5 AND key_id = $6 AND nonce = $7`,
		r.Ciphertext, r.Nonce, r.KeyID, r.Org, r.Name, oldKeyID, oldNonce)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrConflict
	}
	return nil
}
