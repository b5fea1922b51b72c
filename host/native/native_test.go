package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/kernel"
)

func TestMain(m *testing.M) {
	kernel.ConfineMain()
	LauncherMain()
	jobRunnerMain()
	code := m.Run()
	removeProbe()
	os.Exit(code)
}

const python = "/usr/bin/python3"

// nobody is the unprivileged uid (and gid) the non-root tests run as.
const nobody = 65534

// needPython skips when Debian's python3 is absent. It never falls back to
// a python3 found on PATH (a pyenv shim is a bash script Landlock would not
// let run).
func needPython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not installed (%v): this case needs the system python3", python, err)
	}
}

func needRoot(t testing.TB) {
	t.Helper()
	testenv.Root(t, "needs root: cgroups and the uid switch are exercised here (CI runs as root)")
}

// run runs spec with a per-test deadline and checks afterwards that the
// run left nothing behind.
func run(t *testing.T, spec Spec) *Result {
	t.Helper()
	before := jobProcs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Command, err)
	}
	t.Logf("%q: status=%s exit=%d signal=%q wall=%s cpu=%s peak=%d pidsHit=%v layers=%v unavailable=%v reason=%q\nstdout: %q\nstderr: %q",
		spec.Command, res.Status, res.ExitCode, res.Signal, res.Wall, res.CPU, res.PeakMemory, res.PidsLimitHit,
		res.Layers, res.Unavailable, res.Reason, clip(res.Stdout), clip(res.Stderr))
	assertClean(t, before)
	return res
}

// othersJob reports whether process pid is a member of a job cgroup of
// another runner (another moat process on the machine, its jobs running
// under the same leased uid range): not this test's to count. A process of
// this binary's jobs that survived is in this binary's job cgroup, whose
// directory then stays; one that escaped it would be in no job cgroup.
func othersJob(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) // gone: left nothing behind
	}
	own := "/" + kernel.CgroupParent + "/job-" + kernel.OwnJobCgroupTag()
	ownWarm := "/" + kernel.CgroupParent + "/warm-" + kernel.OwnJobCgroupTag()
	for _, line := range strings.Split(string(b), "\n") {
		_, path, _ := strings.Cut(line, ":")
		_, path, _ = strings.Cut(path, ":")
		if strings.HasPrefix(path, "/"+kernel.CgroupParent+"/") && !strings.HasPrefix(path, own) && !strings.HasPrefix(path, ownWarm) {
			return true
		}
	}
	return false
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "..."
	}
	return string(b)
}

// isJobUID reports whether uid is one a job runs as: one of the leased
// range as root, else our own.
func isJobUID(uid int) bool {
	if os.Geteuid() == 0 {
		return uid >= UIDBase && uid < UIDBase+UIDCount
	}
	return uid == os.Getuid()
}

// jobProcs lists the pids of processes running as a job uid.
func jobProcs() map[int]bool {
	out := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) == nil && isJobUID(int(st.Uid)) {
			out[pid] = true
		}
	}
	return out
}

// assertClean: no job cgroup under the moat parent, no job dir, and no new
// process of the job uid.
func assertClean(t *testing.T, before map[int]bool) {
	t.Helper()
	// Only this test binary's jobs: another moat on the machine may have
	// jobs of its own running (their names carry their runner).
	if left := kernel.JobCgroupDirs("job-" + kernel.OwnJobCgroupTag()); len(left) > 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(JobsDir(), "job-"+kernel.OwnJobCgroupTag()+"*")); len(left) > 0 {
		t.Errorf("job dirs left behind: %v", left)
	}
	if os.Geteuid() != 0 {
		return // the job uid is our own uid: our own processes come and go
	}
	// Only processes in another pid namespace: jobs are, while other test
	// binaries running as the same uid at the same time (go test runs
	// packages in parallel) are not.
	self, _ := os.Readlink("/proc/self/ns/pid")
	suspect := func(pid int) bool {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		return !before[pid] && err == nil && ns != self && !othersJob(pid) && !othersZombie(pid)
	}
	for pid := range jobProcs() {
		// Another runner's job (another package's test binary under
		// go test -p 2) is in no moat cgroup for a moment while it
		// starts, and one that exits between the reads above looks
		// like none: a process of ours left behind stays suspect for
		// the whole second.
		for i := 0; i < 20 && suspect(pid); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if suspect(pid) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Errorf("process of a job uid left behind: pid %d %q", pid, cmdline)
		}
	}
}

// othersZombie reports whether pid has exited and waits for a parent
// other than this test binary to reap it: another package's job (go test
// -p 2), which runs nothing and holds nothing but its pid until its own
// runner waits for it. A zombie of ours (a job this binary did not wait
// for) stays suspect.
func othersZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses,
	// so the fields are read after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	return len(f) >= 2 && f[0] == "Z" && f[1] != strconv.Itoa(os.Getpid())
}

