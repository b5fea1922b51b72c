package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// daemonHome is a data directory whose moat exec runs may go to a warm
// moat (TestMain turns it off for every other test), with the daemons
// its runs started ended by pid when the test ends.
type daemonHome struct {
	data string
	env  []string
	pids map[int]bool
}

func newDaemonHome(t *testing.T, idle string) *daemonHome {
	t.Helper()
	h := &daemonHome{data: t.TempDir(), pids: map[int]bool{}}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MOAT_NO_DAEMON=") {
			h.env = append(h.env, kv)
		}
	}
	h.env = append(h.env, "MOAT_DAEMON_SAY=1", "MOAT_DAEMON_IDLE="+idle)
	t.Cleanup(func() {
		for pid := range h.pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		// and any daemon a run started that never served one
		for _, pid := range daemonPIDs(h.data) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return h
}

// daemonPIDs are the exec-daemon processes serving data (their command
// lines name it).
func daemonPIDs(data string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 3 && args[1] == "exec-daemon" && args[3] == data {
			pids = append(pids, pid)
		}
	}
	return pids
}

var servedBy = regexp.MustCompile(`(?m)^moat: run by the warm moat, pid (\d+)\n`)

// exec runs moat exec --data h.data ARGS with stdin, in process when
// inProcess, and says which daemon served it (0: none).
func (h *daemonHome) exec(t *testing.T, inProcess bool, stdin string, args ...string) (result, int) {
	t.Helper()
	cmd := exec.Command(moatBin, append([]string{"exec", "--data", h.data}, args...)...)
	cmd.Env = h.env
	if inProcess {
		cmd.Env = append(append([]string{}, h.env...), "MOAT_NO_DAEMON=1")
	}
	cmd.Stdin = strings.NewReader(stdin)
	r := runCmd(t, cmd)
	pid := 0
	if m := servedBy.FindStringSubmatch(r.stderr); m != nil {
		pid, _ = strconv.Atoi(m[1])
		h.pids[pid] = true
		r.stderr = servedBy.ReplaceAllString(r.stderr, "")
	}
	return r, pid
}

