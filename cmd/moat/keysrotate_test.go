package main_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
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
