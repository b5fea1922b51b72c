package main_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
)

// TestKeysRotateAndScopesCmd: moat keys create takes scopes and an
// expiry, list shows them, rotate prints a new secret once, and each is
// audited; a bad scope is refused with the vocabulary.
func TestKeysRotateAndScopesCmd(t *testing.T) {
	data := t.TempDir()
	r := moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ci", "--role", "dev", "--scope", "invoke:hello", "--scope", "audit:read", "--expires", "720h")
	if r.code != 0 || !strings.HasPrefix(strings.TrimSpace(r.stdout), "moat_sk_") {
		t.Fatalf("create: %+v", r)
	}
	list := moat(t, "", "keys", "list", "--data", data)
	id := regexp.MustCompile(`key_[0-9a-f]+`).FindString(list.stdout)
	if list.code != 0 || !strings.Contains(list.stdout, "audit:read,invoke:hello") || !strings.Contains(list.stdout, "expires ") || id == "" {
		t.Fatalf("list: %+v", list)
	}
	rot := moat(t, "", "keys", "rotate", "--data", data, id, "--grace", "1m")
	if rot.code != 0 || !strings.HasPrefix(strings.TrimSpace(rot.stdout), "moat_sk_") || strings.TrimSpace(rot.stdout) == strings.TrimSpace(r.stdout) || !strings.Contains(rot.stderr, "works for 1m0s more") {
		t.Fatalf("rotate: %+v", rot)
	}
	if bad := moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ci", "--scope", "admin"); bad.code != 2 || !strings.Contains(bad.stderr, "invoke:MODULE") {
		t.Errorf("a bad scope: %+v", bad)
	}
	if bad := moat(t, "", "keys", "rotate", "--data", data, id, "--grace", "48h"); bad.code != 2 || !strings.Contains(bad.stderr, "grace") {
		t.Errorf("a grace over a day: %+v", bad)
	}
	if a := moat(t, "", "audit", "--data", data, "--kind", "api_key"); strings.Count(a.stdout, "api_key  allow") != 2 {
		t.Errorf("audit: %+v", a)
	}
}

// TestSecretsRotateKeyCmd: moat secrets rotate-key re-seals the stored
// secrets under the configuration's key, opening them with its old keys,
// without asking for a value; run again, it has nothing to do.
func TestSecretsRotateKeyCmd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeKey := func(name string) (string, *secrets.Key) {
		raw := make([]byte, 32)
		rand.Read(raw)
		enc := base64.StdEncoding.EncodeToString(raw)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(enc+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := secrets.ParseKey(enc)
		if err != nil {
			t.Fatal(err)
		}
		return enc, k
	}
	oldEnc, _ := writeKey("old.key")
	_, newKey := writeKey("new.key")
	t.Setenv("MOAT_SECRETS_KEY", oldEnc)
	const value = "ghp_value_to_rotate_123"
	if r := moat(t, value, "secrets", "set", "--org", "acme", "github", "--data", data); r.code != 0 {
		t.Fatalf("set: %+v", r)
	}
	t.Setenv("MOAT_SECRETS_KEY", "")
	cfg := filepath.Join(dir, "moat-server.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+data+"\nsecrets_key_file: "+filepath.Join(dir, "new.key")+"\nsecrets_old_key_files: ["+filepath.Join(dir, "old.key")+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := moat(t, "", "secrets", "rotate-key", "--config", cfg)
	if r.code != 0 || !strings.Contains(r.stderr, "re-sealed 1 secrets under key "+newKey.ID()) || strings.Contains(r.stdout+r.stderr, value) {
		t.Fatalf("rotate-key: %+v", r)
	}
	if r := moat(t, "", "secrets", "rotate-key", "--config", cfg); r.code != 0 || !strings.Contains(r.stderr, "re-sealed 0 secrets") {
		t.Errorf("again: %+v", r)
	}
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := secrets.NewVault(st, newKey, nil).Secret(ctx, "acme", "github")
	if err != nil || string(got) != value {
		t.Errorf("under the new key alone: %q %v", got, err)
	}
}

// TestKeysCmdOverAPI: moat keys --server manages keys through a running
// server's /v1/keys as the holder of $MOAT_API_KEY, under the server's
// checks (key.manage, nothing wider than the caller).
func TestKeysCmdOverAPI(t *testing.T) {
	cfg := server.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.CacheDir = os.Getenv("MOAT_CACHE_DIR")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close(context.Background()) })
	admin, _, err := server.CreateAPIKey(context.Background(), srv.Store(), server.NewAPIKey{Org: "acme", User: "ann", Roles: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	dev, _, err := server.CreateAPIKey(context.Background(), srv.Store(), server.NewAPIKey{Org: "acme", User: "dan", Roles: []string{"dev"}})
	if err != nil {
		t.Fatal(err)
	}
	keys := func(key string, args ...string) result {
		return moatEnv(t, []string{"MOAT_API_KEY=" + key}, append([]string{"keys", "--server", hs.URL}, args...)...)
	}
	r := keys(admin, "create", "--user", "ci", "--scope", "run", "--name", "ci", "--expires", "24h")
	secret := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(secret, "moat_sk_") || !strings.Contains(r.stderr, "ci@acme") {
		t.Fatalf("create: %+v", r)
	}
	list := keys(admin, "list")
	id := regexp.MustCompile(`(?m)^(key_[0-9a-f]+)\s+acme\s+ci`).FindStringSubmatch(list.stdout)
	if list.code != 0 || id == nil || !strings.Contains(list.stdout, "run") || strings.Contains(list.stdout, secret) {
		t.Fatalf("list: %+v", list)
	}
	if r := keys(dev, "create", "--user", "dan"); r.code != 2 || !strings.Contains(r.stderr, "key.manage") {
		t.Errorf("a key without the permission: %+v", r)
	}
	if r := keys(secret, "create", "--user", "x"); r.code != 2 || !strings.Contains(r.stderr, "scope") {
		t.Errorf("a run-scoped key creating a key: %+v", r)
	}
	if r := keys(admin, "create", "--org", "globex", "--user", "x"); r.code != 2 || !strings.Contains(r.stderr, "--org globex") {
		t.Errorf("another organization: %+v", r)
	}
	rot := keys(admin, "rotate", id[1])
	if rot.code != 0 || !strings.HasPrefix(strings.TrimSpace(rot.stdout), "moat_sk_") {
		t.Fatalf("rotate: %+v", rot)
	}
	if r := keys(admin, "revoke", id[1]); r.code != 0 {
		t.Fatalf("revoke: %+v", r)
	}
	if l := keys(admin, "list"); !strings.Contains(l.stdout, "revoked") {
		t.Errorf("list after revoke: %s", l.stdout)
	}
}
