package testenv

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// recorder is a testing.TB that records what Require did instead of
// doing it, so the cases can run in one test.
type recorder struct {
	testing.TB
	fatal, skip string
}

// stopped is what recorder panics with where testing.T would end the
// test: Fatal and Skip do not return.
type stopped struct{}

func (r *recorder) Helper()           {}
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...); panic(stopped{}) }
func (r *recorder) Skip(args ...any)  { r.skip = fmt.Sprint(args...); panic(stopped{}) }

// call runs f on r, as far as its first Fatal or Skip.
func (r *recorder) call(f func(testing.TB)) {
	defer func() {
		if v := recover(); v != nil && v != (stopped{}) {
			panic(v)
		}
	}()
	f(r)
}

// TestRequireOneMeaning: MOAT_REQUIRE_TOOLS=1, and only "1", turns a
// missing tool or root into a failure (the tree once read it as "set to
// anything" in some places and "1" in others).
func TestRequireOneMeaning(t *testing.T) {
	for _, c := range []struct {
		env, why   string
		fail, skip bool
	}{
		{"1", "no clang", true, false},
		{"", "no clang", false, true},
		{"0", "no clang", false, true},
		{"true", "no clang", false, true},
		{"yes", "no clang", false, true},
		{"1", "", false, false},
		{"", "", false, false},
	} {
		t.Setenv(EnvRequire, c.env)
		r := &recorder{TB: t}
		r.call(func(tb testing.TB) { Require(tb, c.why) })
		if (r.fatal != "") != c.fail || (r.skip != "") != c.skip || c.fail && r.fatal != c.why || c.skip && r.skip != c.why {
			t.Errorf("%s=%q, why %q: fatal %q, skip %q; want fail %t, skip %t, with the reason", EnvRequire, c.env, c.why, r.fatal, r.skip, c.fail, c.skip)
		}
		if got := Required(); got != (c.env == "1") {
			t.Errorf("%s=%q: Required() = %t", EnvRequire, c.env, got)
		}
	}
}

// TestRoot: Root does nothing as root (the tests run as root here and in
// CI); as another user it is Require.
func TestRoot(t *testing.T) {
	r := &recorder{TB: t}
	t.Setenv(EnvRequire, "1")
	r.call(func(tb testing.TB) { Root(tb, "needs root") })
	root := os.Geteuid() == 0
	if root && (r.fatal != "" || r.skip != "") || !root && r.fatal != "needs root" {
		t.Errorf("Root as uid %d under %s=1: fatal %q, skip %q", os.Geteuid(), EnvRequire, r.fatal, r.skip)
	}
}

var (
	readsRequire = regexp.MustCompile(`(Getenv|LookupEnv)\("MOAT_REQUIRE_TOOLS"\)`)
	rootCheck    = regexp.MustCompile(`Geteuid\(\) != 0`)
	plainSkip    = regexp.MustCompile(`\b(t|b|tb)\.Skip(f|Now)?\(`)
	takesTiming  = regexp.MustCompile(`^\ttestenv\.Timing\(t\)`)
	// skipsAfter is a skip at a test's top level: Slow, Require, Root or
	// -short's own; skipsInIf, one in the block of a top-level if.
	skipsAfter = regexp.MustCompile(`^\t(testenv\.(Slow|Require|Root)\(|if testing\.Short\(\))`)
	skipsInIf  = regexp.MustCompile(`^\t\ttestenv\.(Require|Root)\(`)
)

// violations returns, for one file's source, each line that decides a
// skip for a missing tool or root without this package: a read of
// MOAT_REQUIRE_TOOLS, or a root check whose next line skips; and each
// skip a test decides after it took the timing lock (Timing's doc: the
// lock is the machine's, so a test that takes it to skip waits for
// nothing).
func violations(name, src string) []string {
	var out []string
	lines := strings.Split(src, "\n")
	timing := 0 // the line of the current function's Timing call, or 0
	for i, l := range lines {
		if strings.HasPrefix(l, "}") {
			timing = 0
		}
		if takesTiming.MatchString(l) {
			timing = i + 1
		} else if timing > 0 && (skipsAfter.MatchString(l) || skipsInIf.MatchString(l) && strings.HasPrefix(lines[i-1], "\tif ")) {
			out = append(out, fmt.Sprintf("%s:%d: skips after it took the timing lock (line %d): skip first, then call testenv.Timing", name, i+1, timing))
		}
		if readsRequire.MatchString(l) {
			out = append(out, fmt.Sprintf("%s:%d: reads MOAT_REQUIRE_TOOLS itself: use testenv.Require (or testenv.Required), whose one meaning is =1", name, i+1))
		}
		if rootCheck.MatchString(l) && i+1 < len(lines) && plainSkip.MatchString(lines[i+1]) {
			out = append(out, fmt.Sprintf("%s:%d: skips without root by itself: use testenv.Root, which fails under MOAT_REQUIRE_TOOLS=1", name, i+2))
		}
	}
	return out
}

