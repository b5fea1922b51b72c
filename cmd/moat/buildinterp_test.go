package main_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// interpretedPlugins are hello plugins in each interpreted language. With
// throw set, the top level fails after registering its action (no op can
// be called there, and what it prints at load is not kept): a command
// that must run none of a plugin's code succeeds on it, and a run fails.
var interpretedPlugins = map[string]struct{ file, src, throw string }{
	"python": {"main.py", `import moat

@moat.action("greet")
def greet(inp):
    return "hi " + inp.text
`, `raise RuntimeError("TOPLEVEL-RAN")
`},
	"javascript": {"main.js", `import * as moat from "./moat.js";
moat.action("greet", (input) => "hi " + input);
`, `throw new Error("TOPLEVEL-RAN");
`},
}

func writeInterpreted(t *testing.T, lang string, throw bool) string {
	t.Helper()
	p := interpretedPlugins[lang]
	dir := filepath.Join(t.TempDir(), "hello-"+lang)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mf := "name: hello-" + lang[:2] + "\nversion: 0.1.0\nlanguage: " + lang + "\nactions:\n  - name: greet\ncapabilities:\n  kv: true\n"
	if err := os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte(mf), 0o644); err != nil {
		t.Fatal(err)
	}
	src := p.src
	if throw {
		src += p.throw
	}
	if err := os.WriteFile(filepath.Join(dir, p.file), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestBuildInterpreted: `moat build` of an interpreted plugin succeeds (a
// script that builds every plugin does not stop at it), says in one line
// what it checked and prepared, writes nothing into the plugin, and runs
// none of the plugin's code; `moat inspect` shows it without a build.
// A plugin build refuses (the tree reader's refusals, a missing entry, a
// module file to write) still fail, naming what to fix.
func TestBuildInterpreted(t *testing.T) {
	testenv.Slow(t, "moat build of each interpreted language")
	for _, lang := range []string{"python", "javascript"} {
		t.Run(lang, func(t *testing.T) {
			dir := writeInterpreted(t, lang, false)
			data := t.TempDir()
			before := dirNames(t, dir)
			r := moat(t, "", "build", "--data", data, dir)
			if r.code != 0 || !strings.Contains(r.stderr, "checked: manifest, 1 action(s), sources; interpreter compiled into the cache") {
				t.Fatalf("moat build %s: exit %d\n%s", lang, r.code, r.stderr)
			}
			if n := strings.Count(r.stderr, "==> "); n != 1 {
				t.Errorf("moat build said %d lines of its own, want 1:\n%s", n, r.stderr)
			}
			if strings.Contains(r.stderr, "snapshot made") {
				t.Errorf("moat build ran the plugin's top level:\n%s", r.stderr)
			}
			if after := dirNames(t, dir); !slices.Equal(before, after) {
				t.Errorf("moat build wrote into the plugin: %v, then %v", before, after)
			}

			r = moat(t, "", "inspect", "--data", data, dir)
			if r.code != 0 {
				t.Fatalf("moat inspect %s: exit %d\n%s", lang, r.code, r.stderr)
			}
			for _, want := range []string{"kind:          script", "actions:       greet", "language:     " + lang, "interpreter:  ", "grants (requested by moat.yaml", "kv: true"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("moat inspect shows no %q:\n%s", want, r.stdout)
				}
			}
			if strings.Contains(r.stderr, "moat build") || strings.Contains(r.stderr, "snapshot made") {
				t.Errorf("moat inspect asked for a build or ran the plugin:\n%s", r.stderr)
			}
			r = moat(t, "", "inspect", "--json", "--data", data, dir)
			for _, want := range []string{`"language": "` + lang + `"`, `"interpreter": "`, `"grants": {`} {
				if r.code != 0 || !strings.Contains(r.stdout, want) {
					t.Errorf("moat inspect --json: exit %d, no %s:\n%s%s", r.code, want, r.stdout, r.stderr)
				}
			}
			r = moat(t, "", "run", "--data", data, dir, "greet", "--input", "x")
			if r.code != 0 || strings.TrimSpace(r.stdout) != "hi x" {
				t.Errorf("moat run after build: exit %d, stdout %q:\n%s", r.code, r.stdout, r.stderr)
			}

			// A top level that fails: build and inspect run none of it,
			// so they succeed; a run fails, naming it (the check can fail).
			dir = writeInterpreted(t, lang, true)
			for _, args := range [][]string{{"build", "--data", data, dir}, {"inspect", "--data", data, dir}} {
				if r := moat(t, "", args...); r.code != 0 || strings.Contains(r.stderr, "TOPLEVEL-RAN") {
					t.Errorf("moat %s of a plugin whose top level fails: exit %d (it ran the plugin's code?)\n%s", args[0], r.code, r.stderr)
				}
			}
			if r := moat(t, "", "run", "--data", data, dir, "greet"); r.code == 0 || !strings.Contains(r.stderr, "TOPLEVEL-RAN") {
				t.Errorf("moat run of a plugin whose top level fails: exit %d\n%s", r.code, r.stderr)
			}
		})
	}

	hostile := []struct {
		name  string
		setup func(t *testing.T, dir string)
		args  []string
		code  int
		want  string
	}{
		{"a link among the sources", func(t *testing.T, dir string) {
			if err := os.Symlink("/etc/shadow", filepath.Join(dir, "secret.py")); err != nil {
				t.Fatal(err)
			}
		}, nil, 2, "secret.py"},
		{"no entry file", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "main.py")); err != nil {
				t.Fatal(err)
			}
		}, nil, 2, "main.py"},
		{"an action the manifest cannot declare", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte("name: hp\nversion: 0.1.0\nlanguage: python\nactions:\n  - name: \"bad name!\"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, nil, 2, "bad name!"},
		{"--out has nothing to write", func(t *testing.T, dir string) {}, []string{"--out", "x.wasm"}, 2, "--out: python is interpreted"},
	}
	for _, tc := range hostile {
		t.Run("hostile/"+tc.name, func(t *testing.T) {
			dir := writeInterpreted(t, "python", false)
			tc.setup(t, dir)
			before := dirNames(t, dir)
			r := moat(t, "", append(append([]string{"build", "--data", t.TempDir()}, tc.args...), dir)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("moat build: exit %d, want %d naming %q:\n%s", r.code, tc.code, tc.want, r.stderr)
			}
			if after := dirNames(t, dir); !slices.Equal(before, after) {
				t.Errorf("a refused build wrote into the plugin: %v, then %v", before, after)
			}
		})
	}
}

