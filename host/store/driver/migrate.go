package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Migration is one step of a backend's schema. A backend keeps its steps
// in one slice, applied in order; a step's version is its position (the
// first is 1). Append new steps; never edit, remove or reorder one that
// has shipped: a database records how far it got by number.
//
// # Expand, then contract
//
// Replicas of two releases run against one database during a rolling
// update (and after a rollback), so a step must leave the schema usable
// by the release before it: it only adds (a table, an index, a column
// with a default). That is an expand step, and MinReader stays 0. A step
// that removes or renames what an older release reads or writes is a
// contract step: it ships one release after the code stopped using what
// it removes, and its MinReader is the oldest schema version whose code
// still works after it (usually the version of the release that stopped
// using it). A moat that knows the first K steps runs on a database at a
// later version V only when every step of the database has MinReader ≤ K;
// the database records MinReader of every step it applied, so an older
// moat can tell without knowing the steps.
type Migration struct {
	Name string
	SQL  string
	// MinReader is 0 for an expand step; for a contract step, the oldest
	// schema version whose code can read and write the schema after it.
	MinReader int
}

// MigrateMode says whether opening a store may change its schema.
type MigrateMode int

const (
	// MigrateDefault is the backend's own rule. SQLite (one machine, a
	// file no other release shares for long) applies pending steps,
	// after backing the file up; PostgreSQL creates the schema of an
	// empty database (no other replica can be reading it) but refuses
	// to start on an older one, since replicas of the older release may
	// be serving from it: `moat migrate` or `migrate: auto` upgrades it.
	MigrateDefault MigrateMode = iota
	// MigrateAuto applies pending steps at open (`migrate: auto`).
	MigrateAuto
	// MigrateNever refuses any schema older than this moat's, even an
	// empty one.
	MigrateNever
)

// MigrateOptions are how a store is opened (store.OpenWith) or migrated
// (store.Migrate).
type MigrateOptions struct {
	Mode MigrateMode
	// DryRun (store.Migrate) reports the steps it would apply and applies
	// none.
	DryRun bool
	// To (store.Migrate) stops at this version instead of the newest.
	To int
	// Known, when not 0, makes the store act as a moat that knows only
	// its first Known steps: the fixture of the previous release in the
	// tests that run two releases on one database.
	Known int
	// Log receives one line per step applied, and a line when the schema
	// is newer than this moat but compatible. nil is slog.Default().
	Log *slog.Logger
}

// Logger is o.Log, or slog.Default() when nil.
func (o MigrateOptions) Logger() *slog.Logger {
	if o.Log != nil {
		return o.Log
	}
	return slog.Default()
}

// MigrationStep is one step a migration applied, or would apply (DryRun).
type MigrationStep struct {
	From, To  int
	Name      string
	MinReader int           // 0: expand
	Duration  time.Duration // 0 when not applied
}

// MigrationReport is what a migration found and did.
type MigrationReport struct {
	Location string // the database, without its password
	// From is the schema's version before, To after (From when nothing
	// was applied); Known is the newest version this moat knows.
	From, To, Known int
	// MinReader is the oldest version of moat's schema that can use the
	// database afterwards (0: any).
	MinReader int
	Steps     []MigrationStep
	Applied   bool // false for a dry run, or when nothing was pending
	Backup    string
}

// SchemaState is what a database records of its schema: its version and
// the largest MinReader of the steps it applied.
type SchemaState struct {
	Version, MinReader int
	// Newest is the name of the newest step, when the database records
	// names ("" otherwise).
	Newest string
}

// ErrSchemaOlder marks a refusal to start on a schema older than this
// moat's; ErrSchemaNewer a refusal on one a newer moat contracted.
var (
	ErrSchemaOlder = errors.New("the database's schema is older than this moat's")
	ErrSchemaNewer = errors.New("the database's schema is newer than this moat can use")
)

// SchemaError is a refusal to open a database because of its schema's
// version. It matches ErrSchemaOlder or ErrSchemaNewer with errors.Is.
type SchemaError struct {
	Location  string
	Version   int // the database's
	Known     int // this moat's
	MinReader int // the database's
	Pending   []string
	Newer     bool
}

