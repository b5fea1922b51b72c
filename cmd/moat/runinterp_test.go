package main_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/languages/python"
	"github.com/moat-sandbox/moat/toolchains"
)

// TestRunInterpretedPlugin: moat run runs the JavaScript and Python hello
// plugins from their directories: the script is the action, the input its
// stdin, and its kv counter (through the device file) rises across runs,
// scoped by organization; an undeclared action and a missing action name
// are usage errors.
func TestRunInterpretedPlugin(t *testing.T) {
	if _, err := python.Interpreter(""); errors.Is(err, toolchains.ErrMissing) {
		needTool(t, filepath.Join(toolchains.Dir(), "npm", "node_modules", python.NPMPackage))
	}
	root := testwasm.RepoRoot(t)
	data := t.TempDir()
	for _, tt := range []struct{ dir, name string }{{"examples/hello-python", "Py"}, {"examples/hello-js", "JS"}} {
		t.Run(filepath.Base(tt.dir), func(t *testing.T) {
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
