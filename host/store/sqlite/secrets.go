package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// SecretBackend is the secrets family's storage (driver.Families).
var _ driver.SecretBackend = (*DB)(nil)

// SecretPut implements driver.SecretBackend. The writer's transactions
// begin IMMEDIATE, so the count and the insert see no other writer.
func (d *DB) SecretPut(ctx context.Context, r driver.SecretRow, maxPerOrg int) (created bool, err error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var exists int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM secrets WHERE org = ? AND name = ?`, r.Org, r.Name).Scan(&exists); err != nil {
		return false, err
	}
	if exists == 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM secrets WHERE org = ?`, r.Org).Scan(&n); err != nil {
			return false, err
		}
		if n >= maxPerOrg {
			return false, driver.ErrOverQuota
		}
	}
	_, err = tx.ExecContext(ctx, `
INSERT INTO secrets (org, name, ciphertext, nonce, key_id, created_at, updated_at, created_by, updated_by)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (org, name) DO UPDATE SET ciphertext = excluded.ciphertext, nonce = excluded.nonce, key_id = excluded.key_id,
	updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
		r.Org, r.Name, r.Ciphertext, r.Nonce, r.KeyID, r.CreatedAt, r.UpdatedAt, r.CreatedBy, r.UpdatedBy)
	if err != nil {
		return false, err
	}
	return exists == 0, tx.Commit()
}

const secretColumns = `org, name, ciphertext, nonce, key_id, created_at, updated_at, created_by, updated_by`

// SecretGet implements driver.SecretBackend.
func (d *DB) SecretGet(ctx context.Context, org, name string) (*driver.SecretRow, error) {
	var r driver.SecretRow
	err := d.r.QueryRowContext(ctx, `SELECT `+secretColumns+` FROM secrets WHERE org = ? AND name = ?`, org, name).
		Scan(&r.Org, &r.Name, &r.Ciphertext, &r.Nonce, &r.KeyID, &r.CreatedAt, &r.UpdatedAt, &r.CreatedBy, &r.UpdatedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// Secrets implements driver.SecretBackend.
func (d *DB) Secrets(ctx context.Context, org string) ([]driver.SecretRow, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT org, name, key_id, created_at, updated_at, created_by, updated_by FROM secrets WHERE org = ? ORDER BY name`, org)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []driver.SecretRow{}
	for rows.Next() {
		var r driver.SecretRow
		if err := rows.Scan(&r.Org, &r.Name, &r.KeyID, &r.CreatedAt, &r.UpdatedAt, &r.CreatedBy, &r.UpdatedBy); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// SecretDelete implements driver.SecretBackend.
func (d *DB) SecretDelete(ctx context.Context, org, name string) error {
	res, err := d.w.ExecContext(ctx, `DELETE FROM secrets WHERE org = ? AND name = ?`, org, name)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return driver.ErrNotFound
	}
	return nil
}

// SecretsNotUnder implements driver.SecretBackend.
func (d *DB) SecretsNotUnder(ctx context.Context, keyID, afterOrg, afterName string, limit int) ([]driver.SecretRow, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT `+secretColumns+` FROM secrets WHERE key_id <> ? AND (org, name) > (?, ?) ORDER BY org, name LIMIT ?`,
		keyID, afterOrg, afterName, limit)
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
	res, err := d.w.ExecContext(ctx, `UPDATE secrets SET ciphertext = ?, nonce = ?, key_id = ? WHERE org = ? AND name = ? AND key_id = ? AND nonce = ?`,
		r.Ciphertext, r.Nonce, r.KeyID, r.Org, r.Name, oldKeyID, oldNonce)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return driver.ErrConflict
	}
	return nil
}
