// Package store is moat's persistence layer: the data a host keeps between
// invocations: the key-value data of sandboxed modules (the kv.* ops, with
// an optional per-scope disk quota), the audit trail (AuditInsert,
// AuditQuery), pending confirmations of confirm-required actions
// (ConfirmationCreate, ConfirmationUse), the server's API keys and
// modules (with their bytes, ModuleBlobPut), a feed of module changes
// (WatchModules), token buckets shared by every process (RateTake), the
// compiled machine code hosts share (CodePut, CodeGet), and the queue of
// background tasks with the ticks of schedules (TaskEnqueue, TaskClaim,
// ScheduleFire: tasks.go).
//
// # A front and its backends
//
// *Store is a front, as *sql.DB is for database/sql: it owns the domain
// (the types of this package, validation, scope checks, clamps, the quota
// and pruning rules, how times and attributes are encoded) and calls a
// backend (package store/driver's Backend) only to run statements. So
// validation and scope enforcement are written once, and a backend cannot
// forget them; and every consumer keeps using the concrete *Store, so
// adding a backend changed no caller.
//
// Open picks the backend from its argument:
//   - a directory path (what every caller passed before there were two
//     backends), or sqlite:///path/to/dir: SQLite in dir/moat.db, the
//     embedded default (package store/sqlite, always linked in);
//   - postgres://... or postgresql://...: PostgreSQL (package
//     store/postgres, linked in by importing it, or store/backends), for
//     several replicas sharing one database.
//
// Backends register themselves by scheme (RegisterBackend), caddy style,
// so a program that embeds moat links only the backends it imports.
//
// # Why SQLite by default
//
// One embedded SQLite file, dir/moat.db, driven by the pure-Go driver
// modernc.org/sqlite, keeps a moat host a single static binary with no cgo
// and no database server to run, which is all one host needs. PostgreSQL
// is for when one machine is not enough: every row and every piece of
// shared state (module bytes included) lives in the database, so replicas
// need no shared disk.
//
// # Scoping
//
// Every row carries the organization (and, for module data, the module) that
// owns it, and the store applies that scope itself: each method takes a
// Scope or an org, refuses an empty one, and the backend puts both columns
// into every statement it runs. A caller never writes a WHERE clause, so
// no caller can forget one, and one organization's data cannot reach
// another's through this package.
//
// Bad input (an empty scope, an over-long key, an oversized value) is
// reported as an *abi.Error with abi.CodeInvalidArgument or abi.CodeTooLarge,
// ready to go back to a guest. Database failures wrap the backend's error
// with %w and name the operation and scope.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/moat-sandbox/moat/host/store/driver"
	"github.com/moat-sandbox/moat/host/store/sqlite"
)

// FileName is the name of the SQLite database file inside the store's
// directory.
const FileName = sqlite.FileName

// Backend is what a storage backend implements; see package store/driver.
type Backend = driver.Backend

// RegisterBackend makes a backend available to Open under a URL scheme.
// Call it from the backend package's init; a scheme registered twice
// panics. The SQLite backend is always registered (as "sqlite"); the
// PostgreSQL one (as "postgres" and "postgresql") when package
// store/postgres is imported.
func RegisterBackend(scheme string, open func(ctx context.Context, dsn string) (Backend, error)) {
	driver.Register(scheme, open)
}

// Store is moat's persistent state. It is safe for concurrent use by
// several goroutines (and, on PostgreSQL, by several processes). Create it
// with Open.
type Store struct {
	b      driver.Backend
	scheme string    // the scheme b was opened with: "sqlite", "postgres"
	fam    families  // each op family's storage in b, found once (families.go)
	kw     *kvWriter // the group-commit writer of kv writes; nil when b is no driver.KVBatcher

	taskWake chan struct{} // TaskWake's channel (tasks.go)
}

// Open opens the store dirOrURL names, creating it (and, for SQLite, the
// directory, mode 0700, and the file, mode 0600) when it does not exist,
// and applies any pending schema migrations:
//   - a directory path, or sqlite:///path/to/dir: SQLite in dir/moat.db;
//   - postgres://... or postgresql://... (any URL libpq accepts):
//     PostgreSQL, if package store/postgres is linked in.
//
// Errors wrap the cause with %w and name the path or the URL (without its
// password).
func Open(ctx context.Context, dirOrURL string) (*Store, error) {
	return OpenWith(ctx, dirOrURL, MigrateOptions{})
}

