package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
)

// moatEnv runs moat with extra environment variables.
func moatEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return moatEnvIn(t, "", env, args...)
}

// TestStoreCommandsUseServerConfig: moat keys and moat audit given the
// server's --config (or $MOAT_DATABASE_URL) work on the store the server
// uses: its data_dir's SQLite, or its PostgreSQL database, and keys made
// so authenticate on the server.
func TestStoreCommandsUseServerConfig(t *testing.T) {
	dbURL := pgtest.Database(t)
	for i, tt := range []struct {
		name   string
		config func(dir string) string // the config file's text
		env    func(dir string) []string
		// open opens the store the server of config uses, for checking.
		open func(dir string) string
	}{
		{"data_dir of the config", func(dir string) string { return "data_dir: " + filepath.Join(dir, "served") + "\n" }, nil,
			func(dir string) string { return filepath.Join(dir, "served") }},
		{"database_url of the config", func(string) string { return "database_url: " + dbURL + "\n" }, nil,
			func(string) string { return dbURL }},
		{"MOAT_DATABASE_URL over the config's data_dir", func(dir string) string { return "data_dir: " + filepath.Join(dir, "served") + "\n" },
			func(string) []string { return []string{"MOAT_DATABASE_URL=" + dbURL} }, func(string) string { return dbURL }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "moat-server.yaml")
			os.WriteFile(cfg, []byte(tt.config(dir)+"listen: 127.0.0.1:0\n"), 0o644)
			var env []string
			if tt.env != nil {
				env = tt.env(dir)
			}
			org := fmt.Sprintf("org%d", i)
			r := moatEnv(t, env, "keys", "create", "--config", cfg, "--org", org, "--user", "ann", "--role", "admin", "--name", "ci")
			key := strings.TrimSpace(r.stdout)
			if r.code != 0 || !strings.HasPrefix(key, "moat_sk_") {
				t.Fatalf("keys create --config: %+v", r)
			}
			// The key is in the server's store, and only there.
			st, err := store.Open(context.Background(), tt.open(dir))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			keys, err := st.APIKeys(context.Background(), org)
			if err != nil || len(keys) != 1 || keys[0].Name != "ci" {
				t.Fatalf("keys in the server's store: %+v %v", keys, err)
			}
			if r := moat(t, "", "keys", "list", "--data", filepath.Join(dir, "elsewhere"), "--org", org); r.code != 0 || strings.Contains(r.stdout, "ci") {
				t.Errorf("the key is in --data too: %+v", r)
			}
			if r := moatEnv(t, env, "keys", "list", "--config", cfg, "--org", org); r.code != 0 || !strings.Contains(r.stdout, keys[0].ID) {
				t.Errorf("keys list --config: %+v", r)
			}
			// The server of that config takes the key.
			var log bytes.Buffer
			srv, base := startServeEnv(t, &log, env, "--config", cfg, "--data", filepath.Join(dir, "served"))
			if code, out, err := api(base, key, "GET", "/v1/whoami", "", ""); code != 200 || !strings.Contains(out, `"org":"`+org+`"`) {
				t.Fatalf("whoami with the key of keys create --config: %d %s %v", code, out, err)
			}
			// A refused upload is an audit event of the organization.
			if code, out, err := api(base, key, "POST", "/v1/modules?name=x", "not wasm", "application/wasm"); code != 422 {
				t.Fatalf("upload of garbage: %d %s %v", code, out, err)
			}
			srv.Process.Signal(syscall.SIGTERM) // a graceful stop writes the queued audit events
			srv.Wait()
			if r := moatEnv(t, env, "audit", "--config", cfg, "--org", org, "--json"); r.code != 0 || !strings.Contains(r.stdout, `"org":"`+org+`"`) {
				t.Errorf("audit --config: the server's events of %s are not there: %+v", org, r)
			}
			if r := moatEnv(t, env, "keys", "revoke", "--config", cfg, keys[0].ID); r.code != 0 {
				t.Fatalf("keys revoke --config: %+v", r)
			}
			if keys, _ := st.APIKeys(context.Background(), org); len(keys) != 1 || keys[0].RevokedAt.IsZero() {
				t.Errorf("keys revoke --config did not revoke in the server's store: %+v", keys)
			}
		})
	}
}

// TestDatabaseURLRefusals: a bad database URL is refused with exit 2
// naming where it came from, and no message of moat keys, audit or serve
// shows the password, whether the URL is malformed or the database
// unreachable.
func TestDatabaseURLRefusals(t *testing.T) {
	const pw = "s3cret-Pw"
	dir := t.TempDir()
	unreachable := "postgres://moat:" + pw + "@127.0.0.1:1/moat?sslmode=disable&connect_timeout=2"
	cfgBad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(cfgBad, []byte("database_url: mysql://moat:"+pw+"@db/moat\n"), 0o644)
	cfgAway := filepath.Join(dir, "away.yaml")
	os.WriteFile(cfgAway, []byte("database_url: "+unreachable+"\nlisten: 127.0.0.1:0\n"), 0o644)
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"config: not PostgreSQL", nil, []string{"keys", "list", "--config", cfgBad}, 2,
			"bad.yaml:1: database_url: mysql://moat:xxxxx@db/moat is not a PostgreSQL URL"},
		{"env: not PostgreSQL", []string{"MOAT_DATABASE_URL=mysql://moat:" + pw + "@db/moat"}, []string{"audit"}, 2,
			"$MOAT_DATABASE_URL: mysql://moat:xxxxx@db/moat is not a PostgreSQL URL"},
		{"env: does not parse", []string{"MOAT_DATABASE_URL=postgres://moat:" + pw + "%zz@db/moat"}, []string{"keys", "list"}, 2,
			"$MOAT_DATABASE_URL: (a database URL that does not parse): the URL does not parse"},
		{"env: a short media URL key", []string{"MOAT_MEDIA_KEY=" + pw}, []string{"keys", "list"}, 2,
			"$MOAT_MEDIA_KEY: the media URL key is 9 characters; use at least 32"},
		{"env: a short replica secret", []string{"MOAT_REPLICA_SECRET=" + pw}, []string{"keys", "list"}, 2,
			"$MOAT_REPLICA_SECRET: the replica secret is 9 characters; use at least 32"},
		{"keys: unreachable", nil, []string{"keys", "create", "--config", cfgAway, "--org", "acme", "--user", "ann"}, 1,
			"postgres://moat:xxxxx@127.0.0.1:1/moat"},
		{"audit: unreachable", nil, []string{"audit", "--config", cfgAway}, 1, "postgres://moat:xxxxx@127.0.0.1:1/moat"},
		{"serve: unreachable", nil, []string{"serve", "--config", cfgAway, "--data", filepath.Join(dir, "d"), "--confine", "off"}, 1,
			"postgres://moat:xxxxx@127.0.0.1:1/moat"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := moatEnv(t, tt.env, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tt.code, tt.want)
			}
			if strings.Contains(r.stderr+r.stdout, pw) {
				t.Errorf("the password is in the output: %s", r.stderr+r.stdout)
			}
		})
	}
}
