package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moat-sandbox/moat/host/store/driver"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
)

// logTo is a logger writing text lines to a buffer safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
func (l *logBuf) logger() *slog.Logger        { return slog.New(slog.NewTextHandler(l, nil)) }

// schemaVersion reads what the database records, straight from the table.
func schemaVersion(t *testing.T, url string) (version, minReader int) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(max(version),0), coalesce(max(min_reader),0) FROM schema_migrations`).Scan(&version, &minReader); err != nil {
		t.Fatal(err)
	}
	return
}

// Opening a shared database never upgrades it unasked: an empty one gets
// the schema, an older one is refused with the versions and `moat
// migrate`, and nothing of it changes; migrate: auto (MigrateAuto) and
// Migrate upgrade it, logging every step; --dry-run lists and applies
// nothing; --to stops where it is told and never goes back.
func TestMigrateExplicit(t *testing.T) {
	ctx := context.Background()
	n := len(migrations)
	tests := []struct {
		name      string
		at        int // the schema's version before (0: empty database)
		open      bool
		o         driver.MigrateOptions
		wantErr   string // "" = succeeds
		wantIs    error
		wantAfter int
		wantSteps int
	}{
		{name: "empty database is created at start", at: 0, open: true, wantAfter: n, wantSteps: n},
		{name: "older schema refused at start", at: 10, open: true, wantIs: driver.ErrSchemaOlder,
			wantErr: fmt.Sprintf("schema is at version 10 and this moat needs version %d (%d step(s) pending: 11 %s", n, n-10, migrations[10].Name), wantAfter: 10},
		{name: "older schema refused under MigrateNever", at: 10, open: true, o: driver.MigrateOptions{Mode: driver.MigrateNever}, wantIs: driver.ErrSchemaOlder, wantErr: "run `moat migrate`", wantAfter: 10},
		{name: "empty database refused under MigrateNever", at: 0, open: true, o: driver.MigrateOptions{Mode: driver.MigrateNever}, wantIs: driver.ErrSchemaOlder, wantErr: "migrate: auto", wantAfter: 0},
		{name: "migrate: auto upgrades at start", at: 10, open: true, o: driver.MigrateOptions{Mode: driver.MigrateAuto}, wantAfter: n, wantSteps: n - 10},
		{name: "moat migrate upgrades", at: 10, wantAfter: n, wantSteps: n - 10},
		{name: "moat migrate --dry-run applies nothing", at: 10, o: driver.MigrateOptions{DryRun: true}, wantAfter: 10, wantSteps: n - 10},
		{name: "moat migrate --to stops there", at: 3, o: driver.MigrateOptions{To: 7}, wantAfter: 7, wantSteps: 4},
		{name: "moat migrate --to below the schema is refused", at: 10, o: driver.MigrateOptions{To: 5}, wantErr: "steps are never undone", wantAfter: 10},
		{name: "moat migrate on a current schema does nothing", at: n, wantAfter: n},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := pgtest.Database(t)
			if tt.at > 0 {
				if _, err := Migrate(ctx, url, driver.MigrateOptions{To: tt.at, Log: slog.New(slog.DiscardHandler)}); err != nil {
					t.Fatal(err)
				}
			}
			var logs logBuf
			tt.o.Log = logs.logger()
			var r driver.MigrationReport
			var err error
			if tt.open {
				var d *DB
				d, err = Open(driver.WithMigrateOptions(ctx, tt.o), url)
				if err == nil {
					d.Close()
				}
			} else {
				r, err = Migrate(ctx, url, tt.o)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
			case tt.wantIs != nil && !errors.Is(err, tt.wantIs):
				t.Fatalf("error %v is not %v", err, tt.wantIs)
			}
			if err != nil && strings.Contains(err.Error(), "*driver") {
				t.Errorf("the message names a Go type: %v", err)
			}
			if tt.at > 0 || tt.wantAfter > 0 {
				if v, _ := schemaVersion(t, url); v != tt.wantAfter {
					t.Errorf("schema version after = %d, want %d", v, tt.wantAfter)
				}
			}
			if !tt.open && len(r.Steps) != tt.wantSteps {
				t.Errorf("report lists %d steps, want %d: %+v", len(r.Steps), tt.wantSteps, r.Steps)
			}
			// Every step applied is one log line: from→to, name, duration.
			applied := tt.wantSteps
			if tt.at == 0 && applied > 0 {
				// A new database: one line, not one per step.
				applied = 0
				if !strings.Contains(logs.String(), fmt.Sprintf(`msg="store: created the schema of a new database" version=%d steps=%d`, n, n)) {
					t.Errorf("no line says the schema was created:\n%s", logs.String())
				}
			}
			if tt.o.DryRun {
				applied = 0
			}
			if got := strings.Count(logs.String(), `msg="store: schema migration"`); got != applied {
				t.Errorf("%d migration log lines, want %d:\n%s", got, applied, logs.String())
			}
			if applied > 0 && tt.at > 0 {
				last := migrations[tt.wantAfter-1].Name
				want := fmt.Sprintf("from=%d to=%d name=%s kind=expand duration=", tt.wantAfter-1, tt.wantAfter, last)
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, logs.String())
				}
			}
		})
	}
}