// TestEverySkipThroughRequire: no Go file of the repository but this
// package's reads MOAT_REQUIRE_TOOLS or skips for want of root by itself,
// and no test skips after it took the timing lock.
func TestEverySkipThroughRequire(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("not the repository's root: %v", err)
	}
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			// Another module's tree is not moat's tests (as for go list
			// ./...): the image's context holds a copy of GOROOT, whose
			// src has its own go.mod.
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || filepath.Dir(rel) == filepath.Join("internal", "testenv") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, v := range violations(filepath.ToSlash(rel), string(b)) {
			t.Error(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 500 {
		t.Fatalf("only %d Go files read: is the walk in the repository?", files)
	}
}

// TestViolationsFound: the scan finds each way around this package.
func TestViolationsFound(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"set", "if os.Getenv(\"MOAT_REQUIRE_TOOLS\") != \"\" {\n", "x.go:1: reads MOAT_REQUIRE_TOOLS itself"},
		{"equal one", "\tif os.Getenv(\"MOAT_REQUIRE_TOOLS\") == \"1\" {\n", "x.go:1: reads MOAT_REQUIRE_TOOLS itself"},
		{"lookup", "_, ok := os.LookupEnv(\"MOAT_REQUIRE_TOOLS\")\n", "x.go:1: reads MOAT_REQUIRE_TOOLS itself"},
		{"root skip", "\tif os.Geteuid() != 0 {\n\t\tt.Skip(\"needs root\")\n\t}\n", "x.go:2: skips without root by itself"},
		{"root skipf", "if cond && os.Geteuid() != 0 {\n\tt.Skipf(\"%s\", x)\n", "x.go:2: skips without root by itself"},
		{"benchmark", "if os.Geteuid() != 0 {\n\tb.Skip(\"root\")\n", "x.go:2: skips without root by itself"},
		{"helper", "if os.Geteuid() != 0 {\n\ttb.SkipNow()\n", "x.go:2: skips without root by itself"},
		{"slow after timing", "func TestX(t *testing.T) {\n\ttestenv.Timing(t)\n\ttestenv.Slow(t, \"slow\")\n}\n", "x.go:3: skips after it took the timing lock (line 2)"},
		{"short after timing", "func TestX(t *testing.T) {\n\ttestenv.Timing(t)\n\tif testing.Short() {\n\t\tt.Skip(\"x\")\n\t}\n}\n", "x.go:3: skips after it took the timing lock"},
		{"tool after timing", "func TestX(t *testing.T) {\n\ttestenv.Timing(t)\n\tx := 1\n\ttestenv.Require(t, missing())\n}\n", "x.go:4: skips after it took the timing lock"},
		{"root after timing", "func TestX(t *testing.T) {\n\ttestenv.Timing(t)\n\tif os.Geteuid() != 0 {\n\t\ttestenv.Require(t, \"root\")\n\t}\n}\n", "x.go:4: skips after it took the timing lock"},
	} {
		got := violations("x.go", c.src)
		if len(got) != 1 || !strings.HasPrefix(got[0], c.want) {
			t.Errorf("%s: %q, want one violation starting %q", c.name, got, c.want)
		}
	}
	for _, ok := range []string{
		"testenv.Root(t, \"needs root\")\n",
		"if os.Geteuid() != 0 {\n\ttestenv.Require(t, \"needs root\")\n}\n",
		"if os.Geteuid() != 0 {\n\treturn // the job uid is our own\n}\n",
		"func TestX(t *testing.T) {\n\ttestenv.Slow(t, \"slow\")\n\ttestenv.Timing(t)\n}\n",
		"func TestX(t *testing.T) {\n\ttestenv.Timing(t)\n}\n\nfunc TestY(t *testing.T) {\n\ttestenv.Slow(t, \"slow\")\n}\n",
		"func TestX(t *testing.T) {\n\ttestenv.Timing(t)\n\tif os.Getenv(\"HELPER\") != \"\" {\n\t\tt.Skip(\"the helper process\")\n\t}\n}\n",
	} {
		if got := violations("x.go", ok); len(got) != 0 {
			t.Errorf("%q: %q, want none", ok, got)
		}
	}
}
