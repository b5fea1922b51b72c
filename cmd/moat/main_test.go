package main_test

// End-to-end tests of the moat binary, run as a user would run it,
// checking stdout, stderr and the exit status. The binary is this test
// binary under the name moat (asmoat_test.go), linked once by TestMain.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/moatdir"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/toolchains"
)

var moatBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "moat-cli-test")
	if err != nil {
		panic(err)
	}
	moatBin = filepath.Join(dir, "moat")
	// moat's home (the default data dir) inside the test's temp dir: a
	// command run without --data must not write /var/lib/moat or ~.
	os.Setenv("XDG_DATA_HOME", filepath.Join(dir, "xdg"))
	// The system's home (root's, and the toolchains every user falls back
	// to: /var/lib/moat) a poisoned one of the test's, so a test passes on
	// what the repository provides and never on what the machine has;
	// checked unchanged after the run (machinehome_test.go).
	poisoned := filepath.Join(dir, "poisoned-system-home")
	digest, err := poisonMachineHome(poisoned)
	if err != nil {
		panic(err)
	}
	os.Setenv(moatdir.EnvSystemHome, poisoned)
	// The repository's toolchains (make toolchains) for the commands the
	// tests run outside the tree, where moat would not find them above
	// its working directory; make test exports the same.
	if os.Getenv("MOAT_TOOLCHAINS") == "" {
		if abs, err := filepath.Abs(filepath.Join("..", "..", ".toolchains")); err == nil {
			if _, err := os.Stat(abs); err == nil {
				os.Setenv("MOAT_TOOLCHAINS", abs)
			}
		}
	}
	// One compile cache for every moat this test binary starts: each
	// interpreter (ruby.wasm about 12 s, python.wasm 4 s) then compiles
	// once rather than once per test's fresh data dir. Set here, whatever
	// the caller's environment says. With the repository's toolchains it
	// is the cache the languages' and the server's tests keep beside them
	// (interptest.CacheDir: .toolchains/cache/wazero, keyed by the
	// module's bytes and wazero's version, written by rename), so an
	// interpreter compiles once per toolchain, not once per `go test`
	// (20-30 CPU-seconds of each run); without them, one of this run's
	// own. Tests of first-run behaviour (compiling, progress, a fresh
	// cache's contents) clear it: noSharedCache.
	cache := filepath.Join(dir, "cache")
	if tc := os.Getenv("MOAT_TOOLCHAINS"); tc != "" {
		if fi, err := os.Stat(tc); err == nil && fi.IsDir() {
			cache = filepath.Join(tc, "cache", "wazero")
		}
	}
	os.Setenv("MOAT_CACHE_DIR", cache)
	// Every moat exec of these tests runs in process and starts no warm
	// moat (execdaemon.go), but the daemon's own tests (execdaemon_test.go).
	os.Setenv("MOAT_NO_DAEMON", "1")
	if err := linkSelfAsMoat(moatBin); err != nil {
		build := exec.Command("go", "build", "-o", moatBin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			panic("build moat: " + err.Error() + "\n" + string(out))
		}
	}
	code := m.Run()
	pgtest.Stop() // the throwaway PostgreSQL cluster of the replica tests, if one was started
	if after, err := treeDigest(poisoned); err != nil || after != digest {
		fmt.Fprintf(os.Stderr, "FAIL: a test's moat changed the poisoned system home %s (%v): it fell back to the machine's home\n", poisoned, err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// noSharedCache makes the moat processes t starts keep their compile
// cache in their data directory (the default), as a first run would: for
// tests that assert on compiling, on progress lines or on what a fresh
// data directory holds, which the cache TestMain shares would answer from
// another test's run. The machine's cache of the interpreters' code
// would answer as well: they get a machine's state of their own
// (freshMachineState).
func noSharedCache(t *testing.T) {
	t.Helper()
	t.Setenv("MOAT_CACHE_DIR", "")
	freshMachineState(t)
}

// freshMachineState gives the moat processes t starts a machine's state
// of their own ($MOAT_TOOLCHAIN_STATE, a temp dir): no interpreter's
// machine code or image another test made. Go's standard library and
// Rust's SDK crate, which no such test looks at and which cost a minute
// each, are the shared state's, linked. It returns the directory.
func freshMachineState(t *testing.T) string {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if shared := toolchains.StateDir(); shared != "" {
		for _, lang := range []string{"go", "rust"} {
			if err := os.MkdirAll(filepath.Join(shared, lang), 0o755); err == nil {
				_ = os.Symlink(filepath.Join(shared, lang), filepath.Join(state, lang))
			}
		}
	}
	t.Setenv(toolchains.EnvStateDir, state)
	return state
}

type result struct {
	stdout, stderr string
	code           int
}

func moat(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(moatBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	return runCmd(t, cmd)
}

// runCmd runs cmd (a moat binary, its Dir, Env and Stdin set) and returns
// its output and exit status; it fails the test only when cmd cannot run.
func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

// writeModule puts wasm into a plugin directory named name.
func writeModule(t *testing.T, name string, wasm []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHelloGoCountRises(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	plugin := writeModule(t, "hello-go", testwasm.BuildGo(t, "./examples/hello-go", true))
	copyFile(t, filepath.Join(testwasm.RepoRoot(t), "examples", "hello-go", "moat.yaml"), filepath.Join(plugin, "moat.yaml"))
	data := t.TempDir()
	for i, want := range []string{"Hello, World! (call #1)", "Hi, World! (call #2)", "Hello, stdin! (call #3)"} {
		args := []string{"run", plugin, "greet", "--data", data}
		stdin := ""
		switch i {
		case 0:
			args = append(args, "--input", "World")
		case 1:
			args = append(args, "--input", "World", "--config", "greeting=Hi")
		case 2:
			stdin = "stdin"
		}
		r := moat(t, stdin, args...)
		if r.code != 0 || r.stdout != want {
			t.Fatalf("run %d: exit %d stdout %q stderr %q; want %q", i+1, r.code, r.stdout, r.stderr, want)
		}
		if !strings.Contains(r.stderr, "msg=greeting") || !strings.Contains(r.stderr, "module=hello-go") {
			t.Fatalf("the guest's log record is missing from stderr: %q", r.stderr)
		}
	}
	// Another organization has its own count.
	if r := moat(t, "", "run", plugin, "greet", "--input", "World", "--org", "globex", "--data", data); r.stdout != "Hello, World! (call #1)" {
		t.Fatalf("other org: %+v", r)
	}
}

func TestCommandModule(t *testing.T) {
	cmdWasm := filepath.Join(t.TempDir(), "gocmd.wasm")
	os.WriteFile(cmdWasm, testwasm.BuildGo(t, "./testdata/gocmd", false), 0o644)
	data := t.TempDir()
	t.Setenv("GREETING", "from-parent")
	t.Setenv("HOME", "/root/secret-home")

	r := moat(t, "some input", "run", "--data", data, cmdWasm, "--env", "GREETING", "--", "a", "b c")
	want := `stdin="some input" args=["a" "b c"] GREETING="from-parent" HOME=""` + "\n"
	if r.code != 0 || r.stdout != want || r.stderr != "to stderr\n" {
		t.Fatalf("got %+v; want stdout %q", r, want)
	}
	if r := moat(t, "", "run", "--data", data, cmdWasm, "--", "exit", "7"); r.code != 7 || r.stderr != "exiting with 7\n" {
		t.Fatalf("exit code: %+v", r)
	}
}

// TestFailuresAreOneLine: every failure exits non-zero with one line from
// moat on stderr and never a stack trace of moat's.
func TestFailuresAreOneLine(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	dir := t.TempDir()
	cmdWasm := filepath.Join(dir, "gocmd.wasm")
	os.WriteFile(cmdWasm, testwasm.BuildGo(t, "./testdata/gocmd", false), 0o644)
	notWasm := filepath.Join(dir, "script.wasm")
	os.WriteFile(notWasm, []byte("#!/bin/sh\n"), 0o644)
	plugin := filepath.Join(testwasm.RepoRoot(t), "testdata", "plugin.wasm")
	data := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"timeout", []string{"run", cmdWasm, "--timeout", "200ms", "--", "loop"}, 124, "timeout: did not finish within 200ms"},
		{"memory", []string{"run", cmdWasm, "--memory-mib", "32", "--", "alloc"}, 125, "memory_limit"},
		{"output flood", []string{"run", cmdWasm, "--max-output", "1000", "--", "flood"}, 1, "output_too_large"},
		{"trap", []string{"run", plugin, "trap"}, 1, "trap: wasm error: unreachable"},
		{"guest fault", []string{"run", plugin, "badptr"}, 1, "guest_fault"},
		{"no such action", []string{"run", plugin, "nope"}, 1, `no action "nope"`},
		{"plugin without action", []string{"run", plugin}, 2, "is a plugin: name an action"},
		{"missing file", []string{"run", filepath.Join(dir, "nope.wasm"), "x"}, 2, "no such file or directory"},
		{"not wasm", []string{"run", notWasm}, 1, "not a WebAssembly binary"},
		{"bad flag", []string{"run", plugin, "noop", "--bogus"}, 2, "unknown flag: --bogus"},
		{"bad memory", []string{"run", plugin, "noop", "--memory-mib", "9999"}, 2, "--memory-mib 9999"},
		{"bad config", []string{"run", plugin, "noop", "--config", "novalue"}, 2, `--config "novalue": write key=value`},
		{"bad org", []string{"run", plugin, "noop", "--org", "a b"}, 2, "principal org"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{tt.args[0], "--data", data}, tt.args[1:]...)
			r := moat(t, "", args...)
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			last := lines[len(lines)-1]
			if r.code != tt.code || !strings.HasPrefix(last, "moat: ") || !strings.Contains(last, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and a line with %q", r.code, r.stderr, tt.code, tt.want)
			}
			// A command's own stderr passes through (a Go guest prints its
			// stacks there); moat's must not appear, nor wazero's trace.
			for _, leak := range []string{"moat-sandbox/moat/host", "moat-sandbox/moat/cmd", "wasm stack trace", "(recovered by wazero)"} {
				if strings.Contains(r.stderr, leak) {
					t.Fatalf("stack trace leaked (%q): %q", leak, r.stderr)
				}
			}
		})
	}
}

