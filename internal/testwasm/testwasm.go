// Package testwasm builds Go packages into WebAssembly for tests, with the
// stock Go toolchain (GOOS=wasip1). Builds are cached by Go's build cache,
// so after the first run a fixture costs a link, not a compile.
package testwasm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
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

// SharedCompileCache is the compilation cache the tests of every package
// may share across runs: .toolchains/cache/wazero beside the repository's
// toolchains ($MOAT_TOOLCHAINS, else a .toolchains above the working
// directory, as toolchains.Dir finds them), the one interptest.CacheDir
// and the server's tests use. wazero keys its files by the module's bytes
// and its own version and writes them by rename, so hosts side by side
// and runs after one another share it safely, and a guest compiles once
// per its bytes rather than once per go test. It returns "" without
// toolchains: the caller then makes a cache of its own run. Tests of a
// cold cache keep their own directory.
func SharedCompileCache() string {
	tc := os.Getenv("MOAT_TOOLCHAINS")
	if tc == "" {
		wd, err := os.Getwd()
		if err != nil {
			return ""
		}
		for d := wd; ; d = filepath.Dir(d) {
			if fi, err := os.Stat(filepath.Join(d, ".toolchains")); err == nil && fi.IsDir() {
				tc = filepath.Join(d, ".toolchains")
				break
			}
			if filepath.Dir(d) == d {
				return ""
			}
		}
	}
	if fi, err := os.Stat(tc); err != nil || !fi.IsDir() {
		return ""
	}
	return filepath.Join(tc, "cache", "wazero")
}

// BuildExtism builds testdata/extism/NAME, a stock Extism plug-in (the
// Extism Go PDK, stock Go, -buildmode=c-shared, in its own Go module), once
// per test binary. Without the PDK in the module cache or downloadable it
// skips the test, or fails it under MOAT_REQUIRE_TOOLS.
func BuildExtism(t testing.TB, name string) []byte {
	t.Helper()
	key := "extism " + name
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[key]; ok {
		return b
	}
	dir := filepath.Join(RepoRoot(t), "testdata", "extism")
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	dl := exec.Command("go", "mod", "download", "github.com/extism/go-pdk")
	dl.Dir, dl.Env = dir, env
	if msg, err := dl.CombinedOutput(); err != nil {
		why := "the Extism Go PDK is neither in the module cache nor downloadable (`make toolchains` fetches it): " + err.Error() + "\n" + string(msg)
		testenv.Require(t, fmt.Sprint(why))
	}
	out := filepath.Join(t.TempDir(), name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./"+name)
	cmd.Dir, cmd.Env = dir, append(env, "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/extism/%s: %v\n%s", name, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	built[key] = b
	return b
}
