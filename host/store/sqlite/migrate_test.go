package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
)

func fileVersion(t *testing.T, file string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+file+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// On SQLite an older schema is migrated at start, but never silently:
// the file is copied first (a consistent VACUUM INTO, named in the log),
// and every step is logged. The previous release (Known: N-1) runs on
// the migrated file; a contracted file refuses it.
func TestSQLiteMigrateLogsAndBacksUp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	s, err := store.OpenWith(ctx, dir, store.MigrateOptions{Known: 10, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.KVPut(ctx, store.Scope{Org: "o", Module: "m"}, "k", []byte("before")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	file := filepath.Join(dir, "moat.db")
	if v := fileVersion(t, file); v != 10 {
		t.Fatalf("fixture at version %d, want 10", v)
	}

	var logs bytes.Buffer
	s, err = store.OpenWith(ctx, dir, store.MigrateOptions{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	n := fileVersion(t, file)
	if n <= 10 {
		t.Fatalf("not migrated: version %d", n)
	}
	if got := strings.Count(logs.String(), `msg="store: schema migration"`); got != n-10 {
		t.Errorf("%d step lines, want %d:\n%s", got, n-10, logs.String())
	}
	if !strings.Contains(logs.String(), "from=10 to=11 name=") {
		t.Errorf("no from→to line:\n%s", logs.String())
	}
	backups, _ := filepath.Glob(file + ".before-v10-*")
	if len(backups) != 1 {
		t.Fatalf("backups %v, want one moat.db.before-v10-*", backups)
	}
	if !strings.Contains(logs.String(), backups[0]) {
		t.Errorf("the log does not name the backup %s:\n%s", backups[0], logs.String())
	}
	if v := fileVersion(t, backups[0]); v != 10 {
		t.Errorf("the backup is at version %d, want 10 (taken before the migration)", v)
	}

	// The previous release runs on the migrated file (expand steps).
	s, err = store.OpenWith(ctx, dir, store.MigrateOptions{Known: n - 1, Log: quiet})
	if err != nil {
		t.Fatalf("N-1 on N's file: %v", err)
	}
	if v, ok, err := s.KVGet(ctx, store.Scope{Org: "o", Module: "m"}, "k"); err != nil || !ok || string(v) != "before" {
		t.Errorf("N-1 reads %q %v %v", v, ok, err)
	}
	s.Close()

	// A release from before the user_id rename (a contract step, 8) is
	// refused with the versions.
	_, err = store.OpenWith(ctx, dir, store.MigrateOptions{Known: 7, Log: quiet})
	if !errors.Is(err, store.ErrSchemaNewer) || !strings.Contains(err.Error(), "needs a moat that knows version 8 or later") {
		t.Errorf("a moat at 7 on a file past the contract step 8: %v", err)
	}
	// A current file is opened without a new backup.
	if _, err := store.Open(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := filepath.Glob(file + ".before-*"); len(b) != 1 {
		t.Errorf("backups %v after an open with nothing to migrate, want still one", b)
	}
}
