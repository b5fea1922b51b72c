package all_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/tetratelabs/wazero"
)

// TestBuildPlugin: each compiled language's plugin build makes a reactor
// (no _start; _initialize where the toolchain emits one) exporting the
// plugin's function. Go's is tested end to end by `moat build` in
// cmd/moat.
func TestBuildPlugin(t *testing.T) {
	// Under -short, C alone: Rust and AssemblyScript cost a cold build
	// each (most of the test's 55 s in make check); make test builds all.
	for _, tc := range testenv.ShortLanguages([]struct {
		lang, file, code, init string
	}{
		{"c", "lib.c", "__attribute__((export_name(\"mul_add\"))) int mul_add(int a, int b) { return a * b + 1; }\n", "_initialize"},
		{"cpp", "lib.cpp", "extern \"C\" __attribute__((export_name(\"mul_add\"))) int mul_add(int a, int b) { return a * b + 1; }\n", "_initialize"},
		{"rust", "lib.rs", "#[no_mangle]\npub extern \"C\" fn mul_add(a: i32, b: i32) -> i32 { a * b + 1 }\n", ""},
		{"assemblyscript", "index.ts", "export function mul_add(a: i32, b: i32): i32 { return a * b + 1; }\n", "_initialize"},
	}) {
		t.Run(tc.lang, func(t *testing.T) {
			l := needLanguage(t, tc.lang)
			pb, ok := l.(languages.PluginBuilder)
			if !ok {
				t.Fatalf("%s does not build plugins", tc.lang)
			}
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.code), 0o644); err != nil {
				t.Fatal(err)
			}
			work, err := os.MkdirTemp("", "moat-plugin-test-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(work)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			wasm, err := pb.BuildPlugin(ctx, languages.BuildEnv{WorkDir: work, StateDir: persistentDir(t, "lang-state")}, dir)
			if err != nil {
				t.Fatal(err)
			}
			r := wazero.NewRuntime(ctx)
			defer r.Close(ctx)
			cm, err := r.CompileModule(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			exports := cm.ExportedFunctions()
			if _, ok := exports["_start"]; ok {
				t.Error("a plugin exports _start: it was built as a command")
			}
			if _, ok := exports["mul_add"]; !ok {
				t.Errorf("mul_add not exported: %v", keys(exports))
			}
			if tc.init != "" {
				if _, ok := exports[tc.init]; !ok {
					t.Errorf("%s not exported: %v", tc.init, keys(exports))
				}
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