// Two `moat migrate` at once: the one that gets the advisory lock
// applies every step; the other waits for it (said in its log) and then
// finds nothing to do. The test holds the lock first, so both are seen
// waiting.
func TestMigrateAdvisoryLock(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	if _, err := Migrate(ctx, url, driver.MigrateOptions{To: 2, Log: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		r   driver.MigrationReport
		err error
	}
	var logs [2]logBuf
	done := make(chan result, 2)
	for i := range 2 {
		go func() {
			r, err := Migrate(ctx, url, driver.MigrateOptions{Log: logs[i].logger()})
			done <- result{r, err}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("a migrate finished while another holds the lock: %+v", r)
	default:
	}
	for i := range logs {
		if !strings.Contains(logs[i].String(), "waiting for another moat") {
			t.Errorf("migrate %d did not say it waits:\n%s", i, logs[i].String())
		}
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(migrateLock)); err != nil {
		t.Fatal(err)
	}
	var applied, nothing int
	for range 2 {
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		switch {
		case res.r.Applied && len(res.r.Steps) == len(migrations)-2:
			applied++
		case !res.r.Applied && len(res.r.Steps) == 0 && res.r.From == len(migrations):
			nothing++
		default:
			t.Errorf("unexpected report %+v", res.r)
		}
	}
	if applied != 1 || nothing != 1 {
		t.Errorf("applied %d, found nothing to do %d; want 1 and 1", applied, nothing)
	}
	if v, _ := schemaVersion(t, url); v != len(migrations) {
		t.Errorf("schema version %d, want %d", v, len(migrations))
	}
}

// Expand, then contract: a moat at version N keeps running on a database
// a newer moat migrated with expand steps, and refuses, with the
// versions and the fix, one a contract step has run on.
func TestMigrateContractRefusesOlderReader(t *testing.T) {
	ctx := context.Background()
	n := len(migrations)
	expand := driver.Migration{Name: "expand_fixture", SQL: `CREATE TABLE fixture_new (id integer PRIMARY KEY)`}
	contract := driver.Migration{Name: "contract_fixture", SQL: `ALTER TABLE rate_buckets DROP COLUMN taken`, MinReader: n + 1}
	tests := []struct {
		name    string
		newer   []driver.Migration
		wantErr string
		wantMR  int
	}{
		{name: "expand only: the older moat runs", newer: []driver.Migration{expand}},
		{name: "contract: the older moat refuses", newer: []driver.Migration{expand, contract}, wantMR: n + 1,
			wantErr: fmt.Sprintf("schema is at version %d and needs a moat that knows version %d or later (a step that removed what older releases use has run); this moat knows version %d", n+2, n+1, n)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := pgtest.Database(t)
			pool, err := connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			all := append(append([]driver.Migration{}, migrations...), tt.newer...)
			if _, err := migrate(ctx, pool, all, driver.MigrateOptions{Log: slog.New(slog.DiscardHandler)}, true); err != nil {
				t.Fatal(err)
			}
			if _, mr := schemaVersion(t, url); mr != tt.wantMR {
				t.Errorf("recorded min_reader %d, want %d", mr, tt.wantMR)
			}
			var logs logBuf
			d, err := Open(driver.WithMigrateOptions(ctx, driver.MigrateOptions{Log: logs.logger()}), url)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("the older moat refused an expand-only schema: %v", err)
				}
				defer d.Close()
				if !strings.Contains(logs.String(), "newer than this moat, and compatible") {
					t.Errorf("no log line says the schema is newer but compatible:\n%s", logs.String())
				}
				return
			}
			if err == nil {
				d.Close()
				t.Fatal("the older moat opened a contracted schema")
			}
			if !errors.Is(err, driver.ErrSchemaNewer) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want ErrSchemaNewer saying %q", err, tt.wantErr)
			}
			// Migrate of the older moat refuses too, and changes nothing.
			if _, err := Migrate(ctx, url, driver.MigrateOptions{}); !errors.Is(err, driver.ErrSchemaNewer) {
				t.Errorf("Migrate by the older moat: %v, want ErrSchemaNewer", err)
			}
		})
	}
}
