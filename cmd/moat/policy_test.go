package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// helloPlugin lays out examples/hello-go (module and manifest) in a temp dir.
func helloPlugin(t *testing.T, extraManifest string) string {
	t.Helper()
	plugin := writeModule(t, "hello-go", testwasm.BuildGo(t, "./examples/hello-go", true))
	manifest, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "examples", "hello-go", "moat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugin, "moat.yaml"), append(manifest, extraManifest...), 0o644); err != nil {
		t.Fatal(err)
	}
	return plugin
}

// TestSignedModules: keygen, sign, verify; a profile that requires
// signatures runs the signed module, and refuses it after one byte of the
// module or the manifest changes, with the reason, in the audit trail too.
func TestSignedModules(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	plugin := helloPlugin(t, "")
	key := filepath.Join(dir, "rel")
	r := moat(t, "", "keygen", "--out", key)
	pubLine := regexp.MustCompile(`RW[A-Za-z0-9+/=]+`).FindString(r.stdout)
	if r.code != 0 || pubLine == "" {
		t.Fatalf("keygen: %+v", r)
	}
	if r := moat(t, "", "sign", plugin, "--key", key+".key"); r.code != 0 || !strings.Contains(r.stdout, "hello-go.wasm.minisig") {
		t.Fatalf("sign: %+v", r)
	}
	if r := moat(t, "", "verify", plugin, "--key", key+".pub"); r.code != 0 || !strings.Contains(r.stdout, "ok: hello-go signed by") {
		t.Fatalf("verify: %+v", r)
	}
	profile := filepath.Join(dir, "ops.yaml")
	os.WriteFile(profile, []byte("name: ops\nrequire_signature: true\ntrusted_keys:\n  - name: rel\n    key: "+pubLine+
		"\ndefault:\n  capabilities: {kv: true}\n  limits: {memory: 64MiB, timeout: 10s}\n"), 0o644)
	run := func() result {
		return moat(t, "", "run", "--data", data, "--profile", profile, plugin, "greet", "--input", "x")
	}
	if r := run(); r.code != 0 || r.stdout != "Hello, x! (call #1)" {
		t.Fatalf("signed run: %+v", r)
	}
	if r := moat(t, "", "policy", "check", plugin, "--profile", profile); r.code != 0 || !strings.Contains(r.stdout, "trusted: signed by trusted key rel") {
		t.Fatalf("policy check signed: %+v", r)
	}

	wasmPath := filepath.Join(plugin, "hello-go.wasm")
	manifestPath := filepath.Join(plugin, "moat.yaml")
	for _, tt := range []struct {
		name, file string
		edit       func([]byte) []byte
		want       string
	}{
		{"module byte", wasmPath, func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, "module changed since signing"},
		{"manifest byte", manifestPath, func(b []byte) []byte { return []byte(strings.Replace(string(b), "Hello", "Hallo", 1)) }, "manifest changed since signing"},
		{"no signature", wasmPath + ".minisig", nil, "unsigned"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			orig, _ := os.ReadFile(tt.file)
			defer os.WriteFile(tt.file, orig, 0o644)
			if tt.edit == nil {
				os.Remove(tt.file)
			} else {
				os.WriteFile(tt.file, tt.edit(append([]byte(nil), orig...)), 0o644)
			}
			r := run()
			if r.code != 3 || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 3 and %q", r.code, r.stderr, tt.want)
			}
			a := moat(t, "", "audit", "--data", data, "--decision", "deny", "--kind", "signature")
			if !strings.Contains(a.stdout, tt.want) {
				t.Fatalf("audit lacks the refusal:\n%s", a.stdout)
			}
		})
	}
}

// TestConfirmFlow: a confirm-required action prints a token and exit 4;
// the token runs it once, for the same principal only.
func TestConfirmFlow(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	data := t.TempDir()
	plugin := helloPlugin(t, "")
	manifest := filepath.Join(plugin, "moat.yaml")
	b, _ := os.ReadFile(manifest)
	os.WriteFile(manifest, []byte(strings.Replace(string(b), "    timeout: 2s\n", "    timeout: 2s\n    confirm: true\n", 1)), 0o644)

	r := moat(t, "", "run", "--data", data, plugin, "greet", "--input", "Bob")
	token := regexp.MustCompile(`--confirm (\S+)`).FindStringSubmatch(r.stderr)
	if r.code != 4 || token == nil || r.stdout != "" {
		t.Fatalf("first run: %+v", r)
	}
	// The hint names the command that works: the one typed, less its
	// input, plus --confirm TOKEN. Run it as printed (by a shell), but
	// first as another org, which must be refused.
	hint := regexp.MustCompile(`(?m)^  (\S+ .*--confirm \S+)$`).FindStringSubmatch(r.stderr)
	if hint == nil || strings.Contains(hint[1], "Bob") || !strings.HasPrefix(hint[1], moatBin+" run --data ") {
		t.Fatalf("the hint names no command to run without the input: %q", r.stderr)
	}
	if r := moat(t, "", "run", "--data", data, plugin, "greet", "--confirm", token[1], "--org", "globex"); r.code != 3 || !strings.Contains(r.stderr, "another principal") {
		t.Fatalf("other org: %+v", r)
	}
	sh := exec.Command("/bin/sh", "-c", hint[1])
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil || stdout.String() != "Hello, Bob! (call #1)" {
		t.Fatalf("the hint's command %q: %v, stdout %q, stderr %q", hint[1], err, stdout.String(), stderr.String())
	}
	if r := moat(t, "", "run", "--data", data, plugin, "greet", "--confirm", token[1]); r.code != 3 || !strings.Contains(r.stderr, "already used") {
		t.Fatalf("replay: %+v", r)
	}
}

// TestPolicyCheck: a refusal is explained on one screen, with exit 3.
func TestPolicyCheck(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	plugin := helloPlugin(t, "")
	manifest := filepath.Join(plugin, "moat.yaml")
	b, _ := os.ReadFile(manifest)
	os.WriteFile(manifest, []byte(strings.Replace(string(b), "  kv: true", "  kv: true\n  http: [https://api.example.com:443]", 1)), 0o644)
	r := moat(t, "", "policy", "check", manifest)
	lines := strings.Count(r.stdout, "\n")
	if r.code != 3 || !strings.Contains(r.stdout, "https://api.example.com:443") || !strings.Contains(r.stdout, "REFUSED") || lines > 40 {
		t.Fatalf("exit %d, %d lines:\n%s", r.code, lines, r.stdout)
	}
	// A bad manifest names the file, the line and the field.
	bad := filepath.Join(t.TempDir(), "moat.yaml")
	os.WriteFile(bad, []byte("name: x\nversion: 1.0.0\ncapabilities:\n  http: ['*']\n"), 0o644)
	if r := moat(t, "", "policy", "check", bad); r.code != 2 || !strings.Contains(r.stderr, "moat.yaml:4") || !strings.Contains(r.stderr, "allow_any") {
		t.Fatalf("bad manifest: %+v", r)
	}
	// An alias is refused where it is written, not expanded (a manifest's
	// walker used to follow them).
	os.WriteFile(bad, []byte("name: x\nversion: 1.0.0\ncapabilities:\n  db: &c [orders]\n  kv: *c\n"), 0o644)
	if r := moat(t, "", "policy", "check", bad); r.code != 2 || !strings.Contains(r.stderr, "moat.yaml:5: capabilities.kv: YAML aliases (*c) are not supported (the anchor &c is at line 4)") {
		t.Fatalf("alias in a manifest: %+v", r)
	}
}
