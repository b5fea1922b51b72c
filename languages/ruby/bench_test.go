package ruby_test

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
	"github.com/moat-sandbox/moat/languages/ruby"
)

// BenchmarkRun measures hello world (read a line of stdin, print a
// greeting) with the interpreter compiled: each iteration instantiates
// ruby.wasm, runs ruby-init and the script. ruby-e is the system's ruby as
// a plain process, for scale, when installed.
func BenchmarkRun(b *testing.B) {
	const script = `puts "Hello, #{$stdin.gets.chomp}!"`
	b.Run("ruby", func(b *testing.B) {
		interpreter(b)
		l := ruby.Language{}
		a, err := l.Build(context.Background(), languages.BuildEnv{}, languages.Source{Files: []languages.File{{Name: "main.rb", Content: []byte(script)}}})
		if err != nil {
			b.Fatal(err)
		}
		in := languages.RunInput{Stdin: []byte("World\n"), SrcDir: b.TempDir()}
		if err := writeFiles(in.SrcDir, a.Files); err != nil {
			b.Fatal(err)
		}
		env := languages.RunEnv{Host: suite.Host}
		if _, err := l.RunArtifact(context.Background(), env, a, in); err != nil { // compile outside the timing
			b.Fatal(err)
		}
		b.ResetTimer()
		cpu := interptest.StartCPU(syscall.RUSAGE_SELF)
		for b.Loop() {
			if out, err := l.RunArtifact(context.Background(), env, a, in); err != nil || out.ExitCode != 0 {
				b.Fatal(out, err)
			}
		}
		cpu.Report(b)
	})
	b.Run("ruby-e", func(b *testing.B) {
		rb, err := exec.LookPath("ruby")
		if err != nil {
			b.Skip("ruby is not installed")
		}
		cpu := interptest.StartCPU(syscall.RUSAGE_CHILDREN)
		for b.Loop() {
			cmd := exec.Command(rb, "-e", script)
			cmd.Stdin = strings.NewReader("World\n")
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
}

// BenchmarkPluginCall: interptest.Suite.BenchPluginCall, in Ruby: a warm
// call of an echo action on a resident instance. Ruby plugins have no
// per-call form.
func BenchmarkPluginCall(b *testing.B) {
	interpreter(b)
	suite.BenchPluginCall(b, "main.rb", "require \"moat\"\n\nMoat.action(\"echo\") { |input| input }\n", "")
}
