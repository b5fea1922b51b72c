package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/moat-sandbox/moat/host/store/driver"
)

const confirmationColumns = `token_hash, org, user_id, module, action, input, input_sha256, summary, created_at, expires_at, used_at, binding, roles, decided_by, decision`

func scanConfirmation(r rowScanner) (*driver.ConfirmationRow, error) {
	var (
		c    driver.ConfirmationRow
		used sql.NullInt64
	)
	if err := r.Scan(&c.TokenHash, &c.Org, &c.User, &c.Module, &c.Action, &c.Input, &c.InputSHA256, &c.Summary, &c.CreatedAt, &c.ExpiresAt, &used, &c.Binding, &c.Roles, &c.DecidedBy, &c.Decision); err != nil {
		return nil, err
	}
	c.UsedAt = used.Int64
	return &c, nil
}

// ConfirmationCreate implements driver.Backend.
func (d *DB) ConfirmationCreate(ctx context.Context, c driver.ConfirmationRow, sweepBefore int64, sweepLimit int) error {
	return d.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
DELETE FROM confirmations WHERE token_hash IN (
	SELECT token_hash FROM confirmations WHERE expires_at < ?1
	UNION ALL
	SELECT token_hash FROM confirmations WHERE used_at < ?1
	LIMIT ?2)`, sweepBefore, sweepLimit); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
INSERT INTO confirmations (token_hash, org, user_id, module, action, input, input_sha256, summary, created_at, expires_at, binding, roles)
VALUES (?, ?, ?, ?, ?, coalesce(?, x''), ?, ?, ?, ?, ?, ?)
ON CONFLICT (token_hash) DO NOTHING`,
			c.TokenHash, c.Org, c.User, c.Module, c.Action, c.Input, c.InputSHA256, c.Summary, c.CreatedAt, c.ExpiresAt, c.Binding, c.Roles)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return driver.ErrConflict
		}
		return nil
	})
}

// ConfirmationClaim implements driver.Backend. The IMMEDIATE transaction
// holds the file's write lock from the read to the update, so no other
// claim, in this process or another, sees the row in between; the update
// still requires used_at IS NULL.
func (d *DB) ConfirmationClaim(ctx context.Context, tokenHash string, usedAt int64, check driver.ConfirmationCheck) (c *driver.ConfirmationRow, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		c, err = scanConfirmation(tx.QueryRowContext(ctx, `SELECT `+confirmationColumns+` FROM confirmations WHERE token_hash = ?`, tokenHash))
		if errors.Is(err, sql.ErrNoRows) {
			return driver.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := check(c); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE confirmations SET used_at = ?, decided_by = ?, decision = ? WHERE token_hash = ? AND used_at IS NULL`, usedAt, c.DecidedBy, c.Decision, tokenHash)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return driver.ErrConflict
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.UsedAt = usedAt
	return c, nil
}

// ConfirmationsPending implements driver.Backend.
func (d *DB) ConfirmationsPending(ctx context.Context, org string, now int64, limit int) ([]driver.ConfirmationRow, error) {
	rows, err := d.r.QueryContext(ctx, `
SELECT `+confirmationColumns+` FROM confirmations
WHERE org = ? AND used_at IS NULL AND expires_at > ?
ORDER BY created_at DESC, token_hash DESC LIMIT ?`, org, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []driver.ConfirmationRow{}
	for rows.Next() {
		c, err := scanConfirmation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *c)
	}
	return out, rows.Err()
}

// ConfirmationGet implements driver.Backend.
func (d *DB) ConfirmationGet(ctx context.Context, tokenHash string) (*driver.ConfirmationRow, error) {
	c, err := scanConfirmation(d.r.QueryRowContext(ctx, `SELECT `+confirmationColumns+` FROM confirmations WHERE token_hash = ?`, tokenHash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, driver.ErrNotFound
	}
	return c, err
}
