package ruby_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/ruby"
	"github.com/moat-sandbox/moat/toolchains"
)

var testHost *host.Host

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "moat-ruby-test-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		cache := filepath.Join(dir, "cache")
		if d := toolchains.Dir(); d != "" {
			cache = filepath.Join(d, "cache", "wazero")
		}
		ctx := context.Background()
		testHost, err = host.New(ctx, host.Config{DataDir: dir, CacheDir: cache, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			panic(err)
		}
		defer testHost.Close(ctx)
		return m.Run()
	}()
	os.Exit(code)
}

// interpreter skips when `make toolchains` has not provisioned ruby.wasm,
// except in CI (MOAT_REQUIRE_TOOLS=1), where that is a failure.
func interpreter(t testing.TB) {
	t.Helper()
	if _, err := ruby.Interpreter(""); err != nil {
		if os.Getenv("MOAT_REQUIRE_TOOLS") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// run builds files (name, content...) and runs them as the executor does.
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
	for _, f := range a.Files {
		p := filepath.Join(in.SrcDir, filepath.FromSlash(f.Name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return l.RunArtifact(context.Background(), languages.RunEnv{Host: testHost}, a, in)
}

func TestRun(t *testing.T) {
	out, err := run(t, languages.RunInput{Stdin: []byte("world\n"), Args: []string{"a", "-b"}, Env: map[string]string{"GREETING": "hi"}},
		"main.rb", `line = $stdin.gets.chomp
require "json"
puts "hello #{line} #{ARGV.join(",")} #{ENV["GREETING"]} #{JSON.generate([RUBY_VERSION])}"
exit 3`)
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Stdout) != "hello world a,-b hi [\"3.4.1\"]\n" || out.ExitCode != 3 {
		t.Fatalf("exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout, out.Stderr)
	}
	t.Logf("%q", out.Stderr)
	_ = strings.Contains
}
