package secrets_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
)

func newKey(t *testing.T) (*secrets.Key, string) {
	t.Helper()
	raw := make([]byte, secrets.KeySize)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	enc := base64.StdEncoding.EncodeToString(raw)
	k, err := secrets.ParseKey(enc)
	if err != nil {
		t.Fatal(err)
	}
	return k, enc
}

// TestSealBindsOrgAndName: a sealed value opens only for the organization
// and name it was sealed for, only under its key, and not once a byte of
// it changed.
func TestSealBindsOrgAndName(t *testing.T) {
	k, _ := newKey(t)
	other, _ := newKey(t)
	value := []byte("ghp_0123456789abcdef")
	ct, nonce, err := k.Seal("acme", "github", value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ct, value) {
		t.Fatal("the ciphertext holds the value")
	}
	got, err := k.Open("acme", "github", ct, nonce)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	flipped := bytes.Clone(ct)
	flipped[0] ^= 1
	for name, open := range map[string]func() ([]byte, error){
		"another organization":        func() ([]byte, error) { return k.Open("evil", "github", ct, nonce) },
		"the operator's own":          func() ([]byte, error) { return k.Open("", "github", ct, nonce) },
		"another name":                func() ([]byte, error) { return k.Open("acme", "gitlab", ct, nonce) },
		"org and name shifted":        func() ([]byte, error) { return k.Open("acmeg", "ithub", ct, nonce) },
		"another key":                 func() ([]byte, error) { return other.Open("acme", "github", ct, nonce) },
		"a changed byte":              func() ([]byte, error) { return k.Open("acme", "github", flipped, nonce) },
		"another nonce":               func() ([]byte, error) { return k.Open("acme", "github", ct, make([]byte, 12)) },
		"a short nonce":               func() ([]byte, error) { return k.Open("acme", "github", ct, nonce[:4]) },
		"the tag cut off":             func() ([]byte, error) { return k.Open("acme", "github", ct[:len(ct)-16], nonce) },
		"nothing but the tag removed": func() ([]byte, error) { return k.Open("acme", "github", ct[:len(value)], nonce) },
	} {
		v, err := open()
		if !errors.Is(err, secrets.ErrTampered) || v != nil {
			t.Errorf("%s: Open = %q, %v; want ErrTampered", name, v, err)
		}
	}
	ct2, nonce2, _ := k.Seal("acme", "github", value)
	if bytes.Equal(nonce, nonce2) || bytes.Equal(ct, ct2) {
		t.Error("two seals of one value share a nonce or a ciphertext")
	}
	if k.ID() == other.ID() || len(k.ID()) != 16 {
		t.Errorf("key ids %q and %q", k.ID(), other.ID())
	}
}

