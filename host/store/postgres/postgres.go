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
// Migrations are recorded in schema_migrations (with each step's
// MinReader, see driver.Migration) and applied under an advisory lock, so
// replicas starting at once, or two `moat migrate`, apply each one once.
// Open applies them only to an empty database or when asked (`migrate:
// auto`); an older schema is otherwise refused with the fix: replicas of
// the previous release may still be serving from it.
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
	driver.RegisterMigrator("postgres", Migrate)
	driver.RegisterMigrator("postgresql", Migrate)
}

// DB is the PostgreSQL backend: a pool of connections to one database.
// It is safe for concurrent use. Create it with Open (or store.Open).
type DB struct {
	pool     *pgxpool.Pool
	location string
}

// Open connects to the database url names. An empty database gets the
// schema; an older schema is refused (driver.SchemaError) unless the
// driver.MigrateOptions in ctx (store.OpenWith) say MigrateAuto: replicas
// of the previous release may be serving from it, so upgrading it is the
// operator's step (`moat migrate`). A newer schema is used when its newer
// steps are all expand steps, and refused when one contracted it.
func Open(ctx context.Context, dsn string) (*DB, error) {
	pool, err := connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := migrate(ctx, pool, migrations, driver.MigrateOptionsFrom(ctx), false); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", locate(err, dsn))
	}
	return &DB{pool: pool, location: redact(dsn)}, nil
}

// Migrate applies the pending steps of the database dsn names (`moat
// migrate`), or with o.DryRun lists them, under the advisory lock every
// migration takes.
func Migrate(ctx context.Context, dsn string, o driver.MigrateOptions) (driver.MigrationReport, error) {
	pool, err := connect(ctx, dsn)
	if err != nil {
		return driver.MigrationReport{}, err
	}
	defer pool.Close()
	r, err := migrate(ctx, pool, migrations, o, true)
	r.Location = redact(dsn)
	if err != nil {
		return r, fmt.Errorf("postgres: %w", locate(err, dsn))
	}
	return r, nil
}

// locate names the database in a *driver.SchemaError.
func locate(err error, dsn string) error {
	var se *driver.SchemaError
	if errors.As(err, &se) {
		se.Location = redact(dsn)
	}
	return err
}

// connect opens a pool on dsn and checks it reaches the server.
func connect(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
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
	return pool, nil
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
