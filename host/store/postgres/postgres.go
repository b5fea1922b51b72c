// Package postgres is the PostgreSQL storage backend of package store,
// for several moat replicas sharing one database: keys, modules (their
// bytes too), kv, audit, confirmations, the module change feed and rate
// buckets all live there, so replicas on different machines need no
// shared disk. It registers itself under the schemes "postgres" and
// "postgresql"; link it in with
//
//	import _ "github.com/moat-sandbox/moat/host/store/postgres"
//
// and pass store.Open a URL libpq would accept (postgres://user@host/db,
// or postgres:///db?host=/run/postgresql for a unix socket).
//
// # Why pgx, natively
//
// It is pure Go (no cgo), and its own pool (pgxpool) rather than
// database/sql: the binary protocol, a prepared-statement cache per
// connection with no second layer of pooling, and a dedicated connection
// for LISTEN, which database/sql cannot hold.
//
// # Atomicity across replicas
//
// Every replica is another process on the same database, so what SQLite
// gets from its single writer is explicit here:
//   - kv: every write first locks its scope's kv_usage row (kvLock); the
//     quota check reads the usage under that lock, and triggers keep the
//     row in the same transaction, so concurrent puts cannot overshoot.
//   - confirmations: the claim reads the row FOR UPDATE and sets used_at
//     only WHERE used_at IS NULL: one claim wins, on any replica.
//   - modules: every module write holds one advisory lock (moduleLock)
//     for its transaction, which serializes pruning under a quota and
//     makes the change log's order the commit order.
//   - rate buckets: one INSERT ... ON CONFLICT DO UPDATE ... RETURNING.
//
// Migrations are recorded in schema_migrations and applied under an
// advisory lock, so replicas starting at once apply each one once.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moat-sandbox/moat/host/store/driver"
)

func init() {
	open := func(ctx context.Context, dsn string) (driver.Backend, error) { return Open(ctx, dsn) }
	driver.Register("postgres", open)
	driver.Register("postgresql", open)
}

// DB is the PostgreSQL backend: a pool of connections to one database.
// It is safe for concurrent use. Create it with Open (or store.Open).
type DB struct {
	pool     *pgxpool.Pool
	location string
}

// Open connects to the database url names and applies any pending
// migrations.
func Open(ctx context.Context, dsn string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse the URL: %w", redactErr(err, dsn))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &DB{pool: pool, location: redact(dsn)}, nil
}

// redact hides the password of a URL.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an unparsable URL)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// redactErr keeps a password in a URL out of a parse error.
func redactErr(err error, raw string) error {
	if u, perr := url.Parse(raw); perr == nil {
		if p, ok := u.User.Password(); ok && p != "" && strings.Contains(err.Error(), p) {
			return errors.New(strings.ReplaceAll(err.Error(), p, "xxxxx"))
		}
	}
	return err
}

// Location is the URL of the database, without its password.
func (d *DB) Location() string { return d.location }

// Close closes every connection.
func (d *DB) Close() error {
	d.pool.Close()
	return nil
}

// uniqueViolation is SQLSTATE 23505.
const uniqueViolation = "23505"

// conflict marks a unique violation as driver.ErrConflict.
func conflict(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == uniqueViolation {
		return fmt.Errorf("%w: %w", driver.ErrConflict, err)
	}
	return err
}

// notFound maps pgx.ErrNoRows to driver.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.ErrNotFound
	}
	return err
}

var _ driver.Backend = (*DB)(nil)
