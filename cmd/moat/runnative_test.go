package main_test

import (
	"github.com/moat-sandbox/moat/internal/testenv"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRunNativePlugin: `moat run` on the native Python example, as its
// README says to run it: workers confined, ops through the gate (the kv
// counter), the minimal profile; and a plugin directory the workers could
// not read is refused with the fix.
func TestRunNativePlugin(t *testing.T) {
	testenv.Require(t, testenv.NativePython(true))
	dir, err := os.MkdirTemp("", "moat-native-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	plugin := filepath.Join(dir, "hello-python-native")
	if err := os.CopyFS(plugin, os.DirFS("../../examples/hello-python-native")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, plugin} {
		os.Chmod(p, 0o755)
	}
	data := filepath.Join(dir, "data")
	for i, want := range []string{"Hello, Ann! (call #1, numpy ", "Hello, Ann! (call #2, numpy "} {
		r := moat(t, "", "--data", data, "run", plugin, "greet", "--input", "Ann")
		if r.code != 0 || !strings.HasPrefix(r.stdout, want) {
			t.Fatalf("run #%d: exit %d, stdout %q, want %q...\n%s", i+1, r.code, r.stdout, want, r.stderr)
		}
	}
	r := moat(t, "", "--data", data, "run", plugin, "stats", "--input", "[1, 2, 3, 10]")
	if r.code != 0 || r.stdout != `{"n":4,"mean":4.0,"std":3.5355339059327378,"median":2.5}` {
		t.Fatalf("stats: exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
	r = moat(t, "", "--data", data, "run", plugin, "stats", "--input", "not json")
	if r.code == 0 || !strings.Contains(r.stderr, "invalid_argument") {
		t.Fatalf("stats of bad input: exit %d, stderr %q; want invalid_argument", r.code, r.stderr)
	}
	// Signed: moat sign packs the directory as moat run and moat serve do.
	key := filepath.Join(dir, "rel")
	r = moat(t, "", "keygen", "--out", key)
	pubLine := regexp.MustCompile(`RW[A-Za-z0-9+/=]+`).FindString(r.stdout)
	if r.code != 0 || pubLine == "" {
		t.Fatalf("keygen: %+v", r)
	}
	if r := moat(t, "", "sign", plugin, "--key", key+".key"); r.code != 0 || !strings.Contains(r.stdout, "hello-python-native.minisig") {
		t.Fatalf("sign: %+v", r)
	}
	if r := moat(t, "", "verify", plugin, "--key", key+".pub"); r.code != 0 || !strings.Contains(r.stdout, "ok: hello-python-native signed by") {
		t.Fatalf("verify: %+v", r)
	}
	profile := filepath.Join(dir, "ops.yaml")
	os.WriteFile(profile, []byte("name: ops\nrequire_signature: true\ntrusted_keys:\n  - name: rel\n    key: "+pubLine+
		"\ndefault:\n  capabilities: {kv: true}\n  limits: {memory: 64MiB, timeout: 10s}\n"), 0o644)
	if r := moat(t, "", "--data", data, "--profile", profile, "run", plugin, "greet", "--input", "Sig"); r.code != 0 || !strings.HasPrefix(r.stdout, "Hello, Sig! (call #3") {
		t.Fatalf("signed run: %+v", r)
	}
	main := filepath.Join(plugin, "main.py")
	orig, _ := os.ReadFile(main)
	os.WriteFile(main, []byte(strings.Replace(string(orig), "Hello", "Hallo", 1)), 0o644)
	if r := moat(t, "", "--data", data, "--profile", profile, "run", plugin, "greet"); r.code == 0 || !strings.Contains(r.stderr, "module changed since signing") {
		t.Fatalf("tampered run: %+v", r)
	}
	os.WriteFile(main, orig, 0o644)
	// Unsigned: the refusal names the file moat sign writes for a
	// directory (NAME.minisig, not a module's NAME.wasm.minisig).
	sig := filepath.Join(plugin, "hello-python-native.minisig")
	if err := os.Rename(sig, sig+".away"); err != nil {
		t.Fatal(err)
	}
	r = moat(t, "", "--data", data, "--profile", profile, "run", plugin, "greet")
	if r.code == 0 || !strings.Contains(r.stderr, "unsigned (no hello-python-native.minisig)") {
		t.Fatalf("unsigned run: %+v", r)
	}
	if err := os.Rename(sig+".away", sig); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(filepath.Join(plugin, "main.py"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = moat(t, "", "--data", data, "run", plugin, "greet")
	if r.code != 2 || !strings.Contains(r.stderr, "not readable by other users") || !strings.Contains(r.stderr, "chmod -R a+rX") {
		t.Fatalf("private main.py: exit %d, stderr %q; want a usage error naming the fix", r.code, r.stderr)
	}
}
