package main_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
)

// firstRunSources are the programs the first runs run, by language.
var firstRunSources = map[string]string{
	"javascript":     "console.log(6*7)",
	"typescript":     "const n: number = 6 * 7; console.log(n)",
	"python":         "print(6*7)",
	"ruby":           "puts 6*7",
	"go":             "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(6 * 7) }\n",
	"c":              "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 6*7); return 0; }\n",
	"cpp":            "#include <cstdio>\nint main() { std::printf(\"%d\\n\", 6*7); return 0; }\n",
	"rust":           "fn main() { println!(\"{}\", 6 * 7); }\n",
	"assemblyscript": "console.log((6 * 7).toString());\n",
	"bash":           "echo $((6*7))",
	"python3-native": "print(6*7)",
	"lua":            "print(6*7)",
	"php":            "<?php echo 6*7, \"\\n\";",
	"perl":           "print 6*7, \"\\n\";",
	"java":           "public class Main { public static void main(String[] a) { System.out.println(6*7); } }\n",
	"kotlin":         "fun main() { println(6 * 7) }\n",
}

// firstRunBound is what a first run may take after `moat toolchains
// install`: the goal is under a second; the bound leaves room for a
// loaded CI machine, and the log says each figure measured. Past it, the
// first run must take no more than twice a warm run of the same program
// (and a second): on a machine loaded enough that a warm process takes
// seconds, that is what "paid nothing" means.
const firstRunBound = 3 * time.Second

// TestFirstRunsAfterInstall: `moat toolchains install` pays every
// first-time cost that is the machine's (the interpreters' machine code
// and start images, Go's standard library) into the machine's state, so
// that the first `moat exec` of each language in a fresh data directory
// answers within firstRunBound, and a second fresh data directory pays
// nothing again ("once" is said by no run). A compiled language's first
// run is that program's build (a compiler started on its source), which
// nothing can do ahead: its figure is logged, not bounded, and it must
// not do the machine's first-time work either (its program's own compile
// to machine code is that program's, once).
func TestFirstRunsAfterInstall(t *testing.T) {
	testenv.Slow(t, "installs into a fresh machine state: the interpreters compile to machine code (a minute or more of CPU)")
	noSharedCache(t)
	tc := os.Getenv("MOAT_TOOLCHAINS")
	if tc == "" {
		testenv.Require(t, "no toolchains: `make toolchains` provisions them")
	}
	var warmed []string
	for _, name := range []string{"javascript", "typescript", "python", "ruby", "go"} {
		if langMissing(name) == "" {
			warmed = append(warmed, name)
		}
	}
	// The repository's toolchains are installed already: install only
	// prepares, the languages named so that nothing is downloaded.
	began := time.Now()
	install := moat(t, "", append([]string{"toolchains", "install", "--no-apt", "--dir", tc}, warmed...)...)
	if install.code != 0 {
		t.Fatalf("toolchains install: %+v", install)
	}
	t.Logf("toolchains install %s: %s\n%s", strings.Join(warmed, " "), time.Since(began).Round(time.Millisecond), install.stderr)
	for _, name := range warmed {
		if !strings.Contains(install.stderr, "preparing "+name+" for the machine: done in") {
			t.Errorf("install did not say it prepared %s:\n%s", name, install.stderr)
		}
	}

	t.Setenv("MOAT_PREPARING_AFTER", "0s") // every first-time step shows, however short
	var langs []struct {
		Name      string
		Path      string `json:"path"`
		Available bool   `json:"available"`
	}
	r := moat(t, "", "langs", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &langs); err != nil {
		t.Fatalf("langs --json: %v: %q", err, r.stdout)
	}
	for round, data := range []string{t.TempDir(), t.TempDir()} {
		for _, l := range langs {
			src, ok := firstRunSources[l.Name]
			if !ok || !l.Available || langMissing(l.Name) != "" {
				continue
			}
			start := time.Now()
			r := moat(t, "", "exec", "--data", data, "--lang", l.Name, "-e", src)
			took := time.Since(start)
			compiles := l.Path == string(languages.PathCompiled) || l.Name == "java" || l.Name == "kotlin"
			t.Logf("data dir %d: first %s run %s (compiles its program: %t)", round+1, l.Name, took.Round(time.Millisecond), compiles)
			if r.code != 0 || strings.TrimSpace(r.stdout) != "42" {
				if compiles {
					// Its compiler's own behaviour (a JVM build past its
					// deadline on a loaded machine) is other tests' subject.
					t.Logf("data dir %d: %s: exit %d, stdout %q, stderr %s", round+1, l.Name, r.code, r.stdout, r.stderr)
					continue
				}
				t.Errorf("data dir %d: %s: exit %d, stdout %q, stderr %s", round+1, l.Name, r.code, r.stdout, r.stderr)
				continue
			}
			// A compiled program's own machine code is compiled once for
			// it ("once" is true of that program); an interpreter's is the
			// machine's, made by install.
			if !compiles && strings.Contains(r.stderr, "once)") {
				t.Errorf("data dir %d: %s's first run did the machine's first-time work again:\n%s", round+1, l.Name, r.stderr)
			}
			if compiles || took <= firstRunBound {
				continue
			}
			// Past the bound on a loaded machine: a first run that paid
			// nothing takes what a warm run of the same program in the
			// same data directory takes, at the same load.
			start = time.Now()
			moat(t, "", "exec", "--data", data, "--lang", l.Name, "-e", src)
			warm := time.Since(start)
			t.Logf("data dir %d: %s's first run %s, a warm run %s", round+1, l.Name, took.Round(time.Millisecond), warm.Round(time.Millisecond))
			if took > 2*warm+time.Second {
				t.Errorf("data dir %d: %s's first run took %s, past %s and past twice a warm run's %s", round+1, l.Name, took.Round(time.Millisecond), firstRunBound, warm.Round(time.Millisecond))
			}
		}
	}
}
