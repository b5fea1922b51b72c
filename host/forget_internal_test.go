package host

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
)

// TestForgetCompiled: CacheFiles names the files the compile cache holds
// for a module's code (its rewritten module and wazero's machine code),
// every one of them there after the load; ForgetCompiled removes them,
// and the next load of the same bytes compiles again rather than failing.
func TestForgetCompiled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, err := New(ctx, Config{DataDir: t.TempDir(), CacheDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	wasm, err := os.ReadFile("../testdata/plugin.wasm")
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(ctx, wasm, LoadOptions{Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	files := m.CacheFiles()
	if len(files) != 2 {
		t.Fatalf("CacheFiles = %q; want the rewritten module and the machine code", files)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s is not in the cache: %v", f, err)
		}
	}
	m.Close(ctx)
	if err := ForgetCompiled(files); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", f, err)
		}
	}
	if err := ForgetCompiled(files); err != nil {
		t.Errorf("forgetting twice: %v", err)
	}
	m, err = h.Load(ctx, wasm, LoadOptions{Name: "p"})
	if err != nil {
		t.Fatalf("load after forgetting: %v", err)
	}
	defer m.Close(ctx)
	if m.Info().Compile.FromDiskCache {
		t.Error("the load after forgetting says its code came from the cache")
	}
	for _, f := range m.CacheFiles() {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s not written again: %v", f, err)
		}
	}
}
