package python_test

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
	"github.com/moat-sandbox/moat/languages/python"
	"github.com/moat-sandbox/moat/policy"
)

// BenchmarkRun measures hello world (read a line of stdin, print a
// greeting) with the 26 MB interpreter compiled and loaded: one
// instantiation and CPython start-up per iteration, as the executor pays
// with a warm build cache. python3-c is the machine's CPython as a plain
// process, for scale, when installed.
func BenchmarkRun(b *testing.B) {
	const script = "import sys\nprint('Hello, ' + sys.stdin.readline().strip() + '!')\n"
	b.Run("python", func(b *testing.B) {
		a := build(b, "main.py", script)
		m, err := suite.Host.Load(context.Background(), a.WASM, host.LoadOptions{Name: "py-bench"})
		if err != nil {
			b.Fatal(err)
		}
		src := interptest.WriteFiles(b, a)
		req := host.RunRequest{Principal: policy.Principal{User: "bench", Org: "acme"}, Args: a.Args, Env: a.Env, Stdout: io.Discard, Mounts: append([]host.Mount{{HostDir: src, GuestPath: "/src", ReadOnly: true}}, a.Mounts...)}
		b.ResetTimer()
		cpu := interptest.StartCPU(syscall.RUSAGE_SELF)
		for b.Loop() {
			req.Stdin = strings.NewReader("World\n")
			if res, err := m.Run(context.Background(), req); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
		}
		cpu.Report(b)
	})
	b.Run("python-snapshot", func(b *testing.B) {
		// The same run, started from the interpreter's snapshot
		// (snapshot.go), as moat exec starts it.
		a := build(b, "main.py", script)
		lang := python.Language{}
		m, err := suite.Host.Load(context.Background(), a.WASM, host.LoadOptions{Name: "py-bench-snap", Snapshot: lang.Snapshot(a)})
		if err != nil {
			b.Fatal(err)
		}
		src := interptest.WriteFiles(b, a)
		entry, ok := lang.EntryCode(a, nil, a.Env)
		if !ok {
			b.Fatal("no entry code")
		}
		req := host.RunRequest{Principal: policy.Principal{User: "bench", Org: "acme"}, Args: a.Args, Env: a.Env, Stdout: io.Discard, Entry: entry,
			Mounts: append([]host.Mount{{HostDir: src, GuestPath: "/src", ReadOnly: true}}, a.Mounts...), Scratch: &host.Scratch{Dir: b.TempDir()}}
		b.ResetTimer()
		cpu := interptest.StartCPU(syscall.RUSAGE_SELF)
		for b.Loop() {
			req.Stdin = strings.NewReader("World\n")
			if res, err := m.Run(context.Background(), req); err != nil || res.ExitCode != 0 || !res.FromSnapshot {
				b.Fatal(res, err)
			}
		}
		cpu.Report(b)
	})
	b.Run("python3-c", func(b *testing.B) {
		// The interpreter itself, not a version manager's shim script.
		out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
		if err != nil {
			b.Skip("python3 is not installed")
		}
		py := strings.TrimSpace(string(out))
		cpu := interptest.StartCPU(syscall.RUSAGE_CHILDREN)
		for b.Loop() {
			cmd := exec.Command(py, "-c", script)
			cmd.Stdin = strings.NewReader("World\n")
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
}

// BenchmarkPluginCall: interptest.Suite.BenchPluginCall, in Python.
func BenchmarkPluginCall(b *testing.B) {
	suite.BenchPluginCall(b, "main.py", "import moat\n\n\n@moat.action(\"echo\")\ndef echo(inp):\n    return bytes(inp)\n",
		"import sys\n\nsys.stdout.write(sys.stdin.read())\n")
}
