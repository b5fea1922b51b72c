package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

const apiKeyColumns = `id, hash, org, user_id, roles, name, created_at, coalesce(revoked_at, 0)`

func apiKeyDest(k *driver.APIKeyRow) []any {
	return []any{&k.ID, &k.Hash, &k.Org, &k.User, &k.Roles, &k.Name, &k.CreatedAt, &k.RevokedAt}
}

// APIKeyCreate implements driver.Backend.
func (d *DB) APIKeyCreate(ctx context.Context, k driver.APIKeyRow) error {
	_, err := d.pool.Exec(ctx, `INSERT INTO api_keys (id, hash, org, user_id, roles, name, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		k.ID, k.Hash, k.Org, k.User, k.Roles, k.Name, k.CreatedAt)
	return conflict(err)
}

// APIKeyByHash implements driver.Backend.
func (d *DB) APIKeyByHash(ctx context.Context, hash string) (*driver.APIKeyRow, error) {
	var k driver.APIKeyRow
	if err := d.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = $1`, hash).Scan(apiKeyDest(&k)...); err != nil {
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
