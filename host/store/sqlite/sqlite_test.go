package sqlite_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/storetest"
)

// TestConformance runs the store conformance suite on SQLite: a fresh
// directory per test, and for the shared tests several *store.Store on one
// file, as several processes would open it (each its own pools, meeting
// only at SQLite's file lock).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *store.Store { return open(t, t.TempDir()) })
	t.Run("Shared", func(t *testing.T) {
		storetest.RunShared(t, func(t *testing.T, n int) []*store.Store {
			dir := t.TempDir()
			out := make([]*store.Store, n)
			for i := range out {
				out[i] = open(t, dir)
			}
			return out
		})
	})
}

func open(t *testing.T, dir string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var scA = store.Scope{Org: "org-a", Module: "mod"}

// t0 is the base time of the audit rows.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func put(t *testing.T, s *store.Store, sc store.Scope, key, value string) {
	t.Helper()
	if err := s.KVPut(context.Background(), sc, key, []byte(value)); err != nil {
		t.Fatalf("KVPut(%v, %q): %v", sc, key, err)
	}
}

func list(t *testing.T, s *store.Store, sc store.Scope, prefix, after string, limit int) ([]string, bool) {
	t.Helper()
	keys, more, err := s.KVList(context.Background(), sc, prefix, after, limit)
	if err != nil {
		t.Fatalf("KVList(%v, %q, %q, %d): %v", sc, prefix, after, limit, err)
	}
	return keys, more
}

func newConfirmation(token string, now time.Time) store.Confirmation {
	sum := sha256.Sum256([]byte(token))
	return store.Confirmation{
		TokenHash: hex.EncodeToString(sum[:]), Org: "acme", User: "alice", Module: "billing", Action: "refund",
		Input: []byte(`{"amount":100}`), CreatedAt: now, ExpiresAt: now.Add(time.Hour), Binding: strings.Repeat("ab", 32),
	}
}

func TestOpenLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "state")
	s := open(t, dir)
	if want := filepath.Join(dir, store.FileName); s.Path() != want {
		t.Errorf("Path() = %q, want %q", s.Path(), want)
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o700 {
			t.Errorf("dir mode = %o, want 700", got)
		}
		fi, err = os.Stat(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got&0o077 != 0 {
			t.Errorf("file mode = %o, want no group or other access", got)
		}
	}

	// The pragmas Open promises, as seen by a separate connection.
	db, err := sql.Open("sqlite", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	var version int
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 1 {
		t.Errorf("user_version = %d, want >= 1 after migrations", version)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := store.Open(ctx, ""); err == nil {
		t.Error("Open(\"\") succeeded, want error")
	}

	// dir is a regular file: the error names the path.
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(ctx, file)
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("Open(file) error = %v, want an error naming %s", err, file)
	}

	// A file from a newer moat (unknown schema version) is refused.
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 9999"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = store.Open(ctx, dir)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open(newer schema) error = %v, want a refusal", err)
	}
}

