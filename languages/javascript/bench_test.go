package javascript_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
		src := b.TempDir()
		for _, f := range a.Files {
			if err := os.WriteFile(filepath.Join(src, f.Name), f.Content, 0o644); err != nil {
				b.Fatal(err)
			}
		}
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

// BenchmarkPluginCall measures one warm call of an echo action through
// Module.Invoke: a resident plugin (handlers registered with moat.action:
// one instance serves every call) against the same action as a per-call
// script (the interpreter starts and runs the script for each call).
func BenchmarkPluginCall(b *testing.B) {
	p := policy.Principal{User: "bench", Org: "acme"}
	for _, tc := range []struct{ name, script string }{
		{"resident", `import * as moat from "./moat.js";
moat.action("echo", (s) => s);`},
		{"per-call", `print(std.in.readAsString());`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			mf, err := policy.ParseManifest("moat.yaml", []byte("name: echo-"+tc.name+"\nversion: 0.1.0\nlanguage: javascript\nkind: moat\nactions: [{name: echo}]\n"))
			if err != nil {
				b.Fatal(err)
			}
			m := suite.LoadScript(b, mf, "main.js", tc.script)
			req := host.Request{Action: "echo", Input: []byte("hello"), Principal: p}
			b.ResetTimer()
			for b.Loop() {
				if res, err := m.Invoke(context.Background(), req); err != nil || string(res.Output) != "hello" {
					b.Fatal(string(res.Output), err)
				}
			}
		})
	}
}
