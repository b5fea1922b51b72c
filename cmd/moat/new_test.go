package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/all" // Lookup finds every language
)

// langMissing says why plugins in lang (a moat new language) cannot be
// built or run here, or "".
func langMissing(lang string) string {
	switch lang {
	case "python-native":
		return testenv.NativePython(false)
	case "go":
		if _, err := exec.LookPath("go"); err != nil {
			return "go is not installed"
		}
		return ""
	}
	l, err := languages.Lookup(lang)
	if err != nil {
		return err.Error()
	}
	if c, ok := l.(languages.Checker); ok {
		if err := c.Available(); err != nil {
			return lang + ": " + err.Error()
		}
	}
	return ""
}

// mainSource is the code file moat new writes for each language.
var mainSource = map[string]string{
	"go": "main.go", "rust": "src/lib.rs", "c": "main.c", "cpp": "main.cpp", "assemblyscript": "index.ts",
	"javascript": "main.js", "python": "main.py", "python-native": "main.py", "ruby": "main.rb",
}

// TestBuildExamplesAnywhere: moat build of each example in the moat tree
// gives the same bytes as moat build of a copy of it outside the tree, in
// a directory the compiler's uid cannot read; make examples builds them
// with bin/moat build (TestMakeExamplesUseMoatBuild), so these are the
// bytes make examples writes, and a rebuild never breaks a signature.
func TestBuildExamplesAnywhere(t *testing.T) {
	testenv.Slow(t, "moat build of every example, twice")
	data := filepath.Join(os.TempDir(), "moat-test-cli-build")
	for _, tc := range []struct{ lang, dir string }{
		{"go", "examples/hello-go"}, {"go", "examples/notes/go"}, {"go", "examples/thumbnail"},
		{"c", "examples/hello-c"}, {"cpp", "examples/hello-cpp"},
		{"rust", "examples/hello-rust"}, {"assemblyscript", "examples/hello-as"},
	} {
		t.Run(strings.ReplaceAll(tc.dir, "/", "_"), func(t *testing.T) {
			testenv.Require(t, langMissing(tc.lang))
			work := t.TempDir()
			os.Chmod(work, 0o700)
			inTree := filepath.Join(work, "in-tree.wasm")
			if r := moat(t, "", "build", "--data", data, "--out", inTree, filepath.Join("../..", tc.dir)); r.code != 0 {
				t.Fatalf("build in the tree: exit %d: %s", r.code, r.stderr)
			}
			cp := filepath.Join(work, "copy")
			if err := os.CopyFS(cp, os.DirFS(filepath.Join("../..", tc.dir))); err != nil {
				t.Fatal(err)
			}
			outside := filepath.Join(work, "outside.wasm")
			if r := moatIn(t, work, "build", "--data", data, "--out", outside, cp); r.code != 0 {
				t.Fatalf("build of a copy outside the tree: exit %d: %s", r.code, r.stderr)
			}
			a, _ := os.ReadFile(inTree)
			b, _ := os.ReadFile(outside)
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Fatalf("%s built in the tree (%d bytes) and outside it (%d bytes) differ", tc.dir, len(a), len(b))
			}
		})
	}
}

// TestMakeExamplesUseMoatBuild holds the Makefile to building every
// example module with bin/moat build (one path, so one set of bytes).
func TestMakeExamplesUseMoatBuild(t *testing.T) {
	var rules []byte
	for _, f := range []string{"../../Makefile", "../../mk/guests.mk"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, b...)
	}
	text := string(rules)
	for _, bad := range []string{"-buildmode=c-shared -o examples/", "--target=wasm32-wasi -mexec-model=reactor", "cargo) build", "asc --config"} {
		if strings.Contains(text, bad) {
			t.Errorf("the Makefile builds an example without moat build (%q): its bytes would differ from moat build's", bad)
		}
	}
	for _, want := range []string{"examples/hello-go", "examples/notes/go", "examples/thumbnail", "$(MOAT) build examples/hello-c", "$(MOAT) build examples/hello-cpp", "$(MOAT) build examples/hello-rust", "$(MOAT) build examples/hello-as"} {
		if !strings.Contains(text, want) {
			t.Errorf("the Makefile does not build %s with moat build", want)
		}
	}
	if !strings.Contains(text, "$(MOAT) build $$d") {
		t.Error("make examples does not run $(MOAT) build over GO_EXAMPLES")
	}
}

