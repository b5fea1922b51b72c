package all_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/nativepython"
)

// TestNativeScriptModules: a native script's sibling files load as
// modules, from the read-only source directory (Lua's require, Perl's
// use, PHP's require).
func TestNativeScriptModules(t *testing.T) {
	e := newExecutor(t, "")
	for _, tc := range []struct {
		lang  string
		files []languages.File
	}{
		{"lua", []languages.File{{Name: "main.lua", Content: []byte("local u = require('util')\nprint(u.twice(21))\n")},
			{Name: "util.lua", Content: []byte("return { twice = function(x) return 2 * x end }\n")}}},
		{"perl", []languages.File{{Name: "main.pl", Content: []byte("use Util;\nprint Util::twice(21), \"\\n\";\n")},
			{Name: "Util.pm", Content: []byte("package Util;\nsub twice { return 2 * shift }\n1;\n")}}},
		{"php", []languages.File{{Name: "main.php", Content: []byte("<?php\nrequire __DIR__ . '/util.php';\necho twice(21), \"\\n\";\n")},
			{Name: "util.php", Content: []byte("<?php\nfunction twice($x) { return 2 * $x; }\n")}}},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			needLanguage(t, tc.lang)
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tc.lang, Source: languages.Source{Files: tc.files}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusOK || string(res.Stdout) != "42\n" {
				t.Fatalf("status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
			}
		})
	}
}

// TestWorkFilesEveryPath: the work files (Judge0's additional_files) are
// in the run's working directory, native or WASM: the program reads them
// by a relative name, in a subdirectory too, and may write beside them
// (its working directory is its own, writable).
func TestWorkFilesEveryPath(t *testing.T) {
	e := newExecutor(t, "")
	work := []languages.File{{Name: "data.txt", Content: []byte("from the zip\n")}, {Name: "sub/more.txt", Content: []byte("nested\n")}}
	for _, tc := range []struct{ lang, src string }{
		{"bash", "read a < data.txt; read b < sub/more.txt; echo x >> data.txt; echo \"$a $b $(wc -l < data.txt)\""},
		{"perl", "open my $f, '<', 'data.txt' or die; my $a = <$f>; chomp $a; open my $g, '<', 'sub/more.txt' or die; my $b = <$g>; chomp $b;\nopen my $w, '>>', 'data.txt' or die; print $w \"x\\n\"; close $w; open $f, '<', 'data.txt'; my @l = <$f>; print \"$a $b \", scalar(@l), \"\\n\";"},
		{"python3-native", "a = open('data.txt').read().strip(); b = open('sub/more.txt').read().strip()\nopen('data.txt', 'a').write('x\\n')\nprint(a, b, len(open('data.txt').readlines()))"},
		{"python", "a = open('data.txt').read().strip(); b = open('sub/more.txt').read().strip()\nopen('data.txt', 'a').write('x\\n')\nprint(a, b, len(open('data.txt').readlines()))"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			l := needLanguage(t, tc.lang)
			main := "main" + l.Info().Extensions[0]
			res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tc.lang,
				Source: languages.Source{Main: main, Files: []languages.File{{Name: main, Content: []byte(tc.src)}}}, WorkFiles: work})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusOK || string(res.Stdout) != "from the zip nested 2\n" {
				t.Fatalf("status %s stdout %q stderr %q message %s", res.Status, res.Stdout, res.Stderr, res.Message)
			}
		})
	}
}

// TestNativePythonDataPackages: numpy and pandas, from Debian's packages,
// import and compute in a confined native run, with their numerical
// libraries held to one thread; a program that asks OpenBLAS for 512
// threads and starts 500 of its own is held at the process limit, and
// the host is none the worse.
func TestNativePythonDataPackages(t *testing.T) {
	testenv.Slow(t, "imports numpy and pandas natively and holds a thread bomb: about 10 s")
	needLanguage(t, "python3-native")
	if why := testenv.NativePython(true); why != "" {
		testenv.Require(t, why)
	}
	if !slices.ContainsFunc(nativepython.DataPackages(), func(p string) bool { return strings.HasPrefix(p, "pandas ") }) {
		testenv.Require(t, "Debian's python3-pandas is not installed (make deps: apt-get install python3-pandas)")
	}
	e := newExecutor(t, "")
	run := func(src string, lim languages.ExecLimits) *languages.ExecResult {
		t.Helper()
		res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "python3-native",
			Source: languages.Source{Main: "main.py", Files: []languages.File{{Name: "main.py", Content: []byte(src)}}}, Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := run(`import os, threading
import numpy as np, pandas as pd
a = np.arange(12, dtype=float).reshape(3, 4)
df = pd.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]})
print(int(a.sum()), int((a @ a.T).trace()), df.groupby("k")["v"].sum().to_dict(), os.environ["OPENBLAS_NUM_THREADS"], threading.active_count())
`, languages.ExecLimits{Timeout: 30 * time.Second, MemoryBytes: 512 << 20})
	if res.Status != languages.StatusOK || string(res.Stdout) != "66 506 {'a': 4, 'b': 2} 1 1\n" {
		t.Fatalf("numpy and pandas: %s %q stderr %q %s", res.Status, res.Stdout, res.Stderr, res.Message)
	}

	began := time.Now()
	res = run(`import os, threading
os.environ["OPENBLAS_NUM_THREADS"] = "512"
import numpy as np
m = np.ones((100, 100))
def work():
    for _ in range(50):
        m @ m
for _ in range(500):
    threading.Thread(target=work).start()
print("all started")
`, languages.ExecLimits{Timeout: 5 * time.Second, MemoryBytes: 512 << 20})
	// What holds it (seen with moat exec): OpenBLAS takes what threads
	// the process limit leaves it, each with its buffers, so the
	// program's own threads soon cannot allocate under the address-space
	// limit, and a thread start fails or hangs in the interpreter; the
	// deadline ends it, or an error first on an idle machine.
	switch res.Status {
	case languages.StatusTimeout, languages.StatusRuntimeError, languages.StatusMemoryLimit:
	default:
		t.Fatalf("a thread bomb through numpy: %s %q stderr %.600q %s", res.Status, res.Stdout, res.Stderr, res.Message)
	}
	if strings.Contains(string(res.Stdout), "all started") {
		t.Errorf("the bomb started its 500 threads: %q", res.Stdout)
	}
	if d := time.Since(began); d > 15*time.Second {
		t.Errorf("the bomb took %v to end under a 5 s limit", d)
	}
	t.Logf("thread bomb: %s after %v: %s", res.Status, time.Since(began).Round(time.Millisecond), res.Message)
}
