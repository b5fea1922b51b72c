package all_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/all"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/kernel"
)

func TestMain(m *testing.M) {
	kernel.ConfineMain()
	native.LauncherMain()
	code := m.Run()
	if sharedHost != nil {
		sharedHost.Close(context.Background())
		sharedAudit.Close(context.Background())
		sharedStore.Close()
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// persistentDir is a directory kept across test runs: the Go toolchain's
// seed cache (about 20 s of CPU to build) and wazero's compiled code are
// keyed by toolchain version and content, so reusing them is safe, and it
// keeps the Go tests' cost bounded to one seed build per machine.
func persistentDir(t testing.TB, name string) string {
	d := filepath.Join(os.TempDir(), "moat-test-"+name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

var (
	sharedOnce sync.Once
	sharedHost *host.Host
	// sharedStore and sharedAudit are what sharedHost runs on, opened by
	// testHost: the tests read the events their runs leave.
	sharedStore *store.Store
	sharedAudit *audit.Log
	sharedDir   string // its data dir, removed by TestMain
	sharedErr   error
)

// testHost is one host for the package: WASM modules compile once.
func testHost(t testing.TB) *host.Host {
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "moat-langs-test-")
		if err != nil {
			sharedErr = err
			return
		}
		sharedDir = dir
		if sharedStore, sharedErr = store.Open(context.Background(), dir); sharedErr != nil {
			return
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		sharedAudit = audit.New(sharedStore, log)
		sharedHost, sharedErr = host.New(context.Background(), host.Config{
			DataDir: dir, CacheDir: persistentDir(t, "wazero-cache"), Store: sharedStore, Audit: sharedAudit,
			Logger:                     log,
			OmitAllowedInvocationAudit: true,
		})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedHost
}

// newExecutor returns an executor with a fresh build cache (or the given
// one) and the shared state dir.
func newExecutor(t testing.TB, cacheDir string) *languages.Executor {
	t.Helper()
	if cacheDir == "" {
		cacheDir = t.TempDir()
	}
	e, err := languages.NewExecutor(languages.ExecutorConfig{
		Host: testHost(t), Audit: sharedAudit, BuildCacheDir: cacheDir, StateDir: persistentDir(t, "lang-state"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// needLanguage skips when the language's toolchain is missing, unless
// MOAT_REQUIRE_TOOLS is set (CI), where a missing toolchain fails.
func needLanguage(t testing.TB, name string) languages.Language {
	t.Helper()
	l, err := languages.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := l.(languages.Checker); ok {
		if err := c.Available(); err != nil {
			testenv.Require(t, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if l.Info().Path == languages.PathNative && !nativeOK() {
		testenv.Require(t, fmt.Sprintf("%s: the native runner cannot run here (no user namespaces and not root)", name))
	}
	return l
}

// nativeOK: the native runner needs root or unprivileged user namespaces.
func nativeOK() bool {
	if os.Geteuid() == 0 {
		return true
	}
	b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone")
	return err != nil || strings.TrimSpace(string(b)) == "1"
}

// hello returns the hello-world source of a language from testdata:
// hello-NAME.EXT when there is one (TypeScript and AssemblyScript share
// .ts), else hello.EXT by its first extension; every one reads a line from stdin, prints
// "$GREETING <line> from <argv[1]>", writes "bye" to stderr and exits 3.
func hello(t testing.TB, l languages.Language) languages.Source {
	t.Helper()
	for _, ext := range l.Info().Extensions {
		if b, err := os.ReadFile(filepath.Join("testdata", "hello-"+l.Info().Name+ext)); err == nil {
			return languages.Source{Files: []languages.File{{Name: "main" + ext, Content: b}}}
		}
	}
	for _, ext := range l.Info().Extensions {
		b, err := os.ReadFile(filepath.Join("testdata", "hello"+ext))
		if err == nil {
			return languages.Source{Files: []languages.File{{Name: "main" + ext, Content: b}}}
		}
	}
	t.Skipf("%s: no testdata/hello{%s}", l.Info().Name, strings.Join(l.Info().Extensions, ","))
	return languages.Source{}
}

func helloRequest(lang string, src languages.Source) languages.ExecRequest {
	return languages.ExecRequest{
		Language: lang, Source: src,
		Stdin: []byte("moat\n"), Args: []string{"a1", "a2"}, Env: map[string]string{"GREETING": "hi"},
		Limits: languages.ExecLimits{CompileTimeout: 5 * time.Minute},
	}
}

// TestHelloEveryLanguage runs each registered language's hello world
// through Exec: stdin, args, env, stdout, stderr and the exit code.
func TestHelloEveryLanguage(t *testing.T) {
	e := newExecutor(t, "")
	for _, l := range languages.All() {
		name := l.Info().Name
		t.Run(name, func(t *testing.T) {
			needLanguage(t, name)
			if name == "go" || name == "rust" || name == "assemblyscript" || name == "cpp" || name == "kotlin" {
				testenv.Slow(t, "a cold build of its hello world (2-8 CPU-s); c shows the compiled path")
			}
			res, err := e.Exec(context.Background(), helloRequest(name, hello(t, l)))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusRuntimeError || res.ExitCode != 3 {
				t.Fatalf("status %s exit %d (want runtime-error, 3): %s\ncompile: %s\nstderr: %s", res.Status, res.ExitCode, res.Message, res.CompileOutput, res.Stderr)
			}
			if got, want := string(res.Stdout), "hi moat from a1\n"; got != want {
				t.Errorf("stdout %q, want %q", got, want)
			}
			if got := string(res.Stderr); !strings.Contains(got, "bye") {
				t.Errorf("stderr %q, want bye", got)
			}
			if res.Language != name || res.Version == "" || res.Version == "unavailable" {
				t.Errorf("language %q version %q", res.Language, res.Version)
			}
			if res.RunTime <= 0 {
				t.Errorf("run time %s", res.RunTime)
			}
			// Every path reports its peak: the cgroup's for native runs,
			// the linear memory's for WASM ones (at least one 64 KiB page).
			if res.PeakMemory < 64<<10 {
				t.Errorf("peak memory %d bytes, want at least a page", res.PeakMemory)
			}
		})
	}
}

// TestPeakMemory: a WASM run's peak is the size its memory grew to, so a
// program that allocates 32 MiB reports more than that, and more than a
// hello world.
func TestPeakMemory(t *testing.T) {
	e := newExecutor(t, "")
	for _, tc := range []struct{ lang, file, small, big string }{
		{"python", "main.py", "print(1)", "b = bytearray(32 << 20)\nprint(len(b))"},
		{"c", "main.c", "int main(void){return 0;}", "#include <stdlib.h>\nint main(void){volatile char *p = malloc(32 << 20); for (int i = 0; i < (32 << 20); i += 4096) p[i] = 1; return p[4096] - 1;}"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			needLanguage(t, tc.lang)
			peak := func(code string) uint64 {
				res, err := e.Exec(context.Background(), languages.ExecRequest{Language: tc.lang,
					Source: languages.Source{Files: []languages.File{{Name: tc.file, Content: []byte(code)}}},
					Limits: languages.ExecLimits{CompileTimeout: 5 * time.Minute}})
				if err != nil || res.Status != languages.StatusOK {
					t.Fatalf("%v %s %s %s", err, res.Status, res.Message, res.Stderr)
				}
				return res.PeakMemory
			}
			small, big := peak(tc.small), peak(tc.big)
			if big < 32<<20 || big <= small {
				t.Errorf("peak of the 32 MiB program %d, of the small one %d; want over 32 MiB and over the small one", big, small)
			}
		})
	}
}

// TestAliases: every alias finds its language.
func TestAliases(t *testing.T) {
	for _, tc := range []struct{ alias, want string }{
		{"golang", "go"}, {"C++", "cpp"}, {"rs", "rust"}, {"as", "assemblyscript"}, {"sh", "bash"}, {"C", "c"},
		{"pynative", "python3-native"}, {"JDK", "java"}, {"pl", "perl"}, {"ts", "typescript"}, {"asc", "assemblyscript"}, {"lua5.4", "lua"}, {"PHP8", "php"}, {"kt", "kotlin"},
	} {
		l, err := languages.Lookup(tc.alias)
		if err != nil || l.Info().Name != tc.want {
			t.Errorf("Lookup(%q) = %v, %v; want %s", tc.alias, l, err, tc.want)
		}
	}
}

func src(name, content string) languages.Source {
	return languages.Source{Files: []languages.File{{Name: name, Content: []byte(content)}}}
}

// TestBadInput: each kind of bad submission ends in a clear status, not an
// error and not a crash.
func TestBadInput(t *testing.T) {
	e := newExecutor(t, "")
	const okC = "int main(void){return 0;}\n"
	tests := []struct {
		name    string
		req     languages.ExecRequest
		status  languages.Status
		rule    string // a violation with this rule, for invalid
		message string // in Message, CompileOutput or a violation
	}{
		{name: "unknown language", req: languages.ExecRequest{Language: "cobol", Source: src("a.cob", "x")},
			status: languages.StatusInvalid, rule: "language", message: "moat langs"},
		{name: "over size", req: languages.ExecRequest{Language: "c", Source: src("main.c", okC+strings.Repeat("//x\n", 100)),
			Validation: languages.ValidationProfile{MaxSourceBytes: 64}}, status: languages.StatusInvalid, rule: languages.RuleSize, message: "over the limit of 64"},
		{name: "too many files", req: languages.ExecRequest{Language: "c", Source: languages.Source{Files: []languages.File{
			{Name: "main.c", Content: []byte(okC)}, {Name: "b.h"}, {Name: "c.h"}}}, Validation: languages.ValidationProfile{MaxFiles: 2}},
			status: languages.StatusInvalid, rule: languages.RuleFiles, message: "limit of 2"},
		{name: "invalid UTF-8", req: languages.ExecRequest{Language: "c", Source: src("main.c", okC+"// caf\xe9\n")},
			status: languages.StatusInvalid, rule: languages.RuleEncoding, message: "UTF-8"},
		{name: "dot-dot path", req: languages.ExecRequest{Language: "c", Source: languages.Source{Files: []languages.File{
			{Name: "main.c", Content: []byte(okC)}, {Name: "../evil.h", Content: []byte("x")}}}},
			status: languages.StatusInvalid, rule: languages.RulePath, message: `".."`},
		{name: "absolute path", req: languages.ExecRequest{Language: "c", Source: languages.Source{Files: []languages.File{
			{Name: "main.c", Content: []byte(okC)}, {Name: "/etc/passwd", Content: []byte("x")}}}},
			status: languages.StatusInvalid, rule: languages.RulePath, message: "absolute"},
		{name: "denied include", req: languages.ExecRequest{Language: "c", Source: src("main.c", "#include <sys/socket.h>\n"+okC),
			Validation: languages.ValidationProfile{Deny: []string{"include:sys/socket.h"}}},
			status: languages.StatusInvalid, rule: languages.RuleDeny, message: "include:sys/socket.h"},
		{name: "compile timeout", req: languages.ExecRequest{Language: "c", Source: src("main.c", okC+"// compile timeout\n"),
			Limits: languages.ExecLimits{CompileTimeout: time.Millisecond}}, status: languages.StatusTimeout, message: "compile"},
		{name: "compile error", req: languages.ExecRequest{Language: "c", Source: src("main.c", "int main(void){ return undefined_thing; }\n")},
			status: languages.StatusCompileError, message: "undeclared identifier 'undefined_thing'"},
		{name: "output flood", req: languages.ExecRequest{Language: "c", Source: src("main.c", "#include <stdio.h>\nint main(void){for(;;)puts(\"flood\");}\n"),
			Limits: languages.ExecLimits{MaxOutputBytes: 4096}}, status: languages.StatusOutputLimit, message: "4096"},
		{name: "timeout", req: languages.ExecRequest{Language: "c", Source: src("main.c", "int main(void){volatile int x=0; for(;;)x++;}\n"),
			Limits: languages.ExecLimits{Timeout: 300 * time.Millisecond}}, status: languages.StatusTimeout, message: "300ms"},
		{name: "memory limit", req: languages.ExecRequest{Language: "c", Source: src("main.c",
			"#include <stdlib.h>\n#include <string.h>\nchar *keep[4096];\nint main(void){for(int i=0;;i++){char*p=malloc(1<<20); if(!p) __builtin_trap(); memset(p,1,1<<20); keep[i%4096]=p;}}\n"),
			Limits: languages.ExecLimits{MemoryBytes: 16 << 20}}, status: languages.StatusMemoryLimit, message: "limit"},
		{name: "trap", req: languages.ExecRequest{Language: "c", Source: src("main.c", "int main(void){__builtin_trap();}\n")},
			status: languages.StatusRuntimeError, message: "unreachable"},
		{name: "native timeout", req: languages.ExecRequest{Language: "bash", Source: src("main.sh", "sleep 5\n"),
			Limits: languages.ExecLimits{Timeout: 300 * time.Millisecond}}, status: languages.StatusTimeout, message: "300ms"},
		{name: "native output flood", req: languages.ExecRequest{Language: "bash", Source: src("main.sh", "yes flood\n"),
			Limits: languages.ExecLimits{MaxOutputBytes: 4096, Timeout: 2 * time.Second}}, status: languages.StatusOutputLimit, message: "4096"},
		{name: "native memory limit", req: languages.ExecRequest{Language: "python3-native", Source: src("main.py", "x = bytearray(512 << 20)\n"),
			Limits: languages.ExecLimits{MemoryBytes: 64 << 20}}, status: languages.StatusMemoryLimit, message: "memory"},
		{name: "native reads only its sources", req: languages.ExecRequest{Language: "bash", Source: src("main.sh", "echo x > \"$0\"\n")},
			status: languages.StatusRuntimeError, message: "exited with status"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := languages.Lookup(tc.req.Language); err == nil {
				needLanguage(t, l.Info().Name)
				if strings.HasPrefix(tc.name, "native memory") {
					testenv.Root(t, "the memory limit of a native run is a cgroup's, which needs root")
				}
			}
			res, err := e.Exec(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status {
				t.Fatalf("status %s, want %s (message %q, compile %q, violations %v)", res.Status, tc.status, res.Message, res.CompileOutput, res.Violations)
			}
			all := res.Message + "\n" + res.CompileOutput
			found := tc.rule == ""
			for _, v := range res.Violations {
				all += "\n" + v.String()
				if v.Rule == tc.rule {
					found = true
				}
			}
			if !found {
				t.Errorf("no violation with rule %q in %v", tc.rule, res.Violations)
			}
			if !strings.Contains(all, tc.message) {
				t.Errorf("want %q in %q", tc.message, all)
			}
		})
	}
}

// TestCompileErrors: every compiled language returns the compiler's
// message as a compile-error.
func TestCompileErrors(t *testing.T) {
	e := newExecutor(t, "")
	for _, tc := range []struct{ lang, file, code, want string }{
		{"c", "main.c", "int main(void){ return nope; }\n", "nope"},
		{"cpp", "main.cpp", "int main(){ return nope; }\n", "nope"},
		{"rust", "main.rs", "fn main() { let x: i32 = \"s\"; }\n", "mismatched types"},
		{"go", "main.go", "package main\nfunc main() { undefinedFn() }\n", "undefined: undefinedFn"},
		{"assemblyscript", "main.ts", "let x: i32 = nope;\n", "nope"},
		{"java", "Main.java", "public class Main { public static void main(String[] a) { nope(); } }\n", "cannot find symbol"},
		{"kotlin", "main.kt", "fun main() { nope() }\n", "main.kt:1:14: error: unresolved reference"},
		{"typescript", "main.ts", "let x: number = ;\n", "main.ts:1:17: error: Unexpected \";\""},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			needLanguage(t, tc.lang)
			if tc.lang == "kotlin" {
				testenv.Slow(t, "kotlinc starts a JVM of its own: 6-8 CPU-s")
			}
			req := languages.ExecRequest{Language: tc.lang, Source: src(tc.file, tc.code), Limits: languages.ExecLimits{CompileTimeout: 5 * time.Minute}}
			res, err := e.Exec(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != languages.StatusCompileError || !strings.Contains(res.CompileOutput, tc.want) {
				t.Fatalf("status %s, compile output %q: want compile-error with %q", res.Status, res.CompileOutput, tc.want)
			}
		})
	}
}

// TestDenyRules: each language's configurable static check refuses what
// the profile denies and lets the rest through.
func TestDenyRules(t *testing.T) {
	for _, tc := range []struct {
		lang, file, code, deny string
		refused                bool
	}{
		{"go", "main.go", "package main\nimport \"net/http\"\nfunc main(){ _ = http.Get }\n", "import:net", true},
		{"go", "main.go", "package main\nimport \"fmt\"\nfunc main(){ fmt.Println() }\n", "import:net", false},
		{"c", "main.c", "#include <sys/socket.h>\nint main(void){return 0;}\n", "include:sys/socket.h", true},
		{"c", "main.c", "#include <stdio.h>\nint main(void){return 0;}\n", "include:sys/socket.h", false},
		{"cpp", "main.cpp", "#  include \"sys/socket.h\"\nint main(){}\n", "include:sys/socket.h", true},
		{"rust", "main.rs", "use std::net::TcpStream;\nfn main(){}\n", "use:std::net", true},
		{"rust", "main.rs", "use std::{io, net};\nfn main(){}\n", "use:std::net", true},
		{"rust", "main.rs", "use std::io;\nfn main(){}\n", "use:std::net", false},
		{"rust", "main.rs", "fn main(){ unsafe { } }\n", "unsafe", true},
		{"assemblyscript", "main.ts", "@external(\"host\", \"add\")\ndeclare function add(a: i32, b: i32): i32;\n", "external:host", true},
		{"bash", "main.sh", "curl http://x\n", "command:curl", true},
		{"bash", "main.sh", "echo curly\n", "command:curl", false},
		{"python3-native", "main.py", "import os, socket\n", "import:socket", true},
		{"python3-native", "main.py", "from os.path import join\n", "import:os", true},
		{"python3-native", "main.py", "import osx\n", "import:os", false},
		{"lua", "main.lua", "local s = require(\"socket.core\")\n", "require:socket", true},
		{"lua", "main.lua", "local s = require 'socketx'\n", "require:socket", false},
		{"php", "main.php", "<?php\n$o = EXEC('id');\n", "function:exec", true},
		{"php", "main.php", "<?php\n$o = shell_exec('id');\n", "function:exec", false},
		{"php", "main.php", "<?php\n$o->exec('id');\n", "function:exec", false},
		{"perl", "main.pl", "use IO::Socket::INET;\n", "use:IO::Socket", true},
		{"perl", "main.pl", "require Socket;\n", "use:Socket", true},
		{"perl", "main.pl", "use SocketX;\n", "use:Socket", false},
		{"java", "Main.java", "import java.net.Socket;\nclass Main {}\n", "import:java.net", true},
		{"kotlin", "main.kt", "import java.net.Socket\nfun main() {}\n", "import:java.net", true},
		{"kotlin", "main.kt", "import java.net.*\nfun main() {}\n", "import:java.net", true},
		{"kotlin", "main.kt", "import java.net.Socket as S\nfun main() {}\n", "import:java.net", true},
		{"kotlin", "main.kt", "import java.netx.Socket\nfun main() {}\n", "import:java.net", false},
		{"java", "Main.java", "import static java.net.InetAddress.getByName;\nclass Main {}\n", "import:java.net", true},
		{"java", "Main.java", "import java.net.*;\nclass Main {}\n", "import:java.net", true},
		{"java", "Main.java", "import java.nio.file.Files;\nclass Main {}\n", "import:java.net", false},
		{"java", "Main.java", "import java.network.X;\nclass Main {}\n", "import:java.net", false},
	} {
		l, err := languages.Lookup(tc.lang)
		if err != nil {
			t.Fatal(err)
		}
		vs := l.Validate(src(tc.file, tc.code), languages.ValidationProfile{Deny: []string{tc.deny}})
		refused := false
		for _, v := range vs {
			if v.Rule == languages.RuleDeny {
				refused = true
				if v.File != tc.file || v.Line == 0 || !strings.Contains(v.Message, "remove") {
					t.Errorf("%s %q: violation %+v lacks file, line or fix", tc.lang, tc.deny, v)
				}
			}
		}
		if refused != tc.refused {
			t.Errorf("%s deny %q on %q: refused=%v, want %v (%v)", tc.lang, tc.deny, tc.code, refused, tc.refused, vs)
		}
	}
}

// TestBuildCache: a second run of the same source does not rebuild, in
// the same executor (memory) and in a new one over the same directory
// (disk, as a new process would); concurrent jobs share one build.
func TestBuildCache(t *testing.T) {
	needLanguage(t, "c")
	dir := t.TempDir()
	e := newExecutor(t, dir)
	code := "#include <stdio.h>\nint main(void){ puts(\"cached " + time.Now().Format(time.RFC3339Nano) + "\"); return 0; }\n"
	req := languages.ExecRequest{Language: "c", Source: src("main.c", code)}
	first, err := e.Exec(context.Background(), req)
	if err != nil || first.Status != languages.StatusOK {
		t.Fatalf("%v %+v", err, first)
	}
	if first.BuildCached {
		t.Fatal("first run reports a cached build")
	}
	second, err := e.Exec(context.Background(), req)
	if err != nil || second.Status != languages.StatusOK || !second.BuildCached {
		t.Fatalf("second run: %v %+v", err, second)
	}
	if string(second.Stdout) != string(first.Stdout) {
		t.Errorf("outputs differ: %q %q", first.Stdout, second.Stdout)
	}
	fresh := newExecutor(t, dir)
	third, err := fresh.Exec(context.Background(), req)
	if err != nil || !third.BuildCached || third.Status != languages.StatusOK {
		t.Fatalf("new executor over the same cache: %v %+v", err, third)
	}
	// A different source is a different key.
	req.Source = src("main.c", code+"\n")
	other, err := e.Exec(context.Background(), req)
	if err != nil || other.BuildCached {
		t.Fatalf("changed source served from the cache: %v %+v", err, other)
	}

	// Concurrent jobs of a new source: exactly one builds.
	req.Source = src("main.c", code+"// concurrent\n")
	var wg sync.WaitGroup
	results := make([]*languages.ExecResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.Exec(context.Background(), req)
		}()
	}
	wg.Wait()
	built := 0
	for i, r := range results {
		if errs[i] != nil || r.Status != languages.StatusOK {
			t.Fatalf("job %d: %v %+v", i, errs[i], r)
		}
		if !r.BuildCached {
			built++
		}
	}
	if built != 1 {
		t.Errorf("%d of 4 concurrent jobs built; want exactly 1", built)
	}
}

// TestCompilerIsConfined: the compiler cannot read outside the system
// directories: #include of a file in /root or /etc/shadow fails at the
// compile stage (the sandbox, not the validator, refuses).
func TestCompilerIsConfined(t *testing.T) {
	needLanguage(t, "c")
	e := newExecutor(t, "")
	// World-readable, so that file permissions would let the job uid
	// read it: only the compiler's Landlock domain refuses.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret.h")
	if err := os.WriteFile(secret, []byte("int leaked = 42;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "c",
		Source: src("main.c", "#include \""+secret+"\"\nint main(void){ return leaked; }\n")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != languages.StatusCompileError {
		t.Fatalf("status %s (exit %d): the compiler read %s", res.Status, res.ExitCode, secret)
	}
	if !strings.Contains(res.CompileOutput, "secret.h") {
		t.Errorf("compile output %q does not name the file", res.CompileOutput)
	}
}

// TestCanceled: a canceled caller gets its context's error, not a result.
func TestCanceled(t *testing.T) {
	needLanguage(t, "c")
	e := newExecutor(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.Exec(ctx, languages.ExecRequest{Language: "c", Source: src("main.c", "int main(void){return 0;}\n")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestNativeRunAudited: a native run's kernel denial (here the cgroup's
// OOM kill) and the run itself reach the host's audit trail under the
// job's correlation id and principal.
func TestNativeRunAudited(t *testing.T) {
	needLanguage(t, "python3-native")
	testenv.Root(t, "the memory limit of a native run is a cgroup's, which needs root; CI runs as root")
	e := newExecutor(t, "") // on testHost, recording to sharedAudit
	res, err := e.Exec(context.Background(), languages.ExecRequest{Language: "python3-native",
		Source: src("main.py", "x = bytearray(512 << 20)\n"), Limits: languages.ExecLimits{MemoryBytes: 64 << 20},
		Principal: policy.Principal{User: "ann", Org: "acme"}, CorrelationID: "corr-native-oom"})
	if err != nil || res.Status != languages.StatusMemoryLimit {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if err := sharedAudit.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs, err := sharedAudit.Query(context.Background(), audit.Filter{CorrelationID: "corr-native-oom"})
	if err != nil {
		t.Fatal(err)
	}
	var denied, ran bool
	for _, ev := range evs {
		if ev.User != "ann" || ev.Org != "acme" || ev.Module != "lang:python3-native" {
			t.Errorf("event %+v: want user ann, org acme, module lang:python3-native", ev)
		}
		denied = denied || ev.Decision == audit.Deny && ev.Rule == "kernel: cgroup memory limit"
		ran = ran || ev.Kind == audit.KindInvocation && ev.Code == "memory-limit"
	}
	if !denied || !ran {
		t.Fatalf("audit events %+v: want the memory-limit denial and the invocation", evs)
	}
}
