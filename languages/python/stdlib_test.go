package python_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/python"
	"github.com/moat-sandbox/moat/toolchains"
)

// TestStdlibFromFiles: with the standard library extracted (make
// toolchains), a run imports it from the mounted files, not from the zip
// inside python.wasm; without it, the same script runs from the zip.
func TestStdlibFromFiles(t *testing.T) {
	const script = "import sys, json, decimal\nprint(sys.prefix, json.__spec__.origin, decimal.Decimal('1.10') + 1)"
	a := build(t, "main.py", script)
	home := python.Stdlib("")
	if home == "" {
		testenv.Require(t, "python's standard library has not been extracted: run `make toolchains`")
	}
	if a.Env["PYTHONHOME"] != python.GuestHome || len(a.Mounts) != 1 || a.Mounts[0].HostDir != home || !a.Mounts[0].ReadOnly {
		t.Fatalf("artifact env %v, mounts %+v; want PYTHONHOME=%s and %s mounted read-only", a.Env, a.Mounts, python.GuestHome, home)
	}
	res, err := run(t, a, runOpts{})
	if err != nil || res.Code != 0 {
		t.Fatalf("run: %v, exit %d, stderr %s", err, res.Code, res.Stderr)
	}
	want := python.GuestHome + " " + python.GuestHome + "/lib/python3.12/json/__init__.pyc 2.10\n"
	if res.Stdout != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}

	// A toolchain directory with the interpreter but no extracted library:
	// the interpreter's own zip.
	bare := t.TempDir()
	if err := os.Symlink(filepath.Join(toolchains.Dir(), "npm"), filepath.Join(bare, "npm")); err != nil {
		t.Fatal(err)
	}
	l, err := languages.Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	a, err = l.Build(context.Background(), languages.BuildEnv{WorkDir: t.TempDir(), ToolchainDir: bare},
		languages.Source{Files: []languages.File{{Name: "main.py", Content: []byte(script)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Mounts) != 0 || a.Env["PYTHONHOME"] != "" {
		t.Fatalf("without the extracted library: env %v, mounts %+v; want neither", a.Env, a.Mounts)
	}
	res, err = run(t, a, runOpts{})
	if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, "python312.zip/json/__init__.pyc 2.10") {
		t.Fatalf("run from the zip: %v, exit %d, stdout %q, stderr %s", err, res.Code, res.Stdout, res.Stderr)
	}
}
