package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestRunExtism: `moat run` runs Extism plug-ins: output as the Extism
// CLI prints it, the plug-in's error as a one-line failure with exit 1,
// moat's kv through moat_call persisting between runs.
func TestRunExtism(t *testing.T) {
	root := testwasm.RepoRoot(t)
	upper := filepath.Join(root, "testdata", "extism_upper.wasm")
	data := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "output", args: []string{"run", upper, "upper", "--input", "hello"}, stdout: "HELLO"},
		{name: "input from stdin", args: []string{"run", upper, "upper"}, stdout: "FROM STDIN"},
		{name: "no function", args: []string{"run", upper}, code: 2, stderr: "is a plugin: name an action (upper)"},
		{name: "unknown function", args: []string{"run", upper, "lower"}, code: 1, stderr: `no action "lower"`},
	}
	if clang, err := exec.LookPath("clang-19"); err == nil {
		dir := filepath.Join(t.TempDir(), "memo")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if msg, err := exec.Command(clang, "--target=wasm32-wasi", "-O2", "-mexec-model=reactor", "-Wl,--strip-all",
			"-o", filepath.Join(dir, "memo.wasm"), filepath.Join(root, "guests", "extism", "c", "memo.c")).CombinedOutput(); err != nil {
			t.Fatalf("clang: %v\n%s", err, msg)
		}
		mf := "name: memo\nversion: 1.0.0\nkind: extism\nactions: [{name: remember}, {name: recall}]\ncapabilities: {kv: true}\n"
		if err := os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte(mf), 0o644); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, []struct {
			name   string
			args   []string
			code   int
			stdout string
			stderr string
		}{
			{name: "moat_call kv.put", args: []string{"run", dir, "remember", "--input", "hi"}, stdout: `{"resp":{}}`},
			{name: "kv persists between runs", args: []string{"run", dir, "recall"}, stdout: `{"resp":{"value":"aGk=","found":true}}`},
			{name: "plug-in error", args: []string{"run", dir, "remember", "--input", strings.Repeat("x", 5000)}, code: 1,
				stderr: "moat: module memo: action remember: guest_error: a note is at most 4096 bytes"},
		}...)
	} else if os.Getenv("MOAT_REQUIRE_TOOLS") != "" {
		t.Fatal("clang-19 is not installed; `make toolchains` installs it")
	} else {
		t.Log("clang-19 is not installed: the C plug-in cases are skipped")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{tt.args[0], "--data", data}, tt.args[1:]...)
			r := moat(t, "from stdin", args...)
			if r.code != tt.code || r.stdout != tt.stdout || !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q", r.code, r.stdout, r.stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}