func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, scA, "kept", "across restarts")
	put(t, s, scA, "gone", "deleted before close")
	if _, err := s.KVDelete(ctx, scA, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, _, err := s.KVGet(ctx, scA, "kept"); err == nil {
		t.Error("KVGet after Close succeeded, want error")
	}

	for range 2 { // twice: migrations must not re-run on an up-to-date file
		s2 := open(t, dir)
		v, found, err := s2.KVGet(ctx, scA, "kept")
		if err != nil || !found || string(v) != "across restarts" {
			t.Fatalf("after reopen KVGet = %q, %v, %v", v, found, err)
		}
		if keys, _ := list(t, s2, scA, "", "", 0); !slices.Equal(keys, []string{"kept"}) {
			t.Fatalf("after reopen KVList = %q", keys)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// v1Schema is the schema of the first store version (migration 1 only).
const v1Schema = `
CREATE TABLE kv (
	org        TEXT    NOT NULL,
	module     TEXT    NOT NULL,
	key        TEXT    NOT NULL COLLATE BINARY,
	value      BLOB    NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (org, module, key)
) STRICT, WITHOUT ROWID;
PRAGMA user_version = 1;
`

func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
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

func TestMigrateFromV1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, store.FileName)

	// A file as the first version left it, with data.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(v1Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO kv VALUES ('org-a', 'mod', 'old', x'6b657074', 1)`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, path); v != 1 {
		t.Fatalf("v1 file has user_version %d", v)
	}

	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatalf("Open(v1 file): %v", err)
	}
	if v, found, err := s.KVGet(ctx, scA, "old"); err != nil || !found || string(v) != "kept" {
		t.Errorf("KVGet(old) after migration = %q, %v, %v", v, found, err)
	}
	if err := s.AuditInsert(ctx, []store.AuditEvent{{ID: "a", Time: t0, Kind: "load"}}); err != nil {
		t.Errorf("AuditInsert after migration: %v", err)
	}
	if err := s.ConfirmationCreate(ctx, newConfirmation("tok", time.Now())); err != nil {
		t.Errorf("ConfirmationCreate after migration: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	v := userVersion(t, path)
	if v < 3 {
		t.Fatalf("user_version after migration = %d, want >= 3", v)
	}

	// Reopening an up-to-date file changes nothing and keeps everything.
	s = open(t, dir)
	if got := userVersion(t, path); got != v {
		t.Errorf("user_version after reopen = %d, want %d", got, v)
	}
	if v, found, err := s.KVGet(ctx, scA, "old"); err != nil || !found || string(v) != "kept" {
		t.Errorf("KVGet(old) after reopen = %q, %v, %v", v, found, err)
	}
	if got, err := s.AuditQuery(ctx, store.AuditFilter{}); err != nil || len(got) != 1 {
		t.Errorf("AuditQuery after reopen = %d events, %v; want 1", len(got), err)
	}
	if got, err := s.ConfirmationsPending(ctx, "acme", time.Now(), 0); err != nil || len(got) != 1 {
		t.Errorf("ConfirmationsPending after reopen = %d, %v; want 1", len(got), err)
	}
}

// TestKVUsageMigration opens a file written before usage was kept in its
// own table, with data: the migration must count what is already stored.
func TestKVUsageMigration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(v1Schema); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"x", "yy", "zzz"} {
		if _, err := db.Exec(`INSERT INTO kv VALUES ('acme', 'billing', ?, ?, 1)`, fmt.Sprint("k", i), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s := open(t, dir)
	sc := store.Scope{Org: "acme", Module: "billing"}
	if n, err := s.KVUsage(ctx, sc); err != nil || n != 12 {
		t.Errorf("usage after the migration = %d, %v; want 12 (three 2-byte keys, 6 bytes of values)", n, err)
	}
	if err := s.KVPutWithin(ctx, sc, "k3", []byte("w"), 13); err == nil {
		t.Error("a put over the quota succeeded after the migration")
	}
}

// TestSchemaUserID: one schema on every backend; "user" (reserved in
// PostgreSQL) is user_id in every table that names a principal.
func TestSchemaUserID(t *testing.T) {
	s := open(t, t.TempDir())
	db, err := sql.Open("sqlite", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"audit_events", "confirmations", "api_keys"} {
		var cols []string
		rows, err := db.Query(`SELECT name FROM pragma_table_info(?)`, table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			cols = append(cols, c)
		}
		rows.Close()
		if !slices.Contains(cols, "user_id") || slices.Contains(cols, "user") {
			t.Errorf("%s columns %v: want user_id and no user", table, cols)
		}
	}
}

// TestOpenURL: sqlite:///dir is the same store as the plain directory.
func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	put(t, open(t, dir), scA, "k", "v")
	s := open(t, "sqlite://"+dir)
	if s.Path() != filepath.Join(dir, store.FileName) {
		t.Errorf("Path() = %q", s.Path())
	}
	if v, found, err := s.KVGet(ctx, scA, "k"); err != nil || !found || string(v) != "v" {
		t.Errorf("KVGet through sqlite:// = %q, %v, %v", v, found, err)
	}
}