// TestSecondProcessUsesCompileCache: a second moat process does not
// recompile a module it has seen.
func TestSecondProcessUsesCompileCache(t *testing.T) {
	testenv.Slow(t, "two cold processes compiling; the compile cache's unit tests keep it")
	noSharedCache(t) // the first process must compile
	plugin := writeModule(t, "goguest", testwasm.BuildGo(t, "./testdata/goguest", true))
	data := t.TempDir()
	first := moat(t, "", "inspect", plugin, "--data", data)
	second := moat(t, "", "inspect", plugin, "--data", data)
	if !strings.Contains(first.stdout, "machine code:  compiled now") || !strings.Contains(second.stdout, "machine code:  from the disk cache") {
		t.Fatalf("first:\n%s\nsecond:\n%s", first.stdout, second.stdout)
	}
	for _, want := range []string{"kind:          moat-plugin", "digest:        sha256:", "actions:       echo, upper, config", "moat.call(i32, i32, i32, i32, i32, i32) -> (i64)", "moat_invoke(i32, i32, i32) -> (i64)"} {
		if !strings.Contains(second.stdout, want) {
			t.Errorf("inspect lacks %q:\n%s", want, second.stdout)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	if r := moat(t, "", "version"); r.code != 0 || !strings.Contains(r.stdout, "ABI v1") || !strings.Contains(r.stdout, "wazero v1.12.0") {
		t.Fatalf("version: %+v", r)
	}
	if r := moat(t, "", "run", "--help"); r.code != 0 || !strings.Contains(r.stdout, "Exit status") || !strings.Contains(r.stdout, "--input-file") {
		t.Fatalf("help: %+v", r)
	}
}

// TestConfineCheck: the confined host cannot execve, read /etc/shadow, write
// outside its data directory, connect over TCP, ptrace, unshare, setuid or
// open an MPTCP socket; every refusal has the expected errno; it can write
// its data directory and its compile cache.
func TestConfineCheck(t *testing.T) {
	r := moat(t, "", "confine-check", "--data", t.TempDir())
	if r.code != 0 || strings.Contains(r.stdout, "NOT HELD") || strings.Count(r.stdout, "held") != 11 ||
		!strings.Contains(r.stdout, "applied: [cgroup landlock (ABI 7) seccomp]") && os.Geteuid() == 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// And moat run works strictly confined.
	plugin := filepath.Join(testwasm.RepoRoot(t), "testdata", "plugin.wasm")
	if r := moat(t, "", "run", "--data", t.TempDir(), "--confine", "strict", plugin, "echo", "--input", "confined"); r.code != 0 || r.stdout != "confined" {
		t.Fatalf("strict run: %+v", r)
	}
}

// TestExecNative: moat exec --native runs a command under the kernel layers;
// /etc/shadow is not in the job's root, and an OOM kill is reported with exit 125
// and as a kernel denial in the audit trail.
func TestExecNative(t *testing.T) {
	testenv.Root(t, "the full native layer stack (cgroups, uid switch) needs root; CI runs as root")
	data := t.TempDir()
	r := moat(t, "", "exec", "--data", data, "--native", "--allow-exec", "/usr/bin/cat", "--", "sh", "-c", "cat /etc/shadow")
	if r.code == 0 || !strings.Contains(r.stderr, "cat: /etc/shadow: No such file or directory") || !strings.Contains(r.stderr, "layers=cgroup,") {
		t.Fatalf("shadow: %+v", r)
	}
	r = moat(t, "", "exec", "--data", data, "--native", "--memory-mib", "32", "--", "python3", "-c", "x = bytearray(300 << 20)")
	if r.code != 125 || !strings.Contains(r.stderr, "status=memory-limit") {
		t.Fatalf("oom: %+v", r)
	}
	a := moat(t, "", "audit", "--data", data, "--decision", "deny")
	if !strings.Contains(a.stdout, "kernel: cgroup memory limit") || !strings.Contains(a.stdout, "native:python3") {
		t.Fatalf("audit:\n%s", a.stdout)
	}
}

// TestBackstopReported: a host that reaches its own memory ceiling is
// killed by the kernel, and that is never a bare SIGKILL: its watcher says
// so on stderr and in the audit trail, and removes the cgroup.
func TestBackstopReported(t *testing.T) {
	testenv.Root(t, "the host's backstop cgroup needs root; CI runs as root")
	plugin := writeModule(t, "hello-go", testwasm.BuildGo(t, "./examples/hello-go", true))
	data := t.TempDir()
	r := moat(t, "", "run", "--data", data, "--host-memory-mib", "24", plugin, "greet", "--input", "x")
	if r.code != -1 || !strings.Contains(r.stderr, "moat: moat run was killed by its memory backstop: the host process reached its ceiling of 24 MiB") {
		t.Fatalf("a host over its ceiling: %+v", r)
	}
	a := moat(t, "", "audit", "--data", data, "--kind", "confinement", "--decision", "deny")
	if a.code != 0 || !strings.Contains(a.stdout, "killed by its memory backstop") {
		t.Errorf("audit: %+v", a)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/moat/host-*"); len(left) > 0 {
		for _, d := range left {
			if procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(procs) == 0 {
				t.Errorf("an empty host cgroup left behind: %s", d)
			}
		}
	}
	// A ceiling the host stays under changes nothing.
	echo := filepath.Join(testwasm.RepoRoot(t), "testdata", "plugin.wasm")
	if r := moat(t, "", "run", "--data", data, "--host-memory-mib", "600", echo, "echo", "--input", "fine"); r.code != 0 || r.stdout != "fine" {
		t.Errorf("under the ceiling: %+v", r)
	}
}

// linkSelfAsMoat makes moatBin this test binary, which is moat when run
// under that name (asmoat_test.go): a hard link, or a copy across file
// systems. It refuses a binary built with cgo, which moat never is (a
// dynamically linked moat would need the loader and libc where its
// confined children may not read them); TestMain then builds moat with
// go build, as it did before.
func linkSelfAsMoat(moatBin string) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("no build info")
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			return errors.New("built with cgo")
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if os.Link(self, moatBin) == nil {
		return nil
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	return os.WriteFile(moatBin, b, 0o755)
}
