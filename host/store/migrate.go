package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migration is one step of the schema. Migrations are applied in the order
// of the migrations slice; the schema version of a file (PRAGMA
// user_version) is the number of migrations applied to it. Append new
// migrations; never edit or reorder one that has shipped.
type migration struct {
	name string
	sql  string
}

var migrations = []migration{
	{
		name: "kv",
		// key is compared with BINARY collation (memcmp), which the ordering
		// and prefix ranges of KVList rely on. STRICT makes SQLite refuse a
		// value of the wrong type instead of converting it.
		sql: `
CREATE TABLE kv (
	org        TEXT    NOT NULL,
	module     TEXT    NOT NULL,
	key        TEXT    NOT NULL COLLATE BINARY,
	value      BLOB    NOT NULL,
	updated_at INTEGER NOT NULL, -- unix milliseconds
	PRIMARY KEY (org, module, key)
) STRICT, WITHOUT ROWID;
`,
	},
}

// migrate brings the schema of db up to date in one transaction. Because
// the writer pool begins transactions IMMEDIATE, two processes opening the
// same file at once apply each migration exactly once.
func migrate(ctx context.Context, db *sql.DB) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()

	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("migrate: schema version %d is newer than this moat knows (%d); upgrade moat or open another directory", version, len(migrations))
	}
	if version < 0 {
		return fmt.Errorf("migrate: schema version %d is negative; the file was not written by moat", version)
	}
	for i := version; i < len(migrations); i++ {
		m := migrations[i]
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate: %d (%s): %w", i+1, m.name, err)
		}
	}
	if version == len(migrations) {
		return tx.Rollback()
	}
	// PRAGMA takes no bound parameters; the value is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(migrations))); err != nil {
		return fmt.Errorf("migrate: write schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
