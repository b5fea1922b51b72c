package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// needTool skips when a Debian toolchain binary is missing, except in CI.
func needTool(t *testing.T, bin string) {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		testenv.Require(t, fmt.Sprintf("%s is not installed: run `make toolchains`", bin))
	}
}

func TestLangs(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	r := moat(t, "", "langs", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var list []struct {
		Name      string
		Version   string
		Path      string
		Available bool   `json:"available"`
		Missing   string `json:"missing"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	got := map[string]string{}
	for _, l := range list {
		got[l.Name] = l.Path
		if l.Available && (l.Version == "" || l.Version == "unavailable") {
			t.Errorf("%s is available without a version", l.Name)
		}
		if !l.Available && l.Missing == "" {
			t.Errorf("%s is unavailable without saying what is missing", l.Name)
		}
	}
	for name, path := range map[string]string{"go": "compiled", "c": "compiled", "cpp": "compiled", "rust": "compiled",
		"assemblyscript": "compiled", "bash": "native", "python3-native": "native", "java": "native",
		"perl": "native", "lua": "native", "php": "native", "typescript": "interpreted", "kotlin": "native"} {
		if got[name] != path {
			t.Errorf("%s: path %q, want %q", name, got[name], path)
		}
	}
	table := moat(t, "", "langs")
	if !strings.HasPrefix(table.stdout, "NAME") || !strings.Contains(table.stdout, "rust") {
		t.Errorf("table:\n%s", table.stdout)
	}
	// A native language says why it is not WebAssembly.
	if !strings.Contains(table.stdout, "\njava is native: no JVM runs as a WASI command") {
		t.Errorf("moat langs does not say why java is native:\n%s", table.stdout)
	}
	if !strings.Contains(table.stdout, "\nkotlin is native: Kotlin compiles to JVM classes") {
		t.Errorf("moat langs does not say why kotlin is native:\n%s", table.stdout)
	}
}

// TestExecJava: `moat exec --lang java` end to end through the binary:
// javac confined, the class run with stdin, arguments and environment,
// its exit code as moat's, a second run from the build cache, and a
// compile error's message.
func TestExecJava(t *testing.T) {
	testenv.Slow(t, "javac and a JVM start in each of its three runs; moat exec through the binary is TestExecLang's, and Java under -short is languages/all's TestJavaThreads and TestJavaMainClass")
	needTool(t, "/usr/bin/javac")
	data := t.TempDir()
	const code = `import java.util.Scanner;
public class Main {
    public static void main(String[] args) {
        String line = new Scanner(System.in).nextLine();
        System.out.println(System.getenv("K") + "|" + args[0] + "|" + line);
        System.exit(7);
    }
}`
	for _, cached := range []string{"cached=false", "cached=true"} {
		r := moat(t, "in\n", "exec", "--data", data, "--lang", "java", "--env", "K=v", "-e", code, "--", "a1")
		if r.code != 7 || r.stdout != "v|a1|in\n" {
			t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "status=runtime-error exit=7 lang=java@17") || !strings.Contains(r.stderr, cached) {
			t.Errorf("summary: %q, want %s", r.stderr, cached)
		}
	}
	r := moat(t, "", "exec", "--data", data, "--lang", "java", "-e", "public class Main { public static void main(String[] a) { int x = \"s\"; } }")
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "incompatible types: String cannot be converted to int") {
		t.Fatalf("compile error: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestExecKotlin: `moat exec --lang kotlin` end to end through the
// binary: kotlinc confined, the facade class run with stdin, arguments
// and environment, its exit code as moat's, a second run from the build
// cache.
func TestExecKotlin(t *testing.T) {
	testenv.Slow(t, "a kotlinc run (6-8 CPU-seconds) and two JVM starts; Kotlin under -short is languages/all's TestKotlinMainClass")
	var list []struct {
		Name      string
		Available bool
	}
	if r := moat(t, "", "langs", "--json"); json.Unmarshal([]byte(r.stdout), &list) != nil || !slices.Contains(list, struct {
		Name      string
		Available bool
	}{"kotlin", true}) {
		testenv.Require(t, "the Kotlin compiler is not installed: run `make toolchains`")
	}
	data := t.TempDir()
	const code = "fun main(args: Array<String>) {\n    println(System.getenv(\"K\") + \"|\" + args[0] + \"|\" + readln())\n    kotlin.system.exitProcess(7)\n}\n"
	for _, cached := range []string{"cached=false", "cached=true"} {
		r := moat(t, "in\n", "exec", "--data", data, "--lang", "kotlin", "--env", "K=v", "-e", code, "--", "a1")
		if r.code != 7 || r.stdout != "v|a1|in\n" {
			t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "status=runtime-error exit=7 lang=kotlin@2.") || !strings.Contains(r.stderr, cached) {
			t.Errorf("summary: %q, want %s", r.stderr, cached)
		}
	}
}

// TestExecNumpyPandas: `moat exec --lang python3-native` imports
// Debian's numpy and pandas (issue 33, item 4), with their numerical
// libraries at one thread, and moat langs names them.
func TestExecNumpyPandas(t *testing.T) {
	testenv.Slow(t, "pandas' import in a confined run, and moat langs")
	if why := testenv.NativePython(true); why != "" {
		testenv.Require(t, why)
	}
	if _, err := os.Stat("/usr/lib/python3/dist-packages/pandas"); err != nil {
		testenv.Require(t, "Debian's python3-pandas is not installed (make deps)")
	}
	code := "import os\nimport numpy as np, pandas as pd\n" +
		"df = pd.DataFrame({'x': np.arange(4)})\nprint(int(df['x'].sum()), np.linalg.det(np.eye(3)), os.environ['OPENBLAS_NUM_THREADS'])\n"
	r := moat(t, "", "exec", "--data", t.TempDir(), "--lang", "python3-native", "--timeout", "30s", "-e", code)
	if r.code != 0 || r.stdout != "6 1.0 1\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if l := moat(t, "", "langs"); !strings.Contains(l.stdout, "with numpy ") || !strings.Contains(l.stdout, ", pandas ") {
		t.Errorf("moat langs does not name numpy and pandas:\n%s", l.stdout)
	}
}

func TestExecLang(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	needTool(t, "/usr/bin/clang-19")
	data := t.TempDir()
	const code = `#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	char line[64] = {0};
	fgets(line, sizeof line, stdin);
	printf("%s|%s|%s", getenv("K"), argc > 1 ? argv[1] : "-", line);
	return 7;
}`
	r := moat(t, "in\n", "exec", "--data", data, "--lang", "c", "--env", "K=v", "-e", code, "--", "a1")
	if r.code != 7 || r.stdout != "v|a1|in\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "status=runtime-error exit=7 lang=c@") || !strings.Contains(r.stderr, "cached=false") {
		t.Errorf("summary: %q", r.stderr)
	}
	// Files, --stdin and a warm build cache.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.c"), []byte(code), 0o644)
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from file\n"), 0o644)
	r = moat(t, "", "exec", "--data", data, "--lang", "C", "--env", "K=v", "--stdin", filepath.Join(dir, "in.txt"), filepath.Join(dir, "main.c"), "--", "a1")
	if r.code != 7 || r.stdout != "v|a1|from file\n" || !strings.Contains(r.stderr, "cached=true") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"json", []string{"--lang", "c", "--json", "-e", "int main(void){return 0;}"}, 0, `"status": "ok"`},
		{"compile error", []string{"--lang", "c", "-e", "int main(void){return nope;}"}, 1, "nope"},
		{"timeout", []string{"--lang", "c", "--timeout", "300ms", "-e", "int main(void){volatile int x; for(;;) x++;}"}, 124, "status=timeout"},
		{"unknown language", []string{"--lang", "cobol", "-e", "x"}, 2, "unknown language"},
		{"invalid path", []string{"--lang", "c", "--max-source", "8", "-e", "int main(void){return 0;}"}, 2, "over the limit of 8"},
		{"no source", []string{"--lang", "c"}, 2, "give the source"},
		{"both modes", []string{"--lang", "c", "--native", "-e", "x"}, 2, "not both"},
		{"no mode", []string{"main.c"}, 2, "--lang"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := moat(t, "", append([]string{"exec", "--data", data}, tc.args...)...)
			if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
				t.Fatalf("exit %d (want %d), want %q in:\n%s%s", r.code, tc.code, tc.want, r.stdout, r.stderr)
			}
		})
	}
}

// TestBuildGoPlugin: moat build reads the manifest's language and writes
// a plugin that moat inspect accepts. The data dir is kept across runs:
// the Go seed cache in it costs about 20 s of CPU once.
func TestBuildGoPlugin(t *testing.T) {
	testenv.Slow(t, "a cold Go build")
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Require(t, "go is not installed")
	}
	data := filepath.Join(os.TempDir(), "moat-test-cli-build")
	out := filepath.Join(t.TempDir(), "hello-go.wasm")
	r := moat(t, "", "build", "--data", data, "--out", out, "../../examples/hello-go")
	if r.code != 0 || !strings.Contains(r.stderr, "==> wrote") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	r = moat(t, "", "inspect", "--data", data, "--json", out)
	if r.code != 0 || !strings.Contains(r.stdout, `"kind": "moat-plugin"`) {
		t.Fatalf("inspect: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte("name: x\nversion: 0.1.0\nlanguage: cobol\n"), 0o644)
	if r := moat(t, "", "build", "--data", data, dir); r.code != 2 || !strings.Contains(r.stderr, "unknown language") {
		t.Fatalf("unknown language: exit %d %s", r.code, r.stderr)
	}
}
