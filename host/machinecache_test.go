package host_test

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host"
)

// machineFiles lists the regular files under dir, relative to it.
func machineFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestMachineCache: what a load of the machine's toolchain makes is kept
// once per machine (Config.MachineCacheDir), whatever the data directory:
// a host on a second, fresh data directory reads the machine code back
// and does no first-time work; a tenant's module (no
// LoadOptions.Toolchain) leaves nothing there.
func TestMachineCache(t *testing.T) {
	ctx := context.Background()
	machine := filepath.Join(t.TempDir(), "machine")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	load := func(t *testing.T, data string, toolchain bool) (host.CompileInfo, int) {
		t.Helper()
		h, err := host.New(ctx, host.Config{DataDir: data, MachineCacheDir: machine, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close(ctx)
		firstTime := 0
		m, err := h.Load(ctx, fixture(t, "plugin.wasm"), host.LoadOptions{Name: "p", Toolchain: toolchain,
			FirstTime: func(string) func() { firstTime++; return func() {} }})
		if err != nil {
			t.Fatal(err)
		}
		return m.Info().Compile, firstTime
	}

	if ci, _ := load(t, t.TempDir(), false); ci.FromDiskCache {
		t.Fatalf("a tenant's module on a fresh data directory came from a cache: %+v", ci)
	}
	if got := machineFiles(t, machine); len(got) != 0 {
		t.Fatalf("a tenant's module left files in the machine's cache: %v", got)
	}

	if ci, n := load(t, t.TempDir(), true); ci.FromDiskCache || n == 0 {
		t.Fatalf("the machine's first load: %+v, first-time work reported %d times; want compiled, reported", ci, n)
	}
	kept := machineFiles(t, machine)
	if len(kept) != 2 || !strings.HasPrefix(kept[0], "code-") || !strings.HasPrefix(kept[1], "rewritten/") {
		t.Fatalf("the machine's cache holds %v; want wazero's file and the rewritten module", kept)
	}
	data := t.TempDir()
	if ci, n := load(t, data, true); !ci.FromDiskCache || n != 0 {
		t.Fatalf("a second data directory: %+v, first-time work reported %d times; want the machine's code, nothing reported", ci, n)
	}
	// wazero's file is in the data directory's cache (wazero reads no
	// other), as the same file: a hard link, no copy.
	var linked bool
	_ = filepath.WalkDir(filepath.Join(data, "cache"), func(p string, d fs.DirEntry, err error) error {
		if fi, err := os.Stat(p); err == nil && d.Type().IsRegular() {
			if st, err := os.Stat(filepath.Join(machine, kept[0])); err == nil && os.SameFile(fi, st) {
				linked = true
			}
		}
		return nil
	})
	if !linked {
		t.Errorf("the second data directory's cache does not hold the machine's file %s", kept[0])
	}
}

// TestMachineCacheTorn: a torn file in the machine's cache (cut short:
// wazero cannot read it whole) is not run: the load compiles again, and the machine's
// file is made again whole.
func TestMachineCacheTorn(t *testing.T) {
	ctx := context.Background()
	machine := filepath.Join(t.TempDir(), "machine")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	load := func(t *testing.T) host.CompileInfo {
		t.Helper()
		h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), MachineCacheDir: machine, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close(ctx)
		m, err := h.Load(ctx, fixture(t, "plugin.wasm"), host.LoadOptions{Name: "p", Toolchain: true})
		if err != nil {
			t.Fatalf("load over a torn machine file: %v", err)
		}
		if _, err := m.Invoke(ctx, host.Request{Action: "noop", Principal: ann}); err != nil {
			t.Fatalf("invoke: %v", err)
		}
		return m.Info().Compile
	}
	load(t)
	var code string
	for _, f := range machineFiles(t, machine) {
		if strings.HasPrefix(f, "code-") {
			code = filepath.Join(machine, f)
		}
	}
	b, err := os.ReadFile(code)
	if err != nil {
		t.Fatal(err)
	}
	// Cut short (replaced, not written in place: a data directory's link
	// to the old file keeps that).
	if err := os.Remove(code); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(code, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if ci := load(t); ci.FromDiskCache {
		t.Fatalf("the torn file answered: %+v", ci)
	}
	if ci := load(t); !ci.FromDiskCache {
		t.Fatalf("the machine's file was not made again: %+v", ci)
	}
}

// TestMachineCacheRefused: a machine's cache another user may write is
// not used (its code would run as the host's own): the host keeps
// everything in its own cache directory.
func TestMachineCacheRefused(t *testing.T) {
	ctx := context.Background()
	machine := filepath.Join(t.TempDir(), "machine")
	if err := os.Mkdir(machine, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(machine, 0o777); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), MachineCacheDir: machine, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	if _, err := h.Load(ctx, fixture(t, "plugin.wasm"), host.LoadOptions{Name: "p", Toolchain: true}); err != nil {
		t.Fatal(err)
	}
	if got := machineFiles(t, machine); len(got) != 0 {
		t.Fatalf("a machine's cache writable by others was used: %v", got)
	}
	if !strings.Contains(log.String(), "writable by others") {
		t.Errorf("the refusal was not logged with its reason:\n%s", log.String())
	}
}
