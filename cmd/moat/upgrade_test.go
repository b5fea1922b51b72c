package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
)

// moatTimeout runs the moat binary and gives up after d (a moat serve
// that should have refused to start).
func moatTimeout(t *testing.T, d time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return runCmd(t, exec.CommandContext(ctx, moatBin, args...))
}

// schemaVersionOf reads the version PostgreSQL records.
func schemaVersionOf(t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestUpgradeThroughBinary follows an operator upgrading a shared
// PostgreSQL database with the moat binary: moat serve refuses the older
// schema (naming moat migrate and both versions, changing nothing), and
// so does every command that opens the store; moat migrate --dry-run
// lists the steps and applies none; two moat migrate at once (the test
// holds the advisory lock first, so both wait) apply the steps once: one
// lists them, the other finds nothing to do; moat serve then starts and
// serves. A server with --migrate auto upgrades at start, logging each
// step.
func TestUpgradeThroughBinary(t *testing.T) {
	dbURL := pgtest.Database(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "moat-server.yaml")
	os.WriteFile(cfg, []byte("database_url: "+dbURL+"\ncache_dir: "+filepath.Join(dir, "cache")+"\n"), 0o644)

	// The database as the previous release left it.
	r := moat(t, "", "migrate", "--config", cfg, "--to", "10")
	if r.code != 0 || !strings.Contains(r.stdout, "applied 10 step(s)") || !strings.Contains(r.stdout, "schema version 10 now") {
		t.Fatalf("migrate --to 10: %+v", r)
	}
	n := 0
	{
		d := moat(t, "", "migrate", "--config", cfg, "--dry-run")
		m := regexp.MustCompile(`would apply (\d+) step\(s\)`).FindStringSubmatch(d.stdout)
		if d.code != 0 || m == nil || !strings.Contains(d.stdout, "10 → 11") || !strings.Contains(d.stdout, "expand (the previous release keeps working)") {
			t.Fatalf("migrate --dry-run: %+v", d)
		}
		fmt.Sscan(m[1], &n)
		n += 10
		if v := schemaVersionOf(t, dbURL); v != 10 {
			t.Fatalf("--dry-run changed the schema to %d", v)
		}
	}

	// moat serve refuses, with the versions and the fix.
	s := moatTimeout(t, 60*time.Second, "serve", "--config", cfg, "--data", filepath.Join(dir, "a"), "--listen", "127.0.0.1:0", "--confine", "off")
	want := fmt.Sprintf("the database's schema is at version 10 and this moat needs version %d", n)
	if s.code == 0 || !strings.Contains(s.stderr, want) || !strings.Contains(s.stderr, "run `moat migrate`") || !strings.Contains(s.stderr, "migrate: auto") {
		t.Fatalf("moat serve on an older schema: exit %d\n%s\nwant a refusal saying %q and naming moat migrate", s.code, s.stderr, want)
	}
	if strings.Count(strings.TrimSpace(s.stderr), "\n") > 3 {
		t.Errorf("the refusal is not a short message:\n%s", s.stderr)
	}
	if strings.Contains(s.stderr, "*driver.") || strings.Contains(s.stderr, "SchemaError") {
		t.Errorf("the refusal names a Go type:\n%s", s.stderr)
	}
	if k := moat(t, "", "keys", "create", "--config", cfg, "--org", "acme", "--user", "ann", "--role", "admin"); k.code == 0 || !strings.Contains(k.stderr, "moat migrate") {
		t.Errorf("keys create on an older schema: %+v", k)
	}
	if v := schemaVersionOf(t, dbURL); v != 10 {
		t.Fatalf("a refused start changed the schema to %d", v)
	}

	// Two moat migrate at once, both made to wait on the lock.
	holder, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	const migrateLock = 0x6d6f6174_6d6967
	if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		t.Fatal(err)
	}
	var outs [2]bytes.Buffer
	var errs [2]lockedBuffer
	var cmds [2]*exec.Cmd
	for i := range cmds {
		cmds[i] = exec.Command(moatBin, "migrate", "--config", cfg)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &errs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	// Both reach the lock and say they wait (however slowly a loaded
	// machine starts them), and neither ends while it is held.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if strings.Contains(errs[0].String(), "waiting for another moat") && strings.Contains(errs[1].String(), "waiting for another moat") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two migrates did not both wait for the lock within 60 s:\n%s\n%s", errs[0].String(), errs[1].String())
		}
	}
	time.Sleep(200 * time.Millisecond)
	for i, c := range cmds {
		if c.ProcessState != nil {
			t.Fatalf("migrate %d ended while the lock was held", i)
		}
	}
	holder.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(migrateLock))
	applied, nothing := 0, 0
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("migrate %d: %v\n%s%s", i, err, outs[i].String(), errs[i].String())
		}
		if !strings.Contains(errs[i].String(), "waiting for another moat") {
			t.Errorf("migrate %d did not say it waited:\n%s", i, errs[i].String())
		}
		switch o := outs[i].String(); {
		case strings.Contains(o, fmt.Sprintf("applied %d step(s)", n-10)):
			applied++
			if got := strings.Count(errs[i].String(), `msg="store: schema migration"`); got != n-10 {
				t.Errorf("migrate logged %d steps, want %d:\n%s", got, n-10, errs[i].String())
			}
		case strings.Contains(o, fmt.Sprintf("schema version %d is up to date; nothing to do", n)):
			nothing++
		default:
			t.Errorf("migrate %d printed:\n%s", i, o)
		}
	}
	if applied != 1 || nothing != 1 {
		t.Fatalf("applied %d, nothing to do %d; want 1 and 1", applied, nothing)
	}

	// Now it serves.
	k := moat(t, "", "keys", "create", "--config", cfg, "--org", "acme", "--user", "ann", "--role", "admin")
	key := strings.TrimSpace(k.stdout)
	if k.code != 0 {
		t.Fatalf("keys create: %+v", k)
	}
	var log bytes.Buffer
	_, base := startServe(t, &log, "--config", cfg, "--data", filepath.Join(dir, "a"), "--listen", "127.0.0.1:0")
	if code, out, err := api(base, key, "GET", "/v1/whoami", "", ""); code != 200 {
		t.Fatalf("whoami after the migration: %d %s %v", code, out, err)
	}

	// --migrate auto upgrades at start, one log line per step.
	db2 := pgtest.Database(t)
	cfg2 := filepath.Join(dir, "auto.yaml")
	os.WriteFile(cfg2, []byte("database_url: "+db2+"\ncache_dir: "+filepath.Join(dir, "cache")+"\n"), 0o644)
	if r := moat(t, "", "migrate", "--config", cfg2, "--to", "10"); r.code != 0 {
		t.Fatalf("migrate --to 10: %+v", r)
	}
	cmd := exec.Command(moatBin, "serve", "--config", cfg2, "--data", filepath.Join(dir, "b"), "--listen", "127.0.0.1:0", "--migrate", "auto")
	var head bytes.Buffer
	cmd.Stderr = &head
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if within(60*time.Second, func() bool { return schemaVersionOf(t, db2) == n }) < 0 {
		t.Fatalf("--migrate auto did not migrate")
	}
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	if !strings.Contains(head.String(), "from=10 to=11") || strings.Count(head.String(), `msg="store: schema migration"`) != n-10 {
		t.Errorf("--migrate auto did not log every step:\n%s", head.String())
	}
}

