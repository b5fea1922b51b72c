package main_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/languages/python"
	"github.com/moat-sandbox/moat/languages/ruby"
	"github.com/moat-sandbox/moat/toolchains"
)

// TestRunInterpretedPlugin: moat run runs the JavaScript, Python and Ruby hello
// plugins from their directories: the script is the action, the input its
// stdin, and its kv counter (through the device file) rises across runs,
// scoped by organization; an undeclared action and a missing action name
// are usage errors.
func TestRunInterpretedPlugin(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	if _, err := python.Interpreter(""); errors.Is(err, toolchains.ErrMissing) {
		needTool(t, filepath.Join(toolchains.Dir(), "npm", "node_modules", python.NPMPackage))
	}
	root := testwasm.RepoRoot(t)
	data := t.TempDir()
	for _, tt := range testenv.ShortLanguages([]struct{ dir, name string }{{"examples/hello-python", "Py"}, {"examples/hello-js", "JS"}, {"examples/hello-ruby", "Rb"}}) {
		t.Run(filepath.Base(tt.dir), func(t *testing.T) {
			if tt.name == "Rb" {
				if _, err := ruby.Interpreter(""); errors.Is(err, toolchains.ErrMissing) {
					needTool(t, filepath.Join(toolchains.Dir(), "npm", "node_modules", ruby.NPMPackage))
				}
			}
			dir := filepath.Join(root, tt.dir)
			for i, want := range []string{"Hello, " + tt.name + "! (call #1)", "Hello, " + tt.name + "! (call #2)"} {
				r := moat(t, tt.name, "run", "--data", data, dir, "greet")
				if r.code != 0 || strings.TrimSpace(r.stdout) != want {
					t.Fatalf("run %d: exit %d, stdout %q, stderr %q; want %q", i+1, r.code, r.stdout, r.stderr, want)
				}
			}
			if r := moat(t, tt.name, "run", "--data", data, "--org", "globex", dir, "greet"); strings.TrimSpace(r.stdout) != "Hello, "+tt.name+"! (call #1)" {
				t.Errorf("another organization: %q %q, want its own counter", r.stdout, r.stderr)
			}
			if r := moat(t, "", "run", "--data", data, dir, "nope"); r.code != 2 || !strings.Contains(r.stderr, `no action "nope"`) {
				t.Errorf("undeclared action: exit %d, stderr %q", r.code, r.stderr)
			}
			if r := moat(t, "", "run", "--data", data, dir); r.code != 2 || !strings.Contains(r.stderr, "name an action (greet)") {
				t.Errorf("no action: exit %d, stderr %q", r.code, r.stderr)
			}
		})
	}
}

// TestSignedScriptPlugin: an interpreted plugin is signed over its sources
// (NAME.minisig beside moat.yaml); a profile that requires signatures runs
// it, and refuses it after one byte of a source file or the manifest
// changes, or without the signature.
func TestSignedScriptPlugin(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	dir := t.TempDir()
	plugin := filepath.Join(dir, "hello-js")
	os.Mkdir(plugin, 0o755)
	for _, f := range []string{"moat.yaml", "main.js"} {
		b, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "examples", "hello-js", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(plugin, f), b, 0o644)
	}
	key := filepath.Join(dir, "rel")
	r := moat(t, "", "keygen", "--out", key)
	pubLine := regexp.MustCompile(`RW[A-Za-z0-9+/=]+`).FindString(r.stdout)
	if r.code != 0 || pubLine == "" {
		t.Fatalf("keygen: %+v", r)
	}
	if r := moat(t, "", "sign", plugin, "--key", key+".key"); r.code != 0 || !strings.Contains(r.stdout, "hello-js.minisig") {
		t.Fatalf("sign: %+v", r)
	}
	if r := moat(t, "", "verify", plugin, "--key", key+".pub"); r.code != 0 || !strings.Contains(r.stdout, "ok: hello-js signed by") {
		t.Fatalf("verify: %+v", r)
	}
	profile := filepath.Join(dir, "ops.yaml")
	os.WriteFile(profile, []byte("name: ops\nrequire_signature: true\ntrusted_keys:\n  - name: rel\n    key: "+pubLine+
		"\ndefault:\n  capabilities: {kv: true}\n  limits: {memory: 64MiB, timeout: 10s}\n"), 0o644)
	data := filepath.Join(dir, "data")
	run := func() result {
		return moat(t, "", "run", "--data", data, "--profile", profile, plugin, "greet", "--input", "x")
	}
	if r := run(); r.code != 0 || strings.TrimSpace(r.stdout) != "Hello, x! (call #1)" {
		t.Fatalf("signed run: %+v", r)
	}
	// The build's work dir is gone after the run, though moat was confined
	// when it ended (it is in the data dir, which moat may still write).
	if left, _ := os.ReadDir(filepath.Join(data, "tmp")); len(left) != 0 {
		t.Fatalf("the run left %d work dirs in %s/tmp", len(left), data)
	}
	if r := moat(t, "", "policy", "check", plugin, "--profile", profile); r.code != 0 || !strings.Contains(r.stdout, "trusted: signed by trusted key rel") {
		t.Fatalf("policy check of the signed plugin: %+v", r)
	}
	for _, tt := range []struct {
		name, file string
		edit       func([]byte) []byte
		want       string
	}{
		{"source byte", "main.js", func(b []byte) []byte { return []byte(strings.Replace(string(b), "call #", "Call #", 1)) }, "module changed since signing"},
		{"manifest byte", "moat.yaml", func(b []byte) []byte { return []byte(strings.Replace(string(b), "Hello", "Hallo", 1)) }, "manifest changed since signing"},
		{"no signature", "hello-js.minisig", nil, "unsigned (no hello-js.minisig)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(plugin, tt.file)
			orig, _ := os.ReadFile(p)
			defer os.WriteFile(p, orig, 0o644)
			if tt.edit == nil {
				os.Remove(p)
			} else {
				os.WriteFile(p, tt.edit(append([]byte(nil), orig...)), 0o644)
			}
			if r := run(); r.code != 3 || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 3 and %q", r.code, r.stderr, tt.want)
			}
		})
	}
}