// TestBuildNative: moat build of a native plugin checks it as moat run and
// an upload read it (the bundle decides its kind: native, though its
// language is an interpreted one's) and compiles nothing: no WebAssembly
// interpreter is prepared for it, nothing is written, and --out is
// refused, naming why.
func TestBuildNative(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p")
	copyTree(t, filepath.Join(testwasm.RepoRoot(t), "examples", "hello-python-native"), dir)
	data := t.TempDir()
	before := dirNames(t, dir)
	r := moat(t, "", "build", "--data", data, dir)
	if r.code != 0 || !strings.Contains(r.stderr, "(native, python) checked: manifest, 2 action(s)") || !strings.Contains(r.stderr, "nothing to build") {
		t.Fatalf("moat build of a native plugin: exit %d\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "preparing python") || strings.Contains(r.stderr, "interpreter compiled") {
		t.Errorf("moat build prepared the WebAssembly interpreter for a native plugin:\n%s", r.stderr)
	}
	if after := dirNames(t, dir); !slices.Equal(before, after) {
		t.Errorf("moat build wrote into the plugin: %v, then %v", before, after)
	}
	r = moat(t, "", "build", "--data", data, "--out", filepath.Join(t.TempDir(), "x.wasm"), dir)
	if r.code != 2 || !strings.Contains(r.stderr, "is a native plugin: its files are the plugin") {
		t.Errorf("moat build --out of a native plugin: exit %d\n%s", r.code, r.stderr)
	}
	// A link in its tree is refused, as moat run and an upload refuse it.
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	if r = moat(t, "", "build", "--data", data, dir); r.code != 2 || !strings.Contains(r.stderr, "leak.txt") {
		t.Errorf("moat build of a native plugin with a link: exit %d\n%s", r.code, r.stderr)
	}
}
