package main_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
)

// TestSecretsCmd: moat secrets set, list and delete against a data
// directory: the value comes from stdin only, is sealed at rest, never
// printed, and every change is in the audit trail; with no key, each
// command says how to configure one; a key file others can read is
// refused.
func TestSecretsCmd(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	raw := make([]byte, 32)
	rand.Read(raw)
	key := base64.StdEncoding.EncodeToString(raw)
	const value = "ghp_cli_secret_value_123"

	t.Setenv("MOAT_SECRETS_KEY", "")
	for _, args := range [][]string{{"set", "--org", "acme", "github"}, {"list", "--org", "acme"}, {"delete", "--org", "acme", "github"}} {
		r := moat(t, value+"\n", append(append([]string{"secrets"}, args...), "--data", data)...)
		if r.code != 2 || !strings.Contains(r.stderr, "MOAT_SECRETS_KEY") || !strings.Contains(r.stderr, "secrets_key_file") {
			t.Errorf("%v with no key: %d %s", args, r.code, r.stderr)
		}
	}

	t.Setenv("MOAT_SECRETS_KEY", key)
	if r := moat(t, value+"\n", "secrets", "set", "--org", "acme", "github", "--data", data); r.code != 0 || !strings.Contains(r.stdout, "stored secret github of organization acme") {
		t.Fatalf("set: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := moat(t, "ghp_replaced_value_456", "secrets", "set", "--org", "acme", "github", "--data", data); r.code != 0 || !strings.Contains(r.stdout, "replaced") {
		t.Fatalf("set again: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := moat(t, "sk-operator-own-key", "secrets", "set", "openai", "--data", data); r.code != 0 || !strings.Contains(r.stdout, "the operator's own") {
		t.Fatalf("set the operator's own: %d %s %s", r.code, r.stdout, r.stderr)
	}
	for _, bad := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{value, []string{"set", "--org", "acme", "github", value}, "accepts 1 arg"}, // never as an argument
		{"", []string{"set", "--org", "acme", "empty"}, "no value on standard input"},
		{"short", []string{"set", "--org", "acme", "short"}, "the least is 8"},
		{"two\nlines here", []string{"set", "--org", "acme", "multi"}, "control byte"},
		{value, []string{"set", "--org", "acme", "x'; DROP TABLE secrets; --"}, "secret name"},
		{value, []string{"set", "--org", "ac me", "github"}, "--org"},
		{value, []string{"delete", "--org", "acme", "nosuch"}, "has no secret nosuch"},
	} {
		r := moat(t, bad.stdin, append(append([]string{"secrets"}, bad.args...), "--data", data)...)
		if r.code == 0 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("%v: %d %s; want a refusal containing %q", bad.args, r.code, r.stderr, bad.want)
		}
		if strings.Contains(r.stderr+r.stdout, value) {
			t.Errorf("%v printed the value", bad.args)
		}
	}
	ls := moat(t, "", "secrets", "list", "--org", "acme", "--data", data)
	if ls.code != 0 || !strings.Contains(ls.stdout, "github") || strings.Count(ls.stdout, "\n") != 2 || strings.Contains(ls.stdout, "ghp_") {
		t.Fatalf("list: %d %q %s", ls.code, ls.stdout, ls.stderr)
	}
	if ls := moat(t, "", "secrets", "list", "--data", data); !strings.Contains(ls.stdout, "openai") || strings.Contains(ls.stdout, "github") {
		t.Errorf("the operator's list: %q", ls.stdout)
	}

	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	row, err := st.SecretGet(ctx, "acme", "github")
	if err != nil || bytes.Contains(row.Ciphertext, []byte("ghp_replaced")) {
		t.Fatalf("the row at rest: %v %v", row, err)
	}
	evs, err := st.AuditQuery(ctx, store.AuditFilter{Kind: "secret"})
	if err != nil || len(evs) != 3 {
		t.Fatalf("%d secret audit events (%v), want 3", len(evs), err)
	}
	for _, e := range evs {
		if e.Attrs["by"] == "" || !strings.HasPrefix(e.Attrs["by"], "cli:") || strings.Contains(e.Reason, "ghp_") || strings.Contains(e.Reason, "sk-") {
			t.Errorf("audit event %+v", e)
		}
	}
	st.Close()

	if r := moat(t, "", "secrets", "delete", "--org", "acme", "github", "--data", data); r.code != 0 {
		t.Fatalf("delete: %d %s", r.code, r.stderr)
	}
	if ls := moat(t, "", "secrets", "list", "--org", "acme", "--data", data); strings.Contains(ls.stdout, "github") {
		t.Errorf("list after delete: %q", ls.stdout)
	}

	// A key file in the server config: refused while others can read it.
	t.Setenv("MOAT_SECRETS_KEY", "")
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "secrets.key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o644)
	cfg := filepath.Join(dir, "moat-server.yaml")
	os.WriteFile(cfg, []byte("data_dir: "+data+"\nsecrets_key_file: "+keyFile+"\n"), 0o644)
	if r := moat(t, "", "secrets", "list", "--config", cfg); r.code == 0 || !strings.Contains(r.stderr, "chmod 600") {
		t.Errorf("a key file of mode 0644: %d %s", r.code, r.stderr)
	}
	os.Chmod(keyFile, 0o600)
	if r := moat(t, "", "secrets", "list", "--config", cfg); r.code != 0 || !strings.Contains(r.stdout, "openai") {
		t.Errorf("--config with secrets_key_file: %d %s %s", r.code, r.stdout, r.stderr)
	}
}
