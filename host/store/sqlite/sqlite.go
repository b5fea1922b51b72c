// Package sqlite is the embedded storage backend of package store, and its
// default: one SQLite file, dir/moat.db, driven by the pure-Go driver
// modernc.org/sqlite (no cgo). Package store imports it, so it is always
// there; it registers itself under the scheme "sqlite", and store.Open
// sends it every plain directory path and every sqlite:///path/to/dir URL.
//
// # Configuration
//
// Every connection is configured the same way: WAL journal (readers never
// wait for the writer), busy_timeout 5000 ms, foreign_keys on, synchronous
// NORMAL. Open refuses a file system that cannot hold a WAL (a network
// mount) rather than degrading quietly.
//
// # Schema and migrations
//
// The schema is an ordered list of migrations. Open applies the ones the
// file has not seen yet, in order, inside one IMMEDIATE transaction,
// after copying a file that holds a schema already to
// moat.db.before-v<N>-<time> (VACUUM INTO), logs each step, and records
// the schema version in PRAGMA user_version and each step in
// schema_migrations. A file written by a newer moat is used when the
// newer steps only added to the schema, and refused when one removed
// what this moat uses (driver.Migration's MinReader). kv_usage and the module change log are kept by triggers, in
// the transaction of the write.
//
// # Concurrency
//
// Writes go through a pool of a single connection whose transactions
// begin IMMEDIATE, so writers in one process queue in Go instead of
// contending for SQLite's lock (no SQLITE_BUSY between goroutines), and
// writers in several processes serialize on the file lock: that is what
// makes the kv quota, the confirmation claim, module pruning and rate
// buckets atomic here. Reads use a separate pool of read-only connections
// and run in parallel with the writer. The statements of the invocation
// path are prepared once per connection.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/host/store/driver"
	"golang.org/x/sys/unix"
	msqlite "modernc.org/sqlite" // also registers the "sqlite" database/sql driver
)

// FileName is the name of the database file inside the store's directory.
const FileName = "moat.db"

// Scheme is the URL scheme of this backend: sqlite:///path/to/dir.
const Scheme = "sqlite"

// busyTimeoutMS is how long a connection waits for a lock held by another
// connection (or another process) before reporting SQLITE_BUSY.
const busyTimeoutMS = 5000

func init() {
	driver.Register(Scheme, func(ctx context.Context, dsn string) (driver.Backend, error) {
		return Open(ctx, strings.TrimPrefix(dsn, Scheme+"://"))
	})
	driver.RegisterMigrator(Scheme, func(ctx context.Context, dsn string, o driver.MigrateOptions) (driver.MigrationReport, error) {
		return Migrate(ctx, strings.TrimPrefix(dsn, Scheme+"://"), o)
	})
}

// DB is the SQLite backend: one database file. It is safe for concurrent
// use. Create it with Open (or store.Open).
type DB struct {
	path string
	// lock holds a shared flock on the file for the DB's life, so that
	// Restore can tell a store some moat process has open (flock is
	// apart from SQLite's own POSIX locks, which it does not disturb).
	lock  *os.File
	w     *sql.DB  // the single writer connection; also runs migrations
	r     *sql.DB  // read-only connections for queries
	stmts sync.Map // stmtKey → *sql.Stmt: the hot statements, prepared once

	wakeMu sync.Mutex
	wakes  map[chan struct{}]struct{} // ModuleWake's subscribers
}

// stmtKey names a prepared statement: the pool it runs on and its text.
type stmtKey struct {
	db    *sql.DB
	query string
}

