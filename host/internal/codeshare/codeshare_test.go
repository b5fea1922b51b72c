package codeshare

import (
	"context"
	"crypto/hmac"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/wasmlimit"
)

// The mechanism's tests need no host (fetch_test.go: replicas as a
// runtime and a Sharer each). Those that load and invoke modules through
// Hosts sharing a store (wazero's file names for what Load compiles, a
// hostile artifact repaired by the next load, a short key, a store that
// goes away) are package host's (sharedcode_internal_test.go).

var (
	codeKeyA = []byte("replica-set-a: 32 bytes or more of secret")
	codeKeyB = []byte("replica-set-b: another secret, 32 bytes+")
)

func pluginWasm(t testing.TB) []byte {
	t.Helper()
	wasm, err := os.ReadFile("../../../testdata/plugin.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// TestCodeKeyCovers: the store's key of an artifact changes with each
// thing that makes machine code valid on a machine (so a host that would
// run other code looks up another key and misses), and the MAC binds the
// key (so an artifact moved under another key does not verify).
func TestCodeKeyCovers(t *testing.T) {
	code := pluginWasm(t)
	base := CurrentFingerprint(false, false)
	// A test binary carries no module information: wazero calls itself
	// "dev", and the executable's digest tells this build from others.
	if base.WazeroDir != "wazero-dev-"+runtime.GOARCH+"-"+runtime.GOOS || !strings.HasPrefix(base.WazeroSum, "executable ") || len(base.WazeroSum) != len("executable ")+64 {
		t.Fatalf("fingerprint %+v: want wazero's directory of a build without module information, keyed by the executable's SHA-256", base)
	}
	// wazero names its directory as predicted, and a Sharer proves it
	// names its files so (New's probe).
	ctx := context.Background()
	dir := t.TempDir()
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wasmlimit.NewRuntimeConfig(cache).WithCloseOnContextDone(false))
	defer rt.Close(ctx)
	if _, err := rt.CompileModule(ctx, code); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, base.WazeroDir)); err != nil {
		t.Fatalf("wazero made no directory %s: %v", base.WazeroDir, err)
	}
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(ctx, rt, Config{CacheDir: dir, Key: codeKeyA, Store: st, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatalf("New: %v", err)
	}
	otherCode := slices.Clone(code)
	otherCode[len(otherCode)-1] ^= 1
	tests := []struct {
		name     string
		edit     func(f *Fingerprint)
		code     []byte
		fileName bool // wazero's own file name changes too
	}{
		{name: "module bytes (one bit)", edit: func(f *Fingerprint) {}, code: otherCode, fileName: true},
		{name: "CPU features", edit: func(f *Fingerprint) { f.CPU ^= 1 }, fileName: true},
		{name: "CloseOnContextDone", edit: func(f *Fingerprint) { f.EnsureTermination = !f.EnsureTermination }, fileName: true},
		{name: "wazero version", edit: func(f *Fingerprint) { f.WazeroDir = "wazero-v1.12.1-amd64-linux" }},
		{name: "GOARCH", edit: func(f *Fingerprint) { f.WazeroDir = "wazero-v1.12.0-arm64-linux" }},
		{name: "wazero build (replace directive)", edit: func(f *Fingerprint) { f.WazeroSum = "../wazero@ h1:other" }},
		{name: "Go release", edit: func(f *Fingerprint) { f.GoVersion = "go1.25.0" }},
		{name: "runtime config", edit: func(f *Fingerprint) { f.RuntimeConfig = "interpreter" }},
		{name: "DWARF lines", edit: func(f *Fingerprint) { *f = CurrentFingerprint(true, false) }},
	}
	keys := map[string]string{base.ArtifactKey(code): "base"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := base
			tt.edit(&f)
			c := code
			if tt.code != nil {
				c = tt.code
			}
			k := f.ArtifactKey(c)
			if prev, dup := keys[k]; dup {
				t.Fatalf("key %s equals %s's", k, prev)
			}
			keys[k] = tt.name
			if changed := f.FileName(c) != base.FileName(code); changed != tt.fileName {
				t.Errorf("wazero's file name changed: %v, want %v", changed, tt.fileName)
			}
		})
	}
	if base.ArtifactKey(code) != CurrentFingerprint(false, false).ArtifactKey(slices.Clone(code)) {
		t.Error("the key of the same code on the same host differs between calls")
	}
	k1, k2 := base.ArtifactKey(code), base.ArtifactKey(otherCode)
	if hmac.Equal(MAC(codeKeyA, k1, code), MAC(codeKeyA, k2, code)) {
		t.Error("the MAC does not cover the artifact's key")
	}
	if hmac.Equal(MAC(codeKeyA, k1, code), MAC(codeKeyB, k1, code)) {
		t.Error("the MAC does not depend on the code key")
	}
}
