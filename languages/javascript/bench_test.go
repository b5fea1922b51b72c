package javascript_test

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
	"github.com/moat-sandbox/moat/policy"
)

// BenchmarkRun measures hello world (read a line of stdin, print a
// greeting) with the interpreter compiled and loaded: one instantiation
// and run per iteration, as the executor pays with a warm build cache.
// node-e is Node.js as a plain process, for scale, when installed.
func BenchmarkRun(b *testing.B) {
	const script = `const name = std.in.getline(); print("Hello, " + name + "!");`
	b.Run("javascript", func(b *testing.B) {
		a := build(b, "main.js", script)
		m, err := suite.Host.Load(context.Background(), a.WASM, host.LoadOptions{Name: "js-bench"})
		if err != nil {
			b.Fatal(err)
		}
		src := interptest.WriteFiles(b, a)
		req := host.RunRequest{Principal: policy.Principal{User: "bench", Org: "acme"}, Args: a.Args, Stdout: io.Discard, Mounts: []host.Mount{{HostDir: src, GuestPath: "/src", ReadOnly: true}}}
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
	b.Run("node-e", func(b *testing.B) {
		node, err := exec.LookPath("node")
		if err != nil {
			b.Skip("node is not installed")
		}
		cpu := interptest.StartCPU(syscall.RUSAGE_CHILDREN)
		for b.Loop() {
			cmd := exec.Command(node, "-e", `const name = require("fs").readFileSync(0, "utf8").trim(); console.log("Hello, " + name + "!");`)
			cmd.Stdin = strings.NewReader("World\n")
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
}

// BenchmarkPluginCall: interptest.Suite.BenchPluginCall, in JavaScript.
func BenchmarkPluginCall(b *testing.B) {
	suite.BenchPluginCall(b, "main.js", `import * as moat from "./moat.js";
moat.action("echo", (s) => s);`, `print(std.in.readAsString());`)
}
