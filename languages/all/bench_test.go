package all_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/languages"
)

// BenchmarkExec is the end-to-end cost of `moat exec` for a hello world
// that reads stdin, uses args and env and sets an exit code, with a warm
// build cache: validation, the cache lookup, instantiation and the run
// (for native languages, the confined process). It covers every
// registered language that has a testdata/hello file.
//
// BenchmarkBaseline runs the same programs as plain, unconfined processes
// for comparison.
func BenchmarkExec(b *testing.B) {
	installWrapper(b)
	e := newExecutor(b, "")
	for _, l := range languages.All() {
		name := l.Info().Name
		b.Run(name, func(b *testing.B) {
			needLanguage(b, name)
			req := helloRequest(name, hello(b, l))
			warm, err := e.Exec(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			if warm.ExitCode != 3 {
				b.Fatalf("warm-up: status %s exit %d: %s %s", warm.Status, warm.ExitCode, warm.Message, warm.CompileOutput)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := e.Exec(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				if !res.BuildCached || res.ExitCode != 3 {
					b.Fatalf("cached=%v status %s exit %d", res.BuildCached, res.Status, res.ExitCode)
				}
			}
		})
	}
}

// installWrapper builds the slim confinement wrapper moat-confine beside
// the test binary, where the native runner looks for it, as it lies
// beside an installed moat. Without it the runner re-executes this large
// test binary as the wrapper, and the native rows would measure the test
// binary's start-up.
func installWrapper(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(filepath.Dir(exe), "moat-confine")
	if _, err := os.Stat(out); err == nil {
		return
	}
	cmd := exec.Command("go", "build", "-o", out, "./cmd/moat-confine")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build moat-confine: %v\n%s", err, msg)
	}
}

func BenchmarkBaseline(b *testing.B) {
	stdin := []byte("moat\n")
	run := func(b *testing.B, argv ...string) {
		b.Helper()
		for i := 0; i < b.N; i++ {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stdin = bytes.NewReader(stdin)
			cmd.Env = []string{"GREETING=hi", "PATH=/usr/bin:/bin"}
			out, err := cmd.Output()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || string(out) != "hi moat from a1\n" {
				b.Fatalf("%v: %q %v", argv, out, err)
			}
		}
	}
	need := func(b *testing.B, bin string) {
		if _, err := os.Stat(bin); err != nil {
			b.Skipf("%s not installed", bin)
		}
	}
	b.Run("native-c-gcc", func(b *testing.B) {
		need(b, "/usr/bin/gcc")
		bin := filepath.Join(b.TempDir(), "hello")
		if out, err := exec.Command("/usr/bin/gcc", "-O2", "-o", bin, "testdata/hello.c").CombinedOutput(); err != nil {
			b.Fatalf("gcc: %v\n%s", err, out)
		}
		b.ResetTimer()
		run(b, bin, "a1", "a2")
	})
	py, _ := os.ReadFile("testdata/hello.py")
	b.Run("python3-c", func(b *testing.B) {
		need(b, "/usr/bin/python3")
		run(b, "/usr/bin/python3", "-c", string(py), "a1", "a2")
	})
	sh, _ := os.ReadFile("testdata/hello.sh")
	b.Run("bash-c", func(b *testing.B) {
		need(b, "/usr/bin/bash")
		run(b, "/usr/bin/bash", "-c", string(sh), "hello", "a1", "a2")
	})
	b.Run("node-e", func(b *testing.B) {
		need(b, "/usr/bin/node")
		const js = `const fs = require("fs");
const line = fs.readFileSync(0, "utf8").split("\n")[0];
console.log(process.env.GREETING + " " + line + " from " + process.argv[1]);
console.error("bye");
process.exit(3);`
		run(b, "/usr/bin/node", "-e", js, "a1", "a2")
	})
}