// TestNewRefuses: bad names (path tricks, upper case, shell and YAML
// syntax), unknown languages with a did-you-mean, and a directory that
// holds anything are refused before a file is written.
func TestNewRefuses(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	work := t.TempDir()
	occupied := filepath.Join(work, "taken")
	os.MkdirAll(occupied, 0o755)
	os.WriteFile(filepath.Join(occupied, "keep.txt"), []byte("mine"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"dot dot", []string{"new", "../escape", "--lang", "go"}, "lowercase letters"},
		{"slash", []string{"new", "a/b", "--lang", "go"}, "lowercase letters"},
		{"upper", []string{"new", "Hello", "--lang", "go"}, "lowercase letters"},
		{"yaml", []string{"new", "a: b", "--lang", "go"}, "lowercase letters"},
		{"trailing hyphen", []string{"new", "a-", "--lang", "go"}, "lowercase letters"},
		{"too long", []string{"new", strings.Repeat("a", 64), "--lang", "go"}, "at most 63"},
		{"no lang", []string{"new", "x"}, "--lang go|rust"},
		{"typo", []string{"new", "x", "--lang", "pyton"}, "did you mean python?"},
		{"alias", []string{"new", "x", "--lang", "js"}, "did you mean javascript?"},
		{"far", []string{"new", "x", "--lang", "cobol"}, "moat new makes plugins in"},
		{"occupied", []string{"new", "taken", "--lang", "c"}, "exists and is not empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := moatIn(t, work, tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d (want 2), want %q in:\n%s", r.code, tc.want, r.stderr)
			}
		})
	}
	ents, _ := os.ReadDir(work)
	if len(ents) != 1 {
		t.Errorf("refused commands wrote into %s: %v", work, ents)
	}
	if b, _ := os.ReadFile(filepath.Join(occupied, "keep.txt")); string(b) != "mine" {
		t.Error("moat new changed a file of an occupied directory")
	}
}

// TestRunWithoutSources: a plugin as shipped (module and manifest, no
// sources) runs without a build, even when its manifest is newer; with no
// module and nothing to build from, moat run names moat build.
func TestRunWithoutSources(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	dir := writeModule(t, "hello-go", testwasm.BuildGo(t, "./examples/hello-go", true))
	time.Sleep(10 * time.Millisecond)
	copyFile(t, filepath.Join(testwasm.RepoRoot(t), "examples", "hello-go", "moat.yaml"), filepath.Join(dir, "moat.yaml"))
	data := t.TempDir()
	r := moat(t, "", "run", "--data", data, dir, "greet", "--input", "World")
	if r.code != 0 || strings.Contains(r.stderr, "building") || strings.TrimSpace(r.stdout) != "Hello, World! (call #1)" {
		t.Fatalf("exit %d, stdout %q:\n%s", r.code, r.stdout, r.stderr)
	}
	os.Remove(filepath.Join(dir, "hello-go.wasm"))
	r = moat(t, "", "run", "--data", data, dir, "greet", "--input", "World")
	if r.code == 0 || !strings.Contains(r.stderr, "moat build "+dir) {
		t.Fatalf("exit %d, want the moat build hint:\n%s", r.code, r.stderr)
	}
}

