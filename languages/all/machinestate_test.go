package all_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
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

// TestRustSDKKeptOnce: a Rust plugin's build compiles the moat crate once
// and keeps it (moat-sdk-KEY.rlib in the machine's state directory); a
// rebuild reads it and compiles the plugin alone. A kept crate that is not
// what its name says is no crate rustc links: the rebuild fails, which
// shows the rebuild used the kept one rather than compiling its own.
func TestRustSDKKeptOnce(t *testing.T) {
	testenv.Slow(t, "two Rust plugin builds, the first compiling the SDK crate (20-30 s under load)")
	l := needLanguage(t, "rust")
	pb := l.(languages.PluginBuilder)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	machine := t.TempDir()
	build := func(code string) (time.Duration, error) {
		if err := os.WriteFile(filepath.Join(dir, "lib.rs"), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		work, err := os.MkdirTemp("", "moat-plugin-test-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(work)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		_, err = pb.BuildPlugin(ctx, languages.BuildEnv{WorkDir: work, StateDir: t.TempDir(), MachineStateDir: machine}, dir)
		return time.Since(start), err
	}
	first, err := build("extern crate moat;\n#[no_mangle]\npub extern \"C\" fn f(a: i32) -> i32 { a + 1 }\n")
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := filepath.Glob(filepath.Join(machine, "moat-sdk-*.rlib"))
	if len(kept) != 1 {
		t.Fatalf("kept SDK crates after the first build: %v, want one", kept)
	}
	second, err := build("extern crate moat;\n#[no_mangle]\npub extern \"C\" fn f(a: i32) -> i32 { a + 2 }\n")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first build %s (the SDK compiled), the rebuild after a one-line change %s", first, second)
	if err := os.WriteFile(kept[0], []byte("not an rlib"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := build("extern crate moat;\n#[no_mangle]\npub extern \"C\" fn f(a: i32) -> i32 { a + 3 }\n"); err == nil {
		t.Fatal("a rebuild over a broken kept SDK crate succeeded: the rebuild compiled the SDK again instead of reading the kept one")
	}
}

// TestInterpreterOncePerMachine: CPython's machine code, its snapshot
// entry and the image of its start are made once per machine
// (host.Config.MachineCacheDir): the first data directory's run compiles
// (first-time work, stage "load"), a second fresh data directory's run
// reports none, and the image is the machine's, not the data
// directory's.
func TestInterpreterOncePerMachine(t *testing.T) {
	testenv.Slow(t, "python.wasm compiled to machine code into a fresh machine cache (30-60 s of CPU)")
	needLanguage(t, "python")
	ctx := context.Background()
	machine := filepath.Join(t.TempDir(), "machine")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range 2 {
		data := t.TempDir()
		h, err := host.New(ctx, host.Config{DataDir: data, MachineCacheDir: machine, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(ctx) })
		e, err := languages.NewExecutor(languages.ExecutorConfig{Host: h, BuildCacheDir: t.TempDir(), StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		var stages []string
		res, err := e.Exec(ctx, languages.ExecRequest{Language: "python",
			Source:    languages.Source{Files: []languages.File{{Name: "main.py", Content: []byte("print(6*7)\n")}}},
			Preparing: func(stage string) func() { stages = append(stages, stage); return func() {} }})
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(res.Stdout)) != "42" {
			t.Fatalf("data dir %d: stdout %q (status %s, %s)", i+1, res.Stdout, res.Status, res.Stderr)
		}
		loads := slices.Contains(stages, "load")
		switch {
		case i == 0 && !loads:
			t.Errorf("the machine's first python run reported no first-time load: %v", stages)
		case i == 1 && loads:
			t.Errorf("a second data directory's first python run did first-time work again: %v", stages)
		}
		if own, _ := filepath.Glob(filepath.Join(data, "cache", "snapshots", "*.img")); len(own) != 0 {
			t.Errorf("data dir %d keeps an image of its own: %v", i+1, own)
		}
	}
	if imgs, _ := filepath.Glob(filepath.Join(machine, "snapshots", "*.img")); len(imgs) != 1 {
		t.Errorf("the machine's cache holds images %v, want CPython's start", imgs)
	}
}