// TestBackupRestoreThroughBinary: moat backup of a SQLite store while
// moat serve runs on it, moat restore refused while the server runs and
// over a store without --force, restored into a new directory with its
// kv and media, and a truncated archive refused with nothing written.
func TestBackupRestoreThroughBinary(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	sc := store.Scope{Org: "acme", Module: "m"}
	if err := st.KVPut(ctx, sc, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	media := bytes.Repeat([]byte("%PDF-1.4 moat "), 100)
	it, _, err := st.MediaPut(ctx, store.MediaNew{Org: "acme", Module: "m", User: "ann", Type: "application/pdf", Data: media}, 0)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	var log bytes.Buffer
	startServe(t, &log, "--data", data, "--listen", "127.0.0.1:0")
	archive := filepath.Join(dir, "moat.tar.gz")
	if r := moat(t, "", "backup", "--data", data, "--to", archive); r.code != 0 || !strings.Contains(r.stdout, "2 file(s)") {
		t.Fatalf("backup while serving: %+v", r)
	}
	if r := moat(t, "", "backup", "--data", data, "--to", archive); r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("backup over an existing file: %+v", r)
	}
	if r := moat(t, "", "restore", archive, "--data", data, "--force"); r.code == 0 || !strings.Contains(r.stderr, "is moat serve running on it?") {
		t.Errorf("restore over a running server's store: %+v", r)
	}

	restored := filepath.Join(dir, "restored")
	if r := moat(t, "", "restore", archive, "--data", restored); r.code != 0 || !strings.Contains(r.stdout, "restored") {
		t.Fatalf("restore: %+v", r)
	}
	if r := moat(t, "", "restore", archive, "--data", restored); r.code == 0 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("restore over a store without --force: %+v", r)
	}
	rs, err := store.Open(ctx, restored)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := rs.KVGet(ctx, sc, "k"); err != nil || !ok || string(v) != "v" {
		t.Errorf("restored kv: %q %v %v", v, ok, err)
	}
	if _, b, err := rs.MediaRead(ctx, "acme", it.ID, 1<<20); err != nil || !bytes.Equal(b, media) {
		t.Errorf("restored media: %d bytes %v", len(b), err)
	}
	rs.Close()

	// Hostile: a truncated archive.
	whole, _ := os.ReadFile(archive)
	cut := filepath.Join(dir, "cut.tar.gz")
	os.WriteFile(cut, whole[:len(whole)*2/3], 0o600)
	target := filepath.Join(dir, "never")
	if r := moat(t, "", "restore", cut, "--data", target); r.code == 0 || !strings.Contains(r.stderr, "nothing was written") {
		t.Errorf("restore of a truncated archive: %+v", r)
	}
	if _, err := os.Stat(target); err == nil {
		t.Errorf("a refused restore left %s", target)
	}
	// PostgreSQL's stores are pg_dump's.
	if r := moat(t, "", "backup", "--to", filepath.Join(dir, "pg.tgz"), "--data", data); r.code != 0 {
		t.Errorf("second backup: %+v", r)
	}
	t.Setenv("MOAT_DATABASE_URL", "postgres://moat@127.0.0.1:1/moat")
	if r := moat(t, "", "backup", "--to", filepath.Join(dir, "x.tgz")); r.code == 0 || !strings.Contains(r.stderr, "pg_dump") {
		t.Errorf("backup of a PostgreSQL store: %+v", r)
	}
}