func (e *SchemaError) Error() string {
	if e.Newer {
		return fmt.Sprintf("the database's schema is at version %d and needs a moat that knows version %d or later (a step that removed what older releases use has run); this moat knows version %d: run the newer moat, or restore the backup taken before the upgrade (docs/OPERATIONS.md)",
			e.Version, e.MinReader, e.Known)
	}
	return fmt.Sprintf("the database's schema is at version %d and this moat needs version %d (%d step(s) pending: %s); run `moat migrate` against it (`moat migrate --dry-run` lists the steps), or set migrate: auto in the server configuration to apply them at start",
		e.Version, e.Known, len(e.Pending), strings.Join(e.Pending, ", "))
}

// Is makes errors.Is(err, ErrSchemaOlder/ErrSchemaNewer) hold.
func (e *SchemaError) Is(target error) bool {
	if e.Newer {
		return target == ErrSchemaNewer
	}
	return target == ErrSchemaOlder
}

// SchemaTx is a backend's migration transaction, held under the lock that
// serializes migrations of every process.
type SchemaTx interface {
	// State reads the schema's version and MinReader.
	State(ctx context.Context) (SchemaState, error)
	// Apply runs step m as version v and records it (with minReader, the
	// schema's MinReader after it, and how long it took).
	Apply(ctx context.Context, v int, m Migration, minReader int, took func() time.Duration) error
}

// Plan decides what opening (migrating false) or migrating a database at
// state st does with the steps all: the report of the steps to apply, or
// a *SchemaError. sqlite selects SQLite's default (migrate at open).
func Plan(st SchemaState, all []Migration, o MigrateOptions, migrating, sqlite bool) (MigrationReport, error) {
	known := len(all)
	if o.Known > 0 && o.Known < known {
		known = o.Known
	}
	r := MigrationReport{From: st.Version, To: st.Version, Known: known, MinReader: st.MinReader}
	if st.Version > known || st.MinReader > known {
		if st.MinReader > known {
			return r, &SchemaError{Version: st.Version, Known: known, MinReader: st.MinReader, Newer: true}
		}
		return r, nil
	}
	to := known
	if migrating && o.To > 0 {
		if o.To < st.Version {
			return r, fmt.Errorf("migrate --to %d: the schema is at version %d already, and steps are never undone (restore a backup to go back)", o.To, st.Version)
		}
		to = min(o.To, known)
	}
	for v := st.Version + 1; v <= to; v++ {
		m := all[v-1]
		r.Steps = append(r.Steps, MigrationStep{From: v - 1, To: v, Name: m.Name, MinReader: m.MinReader})
	}
	if len(r.Steps) == 0 || migrating {
		return r, nil
	}
	auto := o.Mode == MigrateAuto ||
		o.Mode == MigrateDefault && (sqlite || st.Version == 0)
	if !auto {
		e := &SchemaError{Version: st.Version, Known: known, MinReader: st.MinReader}
		for _, s := range r.Steps {
			e.Pending = append(e.Pending, fmt.Sprintf("%d %s", s.To, s.Name))
		}
		return r, e
	}
	return r, nil
}

