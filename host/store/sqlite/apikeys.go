package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/moat-sandbox/moat/host/store/driver"
)

const apiKeyColumns = `id, hash, org, user_id, roles, name, created_at, revoked_at, scopes, expires_at, prev_hash, prev_until, last_used_at, last_used_addr`

func scanAPIKey(r rowScanner) (*driver.APIKeyRow, error) {
	var (
		k       driver.APIKeyRow
		revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.Hash, &k.Org, &k.User, &k.Roles, &k.Name, &k.CreatedAt, &revoked, &k.Scopes, &k.ExpiresAt, &k.PrevHash, &k.PrevUntil, &k.LastUsedAt, &k.LastUsedAddr); err != nil {
		return nil, err
	}
	k.RevokedAt = revoked.Int64
	return &k, nil
}

// APIKeyCreate implements driver.Backend.
func (d *DB) APIKeyCreate(ctx context.Context, k driver.APIKeyRow) error {
	_, err := d.w.ExecContext(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, '', 0, 0, '')`,
		k.ID, k.Hash, k.Org, k.User, k.Roles, k.Name, k.CreatedAt, k.Scopes, k.ExpiresAt)
	if isConstraint(err) {
		return fmt.Errorf("%w: %w", driver.ErrConflict, err)
	}
	return err
}

// APIKeyByHash implements driver.Backend.
func (d *DB) APIKeyByHash(ctx context.Context, hash string) (*driver.APIKeyRow, error) {
	k, err := scanAPIKey(d.r.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = ? OR prev_hash = ?`, hash, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	return k, err
}

// APIKeys implements driver.Backend.
func (d *DB) APIKeys(ctx context.Context, org string) ([]driver.APIKeyRow, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE ? = '' OR org = ? ORDER BY created_at, id`, org, org)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []driver.APIKeyRow{}
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *k)
	}
	return out, rows.Err()
}

// APIKeyRevoke implements driver.Backend.
func (d *DB) APIKeyRevoke(ctx context.Context, id string, at int64) error {
	res, err := d.w.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, at, id)
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

// APIKeyByID implements driver.Backend.
func (d *DB) APIKeyByID(ctx context.Context, id string) (*driver.APIKeyRow, error) {
	k, err := scanAPIKey(d.r.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	return k, err
}

// APIKeyRotate implements driver.Backend.
func (d *DB) APIKeyRotate(ctx context.Context, id, oldHash, newHash string, prevUntil int64) error {
	res, err := d.w.ExecContext(ctx, `UPDATE api_keys SET hash = ?, prev_hash = ?, prev_until = ? WHERE id = ? AND hash = ? AND revoked_at IS NULL`,
		newHash, oldHash, prevUntil, id, oldHash)
	if isConstraint(err) {
		return fmt.Errorf("%w: %w", driver.ErrConflict, err)
	}
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

// APIKeyTouch implements driver.Backend.
func (d *DB) APIKeyTouch(ctx context.Context, id string, at int64, addr string) error {
	_, err := d.w.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ?, last_used_addr = ? WHERE id = ? AND last_used_at < ?`, at, addr, id, at)
	return err
}
