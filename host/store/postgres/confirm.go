package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
)

const confirmationColumns = `token_hash, org, user_id, module, action, input, input_sha256, summary, created_at, expires_at, coalesce(used_at, 0), binding, roles, decided_by, decision`

func confirmationDest(c *driver.ConfirmationRow) []any {
	return []any{&c.TokenHash, &c.Org, &c.User, &c.Module, &c.Action, &c.Input, &c.InputSHA256, &c.Summary, &c.CreatedAt, &c.ExpiresAt, &c.UsedAt, &c.Binding, &c.Roles, &c.DecidedBy, &c.Decision}
}

// ConfirmationCreate implements driver.Backend.
func (d *DB) ConfirmationCreate(ctx context.Context, c driver.ConfirmationRow, sweepBefore int64, sweepLimit int) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
DELETE FROM confirmations WHERE token_hash IN (
	SELECT token_hash FROM confirmations WHERE expires_at < $1
	UNION ALL
	SELECT token_hash FROM confirmations WHERE used_at < $1
	LIMIT $2)`, sweepBefore, sweepLimit); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
INSERT INTO confirmations (token_hash, org, user_id, module, action, input, input_sha256, summary, created_at, expires_at, binding, roles)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (token_hash) DO NOTHING`,
			c.TokenHash, c.Org, c.User, c.Module, c.Action, c.Input, c.InputSHA256, c.Summary, c.CreatedAt, c.ExpiresAt, c.Binding, c.Roles)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return driver.ErrConflict
		}
		return nil
	})
}

// ConfirmationClaim implements driver.Backend: the row is read FOR
// UPDATE, so a concurrent claim on any replica waits, then sees it used.
func (d *DB) ConfirmationClaim(ctx context.Context, tokenHash string, usedAt int64, check driver.ConfirmationCheck) (*driver.ConfirmationRow, error) {
	var c driver.ConfirmationRow
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT `+confirmationColumns+` FROM confirmations WHERE token_hash = $1 FOR UPDATE`, tokenHash).Scan(confirmationDest(&c)...)
		if err != nil {
			return notFound(err)
		}
		if err := check(&c); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE confirmations SET used_at = $1, decided_by = $2, decision = $3 WHERE token_hash = $4 AND used_at IS NULL`, usedAt, c.DecidedBy, c.Decision, tokenHash)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return driver.ErrConflict
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.UsedAt = usedAt
	return &c, nil
}

// ConfirmationsPending implements driver.Backend.
func (d *DB) ConfirmationsPending(ctx context.Context, org string, now int64, limit int) ([]driver.ConfirmationRow, error) {
	rows, err := d.pool.Query(ctx, `
SELECT `+confirmationColumns+` FROM confirmations
WHERE org = $1 AND used_at IS NULL AND expires_at > $2
ORDER BY created_at DESC, token_hash DESC LIMIT $3`, org, now, limit)
	if err != nil {
		return nil, err
	}
	out := []driver.ConfirmationRow{}
	var c driver.ConfirmationRow
	_, err = pgx.ForEachRow(rows, confirmationDest(&c), func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// ConfirmationGet implements driver.Backend.
func (d *DB) ConfirmationGet(ctx context.Context, tokenHash string) (*driver.ConfirmationRow, error) {
	var c driver.ConfirmationRow
	if err := d.pool.QueryRow(ctx, `SELECT `+confirmationColumns+` FROM confirmations WHERE token_hash = $1`, tokenHash).Scan(confirmationDest(&c)...); err != nil {
		return nil, notFound(err)
	}
	return &c, nil
}
