// Package testwasm builds Go packages into WebAssembly for tests, with the
// stock Go toolchain (GOOS=wasip1). Builds are cached by Go's build cache,
// so after the first run a fixture costs a link, not a compile.
package testwasm

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string][]byte{}
)

// BuildGo builds the Go package at pkg (a path relative to the repository
// root, such as "./testdata/goguest") for wasip1 and returns the module.
// With reactor set it builds with -buildmode=c-shared, as moat plugins are.
func BuildGo(t testing.TB, pkg string, reactor bool) []byte {
	t.Helper()
	key := pkg
	if reactor {
		key += " reactor"
	}
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[key]; ok {
		return b
	}
	root := RepoRoot(t)
	out := filepath.Join(t.TempDir(), "fixture.wasm")
	args := []string{"build", "-o", out}
	if reactor {
		args = append(args, "-buildmode=c-shared")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s for wasip1: %v\n%s", pkg, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	built[key] = b
	return b
}

// RepoRoot finds the module root (the directory holding go.mod) above the
// test's working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testwasm: no go.mod above the working directory")
		}
		dir = parent
	}
}
