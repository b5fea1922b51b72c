package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

const apiKeyColumns = `id, hash, org, user_id, roles, name, created_at, coalesce(revoked_at, 0), scopes, expires_at, prev_hash, prev_until, last_used_at, last_used_addr`

func apiKeyDest(k *driver.APIKeyRow) []any {
	return []any{&k.ID, &k.Hash, &k.Org, &k.User, &k.Roles, &k.Name, &k.CreatedAt, &k.RevokedAt, &k.Scopes, &k.ExpiresAt, &k.PrevHash, &k.PrevUntil, &k.LastUsedAt, &k.LastUsedAddr}
}

// APIKeyCreate implements driver.Backend.
func (d *DB) APIKeyCreate(ctx context.Context, k driver.APIKeyRow) error {
	_, err := d.pool.Exec(ctx, `INSERT INTO api_keys (id, hash, org, user_id, roles, name, created_at, scopes, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		k.ID, k.Hash, k.Org, k.User, k.Roles, k.Name, k.CreatedAt, k.Scopes, k.ExpiresAt)
	return conflict(err)
}

// APIKeyByHash implements driver.Backend.
func (d *DB) APIKeyByHash(ctx context.Context, hash string) (*driver.APIKeyRow, error) {
	var k driver.APIKeyRow
	if err := d.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = $1 OR prev_hash = $1`, hash).Scan(apiKeyDest(&k)...); err != nil {
		return nil, notFound(err)
	}
	return &k, nil
}

// APIKeys implements driver.Backend.
func (d *DB) APIKeys(ctx context.Context, org string) ([]driver.APIKeyRow, error) {
	rows, err := d.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE $1 = '' OR org = $1 ORDER BY created_at, id`, org)
	if err != nil {
		return nil, err
	}
	out := []driver.APIKeyRow{}
	var k driver.APIKeyRow
	_, err = pgx.ForEachRow(rows, apiKeyDest(&k), func() error {
		out = append(out, k)
		return nil
	})
	return out, err
}

// APIKeyRevoke implements driver.Backend.
func (d *DB) APIKeyRevoke(ctx context.Context, id string, at int64) error {
	tag, err := d.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2`, at, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrNotFound
	}
	return nil
}

// APIKeyByID implements driver.Backend.
func (d *DB) APIKeyByID(ctx context.Context, id string) (*driver.APIKeyRow, error) {
	var k driver.APIKeyRow
	if err := d.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`, id).Scan(apiKeyDest(&k)...); err != nil {
		return nil, notFound(err)
	}
	return &k, nil
}

// APIKeyRotate implements driver.Backend.
func (d *DB) APIKeyRotate(ctx context.Context, id, oldHash, newHash string, prevUntil int64) error {
	tag, err := d.pool.Exec(ctx, `UPDATE api_keys SET hash = $1, prev_hash = $2, prev_until = $3 WHERE id = $4 AND hash = $2 AND revoked_at IS NULL`,
		newHash, oldHash, prevUntil, id)
	if err != nil {
		return conflict(err)
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrConflict
	}
	return nil
}

// APIKeyTouch implements driver.Backend.
func (d *DB) APIKeyTouch(ctx context.Context, id string, at int64, addr string) error {
	_, err := d.pool.Exec(ctx, `UPDATE api_keys SET last_used_at = $1, last_used_addr = $2 WHERE id = $3 AND last_used_at < $1`, at, addr, id)
	return err
}
