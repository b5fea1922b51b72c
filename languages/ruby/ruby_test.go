package ruby_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
	"github.com/moat-sandbox/moat/languages/ruby"
)

// The package's tests share one host, and so one compiled interpreter
// (its machine code kept between test runs in .toolchains when `make
// toolchains` made it).
var suite = &interptest.Suite{Language: "ruby", Module: "rb-test"}

func TestMain(m *testing.M) { interptest.Main(m, suite) }

// interpreter skips when `make toolchains` has not provisioned ruby.wasm,
// except in CI (MOAT_REQUIRE_TOOLS=1), where that is a failure.
func interpreter(t testing.TB) {
	t.Helper()
	if _, err := ruby.Interpreter(""); err != nil {
		testenv.Require(t, err.Error())
	}
}

// run builds files (name, content...) and runs them as the executor does:
// Files in a directory that becomes /src, then RunArtifact.
func run(t testing.TB, in languages.RunInput, files ...string) (*languages.RunOutput, error) {
	t.Helper()
	interpreter(t)
	var src languages.Source
	for i := 0; i+1 < len(files); i += 2 {
		src.Files = append(src.Files, languages.File{Name: files[i], Content: []byte(files[i+1])})
	}
	l := ruby.Language{}
	a, err := l.Build(context.Background(), languages.BuildEnv{}, src)
	if err != nil {
		t.Fatal(err)
	}
	in.SrcDir = t.TempDir()
	if err := writeFiles(in.SrcDir, a.Files); err != nil {
		t.Fatal(err)
	}
	return l.RunArtifact(context.Background(), languages.RunEnv{Host: suite.Host}, a, in)
}

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		in         languages.RunInput
		files      []string
		wantOut    string
		wantErrOut string
		wantCode   int
	}{
		{
			name: "stdin args env exit",
			in:   languages.RunInput{Stdin: []byte("world\n"), Args: []string{"a", "-b"}, Env: map[string]string{"GREETING": "hi"}},
			files: []string{"main.rb", `line = $stdin.gets.chomp
require "json"
puts "hello #{line} #{ARGV.join(",")} #{ENV["GREETING"]} #{JSON.generate([RUBY_VERSION, $0])}"
exit 3`},
			wantOut:  "hello world a,-b hi [\"3.4.1\",\"/src/main.rb\"]\n",
			wantCode: 3,
		},
		{
			name:     "require_relative and a clean end",
			files:    []string{"main.rb", "require_relative 'lib/util'\nputs Util.twice(21)", "lib/util.rb", "module Util\n  def self.twice(n) = 2 * n\nend\n"},
			wantOut:  "42\n",
			wantCode: 0,
		},
		{
			name:       "uncaught exception",
			files:      []string{"main.rb", "puts 'before'\nraise ArgumentError, 'boom'"},
			wantOut:    "before\n",
			wantErrOut: "boom (ArgumentError)",
			wantCode:   1,
		},
		{
			name:       "syntax error",
			files:      []string{"main.rb", "def f(\n"},
			wantErrOut: "SyntaxError",
			wantCode:   1,
		},
		{
			name:     "exit! skips the wrapper",
			files:    []string{"main.rb", "print 'bye'\nexit!(7)"},
			wantOut:  "bye",
			wantCode: 7,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := run(t, tt.in, tt.files...)
			if err != nil {
				t.Fatal(err)
			}
			if out.ExitCode != tt.wantCode || !strings.Contains(string(out.Stdout), tt.wantOut) || !strings.Contains(string(out.Stderr), tt.wantErrOut) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					out.ExitCode, out.Stdout, out.Stderr, tt.wantCode, tt.wantOut, tt.wantErrOut)
			}
		})
	}
}

func TestRunLimits(t *testing.T) {
	tests := []struct {
		name   string
		limits languages.ExecLimits
		script string
		want   *host.Error
	}{
		{"timeout", languages.ExecLimits{Timeout: time.Second}, "loop { }", host.ErrTimeout},
		{"output", languages.ExecLimits{MaxOutputBytes: 1000}, "loop { puts 'x' * 100 }", host.ErrOutputTooLarge},
		{"memory", languages.ExecLimits{MemoryBytes: 64 << 20}, "a = []\nloop { a << ('x' * (1 << 20)) }", host.ErrMemoryLimit},
	}
	// The memory case's limit is enough for the interpreter itself.
	if out, err := run(t, languages.RunInput{Limits: languages.ExecLimits{MemoryBytes: 64 << 20}}, "main.rb", "puts 1"); err != nil || string(out.Stdout) != "1\n" {
		t.Fatalf("a small script under 64 MiB: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.limits.Timeout == 0 {
				tt.limits.Timeout = 20 * time.Second
			}
			_, err := run(t, languages.RunInput{Limits: tt.limits}, "main.rb", tt.script)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestNoJavaScript: the browser interop of ruby.wasm has nothing behind it;
// using it stops the run with a message that says so.
func TestNoJavaScript(t *testing.T) {
	_, err := run(t, languages.RunInput{}, "main.rb", "require 'js'\nJS.global")
	if !errors.Is(err, host.ErrTrap) || !strings.Contains(err.Error(), "JavaScript interop") {
		t.Fatalf("err = %v, want a trap about JavaScript interop", err)
	}
}

func writeFiles(dir string, files []languages.File) error {
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			return err
		}
	}
	return nil
}