// warm runs args until a daemon serves them, and returns its pid.
func (h *daemonHome) warm(t *testing.T, args ...string) int {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if r, pid := h.exec(t, false, "", args...); pid != 0 {
			return pid
		} else if r.code != 0 {
			t.Fatalf("moat exec %v: exit %d\n%s", args, r.code, r.stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatal("no warm moat served a run within 3 minutes")
	return 0
}

// sameSummary blanks what differs from run to run in moat's summary line
// (times, memory, the correlation id, whether the build was cached).
var summaryNoise = regexp.MustCompile(`(compile|run|peak|correlation_id|cached)=\S+`)

// preparing are the progress lines of a first build or load, which
// whichever of the two runs came first prints.
var preparing = regexp.MustCompile(`(?m)^moat: preparing .*\n`)

func sameSummary(s string) string {
	return summaryNoise.ReplaceAllString(preparing.ReplaceAllString(s, ""), "$1=*")
}

// TestExecDaemonServesAsInProcess: after a first moat exec --lang python
// (in process, which starts the warm moat), the next ones are served by
// it, and each prints and exits exactly as in process: success, a
// program's own exit code, stdin through a pipe, a traceback, --json, a
// usage refusal by the language, and a read of /etc/shadow or of a path
// outside the run's files (the same errno: WASI's confinement, which the
// daemon applies as the process does).
func TestExecDaemonServesAsInProcess(t *testing.T) {
	testenv.Slow(t, "loads CPython in a moat and in its warm daemon")
	h := newDaemonHome(t, "2m")
	if r, pid := h.exec(t, false, "", "--lang", "python", "-e", "print(1)"); pid != 0 || r.code != 0 || r.stdout != "1\n" {
		t.Fatalf("first run: pid %d, exit %d, %q\n%s", pid, r.code, r.stdout, r.stderr)
	}
	daemon := h.warm(t, "--lang", "python", "-e", "print(1)")
	csrc := filepath.Join(t.TempDir(), "main.c")
	if err := os.WriteFile(csrc, []byte("#include <stdio.h>\nint main(int argc, char **argv) { printf(\"%d\\n\", argc); return 4; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"ok", "", []string{"--lang", "python", "-e", "print('hello')"}},
		{"exit code", "", []string{"--lang", "python", "-e", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"}},
		{"stdin", "hello\nworld\n", []string{"--lang", "python", "-e", "import sys; print(sys.stdin.read().upper())"}},
		{"traceback", "", []string{"--lang", "python", "-e", "1/0"}},
		{"json", "x", []string{"--lang", "python", "--json", "-e", "print(input())"}},
		{"refused", "", []string{"--lang", "python", "--deny", "import:os", "-e", "import os"}},
		{"args", "", []string{"--lang", "python", "-e", "import sys; print(sys.argv[1:])", "--", "a", "b c"}},
		{"shadow", "", []string{"--lang", "python", "-e", "try:\n  open('/etc/shadow')\nexcept OSError as e:\n  print(type(e).__name__, e.errno)"}},
		{"outside", "", []string{"--lang", "python", "-e", "import os\ntry:\n  print(os.listdir('/tmp'))\nexcept OSError as e:\n  print(type(e).__name__, e.errno)"}},
		{"timeout", "", []string{"--lang", "python", "--timeout", "1s", "-e", "while True: pass"}},
		{"c file", "", []string{"--lang", "c", csrc, "--", "x"}},
		{"javascript", "", []string{"--lang", "javascript", "-e", "console.log(6*7)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, _ := h.exec(t, true, tc.stdin, tc.args...)
			got, pid := h.exec(t, false, tc.stdin, tc.args...)
			if pid != daemon {
				t.Fatalf("served by pid %d; want the warm moat %d\n%s", pid, daemon, got.stderr)
			}
			if tc.name == "json" { // times and the correlation id differ
				got.stdout, want.stdout = jsonNoise.ReplaceAllString(got.stdout, ""), jsonNoise.ReplaceAllString(want.stdout, "")
			}
			if got.code != want.code || got.stdout != want.stdout || sameSummary(got.stderr) != sameSummary(want.stderr) {
				t.Fatalf("warm moat: exit %d\nstdout %q\nstderr %q\nin process: exit %d\nstdout %q\nstderr %q",
					got.code, got.stdout, got.stderr, want.code, want.stdout, want.stderr)
			}
			// The run's events are in the data directory's store, as an
			// in-process run's are, by the time the client exits.
			if m := correlationID.FindStringSubmatch(got.stderr); m != nil && tc.name == "ok" {
				if r := moat(t, "", "audit", "--data", h.data, "--correlation-id", m[1]); r.code != 0 || !strings.Contains(r.stdout, m[1]) {
					t.Fatalf("no audit event of the warm moat's run %s: exit %d\n%s%s", m[1], r.code, r.stdout, r.stderr)
				}
			}
		})
	}
}

var correlationID = regexp.MustCompile(`correlation_id=([0-9a-f]+)`)

var jsonNoise = regexp.MustCompile(`(?m)^\s*"(compile_time_ns|run_time_ns|run_time_ms|compile_time_ms|peak_memory_bytes|correlation_id|build_cached)".*\n`)

// TestExecDaemonEndsItsRuns: a client killed in the middle of a run
// leaves no run behind (the daemon's CPU stops), and the daemon exits
// when it has been idle for its idle time.
func TestExecDaemonEndsItsRuns(t *testing.T) {
	testenv.Slow(t, "loads CPython in a warm daemon and waits for it to go idle")
	h := newDaemonHome(t, "4s")
	h.exec(t, false, "", "--lang", "python", "-e", "print(1)")
	daemon := h.warm(t, "--lang", "python", "-e", "print(1)")
	// Ctrl-C (SIGINT) on the client ends the run as it ends one in
	// process: the same exit status and message.
	interrupted := func(inProcess bool) result {
		cmd := exec.Command(moatBin, "exec", "--data", h.data, "--timeout", "2m", "--lang", "python", "-e", "while True: pass")
		cmd.Env = h.env
		if inProcess {
			cmd.Env = append(append([]string{}, h.env...), "MOAT_NO_DAEMON=1")
		}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		return result{out.String(), servedBy.ReplaceAllString(errb.String(), ""), cmd.ProcessState.ExitCode()}
	}
	want, got := interrupted(true), interrupted(false)
	if got.code != want.code || sameSummary(preparing.ReplaceAllString(got.stderr, "")) != sameSummary(preparing.ReplaceAllString(want.stderr, "")) {
		t.Fatalf("Ctrl-C: warm moat exit %d %q; in process exit %d %q", got.code, got.stderr, want.code, want.stderr)
	}
	cmd := exec.Command(moatBin, "exec", "--data", h.data, "--timeout", "2m", "--lang", "python", "-e", "while True: pass")
	cmd.Env = h.env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	cmd.Process.Kill()
	cmd.Wait()
	// The spinning run stops: the daemon's CPU time stands still.
	var before, after uint64
	deadline := time.Now().Add(30 * time.Second)
	for {
		before = cpuTicks(t, daemon)
		time.Sleep(time.Second)
		after = cpuTicks(t, daemon)
		if after-before < 20 { // under 0.2 s of CPU in a second: not spinning
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed client's run goes on in the warm moat (%d ticks a second)", after-before)
		}
	}
	// Idle for 4 s, it exits.
	deadline = time.Now().Add(30 * time.Second)
	for syscall.Kill(daemon, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the warm moat outlived its idle time")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cpuTicks is pid's user and system time in clock ticks, 0 once it is gone.
func cpuTicks(t *testing.T, pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseUint(f[11], 10, 64)
	k, _ := strconv.ParseUint(f[12], 10, 64)
	return u + k
}

// TestExecDaemonIsPerBinaryAndDataDir: the warm moat of one data
// directory does not serve another's runs, nor those of another moat
// binary on the same data directory: each runs in process (and starts
// its own).
func TestExecDaemonIsPerBinaryAndDataDir(t *testing.T) {
	testenv.Slow(t, "loads CPython in a warm daemon")
	h := newDaemonHome(t, "1m")
	h.exec(t, false, "", "--lang", "python", "-e", "print(1)")
	h.warm(t, "--lang", "python", "-e", "print(1)")
	other := newDaemonHome(t, "1m")
	if _, pid := other.exec(t, false, "", "--lang", "python", "-e", "print(1)"); pid != 0 {
		t.Fatalf("another data directory's run went to pid %d", pid)
	}
	// A native language's run is turned away by the daemon, unstarted,
	// and runs in process.
	if r, pid := h.exec(t, false, "", "--lang", "bash", "-e", "echo hi"); pid != 0 || r.stdout != "hi\n" || r.code != 0 {
		t.Fatalf("bash: pid %d, exit %d, %q\n%s", pid, r.code, r.stdout, r.stderr)
	}
	bin := filepath.Join(t.TempDir(), "moat")
	copyFile(t, moatBin, bin)
	os.Chmod(bin, 0o755)
	cmd := exec.Command(bin, "exec", "--data", h.data, "--lang", "python", "-e", "print(2)")
	cmd.Env = h.env
	r := runCmd(t, cmd)
	if servedBy.MatchString(r.stderr) || r.stdout != "2\n" {
		t.Fatalf("another binary's run: %q\n%s", r.stdout, r.stderr)
	}
	for _, pid := range daemonPIDs(h.data) {
		h.pids[pid] = true // the copy's daemon, if it started one
	}
}