// Migration options and reports; see package driver for each.
type (
	MigrateOptions  = driver.MigrateOptions
	MigrateMode     = driver.MigrateMode
	MigrationReport = driver.MigrationReport
	MigrationStep   = driver.MigrationStep
	SchemaError     = driver.SchemaError
)

// The modes of MigrateOptions.Mode.
const (
	MigrateDefault = driver.MigrateDefault
	MigrateAuto    = driver.MigrateAuto
	MigrateNever   = driver.MigrateNever
)

// ErrSchemaOlder and ErrSchemaNewer match a *SchemaError: a refusal to
// open a database whose schema is older than this moat's (run `moat
// migrate`), or newer and contracted past what this moat can use.
var (
	ErrSchemaOlder = driver.ErrSchemaOlder
	ErrSchemaNewer = driver.ErrSchemaNewer
)

// OpenWith is Open with o deciding what happens to an older schema: by
// default SQLite migrates it (after a copy) and PostgreSQL refuses it,
// since replicas of the previous release may be serving from a shared
// database; MigrateAuto migrates either (`migrate: auto`).
func OpenWith(ctx context.Context, dirOrURL string, o MigrateOptions) (*Store, error) {
	ctx = driver.WithMigrateOptions(ctx, o)
	if dirOrURL == "" {
		return nil, errors.New("store: open: empty directory; pass the directory that holds (or will hold) " + FileName + ", or a postgres:// URL")
	}
	scheme := "sqlite"
	if i := strings.Index(dirOrURL, "://"); i > 0 && !strings.ContainsAny(dirOrURL[:i], `/\`) {
		scheme = strings.ToLower(dirOrURL[:i])
	}
	open, ok := driver.Lookup(scheme)
	if !ok {
		hint := ""
		if scheme == "postgres" || scheme == "postgresql" {
			hint = `; link the PostgreSQL backend in with import _ "github.com/moat-sandbox/moat/host/store/postgres"`
		}
		return nil, fmt.Errorf("store: open %s: no storage backend for scheme %q (registered: %s)%s",
			redact(dirOrURL), scheme, strings.Join(driver.Schemes(), ", "), hint)
	}
	b, err := open(ctx, dirOrURL)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", redact(dirOrURL), err)
	}
	s := &Store{b: b, scheme: scheme, fam: findFamilies(b), taskWake: make(chan struct{}, 1)}
	if kb, ok := b.(driver.KVBatcher); ok {
		s.kw = newKVWriter(kb)
	}
	return s, nil
}

// Migrate applies the pending schema steps of the store dirOrURL names
// (`moat migrate`), under the lock that serializes migrations of every
// process, logging each; with o.DryRun it reports them and applies none.
// A second Migrate waiting on the lock finds nothing left to do.
func Migrate(ctx context.Context, dirOrURL string, o MigrateOptions) (MigrationReport, error) {
	if dirOrURL == "" {
		return MigrationReport{}, errors.New("store: migrate: empty location; pass the data directory or the postgres:// URL")
	}
	scheme := "sqlite"
	if i := strings.Index(dirOrURL, "://"); i > 0 && !strings.ContainsAny(dirOrURL[:i], `/\`) {
		scheme = strings.ToLower(dirOrURL[:i])
	}
	m, ok := driver.LookupMigrator(scheme)
	if !ok {
		return MigrationReport{}, fmt.Errorf("store: migrate %s: no storage backend for scheme %q (registered: %s)", redact(dirOrURL), scheme, strings.Join(driver.Schemes(), ", "))
	}
	r, err := m(ctx, dirOrURL, o)
	if err != nil {
		return r, fmt.Errorf("store: migrate %s: %w", redact(dirOrURL), err)
	}
	return r, nil
}

// redact hides the password of a URL; a path comes back as it is.
func redact(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
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

// Close closes the store. kv writes already queued for a group commit
// are committed first; calls made after Close fail.
func (s *Store) Close() error {
	if s.kw != nil {
		s.kw.close()
	}
	return s.b.Close()
}

// Path names the database: for SQLite, the path of the file,
// dir/moat.db; for PostgreSQL, its URL without the password.
func (s *Store) Path() string { return s.b.Location() }