func TestReadOutsideTree(t *testing.T) {
	cases := []struct {
		name       string
		python     bool
		spec       Spec
		wantStderr string
	}{
		// Outside the job's own root: not there at all.
		{"sh-cat-shadow", false, Spec{Command: []string{"sh", "-c", "cat /etc/shadow"}, ExtraExec: []string{"/usr/bin/cat"}}, "cat: /etc/shadow: No such file or directory"},
		{"sh-cat-passwd", false, Spec{Command: []string{"sh", "-c", "cat /etc/passwd"}, ExtraExec: []string{"/usr/bin/cat"}}, "cat: /etc/passwd: No such file or directory"},
		{"python-open-passwd", true, Spec{Command: []string{python, "-c", "open('/etc/passwd')"}}, "FileNotFoundError: [Errno 2]"},
		{"python-list-root", true, Spec{Command: []string{python, "-c", "import os; os.listdir('/root')"}}, "FileNotFoundError: [Errno 2]"},
		// In it, but refused: Landlock's execute allowlist, read-only binds.
		{"sh-exec-not-allowed", false, Spec{Command: []string{"sh", "-c", "cat /usr/share/common-licenses/GPL-3"}}, "cat: Permission denied"},
		{"python-write-usr", true, Spec{Command: []string{python, "-c", "open('/usr/moat-test','w')"}}, "OSError: [Errno 30] Read-only file system"},
		{"python-read-proc-1", true, Spec{Command: []string{python, "-c", "open('/proc/1/environ').read()"}}, "PermissionError: [Errno 13]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.python {
				needPython(t)
			}
			res := run(t, c.spec)
			if res.Status != StatusRuntimeError || res.ExitCode == 0 {
				t.Errorf("status %s exit %d, want runtime-error with a non-zero exit", res.Status, res.ExitCode)
			}
			if !strings.Contains(string(res.Stderr), c.wantStderr) {
				t.Errorf("stderr %q lacks %q", res.Stderr, c.wantStderr)
			}
		})
	}
}

func TestJobDirWritable(t *testing.T) {
	res := run(t, Spec{Command: []string{"sh", "-c", `echo data > f && read x < f && echo "$x" && cd / && pwd && case "$HOME" in */moat-jobs/job-*) echo home-ok;; esac`}})
	if res.Status != StatusOK || string(res.Stdout) != "data\n/\nhome-ok\n" {
		t.Fatalf("status %s stdout %q stderr %q, want ok and data, /, home-ok", res.Status, res.Stdout, res.Stderr)
	}
	if !slices.Equal(res.Layers, wantLayers()) {
		t.Errorf("layers %v, want %v", res.Layers, wantLayers())
	}
}

func wantLayers() []string {
	if os.Geteuid() == 0 {
		return []string{"cgroup", "pidns", "mntns", "root", "netns", "ipcns", "utsns", "rlimits", "uid", "landlock", "seccomp"}
	}
	return []string{"userns", "pidns", "mntns", "root", "netns", "ipcns", "utsns", "rlimits", "landlock", "seccomp"}
}

func TestStdinOutputAndTruncation(t *testing.T) {
	res := run(t, Spec{Command: []string{"sh", "-c", "read x; echo \"got $x\"; echo err >&2"}, Stdin: []byte("hello\n")})
	if res.Status != StatusOK || string(res.Stdout) != "got hello\n" || string(res.Stderr) != "err\n" || res.Truncated {
		t.Errorf("got %s %q %q truncated=%v", res.Status, res.Stdout, res.Stderr, res.Truncated)
	}
	res = run(t, Spec{Command: []string{"sh", "-c", "i=0; while [ $i -lt 200 ]; do echo 0123456789; i=$((i+1)); done; echo done >&2"}, MaxOutput: 100})
	if res.Status != StatusOK || len(res.Stdout) != 100 || !res.Truncated || string(res.Stderr) != "done\n" {
		t.Errorf("got %s stdout %d bytes truncated=%v stderr %q; want ok, 100 bytes, truncated, the run not killed", res.Status, len(res.Stdout), res.Truncated, res.Stderr)
	}
}

