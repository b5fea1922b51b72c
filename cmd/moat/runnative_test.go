package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunNativePlugin: `moat run` on the native Python example, as its
// README says to run it: workers confined, ops through the gate (the kv
// counter), the minimal profile; and a plugin directory the workers could
// not read is refused with the fix.
func TestRunNativePlugin(t *testing.T) {
	why := ""
	if os.Geteuid() != 0 {
		why = "native plugins run confined, which this test asserts as root"
	} else if err := exec.Command("python3", "-c", "import numpy").Run(); err != nil {
		why = "python3 with numpy is not installed (apt-get install python3-numpy)"
	}
	if why != "" {
		if os.Getenv("MOAT_REQUIRE_TOOLS") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
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
	if err := os.Chmod(filepath.Join(plugin, "main.py"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = moat(t, "", "--data", data, "run", plugin, "greet")
	if r.code != 2 || !strings.Contains(r.stderr, "not readable by other users") || !strings.Contains(r.stderr, "chmod -R a+rX") {
		t.Fatalf("private main.py: exit %d, stderr %q; want a usage error naming the fix", r.code, r.stderr)
	}
}