// prepared returns query prepared on db, preparing it on first use.
//
// Preparing is most of the cost of a small statement with the pure-Go
// driver (parsing and planning: ~20 µs of a ~30 µs kv.get on the test
// machine), and the driver keeps no statement cache of its own, so the
// statements of the invocation path (kv.get, kv.put, the quota check) are
// prepared once per connection: database/sql re-prepares a *sql.Stmt on
// each pool connection lazily and reuses it after. Inside a transaction,
// use tx.StmtContext(ctx, stmt), which reuses the connection's copy.
func (d *DB) prepared(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	k := stmtKey{db, query}
	if st, ok := d.stmts.Load(k); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := d.stmts.LoadOrStore(k, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// Open opens the database in dir, the file dir/moat.db, creating the
// directory (mode 0700) and the file (mode 0600) when they do not exist,
// and applies any pending schema migrations. Errors wrap the cause with
// %w and name the path.
func Open(ctx context.Context, dir string) (*DB, error) {
	if dir == "" {
		return nil, errors.New("sqlite: empty directory; pass the directory that holds (or will hold) " + FileName)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: create directory: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	// Create the file ourselves so it is private to this user: SQLite would
	// create it 0644, and its -wal and -shm files copy the main file's mode.
	// An empty file is a valid empty database. An existing file keeps its mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: moat restore is replacing this store (%w); wait for it to finish", path, err)
	}
	opened := false
	defer func() {
		if !opened {
			f.Close()
		}
	}()

	w, err := openPool(path, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	if err := checkWAL(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := migrate(ctx, w, migrations, driver.MigrateOptionsFrom(ctx), false); err != nil {
		w.Close()
		return nil, fmt.Errorf("%s: %w", path, locate(err, path))
	}
	sweepMediaTemp(dir)
	sweepBackupTemp(dir)

	r, err := openPool(path, true)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	n := min(max(runtime.GOMAXPROCS(0), 2), 8)
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("%s: read pool: %w", path, err)
	}
	opened = true
	return &DB{path: path, lock: f, w: w, r: r, wakes: map[chan struct{}]struct{}{}}, nil
}

// Migrate applies the pending steps of the database in dir (`moat
// migrate`), after copying the file beside it, or with o.DryRun lists
// them. The directory must hold a database already.
func Migrate(ctx context.Context, dir string, o driver.MigrateOptions) (driver.MigrationReport, error) {
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return driver.MigrationReport{}, fmt.Errorf("%s: no store here (%s is missing), so nothing to migrate; moat serve creates it, or pass the data directory that holds it (--data, or data_dir in --config)", dir, FileName)
		}
		return driver.MigrationReport{}, fmt.Errorf("%s: %w", path, err)
	}
	w, err := openPool(path, false)
	if err != nil {
		return driver.MigrationReport{}, fmt.Errorf("%s: %w", path, err)
	}
	defer w.Close()
	w.SetMaxOpenConns(1)
	r, err := migrate(ctx, w, migrations, o, true)
	r.Location = path
	if err != nil {
		return r, fmt.Errorf("%s: %w", path, locate(err, path))
	}
	return r, nil
}

// locate names the database in a *driver.SchemaError.
func locate(err error, path string) error {
	var se *driver.SchemaError
	if errors.As(err, &se) {
		se.Location = path
	}
	return err
}

// openPool opens a database/sql pool on path whose every connection carries
// the store's pragmas. A readOnly pool's connections refuse writes.
func openPool(path string, readOnly bool) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		// journal_mode is persistent in the file; setting it on the writer
		// is enough, and readers must not try to change it.
		q.Add("_pragma", "journal_mode(WAL)")
		// Take the write lock at BEGIN: a deferred transaction that
		// upgrades from read to write can fail with SQLITE_BUSY at once,
		// without waiting out busy_timeout, when another process writes.
		q.Set("_txlock", "immediate")
	}
	return sql.Open("sqlite", dsn(path, q))
}

// dsn builds a file: URI for path. Escaping the path keeps a '?' or '#' in a
// directory name from being read as the start of the query.
func dsn(path string, q url.Values) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		if abs, err := filepath.Abs(path); err == nil {
			p = filepath.ToSlash(abs)
		}
		if !strings.HasPrefix(p, "/") { // a Windows drive path: file:///C:/...
			p = "/" + p
		}
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

// checkWAL confirms the file is in WAL mode. Some file systems (network
// mounts) cannot hold a WAL; the store would then serialize readers behind
// the writer, so say so at Open instead of degrading quietly.
func checkWAL(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q, not WAL; put the store on a local file system", mode)
	}
	return nil
}

// Close closes the database. Calls made after Close fail.
func (d *DB) Close() error {
	var errs []error
	d.stmts.Range(func(_, st any) bool {
		errs = append(errs, st.(*sql.Stmt).Close())
		return true
	})
	errs = append(errs, d.r.Close(), d.w.Close())
	if d.lock != nil {
		errs = append(errs, d.lock.Close())
	}
	return errors.Join(errs...)
}

// Location is the path of the database file, dir/moat.db.
func (d *DB) Location() string { return d.path }

// rowScanner is a *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// inTx runs f in a write transaction and commits it, or rolls it back
// when f fails.
func (d *DB) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

var _ driver.Backend = (*DB)(nil)

// sqliteConstraint is SQLITE_CONSTRAINT, the primary result code of every
// constraint violation (a duplicate primary or unique key among them).
const sqliteConstraint = 19

// isConstraint reports whether err is a constraint violation.
func isConstraint(err error) bool {
	var se *msqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqliteConstraint
}