func TestZeroEgress(t *testing.T) {
	needPython(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	script := fmt.Sprintf(`
import socket, errno
def attempt(f):
    try:
        f()
        print("connected")
    except OSError as e:
        print(e.errno)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
attempt(lambda: s.connect(("127.0.0.1", %d)))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt(lambda: u.sendto(b"x", ("127.0.0.1", %d)))
attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262))
`, port, port)
	res := run(t, Spec{Command: []string{python, "-c", script}})
	lines := strings.Fields(string(res.Stdout))
	if res.Status != StatusOK || len(lines) != 3 {
		t.Fatalf("status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
	if lines[0] != "101" && lines[0] != "13" {
		t.Errorf("tcp connect to the parent's listener: %s, want ENETUNREACH (101) or EACCES (13)", lines[0])
	}
	if lines[1] != "101" {
		t.Errorf("udp send: %s, want ENETUNREACH (101): the namespace has no route", lines[1])
	}
	if lines[2] != "1" {
		t.Errorf("MPTCP socket: %s, want EPERM (1) from seccomp", lines[2])
	}
	select {
	case <-accepted:
		t.Error("the parent's listener accepted a connection from the job")
	case <-time.After(50 * time.Millisecond):
	}
}

// TestAllowNet: with targets granted, the job reaches exactly those (the
// per-job iptables chain and Landlock's TCP rules), and nothing else; the
// chain and its cgroup are gone afterwards.
func TestAllowNet(t *testing.T) {
	needPython(t)
	testenv.Root(t, "egress allowlists need root (iptables); CI runs as root")
	listen := func() int {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ln.Addr().(*net.TCPAddr).Port
	}
	allowed, other := listen(), listen()
	script := fmt.Sprintf(`
import socket
for port in (%d, %d):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect(("127.0.0.1", port)); print("connected")
    except OSError as e:
        print(e.errno)
`, allowed, other)
	res := run(t, Spec{Command: []string{python, "-c", script}, AllowNet: []string{fmt.Sprintf("127.0.0.1:%d", allowed)}})
	lines := strings.Fields(string(res.Stdout))
	if res.Status != StatusOK || len(lines) != 2 {
		t.Fatalf("status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
	if lines[0] != "connected" {
		t.Errorf("allowed target: %s, want connected", lines[0])
	}
	if lines[1] != "13" && lines[1] != "111" {
		t.Errorf("other port: %s, want EACCES (13, Landlock) or ECONNREFUSED (111, iptables)", lines[1])
	}
	if !strings.Contains(strings.Join(res.Layers, ","), "egress(127.0.0.1:") {
		t.Errorf("layers %v lack egress", res.Layers)
	}
	rules, _ := exec.Command("iptables", "-S").CombinedOutput()
	if strings.Contains(string(rules), "MOAT-E") {
		t.Errorf("an egress chain was left behind:\n%s", rules)
	}
	left, _ := filepath.Glob("/sys/fs/cgroup/unified/moat-egress/*/cgroup.procs")
	if len(left) > 0 {
		t.Errorf("egress cgroups left behind: %v", left)
	}
}

func TestForkBomb(t *testing.T) {
	res := run(t, Spec{
		Command:   []string{"sh", "-c", "for i in $(seq 1 100); do sleep 1 & done; wait"},
		ExtraExec: []string{"/usr/bin/seq", "/usr/bin/sleep"},
		Pids:      16,
		Timeout:   8 * time.Second,
	})
	if !strings.Contains(string(res.Stderr), "Cannot fork") && !strings.Contains(string(res.Stderr), "Resource temporarily unavailable") {
		t.Errorf("stderr %q: want a fork failure", res.Stderr)
	}
	if res.Status != StatusRuntimeError && res.Status != StatusOK {
		t.Errorf("status %s, want runtime-error (or ok with the limit reported)", res.Status)
	}
	if os.Geteuid() == 0 && !res.PidsLimitHit {
		t.Error("PidsLimitHit false: the cgroup's pids.events should count the refused forks")
	}
	if res.Wall > 5*time.Second {
		t.Errorf("wall %s: the bomb should stop at once", res.Wall)
	}
}

// memoryHog is a shell job that needs 300 MB at once.
const memoryHog = `head -c 300000000 /dev/zero | tail -c 300000000 | wc -c`

func TestMemoryLimit(t *testing.T) {
	needRoot(t)
	cases := []struct {
		name   string
		python bool
		cmd    []string
		extra  []string
	}{
		{"python-512MiB", true, []string{python, "-c", "x = b'a' * (512 << 20); print(len(x))"}, nil},
		// tail keeps the last 300 MB it reads: memory grows as fast as
		// the pipe fills (a shell growing a string byte by byte took 13.5
		// of its 15 s under emulation).
		{"sh-head-tail", false, []string{"sh", "-c", memoryHog}, []string{"/usr/bin/head", "/usr/bin/tail", "/usr/bin/wc"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.python {
				needPython(t)
			}
			res := run(t, Spec{Command: c.cmd, ExtraExec: c.extra, MemoryBytes: 64 << 20, Timeout: 15 * time.Second})
			if res.Status != StatusMemoryLimit {
				t.Errorf("status %s, want memory-limit", res.Status)
			}
			if res.PeakMemory < 60<<20 || res.PeakMemory > 65<<20 {
				t.Errorf("peak %d, want about the 64 MiB limit", res.PeakMemory)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	testenv.Timing(t)
	const timeout, quota = time.Second, 0.5
	// The quota's bound means something only if the loop got the CPU it
	// asked for: on a machine other cgroups keep busy (another test
	// runner, a build) it may get a tenth of it, so a starved run is
	// tried again, up to three times, before the lower bound fails.
	var res *Result
	for range 3 {
		res = run(t, Spec{Command: []string{"sh", "-c", "while :; do :; done"}, Timeout: timeout, CPUQuota: quota})
		if res.CPU >= 200*time.Millisecond {
			break
		}
		t.Logf("the loop got %s of CPU in %s (a busy machine): again", res.CPU, res.Wall)
	}
	if res.Status != StatusTimeout {
		t.Errorf("status %s, want timeout", res.Status)
	}
	if res.Wall < timeout || res.Wall > timeout+time.Second {
		t.Errorf("wall %s, want within [%s, %s]", res.Wall, timeout, timeout+time.Second)
	}
	limit := time.Duration(float64(res.Wall) * quota)
	if os.Geteuid() != 0 {
		limit = res.Wall // no cgroup: no CPU quota
	}
	if res.CPU > limit+150*time.Millisecond {
		t.Errorf("cpu %s over wall*quota %s + 150ms", res.CPU, limit)
	}
	if res.CPU < 200*time.Millisecond {
		t.Errorf("cpu %s: the loop should have burned CPU", res.CPU)
	}
}

func TestPrivilegedSyscallsRefused(t *testing.T) {
	t.Run("unshare", func(t *testing.T) {
		res := run(t, Spec{Command: []string{"unshare", "-r", "true"}, ExtraExec: []string{"/usr/bin/true"}})
		if res.Status != StatusRuntimeError || !strings.Contains(string(res.Stderr), "Operation not permitted") {
			t.Errorf("status %s stderr %q, want runtime-error with EPERM", res.Status, res.Stderr)
		}
	})
	t.Run("python-ctypes", func(t *testing.T) {
		needPython(t)
		script := `
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = getattr(libc, name)(*args)
    return str(ctypes.get_errno()) if r == -1 else "ok"
t = threading.Thread(target=lambda: None); t.start(); t.join()
print("ptrace", call("ptrace", 0, 0, 0, 0))
print("unshare", call("unshare", 0x10000000))
print("setuid", call("setuid", 0))
print("mount", call("mount", b"none", b"/tmp", b"tmpfs", 0, None))
print("clone3", call("syscall", 435, None, 0))
print("thread ok")
`
		res := run(t, Spec{Command: []string{python, "-c", script}})
		want := "ptrace 1\nunshare 1\nsetuid 1\nmount 1\nclone3 38\nthread ok\n"
		if res.Status != StatusOK || string(res.Stdout) != want {
			t.Errorf("status %s stdout %q stderr %q, want ok and\n%s", res.Status, res.Stdout, res.Stderr, want)
		}
	})
	t.Run("signal-outside", func(t *testing.T) {
		// Landlock scoping: no signal to a process outside the domain (our pid
		// is not even visible from the job's pid namespace).
		res := run(t, Spec{Command: []string{"sh", "-c", "kill -0 1 && echo self-ok; kill -9 -1; echo alive"}})
		if res.Status != StatusOK || !strings.Contains(string(res.Stdout), "alive") {
			t.Errorf("status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
		}
	})
}

func TestRefused(t *testing.T) {
	// The wrapper refuses before the exec: a grant under /proc (the job
	// gets a /proc of its own) cannot be bound into its root.
	res := run(t, Spec{Command: []string{"true"}, ReadOnly: []string{"/proc/1"}})
	if res.Status != StatusRefused || res.ExitCode != kernel.ConfineExitCode || !strings.HasPrefix(res.Reason, "moat-confine: root: /proc/1: paths under /proc cannot be granted") {
		t.Errorf("status %s exit %d reason %q, want refused, 125 and a moat-confine root line", res.Status, res.ExitCode, res.Reason)
	}
}

func TestContextCancel(t *testing.T) {
	before := jobProcs()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, Spec{Command: []string{"sh", "-c", "sleep 30 & sleep 30"}, ExtraExec: []string{"/usr/bin/sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusKilled || res.Wall > 2*time.Second {
		t.Errorf("status %s wall %s, want killed promptly", res.Status, res.Wall)
	}
	assertClean(t, before)
}

// TestNonRoot re-runs Run as uid 65534 (a copy of this test binary, with
// TestNonRootHelper) and checks it works with the unprivileged layers.
func TestNonRoot(t *testing.T) {
	needRoot(t)
	// t.TempDir's parent is 0700: the helper needs directories it can enter.
	bin, err := os.MkdirTemp("", "moat-nonroot-bin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "native.test")
	var src []byte
	src, err = os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, src, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "moat-nonroot-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chown(tmp, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestNonRootHelper$", "-test.count=1")
	cmd.Env = []string{"MOAT_TEST_NONROOT=1", "TMPDIR=" + tmp, "PATH=/usr/bin:/bin", "HOME=" + tmp}
	cmd.Dir = tmp
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper as uid %d: %v\nstdout: %s\nstderr: %s", nobody, err, out.String(), errb.String())
	}
	var results map[string]*Result
	for _, line := range strings.Split(out.String(), "\n") {
		if j, ok := strings.CutPrefix(line, "RESULTS "); ok {
			if err := json.Unmarshal([]byte(j), &results); err != nil {
				t.Fatal(err)
			}
		}
	}
	if results == nil {
		t.Fatalf("no results from the helper:\n%s\n%s", out.String(), errb.String())
	}
	for name, r := range results {
		t.Logf("%s: status=%s exit=%d layers=%v unavailable=%v stdout=%q stderr=%q", name, r.Status, r.ExitCode, r.Layers, r.Unavailable, r.Stdout, r.Stderr)
		if !slices.Contains(r.Layers, "userns") || !slices.Contains(r.Layers, "landlock") || !slices.Contains(r.Layers, "seccomp") || slices.Contains(r.Layers, "cgroup") {
			t.Errorf("%s: layers %v, want userns, landlock, seccomp and no cgroup", name, r.Layers)
		}
		if len(r.Unavailable) < 2 || !strings.HasPrefix(r.Unavailable[0], "cgroup: not root") || !strings.HasPrefix(r.Unavailable[1], "uid: not root") {
			t.Errorf("%s: unavailable %v, want cgroup and uid listed", name, r.Unavailable)
		}
	}
	if r := results["shadow"]; r == nil || r.Status != StatusRuntimeError || string(r.Stdout) != "uid=0\n" || !strings.Contains(string(r.Stderr), "No such file or directory") || !strings.Contains(string(r.Stderr), "ls: Permission denied") {
		t.Errorf("shadow: %+v, want uid=0 (of its user namespace), no /etc/shadow, and ls refused by Landlock", r)
	}
	if r := results["egress"]; r != nil && (r.Status != StatusOK || !slices.Contains([]string{"101\n", "13\n"}, string(r.Stdout))) {
		t.Errorf("egress: %s %q %q, want ENETUNREACH or EACCES", r.Status, r.Stdout, r.Stderr)
	}
	if r := results["caps"]; r != nil && (r.Status != StatusOK || string(r.Stdout) != "0 0\n") {
		t.Errorf("caps: %s %q %q, want capget to report no capability at all", r.Status, r.Stdout, r.Stderr)
	}
	if r := results["unshare"]; r == nil || r.Status != StatusRuntimeError || !strings.Contains(string(r.Stderr), "Operation not permitted") {
		t.Errorf("unshare: %+v, want EPERM", r)
	}
	if r := results["timeout"]; r == nil || r.Status != StatusTimeout {
		t.Errorf("timeout: %+v, want timeout", r)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "moat-jobs", "job-*")); len(left) > 0 {
		t.Errorf("job dirs left behind by the unprivileged run: %v", left)
	}
}

func TestNonRootHelper(t *testing.T) {
	if os.Getenv("MOAT_TEST_NONROOT") != "1" {
		t.Skip("run by TestNonRoot as uid 65534")
	}
	specs := map[string]Spec{
		"shadow":  {Command: []string{"sh", "-c", "echo uid=$(id -u); cat /etc/shadow; /usr/bin/ls"}, ExtraExec: []string{"/usr/bin/cat", "/usr/bin/id"}},
		"unshare": {Command: []string{"unshare", "-r", "true"}},
		"timeout": {Command: []string{"sh", "-c", "while :; do :; done"}, Timeout: 300 * time.Millisecond},
	}
	if _, err := os.Stat(python); err == nil {
		specs["egress"] = Spec{Command: []string{python, "-c", `
import socket
try:
    socket.create_connection(("127.0.0.1", 22), timeout=2)
    print("connected")
except OSError as e:
    print(e.errno)`}}
		specs["caps"] = Spec{Command: []string{python, "-c", `
import ctypes
libc = ctypes.CDLL(None)
hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)()
print(libc.capget(hdr, data), sum(data))`}}
	}
	results := map[string]*Result{}
	for name, spec := range specs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := Run(ctx, spec)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		results[name] = r
	}
	j, _ := json.Marshal(results)
	fmt.Fprintf(os.Stdout, "\nRESULTS %s\n", j)
}

// buildWrapper builds cmd/moat-confine, the slim wrapper the moat binary
// uses when it lies beside it.
func buildWrapper(b testing.TB) string {
	b.Helper()
	out := filepath.Join(b.TempDir(), "moat-confine")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/moat-confine")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build moat-confine: %v\n%s", err, msg)
	}
	return out
}

// BenchmarkSpawn: spawn-to-exit through the full runner next to plain
// os/exec. native-* use the slim moat-confine wrapper (what an installed
// moat uses); native-python-selfexe re-executes this (large) test binary as
// the wrapper, to show what the wrapper's start-up costs.
func BenchmarkSpawn(b *testing.B) {
	wrapper := buildWrapper(b)
	bench := func(name string, py bool, f func() error) {
		b.Run(name, func(b *testing.B) {
			if py {
				needPython(b)
			}
			defer reportCPU(b)()
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// spaced: one run every spacing, the pause untimed: requests that
	// arrive now and then (a person pressing Run) rather than back to
	// back, so a pool has refilled and the kernel has gone quiet between
	// them, as it mostly has for a code-execution server.
	const spacing = 30 * time.Millisecond
	spaced := func(name string, f func() error) {
		b.Run(name, func(b *testing.B) {
			needPython(b)
			defer reportCPU(b)()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				time.Sleep(spacing)
				b.StartTimer()
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	native := func(wrapper string, cmd ...string) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := Run(ctx, Spec{Command: cmd, Wrapper: wrapper})
			if err == nil && r.Status != StatusOK {
				err = fmt.Errorf("%s: %s %s", r.Status, r.Stderr, r.Reason)
			}
			return err
		}
	}
	plain := func(cmd ...string) func() error {
		return func() error {
			c := exec.Command(cmd[0], cmd[1:]...)
			c.Stdout, c.Stderr = io.Discard, io.Discard
			return c.Run()
		}
	}
	bench("plain-true", false, plain("/usr/bin/true"))
	bench("native-true", false, native(wrapper, "/usr/bin/true"))
	bench("plain-python", true, plain(python, "-c", "pass"))
	bench("native-python", true, native(wrapper, python, "-c", "pass"))
	bench("native-python-selfexe", true, native("/proc/self/exe", python, "-c", "pass"))
	pool := NewPool(2, wrapper)
	defer pool.Close()
	// A run back to back with the next may find the pool still refilling
	// (its wrapper's cgroup join waits out the kernel's grace period) and
	// start cold, as it would in production: counted, not refused.
	var runs, cold int
	warm := func(cmd ...string) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := pool.Run(ctx, Spec{Command: cmd, Wrapper: wrapper})
			if err == nil && r.Status != StatusOK {
				err = fmt.Errorf("%s warm=%v: %s %s", r.Status, r.Warm, r.Stderr, r.Reason)
			}
			if runs++; err == nil && !r.Warm {
				cold++
			}
			return err
		}
	}
	logCold := func(name string) {
		if cold > 0 {
			b.Logf("%s: %d of %d runs found no warm wrapper and started cold", name, cold, runs)
		}
		runs, cold = 0, 0
	}
	waitWarm(b, pool, 2)
	bench("native-warm-true", false, warm("/usr/bin/true"))
	logCold("native-warm-true")
	waitWarm(b, pool, 2)
	bench("native-warm-python", true, warm(python, "-c", "pass"))
	logCold("native-warm-python")
	spaced("plain-python-spaced", plain(python, "-c", "pass"))
	spaced("native-python-spaced", native(wrapper, python, "-c", "pass"))
	spaced("native-warm-python-spaced", warm(python, "-c", "pass"))
	logCold("native-warm-python-spaced")
}

// reportCPU reports, when the returned func runs, the CPU time per
// operation of this process (the runner: set-up, clean-up, the pool's
// refills) and of its reaped children (the wrapper and the command):
// figures a loaded machine inflates far less than wall time, so a change
// to the runner shows in them when ns/op is noise.
func reportCPU(b *testing.B) func() {
	var self0, child0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &child0)
	return func() {
		var self1, child1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &child1)
		cpu := func(r0, r1 syscall.Rusage) float64 {
			return float64(time.Duration(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()).Microseconds()) / float64(b.N)
		}
		b.ReportMetric(cpu(self0, self1), "runner-cpu-µs/op")
		b.ReportMetric(cpu(child0, child1), "child-cpu-µs/op")
	}
}

// waitWarm waits until the pool holds n idle wrappers.
func waitWarm(t testing.TB, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		idle := len(p.idle)
		p.mu.Unlock()
		if idle >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool has %d warm wrappers after 10s, want %d", idle, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPool: a run in a warm wrapper is confined exactly as a cold one
// (Landlock, zero egress, cgroup limits, uid, deadline), gets its stdin and
// output, and leaves nothing behind; runs the pool cannot serve start cold.
func TestPool(t *testing.T) {
	warmBefore := warmCgroups()
	pool := NewPool(1, "")
	checkClean := func(t *testing.T, r *Result) {
		if r.Status != StatusOK || r.PidsLimitHit || string(r.Stdout) != "fine\n" {
			t.Errorf("status %s, pids limit hit %v, stdout %q: an earlier job's counts leaked in", r.Status, r.PidsLimitHit, r.Stdout)
		}
		if r.PeakMemory > 32<<20 {
			t.Errorf("peak %d: an earlier job's memory is counted", r.PeakMemory)
		}
	}
	cases := []struct {
		name  string
		spec  Spec
		check func(t *testing.T, r *Result)
	}{
		{"landlock", Spec{Command: []string{"sh", "-c", "cat /etc/shadow; /usr/bin/ls"}, ExtraExec: []string{"/usr/bin/cat"}}, func(t *testing.T, r *Result) {
			if r.Status != StatusRuntimeError || !strings.Contains(string(r.Stderr), "cat: /etc/shadow: No such file or directory") || !strings.Contains(string(r.Stderr), "ls: Permission denied") {
				t.Errorf("status %s stderr %q, want no /etc/shadow and ls refused by Landlock", r.Status, r.Stderr)
			}
		}},
		{"stdio-and-layers", Spec{Command: []string{"sh", "-c", "read x; echo \"got $x\"; echo err >&2"}, Stdin: []byte("warm\n")}, func(t *testing.T, r *Result) {
			if r.Status != StatusOK || string(r.Stdout) != "got warm\n" || string(r.Stderr) != "err\n" {
				t.Errorf("got %s %q %q", r.Status, r.Stdout, r.Stderr)
			}
			if !slices.Equal(r.Layers, wantLayers()) {
				t.Errorf("layers %v, want %v", r.Layers, wantLayers())
			}
		}},
		{"zero-egress", Spec{Command: []string{"sh", "-c", "echo > /dev/tcp/127.0.0.1/22 && echo connected || echo refused"}}, func(t *testing.T, r *Result) {
			if strings.Contains(string(r.Stdout), "connected") {
				t.Errorf("stdout %q: the job reached the network", r.Stdout)
			}
		}},
		{"uid", Spec{Command: []string{"sh", "-c", "id -u"}, ExtraExec: []string{"/usr/bin/id"}}, func(t *testing.T, r *Result) {
			uid, _ := strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
			want := strconv.Itoa(uid) + "\n"
			if os.Geteuid() != 0 {
				want = "0\n" // uid 0 of its own user namespace
			} else if !isJobUID(uid) {
				want = "a uid of the leased range"
			}
			if string(r.Stdout) != want {
				t.Errorf("uid %q, want %q", r.Stdout, want)
			}
		}},
		{"timeout", Spec{Command: []string{"sh", "-c", "while :; do :; done"}, Timeout: 300 * time.Millisecond}, func(t *testing.T, r *Result) {
			if r.Status != StatusTimeout {
				t.Errorf("status %s, want timeout", r.Status)
			}
		}},
		// The cgroup was joined while the wrapper waited, with the
		// defaults: the job's own limits must be the ones that bite.
		{"memory-limit", Spec{Command: []string{"sh", "-c", memoryHog},
			ExtraExec: []string{"/usr/bin/head", "/usr/bin/tail", "/usr/bin/wc"}, MemoryBytes: 64 << 20, Timeout: 15 * time.Second}, func(t *testing.T, r *Result) {
			if os.Geteuid() != 0 {
				return
			}
			if r.Status != StatusMemoryLimit {
				t.Errorf("status %s, want memory-limit", r.Status)
			}
			if r.PeakMemory < 60<<20 || r.PeakMemory > 65<<20 {
				t.Errorf("peak %d, want about the job's 64 MiB limit", r.PeakMemory)
			}
		}},
		{"pids-limit", Spec{Command: []string{"sh", "-c", "for i in $(seq 1 100); do sleep 1 & done; wait"},
			ExtraExec: []string{"/usr/bin/seq", "/usr/bin/sleep"}, Pids: 16, Timeout: 8 * time.Second}, func(t *testing.T, r *Result) {
			if os.Geteuid() == 0 && !r.PidsLimitHit {
				t.Errorf("PidsLimitHit false with the job's limit of 16 (stderr %q)", r.Stderr)
			}
		}},
		// A finished job's cgroup serves a later wrapper (the one after
		// next, with a pool of one): what it counted is not the next
		// job's. These two run in the cgroups of the OOM kill and of the
		// refused forks above.
		{"clean-after-oom", Spec{Command: []string{"sh", "-c", "echo fine"}}, checkClean},
		{"clean-after-forks", Spec{Command: []string{"sh", "-c", "echo fine"}}, checkClean},
		// A recycled cgroup gets the next job's limits, not the last
		// one's: after a job held to 64 MiB and 16 processes, a job
		// with the defaults holds 120 MB and starts 30 processes.
		{"tight-limits", Spec{Command: []string{"sh", "-c", "echo fine"}, MemoryBytes: 64 << 20, Pids: 16}, checkClean},
		{"limits-reset", Spec{Command: []string{"sh", "-c", "for i in $(seq 1 30); do sleep 0.2 & done; head -c 120000000 /dev/zero | tail -c 120000000 | wc -c; wait"},
			ExtraExec: []string{"/usr/bin/head", "/usr/bin/tail", "/usr/bin/wc", "/usr/bin/seq", "/usr/bin/sleep"}, Timeout: 15 * time.Second}, func(t *testing.T, r *Result) {
			if r.Status != StatusOK || r.PidsLimitHit || strings.TrimSpace(string(r.Stdout)) != "120000000" {
				t.Errorf("status %s, pids limit hit %v, stdout %q, stderr %q: a previous job's limits held this one", r.Status, r.PidsLimitHit, r.Stdout, r.Stderr)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			waitWarm(t, pool, 1)
			before := jobProcs()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := pool.Run(ctx, c.spec)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Warm {
				t.Error("the run did not use the warm wrapper")
			}
			c.check(t, r)
			assertClean(t, before)
		})
	}
	// Streamed output (a worker's) cannot use a warm wrapper: cold start.
	j, err := startWith(pool, Spec{Command: []string{"true"}}, nil, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_ = j.cmd.Wait()
	j.cleanup()
	if j.res.Warm {
		t.Error("a run with streamed output took a warm wrapper")
	}
	before := jobProcs()
	pool.Close()
	assertClean(t, before)
	assertNoNewWarmCgroups(t, warmBefore)
}

// warmCgroups lists the idle wrappers' cgroups on the machine: those of
// this test's pool, and any other moat's running at the same time.
func warmCgroups() map[string]bool {
	out := map[string]bool{}
	for _, d := range kernel.JobCgroupDirs("warm-" + kernel.OwnJobCgroupTag()) {
		out[d] = true
	}
	return out
}

// assertNoNewWarmCgroups fails when a warm-* cgroup not in before is left.
func assertNoNewWarmCgroups(t *testing.T, before map[string]bool) {
	t.Helper()
	for d := range warmCgroups() {
		if !before[d] {
			t.Errorf("an idle wrapper's cgroup was left behind: %s", d)
		}
	}
}

// TestSlimWrapper: the moat-confine binary confines exactly like the
// re-executed moat binary.
func TestSlimWrapper(t *testing.T) {
	wrapper := buildWrapper(t)
	res := run(t, Spec{Command: []string{"sh", "-c", "cat /etc/shadow; /usr/bin/ls"}, ExtraExec: []string{"/usr/bin/cat"}, Wrapper: wrapper})
	if res.Status != StatusRuntimeError || !strings.Contains(string(res.Stderr), "cat: /etc/shadow: No such file or directory") || !strings.Contains(string(res.Stderr), "ls: Permission denied") {
		t.Fatalf("status %s stderr %q", res.Status, res.Stderr)
	}
	if got := strings.Join(res.Layers, ","); !strings.Contains(got, "landlock,seccomp") {
		t.Fatalf("layers %s", got)
	}
}

// TestPoolDeadWrappers: a warm wrapper that died before its job (a wrapper
// binary of another version, say) does not fail the job: it starts cold,
// and after a few such deaths in a row the pool stops warming.
func TestPoolDeadWrappers(t *testing.T) {
	const dead = "/bin/false" // exits at once, never reads its spec
	warmBefore := warmCgroups()
	pool := NewPool(1, dead)
	before := jobProcs()
	for i := 0; i < maxDeadClaims+2; i++ {
		time.Sleep(100 * time.Millisecond) // the refill starts, and its wrapper dies
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := pool.Run(ctx, Spec{Command: []string{"true"}, Wrapper: dead})
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v, want a cold start's result", i, err)
		}
		if r.Warm || r.Status == StatusOK {
			t.Fatalf("run %d: warm %v, status %s; want a cold start of the broken wrapper", i, r.Warm, r.Status)
		}
	}
	time.Sleep(100 * time.Millisecond)
	pool.mu.Lock()
	idle, filling, failed := len(pool.idle), pool.filling, pool.failed
	pool.mu.Unlock()
	if idle+filling != 0 || failed < maxDeadClaims {
		t.Errorf("after %d dead wrappers the pool still warms (idle %d, filling %d, failed %d)", failed, idle, filling, failed)
	}
	pool.Close()
	assertClean(t, before)
	assertNoNewWarmCgroups(t, warmBefore)
}

// TestSetupErrors: a run that cannot be set up returns an error naming
// why, and leaves nothing behind (each of these once crashed the caller:
// the deferred cleanup ran on the nil job the error return had set).
func TestSetupErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec Spec
		want string
	}{
		{"no such command", Spec{Command: []string{"/nonexistent/moat-test-cmd"}}, "moat-test-cmd"},
		{"unstartable wrapper", Spec{Command: []string{"true"}, Wrapper: "/nonexistent/moat-confine"}, "native: start"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := jobProcs()
			_, err := Run(context.Background(), tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one naming %q", err, tt.want)
			}
			assertClean(t, before)
		})
	}
}