// Migrate plans and, unless o.DryRun, applies the steps on tx, logging
// each (from→to, name, duration). A backend calls it inside its locked
// transaction and commits when the report says Applied.
func Migrate(ctx context.Context, tx SchemaTx, all []Migration, o MigrateOptions, migrating, sqlite bool) (MigrationReport, error) {
	st, err := tx.State(ctx)
	if err != nil {
		return MigrationReport{}, fmt.Errorf("read the schema's version: %w", err)
	}
	r, err := Plan(st, all, o, migrating, sqlite)
	if err != nil {
		return r, err
	}
	log := o.Logger()
	if st.Version > r.Known {
		log.Info("store: the schema is newer than this moat, and compatible with it (expand-only steps)",
			"schema", st.Version, "known", r.Known, "min_reader", st.MinReader, "newest", st.Newest)
		return r, nil
	}
	if o.DryRun || len(r.Steps) == 0 {
		return r, nil
	}
	minReader := st.MinReader
	for i := range r.Steps {
		s := &r.Steps[i]
		m := all[s.To-1]
		minReader = max(minReader, m.MinReader)
		start := time.Now()
		took := func() time.Duration { return time.Since(start) }
		if err := tx.Apply(ctx, s.To, m, minReader, took); err != nil {
			return r, fmt.Errorf("migration %d→%d (%s): %w", s.From, s.To, s.Name, err)
		}
		s.Duration = took()
		kind := "expand"
		if m.MinReader > 0 {
			kind = fmt.Sprintf("contract (moat older than schema %d stops working)", m.MinReader)
		}
		level := slog.LevelInfo
		if st.Version == 0 {
			level = slog.LevelDebug // a new database: one line below says it
		}
		log.Log(ctx, level, "store: schema migration", "from", s.From, "to", s.To, "name", s.Name, "kind", kind, "duration", s.Duration.Round(time.Microsecond))
	}
	r.To = r.Steps[len(r.Steps)-1].To
	if st.Version == 0 {
		var total time.Duration
		for _, s := range r.Steps {
			total += s.Duration
		}
		// A new SQLite file is every first `moat run`: not news.
		level := slog.LevelInfo
		if sqlite {
			level = slog.LevelDebug
		}
		log.Log(ctx, level, "store: created the schema of a new database", "version", r.To, "steps", len(r.Steps), "duration", total.Round(time.Microsecond))
	}
	r.MinReader = minReader
	r.Applied = true
	return r, nil
}

type migrateKey struct{}

// WithMigrateOptions returns ctx carrying o, for the backend's open
// function (store.OpenWith); OpenFunc's signature stays as it is.
func WithMigrateOptions(ctx context.Context, o MigrateOptions) context.Context {
	return context.WithValue(ctx, migrateKey{}, o)
}

// MigrateOptionsFrom is what WithMigrateOptions put in ctx (the zero
// MigrateOptions, the backend's default, when nothing).
func MigrateOptionsFrom(ctx context.Context) MigrateOptions {
	o, _ := ctx.Value(migrateKey{}).(MigrateOptions)
	return o
}

// MigrateFunc migrates the database dsn names (store.Migrate).
type MigrateFunc func(ctx context.Context, dsn string, o MigrateOptions) (MigrationReport, error)

var migrators = map[string]MigrateFunc{}

// RegisterMigrator makes a backend's migration available to store.Migrate
// under scheme; backends call it from init, next to Register.
func RegisterMigrator(scheme string, f MigrateFunc) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := migrators[scheme]; dup {
		panic(fmt.Sprintf("store/driver: migrator %q registered twice", scheme))
	}
	migrators[scheme] = f
}

// LookupMigrator returns the migration registered under scheme.
func LookupMigrator(scheme string) (MigrateFunc, bool) {
	mu.RLock()
	defer mu.RUnlock()
	f, ok := migrators[scheme]
	return f, ok
}

// RateSweeper is implemented by a backend that can delete the token
// buckets of RateTake that are full again (store.RateSweep): a full bucket
// and a missing one are the same to RateTake, so a sweep changes no
// decision, and the table holds only buckets in use. Optional, like
// AuditPruner; without it the buckets are kept.
type RateSweeper interface {
	// RateSweep deletes at most limit buckets whose full_at (when the
	// bucket is full again, unix nanoseconds) is before now, and returns
	// how many it deleted. A bucket taken from at the same moment is
	// kept.
	RateSweep(ctx context.Context, now int64, limit int) (int64, error)
}

// AuditPruner is what a backend implements for audit retention
// (store.AuditPrune). It is separate from Backend so that adding it
// touched no other contract; both backends of this repository implement
// it.
type AuditPruner interface {
	// AuditPrune deletes, in one short transaction, at most limit event
	// rows older than before (unix nanoseconds) and at most limit
	// segments whose newest event is older than before, oldest first,
	// and returns how many rows and segments it removed, and how many
	// events those segments packed. Rows another process is
	// deleting at the same moment are skipped, not waited for: replicas
	// pruning at once divide the work, and what one removed the other
	// does not count.
	AuditPrune(ctx context.Context, before int64, limit int) (rows, segments, packed int64, err error)
}
