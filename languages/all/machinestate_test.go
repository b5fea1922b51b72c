package all_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
)

// TestGoSeedOncePerMachine: Go's standard library for wasip1 (the seed
// GOCACHE, 40 s of CPU) is built into the machine's state directory and
// used from there by every data directory: two executors of two fresh
// data directories build and run Go, and neither keeps a seed of its own.
// Before, each data directory built its own (the make-run home, the
// user's home, the server's data_dir: 43-47 s each).
func TestGoSeedOncePerMachine(t *testing.T) {
	testenv.Slow(t, "two Go builds and their compiles to machine code (7 s; the seed's first build 40 s more)")
	needLanguage(t, "go")
	machine := persistentDir(t, "lang-state") // where the package's other Go tests keep the seed
	for i := range 2 {
		state := t.TempDir()
		e, err := languages.NewExecutor(languages.ExecutorConfig{
			Host: testHost(t), Audit: sharedAudit, BuildCacheDir: t.TempDir(), StateDir: state, MachineStateDir: machine,
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "go", Source: languages.Source{Files: []languages.File{
			{Name: "main.go", Content: []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"once\", " + string(rune('0'+i)) + ") }\n")}}}})
		if err != nil {
			t.Fatal(err)
		}
		if want := "once " + string(rune('0'+i)); strings.TrimSpace(string(res.Stdout)) != want {
			t.Fatalf("data dir %d: stdout %q, want %q (status %s, %s)", i, res.Stdout, want, res.Status, res.CompileOutput)
		}
		seeds, _ := filepath.Glob(filepath.Join(state, "go", "gocache-*"))
		if len(seeds) != 0 {
			t.Errorf("data dir %d built a seed of its own: %v", i, seeds)
		}
	}
	seeds, _ := filepath.Glob(filepath.Join(machine, "go", "gocache-*"))
	for _, s := range seeds {
		if _, err := os.Stat(filepath.Join(s, ".complete")); err == nil {
			return
		}
	}
	t.Fatalf("no complete seed in the machine's state directory %s: %v", machine, seeds)
}