// TestBuildGoHandWrittenModule is the reported failure: a Go plugin in
// the user's own module, in a directory only its owner can read, whose
// go.mod requires a moat version that was never published and replaces it
// with a checkout the compiler cannot read. moat build copies the module
// and points the replace at the SDK it carries.
func TestBuildGoHandWrittenModule(t *testing.T) {
	testenv.Slow(t, "a cold Go build")
	testenv.Require(t, langMissing("go"))
	home := t.TempDir()
	os.Chmod(home, 0o700)
	mod := filepath.Join(home, "src", "mine")
	plugin := filepath.Join(mod, "plugins", "hello")
	if err := os.MkdirAll(plugin, 0o700); err != nil {
		t.Fatal(err)
	}
	root := testwasm.RepoRoot(t)
	gomod := "module example.com/mine\n\ngo 1.24\n\nrequire github.com/moat-sandbox/moat v0.3.0\n\nreplace github.com/moat-sandbox/moat v0.3.0 => " + root + "\n"
	os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o600)
	os.WriteFile(filepath.Join(mod, "go.sum"), []byte("github.com/moat-sandbox/moat v0.3.0 h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 0o600)
	copyFile(t, filepath.Join(root, "examples/hello-go/main.go"), filepath.Join(plugin, "main.go"))
	copyFile(t, filepath.Join(root, "examples/hello-go/moat.yaml"), filepath.Join(plugin, "moat.yaml"))
	data := filepath.Join(os.TempDir(), "moat-test-cli-build")
	if r := moat(t, "", "build", "--data", data, plugin); r.code != 0 {
		t.Fatalf("build: exit %d:\n%s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(mod, "go.mod")); string(b) != gomod {
		t.Errorf("moat build changed the plugin's go.mod:\n%s", b)
	}
	r := moat(t, "", "run", "--data", t.TempDir(), plugin, "greet", "--input", "World")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Hello, World! (call #1)" || strings.Contains(r.stderr, "building") {
		t.Fatalf("run: exit %d, stdout %q:\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestBuildPluginHostile: a plugin's directory is as hostile as a
// code-execution submission. A symlink to a host file is refused before
// anything is copied (exit 2, naming it; TestPluginTreeHostile has every
// kind and entry), an include or replace naming a host path finds
// nothing, and a go.mod that replaces the SDK with a directory of its own
// is overridden by the SDK the binary carries.
func TestBuildPluginHostile(t *testing.T) {
	testenv.Slow(t, "a build of every language's hostile trees; TestBuildPlugin keeps the path")
	data := filepath.Join(os.TempDir(), "moat-test-cli-build")
	secret := filepath.Join(t.TempDir(), "secret.txt")
	os.WriteFile(secret, []byte("TOP-SECRET-BYTES"), 0o600)
	for _, tc := range []struct {
		name, lang string
		files      map[string]string
		link       string // a file name made a symlink to secret
		wantFail   bool
		want       string // in the refusal; default the compiler's
	}{
		{name: "c symlink", lang: "c", link: "secret.h", wantFail: true, want: "secret.h is a symbolic link (to " + secret + ")",
			files: map[string]string{"main.c": "#include \"moat.h\"\n#include \"secret.h\"\nstatic const moat_action actions[] = {{0}};\nMOAT_ACTIONS(actions)\n"}},
		{name: "c absolute include", lang: "c", wantFail: true,
			files: map[string]string{"main.c": "#include \"" + secret + "\"\n"}},
		{name: "go replace to a host dir", lang: "go", wantFail: true,
			files: map[string]string{
				"go.mod":  "module example.com/p\n\ngo 1.24\n\nrequire example.com/leak v0.0.0\n\nreplace example.com/leak => " + filepath.Dir(secret) + "\n",
				"main.go": "package main\n\nimport _ \"example.com/leak\"\n\nfunc main() {}\n"}},
		{name: "go replaces the SDK", lang: "go",
			files: map[string]string{
				"go.mod":                    "module example.com/p\n\ngo 1.24\n\nrequire github.com/moat-sandbox/moat v0.0.0\n\nreplace github.com/moat-sandbox/moat => ./fake\n",
				"fake/go.mod":               "module github.com/moat-sandbox/moat\n\ngo 1.24\n",
				"fake/guests/go/nothing.go": "package moat\n\nfunc Action(string, func([]byte) ([]byte, error)) { panic(\"the plugin's own SDK was used\") }\n",
				"main.go":                   "package main\n\nimport moat \"github.com/moat-sandbox/moat/guests/go\"\n\nfunc init() { moat.Action(\"echo\", func(b []byte) ([]byte, error) { return b, nil }) }\n\nfunc main() {}\n"}},
		// An AssemblyScript plugin imports the SDK from beside it, as
		// moat new writes it, whether or not it kept moat.ts (moat build
		// provides it, as it provides C's moat.h), and a moat.ts of its
		// own is replaced by the binary's.
		{name: "assemblyscript without moat.ts", lang: "assemblyscript", files: map[string]string{"index.ts": asEcho}},
		{name: "assemblyscript replaces the SDK", lang: "assemblyscript",
			files: map[string]string{"index.ts": asEcho, "moat.ts": "export const fake = \"the plugin's own SDK was used\";\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.Require(t, langMissing(tc.lang))
			dir := filepath.Join(t.TempDir(), "p")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte("name: p\nversion: 0.1.0\nlanguage: "+tc.lang+"\nactions:\n  - name: echo\n"), 0o644)
			for n, body := range tc.files {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, n)), 0o755)
				os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644)
			}
			if tc.link != "" {
				if err := os.Symlink(secret, filepath.Join(dir, tc.link)); err != nil {
					t.Fatal(err)
				}
			}
			r := moat(t, "", "build", "--data", data, dir)
			if strings.Contains(r.stdout+r.stderr, "TOP-SECRET-BYTES") {
				t.Fatalf("the build showed the host file's bytes:\n%s", r.stderr)
			}
			if tc.wantFail {
				want := tc.want
				if want == "" {
					want = "the compiler refused the source"
				}
				if r.code == 0 || !strings.Contains(r.stderr, want) {
					t.Fatalf("exit %d, want %q:\n%s", r.code, want, r.stderr)
				}
				t.Logf("refused:\n%s", r.stderr)
				return
			}
			if r.code != 0 {
				t.Fatalf("build: exit %d:\n%s", r.code, r.stderr)
			}
			r = moat(t, "", "run", "--data", t.TempDir(), dir, "echo", "--input", "ok")
			if r.code != 0 || r.stdout != "ok" {
				t.Fatalf("run: exit %d, stdout %q:\n%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// asEcho is an AssemblyScript plugin's index.ts, as moat new lays one
// out, with one action, echo.
const asEcho = `import * as moat from "./moat";
export { moat_abi_version, moat_actions, moat_alloc, moat_invoke } from "./moat";
moat.action("echo", (input: Uint8Array): moat.Output => moat.Output.bytes(input.slice(0)));
`

// TestNativeRelativeData: a native Python plugin runs with a relative
// --data (the workers' root bind-mounts moat.py from it, which needs an
// absolute path).
func TestNativeRelativeData(t *testing.T) {
	testenv.Require(t, langMissing("python-native"))
	work := t.TempDir()
	if r := moatIn(t, work, "new", "pn", "--lang", "python-native"); r.code != 0 {
		t.Fatalf("new: exit %d: %s", r.code, r.stderr)
	}
	r := moatIn(t, work, "run", "--data", "rel-data", "pn", "greet", "--input", "World")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Hello, World! (call #1)" {
		t.Fatalf("run: exit %d, stdout %q:\n%s", r.code, r.stdout, r.stderr)
	}
}