// TestParseKey: what is not the base64 of 32 bytes is refused, and no
// message repeats the key.
func TestParseKey(t *testing.T) {
	_, good := newKey(t)
	if _, err := secrets.ParseKey(" " + good + "\n"); err != nil {
		t.Fatalf("surrounding space: %v", err)
	}
	for _, bad := range []string{"", "not base64 at all!", base64.StdEncoding.EncodeToString(make([]byte, 16)), base64.StdEncoding.EncodeToString(make([]byte, 33)), good[:len(good)-4]} {
		_, err := secrets.ParseKey(bad)
		if err == nil {
			t.Errorf("ParseKey(%q) succeeded", bad)
			continue
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
}

// TestLoadKeyFile: a key file that group or others can read is refused
// before it is read, saying how to fix it; a file of the owner only loads.
func TestLoadKeyFile(t *testing.T) {
	k, enc := newKey(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "secrets.key")
	if err := os.WriteFile(f, []byte(enc+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := secrets.LoadKeyFile(f)
	if err != nil || got.ID() != k.ID() {
		t.Fatalf("LoadKeyFile = %v, %v", got, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o660} {
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
		_, err := secrets.LoadKeyFile(f)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), enc) {
			t.Errorf("mode %04o: %v; want a refusal saying chmod 600", mode, err)
		}
	}
	if _, err := secrets.LoadKeyFile(dir); err == nil {
		t.Error("a directory loaded as a key file")
	}
	t.Setenv(secrets.EnvKey, "")
	if k, err := secrets.LoadKey(""); k != nil || err != nil {
		t.Errorf("no key configured: %v, %v; want nil, nil", k, err)
	}
	t.Setenv(secrets.EnvKey, enc)
	if got, err := secrets.LoadKey(filepath.Join(dir, "missing")); err != nil || got.ID() != k.ID() {
		t.Errorf("$%s did not win over the file: %v, %v", secrets.EnvKey, got, err)
	}
	t.Setenv(secrets.EnvKey, "short")
	if _, err := secrets.LoadKey(""); err == nil || !strings.Contains(err.Error(), "$"+secrets.EnvKey) {
		t.Errorf("a bad $%s: %v", secrets.EnvKey, err)
	}
}

func openStore(t *testing.T) (*store.Store, *audit.Log) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := audit.New(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { l.Close(context.Background()); st.Close() })
	return st, l
}

// TestVault: set, list, read and delete through a real store; every
// change is audited with who, where and which name and never the value;
// the value is sealed at rest; a row moved to another organization in the
// database does not open there.
func TestVault(t *testing.T) {
	ctx := context.Background()
	st, log := openStore(t)
	k, _ := newKey(t)
	v := secrets.NewVault(st, k, log)
	root := secrets.Actor{Via: "cli", User: "root"}
	value := []byte("ghp_supersecretvalue")
	if created, err := v.Set(ctx, root, "acme", "github", value); err != nil || !created {
		t.Fatalf("Set = %v, %v", created, err)
	}
	ann := secrets.Actor{Via: "api", User: "ann", Org: "acme"}
	newer := []byte("ghp_rotatedvalue0000")
	if created, err := v.Set(ctx, ann, "acme", "github", newer); err != nil || created {
		t.Fatalf("second Set = %v, %v", created, err)
	}
	if got, err := v.Secret(ctx, "acme", "github"); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("Secret = %q, %v", got, err)
	}
	row, err := st.SecretGet(ctx, "acme", "github")
	if err != nil || bytes.Contains(row.Ciphertext, newer) || row.KeyID != k.ID() || row.CreatedBy != "cli:root" || row.UpdatedBy != "api:ann@acme" {
		t.Fatalf("the stored row: %+v, %v", row, err)
	}
	for _, c := range []struct{ org, name string }{{"evil", "github"}, {"", "github"}, {"acme", "gitlab"}} {
		if _, err := v.Secret(ctx, c.org, c.name); !errors.Is(err, ops.ErrSecretNotFound) {
			t.Errorf("Secret(%q, %q) = %v, want ops.ErrSecretNotFound", c.org, c.name, err)
		}
	}
	// A writer of the database copies acme's row to evil: it does not open.
	row.Org, row.UpdatedAt = "evil", row.UpdatedAt.Add(1)
	if _, err := st.SecretPut(ctx, *row); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Secret(ctx, "evil", "github"); !errors.Is(err, secrets.ErrTampered) || got != nil {
		t.Errorf("the copied row: %q, %v; want ErrTampered", got, err)
	}
	// Another key: named, not called a forgery.
	k2, _ := newKey(t)
	if _, err := secrets.NewVault(st, k2, log).Secret(ctx, "acme", "github"); err == nil || !strings.Contains(err.Error(), "sealed under key "+k.ID()) {
		t.Errorf("another key: %v", err)
	}
	list, err := v.List(ctx, "acme")
	if err != nil || len(list) != 1 || list[0].Name != "github" || list[0].Ciphertext != nil {
		t.Errorf("List = %+v, %v", list, err)
	}
	if err := v.Delete(ctx, ann, "acme", "github"); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, ann, "acme", "github"); !errors.Is(err, store.ErrSecretNotFound) {
		t.Errorf("a second delete: %v", err)
	}
	if err := log.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := log.Query(ctx, audit.Filter{Kind: audit.KindSecret, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, e := range evs {
		rules = append(rules, e.Rule+" "+e.Attrs["name"]+" "+e.Attrs["by"]+" "+e.Org)
		for _, s := range []string{string(value), string(newer)} {
			if strings.Contains(e.Reason, s) || strings.Contains(e.Rule, s) || strings.Contains(strings.Join(mapValues(e.Attrs), " "), s) {
				t.Errorf("an audit event holds the value: %+v", e)
			}
		}
	}
	want := []string{"secret set github cli:root acme", "secret set github api:ann@acme acme", "secret delete github api:ann@acme acme"}
	if strings.Join(rules, "|") != strings.Join(want, "|") {
		t.Errorf("audit events:\n%s\nwant\n%s", strings.Join(rules, "\n"), strings.Join(want, "\n"))
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestVaultRefuses: bad names and values are refused before anything is
// stored, and the errors never repeat a value; with no key, every method
// says how to configure one.
func TestVaultRefuses(t *testing.T) {
	ctx := context.Background()
	st, log := openStore(t)
	k, _ := newKey(t)
	v := secrets.NewVault(st, k, log)
	who := secrets.Actor{Via: "cli", User: "root"}
	for _, c := range []struct {
		name  string
		value string
	}{
		{"github", "short"},
		{"github", "ends in a newline\n"},
		{"github", "has a\r\nheader: injected"},
		{"github", "nul\x00inside-it"},
		{"github", strings.Repeat("v", abi.MaxSecretBytes+1)},
		{"git hub", "a good long value"},
		{"../x", "a good long value"},
		{"", "a good long value"},
	} {
		_, err := v.Set(ctx, who, "acme", c.name, []byte(c.value))
		var ae *abi.Error
		if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
			t.Errorf("Set(%q, %q) = %v, want invalid_argument", c.name, c.value, err)
		}
		if err != nil && len(c.value) >= abi.MinSecretBytes && strings.Contains(err.Error(), strings.TrimSpace(c.value)) {
			t.Errorf("the error repeats the value: %v", err)
		}
	}
	if list, _ := st.Secrets(ctx, "acme"); len(list) != 0 {
		t.Errorf("refused sets stored %v", list)
	}
	none := secrets.NewVault(st, nil, log)
	for name, err := range map[string]error{
		"set":    func() error { _, err := none.Set(ctx, who, "acme", "github", []byte("a good long value")); return err }(),
		"delete": none.Delete(ctx, who, "acme", "github"),
		"list":   func() error { _, err := none.List(ctx, "acme"); return err }(),
		"secret": func() error { _, err := none.Secret(ctx, "acme", "github"); return err }(),
	} {
		if !errors.Is(err, secrets.ErrNoKey) || !strings.Contains(err.Error(), secrets.EnvKey) || !strings.Contains(err.Error(), "secrets_key_file") {
			t.Errorf("%s with no key: %v", name, err)
		}
	}
}
